package blocks

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/device/cpu"
	"github.com/gosling-ai/gosling/internal/cputime"
	"github.com/gosling-ai/gosling/tensor"
)

// BenchmarkMoELayerCPU times one MoE block of Qwen3-30B-A3B's shape
// (hidden 2048, 128 experts of intermediate 768, top-8 with the
// renormalised softmax; router included) on the CPU, grouped
// (cpu.Ops' device.ExpertOps) and one by one, at 1, 8, 64 and 512
// tokens, the two paths of a size one after the other so that a run
// interleaves them. Weights are synthetic (tensor.Synthetic) and packed
// before timing; bf16 is the checkpoint's dtype, Q4_K a GGUF's.
// ns/op is one block; tok/s is tokens over it; cpu-ms/op the process's
// CPU time per block (the pool's spinning included), which other
// processes on the machine disturb less.
func BenchmarkMoELayerCPU(b *testing.B) {
	const hidden, inter, nExperts, topK = 2048, 768, 128, 8
	pool := cpu.NewWorkers(0)
	defer pool.Close()
	for _, dt := range []tensor.DType{tensor.BF16, tensor.Q4_K} {
		ops := cpu.NewOps(pool)
		var m *MoE
		b.Run(dt.String(), func(b *testing.B) {
			if m == nil {
				m = syntheticMoE(b, ops, dt, hidden, inter, nExperts, topK)
			}
			grouped := *m
			if err := grouped.Group(ops, device.ExpertActivation{}); err != nil || grouped.group == nil {
				b.Fatalf("not grouped: %v", err)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			for _, tokens := range []int{1, 8, 64, 512} {
				x, residual := randRows(rng, tokens, hidden), randRows(rng, tokens, hidden)
				for _, path := range []struct {
					name string
					m    *MoE
				}{{"grouped", &grouped}, {"onebyone", m}} {
					b.Run(fmt.Sprintf("tokens%d/%s", tokens, path.name), func(b *testing.B) {
						cpu0 := cputime.Process()
						for b.Loop() {
							path.m.AddTo(ops, residual, x)
						}
						b.ReportMetric(float64(tokens)*float64(b.N)/b.Elapsed().Seconds(), "tok/s")
						b.ReportMetric(float64(cputime.Process()-cpu0)/float64(b.N)/1e6, "cpu-ms/op")
					})
				}
			}
		})
		if err := ops.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// syntheticMoE is a MoE block of random weights of dtype dt (the router
// in float32), every matrix packed.
func syntheticMoE(b *testing.B, ops *cpu.Ops, dt tensor.DType, hidden, inter, nExperts, topK int) *MoE {
	b.Helper()
	seed := uint64(0)
	mat := func(d tensor.DType, out, in int) device.Matrix {
		seed++
		w := tensor.Weight{Name: fmt.Sprint("w", seed), DType: tensor.F32, Shape: []int{out, in}, Synthetic: &tensor.Synthetic{Seed: seed, Scale: 0.05}}
		w, err := tensor.Convert(w, d)
		if err != nil {
			b.Fatal(err)
		}
		m, err := ops.Matrix(w, nil)
		if err != nil {
			b.Fatal(err)
		}
		ops.LinearOf(m) // pack now, not in the first timed step
		return m
	}
	m := &MoE{Router: device.Router{TopK: topK, Softmax: true, NormTopK: true, Scale: 1}, Gate: mat(tensor.F32, nExperts, hidden)}
	for range nExperts {
		m.Experts = append(m.Experts, &MLP{Gate: mat(dt, inter, hidden), Up: mat(dt, inter, hidden), Down: mat(dt, hidden, inter)})
	}
	return m
}
