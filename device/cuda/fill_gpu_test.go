package cuda

import (
	"testing"
	"time"

	"github.com/gosling-ai/gosling/tensor"
)

// TestGPUFillSynthetic: kernels/fill.cu makes the host generator's bits in
// f32, bf16 and f16, at odd offsets and sizes, past the grid cap of a 1-D
// launch, and through ModelOps.Matrix (skipped without a GPU).
func TestGPUFillSynthetic(t *testing.T) {
	dev, k := needKernels(t)
	_, lt := needLt(t)
	for _, dt := range []DType{F32, BF16, F16} {
		for _, c := range fillCases {
			checkSyntheticFill(t, dev, k, dt, c.first, c.n, c.syn)
		}
	}
	if !testing.Short() {
		// flatConfig caps the grid at 2²⁰ blocks of 256: this many elements
		// take the grid-stride loop (512 MiB of bf16).
		n := 1<<28 + 12345
		syn := tensor.Synthetic{Seed: tensor.NameSeed("model.embed_tokens.weight"), Scale: 0.035}
		p := alloc(t, dev, 2*n)
		start := time.Now()
		if err := k.FillSynthetic(dev.Stream, p, 0, n, BF16, syn); err != nil {
			t.Fatal(err)
		}
		if err := dev.StreamSync(dev.Stream); err != nil {
			t.Fatal(err)
		}
		el := time.Since(start)
		t.Logf("filled %d bf16 values in %v (%.0f GB/s)", n, el, float64(2*n)/el.Seconds()/1e9)
		checkSyntheticFill(t, dev, k, BF16, 3, n, syn)
	}
	env := opsEnv{dev: dev, k: k, lt: lt}
	for _, wdt := range []DType{F32, BF16, F16} {
		t.Run(wdt.String(), func(t *testing.T) { checkSyntheticMatrix(t, env, wdt) })
	}
}
