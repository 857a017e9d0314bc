package flash

import (
	"testing"

	"github.com/gosling-ai/gosling/attention/gpu/gputest"
)

// TestCUDAConformance runs the conformance battery on the GPU (skipped
// with one line where libcuda.so.1 cannot be opened).
func TestCUDAConformance(t *testing.T) { gputest.RunCUDA(t, CUDAEntry) }
