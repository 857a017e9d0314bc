package cpu

import (
	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/tensor"
)

// The composite ops of device.Ops that a GPU fuses into one launch; on the
// CPU they are their parts in order, so their results are the unfused
// ops' bit for bit.

// NormLinearGroup is LinearGroup(RMSNorm(x, w, eps), ms...).
func (o *Ops) NormLinearGroup(x tensor.T, w device.Vector, eps float64, ms ...device.Matrix) []tensor.T {
	return o.LinearGroup(o.RMSNorm(x, w, eps), ms...)
}

// RopeQK rotates q, then k.
func (o *Ops) RopeQK(q, k tensor.T, positions []int32, r *device.Rope) {
	o.Rope(q, positions, r)
	o.Rope(k, positions, r)
}

// LinearAdd sets dst += x·Wᵀ + b.
func (o *Ops) LinearAdd(dst, x tensor.T, m device.Matrix) { Add(dst, o.Linear(x, m)) }

// SiLUMulLinearAdd sets dst += (silu(gate)·up)·Wᵀ + b, gate becoming
// silu(gate)·up.
func (o *Ops) SiLUMulLinearAdd(dst, gate, up tensor.T, m device.Matrix) {
	SiLUMul(gate, up)
	o.LinearAdd(dst, gate, m)
}
