package conformance

import (
	"testing"

	"github.com/gosling-ai/gosling/attention/registry"
)

// TestAllBackends runs the battery against every registered backend.
func TestAllBackends(t *testing.T) {
	for _, e := range registry.ForDevice("cpu") {
		t.Run(e.Name, func(t *testing.T) { Run(t, e) })
	}
}
