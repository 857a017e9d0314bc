// Package device is the contract between model code and a device's
// non-attention kernels. A model prepares its weights once through Ops
// (Matrix, Vector) and runs every forward through the same calls, whether
// the tensors are host slices (device/cpu) or GPU memory (device/cuda).
// Attention is not here: it goes through the attention.Backend contract.
package device

import "github.com/gosling-ai/gosling/tensor"

// Matrix is a linear layer's weight [Out, In] (plus an optional bias),
// prepared for one device: possibly converted, quantised or uploaded.
type Matrix interface {
	Out() int
	In() int
}

// Vector is a prepared 1-D weight (a norm's scale).
type Vector interface {
	Len() int
}

// Rope is a rotary embedding: heads of HeadDim values rotate by
// position·InvFreq[i], pairs (i, i+HeadDim/2), or (2i, 2i+1) when
// Interleaved.
type Rope struct {
	HeadDim     int
	InvFreq     []float32 // [HeadDim/2]
	Interleaved bool
}

// Ops are one device's kernels as a model uses them. Tensors are float32
// activations, row-major: [T, width] for T tokens. Results are new tensors
// unless the method says "in place"; a device may recycle them after
// EndForward, so a model must not keep them across forwards.
type Ops interface {
	// Name is the device: "cpu" or "cuda".
	Name() string

	// Matrix prepares w ([out, in], any stored dtype) and bias ([out] or nil).
	Matrix(w tensor.Weight, bias []float32) (Matrix, error)
	// Vector prepares a 1-D weight.
	Vector(v []float32) (Vector, error)

	// BeginForward and EndForward bracket one forward pass; tensors made
	// in between may be recycled by the next BeginForward.
	BeginForward()
	EndForward()

	// Embed gathers rows of table (a Matrix of [vocab, hidden]): [len(ids), hidden].
	Embed(table Matrix, ids []int32) tensor.T
	// Linear is x·Wᵀ + b: [T, In] → [T, Out].
	Linear(x tensor.T, m Matrix) tensor.T
	// LinearGroup applies several matrices with the same input (q, k, v;
	// gate, up), letting a device share the input's preparation.
	LinearGroup(x tensor.T, ms ...Matrix) []tensor.T
	// RMSNorm returns x / rms(x) · w over rows of w.Len() values; with
	// w.Len() smaller than the row it normalises each head of that width.
	RMSNorm(x tensor.T, w Vector, eps float64) tensor.T
	// Rope rotates every head of every row of x in place; positions: [T].
	Rope(x tensor.T, positions []int32, r *Rope)
	// SiLUMul sets gate = silu(gate)·up in place; GeLUTanhMul likewise.
	SiLUMul(gate, up tensor.T)
	GeLUTanhMul(gate, up tensor.T)
	// Add sets dst += src in place.
	Add(dst, src tensor.T)
	// Scale multiplies x by s in place.
	Scale(x tensor.T, s float32)
	// Softcap sets x = cap·tanh(x/cap) in place.
	Softcap(x tensor.T, cap float32)
	// GatherRows picks rows of x: [len(rows), width].
	GatherRows(x tensor.T, rows []int32) tensor.T
	// ToHost returns x's values on the host (x itself on the CPU).
	ToHost(x tensor.T) tensor.T
	// Adopt takes a tensor made outside Ops on this device (an attention
	// backend's output) into the forward's memory, to be recycled with the
	// rest; a no-op where memory is garbage collected.
	Adopt(x tensor.T)
}
