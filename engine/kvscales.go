package engine

import (
	"fmt"

	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/tensor"
)

// loadKVScales sets an fp8 KV cache's per-layer scales from the
// checkpoint's self_attn.k_scale / v_scale (or kv_scale for both): the
// names vLLM, SGLang and llm-compressor use, with the same meaning,
// x ≈ fp8 · scale. A checkpoint calibrated for an fp8 cache carries them;
// without them the scales stay 1.
//
// No scale is computed instead. e4m3 is a floating-point format: a scale
// only slides its window of magnitudes [2^-9, 448], and within the window
// the relative error is the 3-bit mantissa's whatever the scale. A scale
// matters when K or V reach past 448 (they saturate) or fall below 2^-6
// (subnormal); the reference models' K and V stay within [1e-5, 10], and
// per-layer scales of 1, 0.1 and 0.025 gave the same errors there (see
// TestFP8KVAccuracy), so a computed scale would add work for nothing.
func (e *Engine) loadKVScales() error {
	pool := e.kv.Pool
	if pool.Spec.DType != tensor.FP8E4M3 || e.checkpoint.Weights == nil {
		return nil
	}
	set := 0
	for layer := range pool.Spec.NumLayers {
		prefix := fmt.Sprintf("model.layers.%d.self_attn.", layer)
		k, hasK, err := scalarWeight(e.checkpoint.Weights, prefix+"k_scale")
		if err != nil {
			return err
		}
		v, hasV, err := scalarWeight(e.checkpoint.Weights, prefix+"v_scale")
		if err != nil {
			return err
		}
		if !hasK && !hasV {
			if k, hasK, err = scalarWeight(e.checkpoint.Weights, prefix+"kv_scale"); err != nil {
				return err
			}
			v, hasV = k, hasK
		}
		if !hasK && !hasV {
			continue
		}
		if !hasK {
			k = 1
		}
		if !hasV {
			v = 1
		}
		if err := pool.SetScales(layer, k, v); err != nil {
			return fmt.Errorf("fp8 KV scales of %s: %w", e.checkpoint.Path, err)
		}
		set++
	}
	if set > 0 {
		e.log.Info("fp8 KV cache scales from the checkpoint", "layers", set)
	}
	return nil
}

// scalarWeight reads a one-value tensor.
func scalarWeight(w model.WeightSource, name string) (float32, bool, error) {
	if !w.Has(name) {
		return 0, false, nil
	}
	t, err := w.Tensor(name)
	if err != nil {
		return 0, false, err
	}
	if t.NumElements() != 1 {
		return 0, false, fmt.Errorf("%s has %d values; a KV scale is one", name, t.NumElements())
	}
	return t.Float32()[0], true, nil
}
