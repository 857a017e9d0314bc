package cpu

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"github.com/gosling-ai/gosling/tensor"
)

// TestOpsArena runs the ops that take their outputs from the forward's
// arena twice, the second time over memory the first dirtied: the
// results must match tensors made fresh, and an out-of-range embedding id
// must still give a zero row.
func TestOpsArena(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	pool := NewWorkers(2)
	defer pool.Close()
	o := NewOps(pool)
	const vocab, dim, out = 50, 64, 96
	table, err := o.Matrix(randWeight(rng, tensor.F32, vocab, dim), nil)
	if err != nil {
		t.Fatal(err)
	}
	bias := make([]float32, out)
	for i := range bias {
		bias[i] = float32(i)
	}
	lin, err := o.Matrix(randWeight(rng, tensor.F32, out, dim), bias)
	if err != nil {
		t.Fatal(err)
	}
	norm, _ := o.Vector(randInput(rng, 1, dim).HostData())
	ids := []int32{3, vocab + 7, 0, 49}

	var first []tensor.T
	for pass := range 3 {
		o.BeginForward()
		x := o.Embed(table, ids)
		h := o.RMSNorm(x, norm, 1e-5)
		y := o.Linear(h, lin)
		g := o.LinearGroup(h, lin, lin)
		last := o.GatherRows(y, []int32{3, 1})
		got := []tensor.T{x, h, y, g[0], g[1], last}
		o.EndForward()
		if slices.ContainsFunc(x.Row(1), func(v float32) bool { return v != 0 }) {
			t.Fatalf("pass %d: out-of-range id gave a nonzero row", pass)
		}
		if pass == 0 {
			// Copies: the next forward may recycle the tensors.
			for _, g := range got {
				first = append(first, tensor.From(slices.Clone(g.HostData()), g.Shape...))
			}
			// Dirty the arena as a larger forward would.
			o.BeginForward()
			for range 8 {
				junk := o.arena.new(len(ids), 4*out)
				for i := range junk.HostData() {
					junk.HostData()[i] = float32(i) + 0.5
				}
			}
			o.EndForward()
			continue
		}
		for i, g := range got {
			if !slices.Equal(g.HostData(), first[i].HostData()) {
				t.Errorf("pass %d: output %d differs from the first forward's", pass, i)
			}
		}
	}
	if o.arena.buf == nil {
		t.Error("the arena never grew")
	}
	// Outside a forward, tensors come from the heap.
	if y := o.Linear(randInput(rng, 2, dim), lin); len(o.arena.buf) > 0 && &y.HostData()[0] == &o.arena.buf[0] {
		t.Error("a tensor made outside a forward came from the arena")
	}
}

// TestPackedWeightsOffHeap: an Ops packs its matrices outside the Go heap
// (the heap does not grow by them), computes what a heap-packed Linear
// computes, and Close gives the memory back.
func TestPackedWeightsOffHeap(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	pool := NewWorkers(2)
	defer pool.Close()
	o := NewOps(pool)
	const n, k = 1024, 1024
	var ws []tensor.Weight
	for _, d := range []tensor.DType{tensor.F32, tensor.BF16, tensor.Q8_0} {
		ws = append(ws, randWeight(rng, d, n, k))
	}
	x := randInput(rng, 3, k)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var got []tensor.T
	for _, w := range ws {
		m, err := o.Matrix(w, nil)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, o.Linear(x, m))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	packed := o.WeightBytes()
	if packed < int64(n*k*(4+2+1)) {
		t.Fatalf("%d bytes packed outside the heap, want the three matrices' %d at least", packed, n*k*7)
	}
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > packed/8 {
		t.Errorf("the heap grew by %d bytes packing %d bytes of weights", grew, packed)
	}
	for i, w := range ws {
		want := NewLinear(w, nil).Forward(pool, x)
		if !slices.Equal(got[i].HostData(), want.HostData()) {
			t.Errorf("%v: the Ops' output differs from a heap-packed Linear's", w.DType)
		}
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
}
