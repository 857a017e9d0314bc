package attention

import (
	"testing"

	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/tensor"
)

// closingBackend counts its Close calls; it attends to nothing.
type closingBackend struct{ closed int }

func (c *closingBackend) Name() string                { return "closing" }
func (c *closingBackend) Plan(b *forward.Batch) error { return nil }
func (c *closingBackend) Extend(q, k, v tensor.T, l *Layer, b *forward.Batch) (tensor.T, error) {
	return tensor.T{}, nil
}
func (c *closingBackend) Decode(q, k, v tensor.T, l *Layer, b *forward.Batch) (tensor.T, error) {
	return tensor.T{}, nil
}
func (c *closingBackend) Close() error { c.closed++; return nil }

// TestHybridClose: a hybrid closes each side once, a side shared by both
// phases once too (the engine closes the backend of its start-up
// measurement, engine/memory.go).
func TestHybridClose(t *testing.T) {
	p, d := &closingBackend{}, &closingBackend{}
	if err := (&Hybrid{PrefillBackend: p, DecodeBackend: d}).Close(); err != nil || p.closed != 1 || d.closed != 1 {
		t.Errorf("two sides closed %d and %d times (%v), want once each", p.closed, d.closed, err)
	}
	same := &closingBackend{}
	if err := (&Hybrid{PrefillBackend: same, DecodeBackend: same}).Close(); err != nil || same.closed != 1 {
		t.Errorf("a shared side closed %d times (%v), want once", same.closed, err)
	}
}
