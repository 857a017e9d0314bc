package parallel_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/device/cpu"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/parallel"
	"github.com/gosling-ai/gosling/tensor"
)

// TestVocabParallelUneven: a vocabulary that does not split evenly (7
// rows over 2 and 3 ranks, the last share padded): every rank's embedding
// is the whole table's rows exactly, and every rank's logits are the
// whole LM head's, with the padding columns dropped.
func TestVocabParallelUneven(t *testing.T) {
	const vocab, hidden = 7, 4
	rng := rand.New(rand.NewPCG(1, 2))
	table := make([]float32, vocab*hidden)
	head := make([]float32, vocab*hidden)
	for i := range table {
		table[i], head[i] = rng.Float32()*2-1, rng.Float32()*2-1
	}
	ids := []int32{6, 0, 3, 5, 1, 6}
	h := make([]float32, 3*hidden)
	for i := range h {
		h[i] = rng.Float32()*2 - 1
	}
	w := cpu.NewWorkers(1)
	defer w.Close()
	for _, size := range []int{2, 3} {
		cfg := &model.Config{Architecture: "LlamaForCausalLM", NumHeads: 6, NumKVHeads: 6, HeadDim: 2, HiddenSize: hidden,
			IntermediateSize: 6, VocabSize: vocab}
		plan, comms := planAndComms(t, cfg, size)
		embeds, logits := make([]tensor.T, size), make([]tensor.T, size)
		err := parallel.Each(size, func(r int) error {
			ops, err := parallel.NewOps(cpu.NewOps(w), plan, comms[r])
			if err != nil {
				return err
			}
			ops.BeginForward()
			emb, err := ops.Matrix(tensor.FromFloat32("model.embed_tokens.weight", table, vocab, hidden), nil)
			if err != nil {
				return err
			}
			lm, err := ops.Matrix(tensor.FromFloat32("lm_head.weight", head, vocab, hidden), nil)
			if err != nil {
				return err
			}
			embeds[r] = ops.Embed(emb, ids)
			logits[r] = ops.Linear(tensor.From(h, 3, hidden), lm)
			return nil
		})
		if err != nil {
			t.Fatalf("%d ranks: %v", size, err)
		}
		for r := range size {
			for i, id := range ids {
				for j := range hidden {
					if got, want := embeds[r].Row(i)[j], table[int(id)*hidden+j]; got != want {
						t.Fatalf("%d ranks, rank %d: embedding of token %d [%d] = %v, want %v", size, r, id, j, got, want)
					}
				}
			}
			if logits[r].Rows() != 3 || logits[r].Cols() != vocab {
				t.Fatalf("%d ranks, rank %d: logits %v, want [3 %d]", size, r, logits[r].Shape, vocab)
			}
			for i := range 3 {
				for v := range vocab {
					var want float32
					for j := range hidden {
						want += h[i*hidden+j] * head[v*hidden+j]
					}
					if got := logits[r].Row(i)[v]; math.Abs(float64(got-want)) > 1e-5 {
						t.Fatalf("%d ranks, rank %d: logit [%d, %d] = %v, want %v", size, r, i, v, got, want)
					}
				}
			}
		}
	}
}

// TestFP8RowParallel: an e4m3 o_proj served through the ops of two ranks
// (each its own columns, quantised alone) is row-parallel like a float
// one: every rank's product is the sum of the two ranks' partial products
// with the bias added once, by rank 0. Ops without FP8 kernels say so.
func TestFP8RowParallel(t *testing.T) {
	const out, in, size, tokens = 4, 6, 2, 3
	rng := rand.New(rand.NewPCG(3, 4))
	fill := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = rng.Float32()*2 - 1
		}
		return v
	}
	bias := fill(out)
	w := cpu.NewWorkers(1)
	defer w.Close()
	cfg := &model.Config{Architecture: "LlamaForCausalLM", NumHeads: 2, NumKVHeads: 2, HeadDim: in / 2, HiddenSize: out,
		IntermediateSize: 8, VocabSize: 8}
	plan, comms := planAndComms(t, cfg, size)
	slices, xs := make([]tensor.ScaledFP8, size), make([][]float32, size)
	for r := range size {
		q, err := tensor.QuantizeFP8Rows(tensor.FromFloat32("model.layers.0.self_attn.o_proj.weight", fill(out*in/size), out, in/size))
		if err != nil {
			t.Fatal(err)
		}
		slices[r], xs[r] = q, fill(tokens*in/size)
	}
	fp8Ops := func() *cpu.Ops {
		o := cpu.NewOps(w)
		o.FP8 = true
		return o
	}
	want := make([]float32, tokens*out)
	for r := range size {
		o := fp8Ops()
		o.BeginForward()
		var b []float32
		if r == 0 {
			b = bias
		}
		m, err := o.FP8Matrix(slices[r], b)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range o.Linear(tensor.From(xs[r], tokens, in/size), m).HostData() {
			want[i] += v
		}
	}
	got := make([]tensor.T, size)
	err := parallel.Each(size, func(r int) error {
		ops, err := parallel.NewOps(fp8Ops(), plan, comms[r])
		if err != nil {
			return err
		}
		ops.BeginForward()
		fo := ops.(device.FP8Ops)
		if !fo.FP8Weights() {
			return errors.New("the ops of an FP8 device report no FP8 kernels")
		}
		m, err := fo.FP8Matrix(slices[r], bias)
		if err != nil {
			return err
		}
		got[r] = ops.Linear(tensor.From(xs[r], tokens, in/size), m)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for r := range size {
		for i := range want {
			if got[r].HostData()[i] != want[i] {
				t.Fatalf("rank %d: output %d = %v, want %v", r, i, got[r].HostData()[i], want[i])
			}
		}
	}
	plain, err := parallel.NewOps(cpu.NewOps(w), plan, comms[0])
	if err != nil {
		t.Fatal(err)
	}
	if plain.(device.FP8Ops).FP8Weights() {
		t.Error("the ops of a device without FP8 kernels report FP8 weights")
	}
}

// planAndComms is the plan of cfg over size ranks and their in-process
// communicators.
func planAndComms(t *testing.T, cfg *model.Config, size int) (*parallel.Plan, []parallel.Communicator) {
	t.Helper()
	plan, err := parallel.NewPlan(cfg, size)
	if err != nil {
		t.Fatal(err)
	}
	comms, err := parallel.NewLocal(size)
	if err != nil {
		t.Fatal(err)
	}
	return plan, comms
}
