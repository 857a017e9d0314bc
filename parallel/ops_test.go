package parallel_test

import (
	"math"
	"math/rand/v2"
	"testing"

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
		plan, err := parallel.NewPlan(cfg, size)
		if err != nil {
			t.Fatal(err)
		}
		comms, err := parallel.NewLocal(size)
		if err != nil {
			t.Fatal(err)
		}
		embeds, logits := make([]tensor.T, size), make([]tensor.T, size)
		err = parallel.Each(size, func(r int) error {
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
