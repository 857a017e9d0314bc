package blocks

import (
	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/tensor"
)

// MLP is a gated feed-forward block: down(act(gate(x), up(x))), SwiGLU
// (silu(gate)·up) unless Act says otherwise.
type MLP struct {
	Gate, Up, Down device.Matrix
	Act            Activation // nil: SwiGLU
}

// Activation sets gate = act(gate, up) in place; both are [T, intermediate].
type Activation func(ops device.Ops, gate, up tensor.T)

// Forward maps x [T, hidden] to [T, hidden].
func (f *MLP) Forward(ops device.Ops, x tensor.T) tensor.T {
	gateUp := ops.LinearGroup(x, f.Gate, f.Up) // [T, intermediate] each
	if f.Act != nil {
		f.Act(ops, gateUp[0], gateUp[1])
	} else {
		ops.SiLUMul(gateUp[0], gateUp[1])
	}
	y := ops.Linear(gateUp[0], f.Down)
	if rel, ok := ops.(releaser); ok {
		rel.Release(gateUp[0], gateUp[1])
	}
	return y
}
