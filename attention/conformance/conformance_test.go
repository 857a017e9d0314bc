package conformance

import (
	"testing"

	"github.com/gosling-ai/gosling/attention/registry"
)

// TestAllBackends runs the battery against every registered CPU backend,
// as registered; it is the one place each entry runs it (attention/cpuattn
// adds forced splits, tiny tiles and serial runs of the shared core).
// GOSLING_NOASM=1 runs it on the pure-Go kernels.
func TestAllBackends(t *testing.T) {
	for _, e := range registry.ForDevice("cpu") {
		t.Run(e.Name, func(t *testing.T) { Run(t, e) })
	}
}
