package device

import (
	"os"
	"strconv"

	"github.com/gosling-ai/gosling/tensor"
)

// FP8Ops is an optional power of a device (found by type assertion):
// linear layers whose weights stay in e4m3 with their scales
// (tensor.ScaledFP8), multiplied as FP8Path says. A model's loader asks
// for it (model/blocks.Loader); without it FP8 checkpoints are widened.
type FP8Ops interface {
	// FP8Weights reports whether FP8Matrix may be called: a GPU of compute
	// capability 8.9 or later, or the CPU when it runs the reference
	// numerics (--quantization fp8).
	FP8Weights() bool
	// FP8Matrix prepares w with an optional bias [w.Out()]; the Matrix
	// serves every method of Ops that takes a linear layer's weight
	// (Linear, LinearGroup, NormLinearGroup, LinearAdd, GatedMLPAdd), not
	// Embed or LinearPerHead.
	FP8Matrix(w tensor.ScaledFP8, bias []float32) (Matrix, error)
}

// FP8Path is how x·Wᵀ is computed for an FP8 weight W = Q·s. Each device
// computes the same values, up to float32 summation order, so the CPU's
// reference path (device/cpu) predicts the GPU's:
type FP8Path int

const (
	// FP8Skinny (a decode batch, the GEMV): x rounded to bf16, W·s exact,
	// float32 sums. The weights stream once at a byte each.
	FP8Skinny FP8Path = iota
	// FP8Scaled (larger batches, the FP8 GEMM): each row t of x quantised
	// to e4m3 with its own scale (tensor.QuantizeFP8Row), so
	// y[t, o] = sx[t]·s[o]·Σ qx[t, i]·Q[o, i] with float32 sums (which a
	// GPU without outer-vector scales in its GEMM, device/cuda on sm_90,
	// rounds to bf16 before it scales them).
	FP8Scaled
	// FP8Widened (block scales, or rows the FP8 kernels cannot tile): x
	// and W·s both rounded to bf16, a bf16 GEMM with float32 sums.
	FP8Widened
)

// FP8SkinnyRows is the largest batch the FP8 GEMV takes.
const FP8SkinnyRows = 8

// fp8SkinnyLimit is the largest batch of per-channel FP8 weights that
// takes the GEMV (block-scaled ones take it up to FP8SkinnyRows, their
// alternative being the widened bf16 GEMM): where the GEMV's step, which
// grows with the rows, passes the FP8 GEMM path's (docs/gpu-step.md).
// GOSLING_FP8_SKINNY_ROWS (1..FP8SkinnyRows) overrides it, to measure the
// crossing on a GPU. It is read once, so the CPU's reference path and a
// GPU in one process agree.
var fp8SkinnyLimit = func() int {
	if v, err := strconv.Atoi(os.Getenv("GOSLING_FP8_SKINNY_ROWS")); err == nil && v >= 1 && v <= FP8SkinnyRows {
		return v
	}
	return 6
}()

// FP8Align is the multiple of values the FP8 kernels need along a row
// (16-byte loads of e4m3; cuBLASLt's FP8 layouts) and along a scale block.
const FP8Align = 16

// FP8PathOf is the path for rows rows of x through w.
func FP8PathOf(rows int, w tensor.ScaledFP8) FP8Path {
	in := w.In()
	switch {
	case in%FP8Align != 0 || (!w.PerRow() && w.BlockCols%FP8Align != 0):
		return FP8Widened
	case rows <= fp8SkinnyLimit, rows <= FP8SkinnyRows && !w.PerRow():
		return FP8Skinny
	case w.PerRow():
		return FP8Scaled
	}
	return FP8Widened
}

// CompactWeights is an optional power of a device (found by type
// assertion): matrices in some quantized formats are kept as their blocks
// in its memory and multiplied so (device/cuda: GGUF Q8_0 and K-quants,
// MXFP4, AWQ4). A weight source that can hand a tensor over either
// dequantized or compact (an MXFP4 checkpoint's experts) hands it compact
// where KeepsCompact holds (model.ServeCompact).
type CompactWeights interface {
	KeepsCompact(tensor.DType) bool
}
