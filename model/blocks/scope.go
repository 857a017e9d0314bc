package blocks

import "github.com/gosling-ai/gosling/device"

// Layer opens a layer's scope on a device that can take a forward's
// tensors back early (device.Scoped) and returns its end, which releases
// every tensor the layer made: call it once the layer's output is in the
// residual stream (updated in place, made before the scope), so a
// forward holds one layer's activations at a time. Elsewhere end does
// nothing.
func Layer(ops device.Ops) (end func()) {
	s, ok := ops.(device.Scoped)
	if !ok {
		return func() {}
	}
	mark := s.Mark()
	return func() { s.ReleaseSince(mark) }
}
