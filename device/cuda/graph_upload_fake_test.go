package cuda

import (
	"testing"

	"github.com/gosling-ai/gosling/tensor"
)

// TestFakeGraphLargeUpload: a forward that uploads more than the 1 MiB
// that an eager forward copies synchronously (an EAGLE head's features
// at a large batch) is still captured and then replayed, its uploads
// going through the graph staging, and each step's tensor holds that
// step's values. On the emulated GPU.
func TestFakeGraphLargeUpload(t *testing.T) {
	o := NewFakeModelOps(t)
	const rows, cols = 80, 4096 // 1.25 MiB of float32
	for step, want := range []GraphPath{GraphCaptured, GraphReplayed, GraphReplayed} {
		x := tensor.New(rows, cols)
		xs := x.HostData()
		for i := range xs {
			xs[i] = float32(step*7 + i%1000)
		}
		var up tensor.T
		run, err := o.RunGraph(1, func() error {
			o.BeginForward()
			up = o.Upload(x)
			o.EndForward()
			return nil
		})
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		if run.Path != want {
			t.Fatalf("step %d ran %v (%s), want %v", step, run.Path, run.Reason, want)
		}
		h, err := o.ToHost(up).Host()
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range h.Data {
			if v != x.HostData()[i] {
				t.Fatalf("step %d: value %d is %g, want %g", step, i, v, x.HostData()[i])
			}
		}
	}
}
