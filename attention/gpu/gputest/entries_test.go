package gputest

import (
	"testing"

	"github.com/gosling-ai/gosling/attention/conformance"
	"github.com/gosling-ai/gosling/attention/gpu"
)

// TestCUDAConformance runs the conformance battery on the GPU for every
// CUDA backend (skipped with one line where libcuda.so.1 cannot be opened).
func TestCUDAConformance(t *testing.T) {
	for _, e := range gpu.Entries() {
		t.Run(e.Name, func(t *testing.T) { RunCUDA(t, e) })
	}
}

// TestCudnnRunsSinkScenarios: RunCUDA runs cudnn on the battery's sink
// scenarios, skipping only those that need another column it lacks (a
// window, tree masks); decided without a GPU.
func TestCudnnRunsSinkScenarios(t *testing.T) {
	var runs []string
	for _, s := range conformance.Scenarios() {
		if !s.Sinks {
			continue
		}
		s = asStored(s, gpu.CudnnEntry.Caps)
		switch why := unmet(s, gpu.CudnnEntry.Caps); why {
		case "":
			runs = append(runs, s.Name)
		case "attention sinks":
			t.Errorf("%s: cudnn skipped for %s", s.Name, why)
		}
	}
	if len(runs) == 0 {
		t.Fatal("no sink scenario runs on cudnn")
	}
	t.Logf("cudnn runs %v", runs)
}
