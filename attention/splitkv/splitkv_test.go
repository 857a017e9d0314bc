package splitkv

import (
	"testing"

	"github.com/gosling-ai/gosling/attention/conformance"
)

// The core's own tests (attention/cpuattn) force splits, tiny tiles and
// serial runs; this checks the entry as registered.
func TestConformance(t *testing.T) {
	conformance.Run(t, Entry)
}
