package attention

import (
	"errors"

	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/tensor"
)

// Hybrid routes Extend to one backend and Decode to another. Target
// verification goes to the prefill side unless VerifyWithDecode is set
// (--speculative-attention-mode decode); CUDA-graph capture, which only
// decodes, uses the decode side.
type Hybrid struct {
	PrefillBackend, DecodeBackend Backend
	VerifyWithDecode              bool
}

func (h *Hybrid) Name() string {
	return "hybrid(" + h.PrefillBackend.Name() + "," + h.DecodeBackend.Name() + ")"
}

// For is the backend that serves a batch.
func (h *Hybrid) For(b *forward.Batch) Backend {
	if b.Mode == forward.Decode || (b.Mode == forward.TargetVerify && h.VerifyWithDecode) {
		return h.DecodeBackend
	}
	return h.PrefillBackend
}

func (h *Hybrid) Plan(b *forward.Batch) error { return h.For(b).Plan(b) }

func (h *Hybrid) Extend(q, k, v tensor.T, layer *Layer, b *forward.Batch) (tensor.T, error) {
	return h.For(b).Extend(q, k, v, layer, b)
}

func (h *Hybrid) Decode(q, k, v tensor.T, layer *Layer, b *forward.Batch) (tensor.T, error) {
	return h.DecodeBackend.Decode(q, k, v, layer, b)
}

// Close closes each side that holds resources of its own (a Close
// method), once when both sides are the same backend.
func (h *Hybrid) Close() error {
	var errs []error
	for i, be := range []Backend{h.PrefillBackend, h.DecodeBackend} {
		if c, ok := be.(interface{ Close() error }); ok && (i == 0 || be != h.PrefillBackend) {
			errs = append(errs, c.Close())
		}
	}
	return errors.Join(errs...)
}
