package engine

import (
	"slices"
	"testing"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/device/cpu"
	"github.com/gosling-ai/gosling/internal/fakedevice"
	"github.com/gosling-ai/gosling/tensor"
)

// TestDraftLogitsOnDevice: a top-1 drafter's device logits are argmaxed
// by the device sampler (every row, temperature 0) and only the ids come
// back; expandNodes chains them, mapped through id, each child at its
// parent's score. Host logits, or a wider top-k, keep the rows: the
// children are the top-k by log-probability.
func TestDraftLogitsOnDevice(t *testing.T) {
	w := cpu.NewWorkers(1)
	defer w.Close()
	rt := cpu.NewRuntime(w)
	defer rt.Close()
	f := fakedevice.New()
	dd := &drafterDevice{rt: struct {
		device.Runtime
		*fakedevice.Sampler
	}{rt, f}}
	host := tensor.From([]float32{0, 3, 1, 2, 5, 4, 9, 0, 1}, 3, 3)
	got, err := dd.draftLogitsOf(f.Put(host), 1)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.ids, []int{1000, 1001, 1002}) || f.Copies != 0 || len(f.Sampled) != 1 {
		t.Fatalf("ids %v, %d copies, %d sample calls; want the device's draw of every row and no copy", got.ids, f.Copies, len(f.Sampled))
	}
	for i, r := range f.Sampled[0] {
		if r != (device.SampleRow{Row: i}) {
			t.Errorf("row %d drawn with %+v, want the greedy draw", i, r)
		}
	}
	nodes := []draftNode{{parent: -1, token: 7, score: -0.5}}
	next := expandNodes(&nodes, []int{0}, got, []int{2}, 1, func(tok int) int { return tok + 1 })
	if len(next) != 1 || nodes[1] != (draftNode{parent: 0, token: 1003, score: -0.5, row: 2}) {
		t.Fatalf("chain node %+v", nodes[1:])
	}

	onHost, err := dd.draftLogitsOf(host, 1)
	if err != nil || onHost.ids != nil || onHost.host.Rows() != 3 {
		t.Fatalf("host logits: %+v, %v", onHost, err)
	}
	nodes = []draftNode{{parent: -1, token: 7}}
	next = expandNodes(&nodes, []int{0}, onHost, []int{1}, 2, nil)
	if len(next) != 2 || nodes[1].token != 1 || nodes[2].token != 2 || nodes[1].score <= nodes[2].score {
		t.Fatalf("top-2 of row 1 (2 5 4): %+v", nodes[1:])
	}
}
