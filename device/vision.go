package device

import "github.com/gosling-ai/gosling/tensor"

// VisionOps is an optional power of a device (found by type assertion):
// the kernels vision encoders need beyond a language model's. Vision
// models check for it at load and name the device that lacks it.
type VisionOps interface {
	// LayerNorm returns (x − mean)/sqrt(var + eps)·w + b over rows of
	// w.Len() values (biased variance, as torch.nn.LayerNorm).
	LayerNorm(x tensor.T, w, b Vector, eps float64) tensor.T
	// GELU sets x = x·Φ(x) in place (the exact, erf form: torch's
	// nn.GELU()); GELUTanh uses the tanh approximation.
	GELU(x tensor.T)
	GELUTanh(x tensor.T)
	// SetRows overwrites rows[i] of dst with row i of src, a host tensor
	// [len(rows), dst's width] (image embeddings placed at their
	// placeholder tokens).
	SetRows(dst tensor.T, rows []int32, src tensor.T)
	// AvgPool averages x, a grid of gridH×gridW rows (row-major), over
	// k×k blocks: [(gridH/k)·(gridW/k), width], blocks row-major.
	AvgPool(x tensor.T, gridH, gridW, k int) tensor.T
	// Upload makes a host float32 tensor (pixel patches) an activation of
	// this device: itself on the CPU, a copy in the forward's memory on a
	// GPU.
	Upload(x tensor.T) tensor.T
}
