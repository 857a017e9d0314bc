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

// RopeQK rotates q and k: a batch of many tokens is split over the
// workers by tokens, each rotating its q and k rows with the one table.
func (o *Ops) RopeQK(q, k tensor.T, positions []int32, r *device.Rope) {
	rope := o.rope(r)
	tab := rope.table(positions)
	o.Workers.For(len(positions), ropeMinTokens, func(lo, hi int) {
		rope.applyRows(q.HostData(), q.Cols(), tab, lo, hi)
		rope.applyRows(k.HostData(), k.Cols(), tab, lo, hi)
	})
}

// ropeMinTokens is the fewest tokens worth a worker: a token's q and k
// of a 7B model are a few microseconds of rotations.
const ropeMinTokens = 4

// LinearAdd sets dst += x·Wᵀ + b.
func (o *Ops) LinearAdd(dst, x tensor.T, m device.Matrix) { Add(dst, o.Linear(x, m)) }

// GatedMLPAdd sets x += down(silu(gate(xn))·up(xn)), xn = RMSNorm(x, w, eps).
func (o *Ops) GatedMLPAdd(x tensor.T, w device.Vector, eps float64, gate, up, down device.Matrix) {
	gu := o.NormLinearGroup(x, w, eps, gate, up)
	o.SiLUMul(gu[0], gu[1])
	o.LinearAdd(x, gu[0], down)
}

// LinearInto sets dst = x·Wᵀ + b.
func (o *Ops) LinearInto(dst, x tensor.T, m device.Matrix) {
	y := o.Linear(x, m)
	copy(dst.HostData()[:len(y.HostData())], y.HostData())
}

// GatedMLPInto sets x = down(silu(gate(xn))·up(xn)), xn = RMSNorm(x, w, eps).
func (o *Ops) GatedMLPInto(x tensor.T, w device.Vector, eps float64, gate, up, down device.Matrix) {
	gu := o.NormLinearGroup(x, w, eps, gate, up)
	o.SiLUMul(gu[0], gu[1])
	o.LinearInto(x, gu[0], down)
}

var _ device.OverwriteOps = (*Ops)(nil)
