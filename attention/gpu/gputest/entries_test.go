package gputest

import (
	"testing"

	"github.com/gosling-ai/gosling/attention/gpu"
)

// TestCUDAConformance runs the conformance battery on the GPU for every
// CUDA backend (skipped with one line where libcuda.so.1 cannot be opened).
func TestCUDAConformance(t *testing.T) {
	for _, e := range gpu.Entries() {
		t.Run(e.Name, func(t *testing.T) { RunCUDA(t, e) })
	}
}
