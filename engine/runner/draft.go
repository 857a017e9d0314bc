package runner

import (
	"fmt"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/vision"
)

// Draft is the runner of a model that drafts for the target (a
// STANDALONE draft model, an EAGLE head): its device (the target's), its
// own attention backend and KV cache. It has the target runner's
// forward seam without the scheduler's: the drafter builds its batches
// (forward.DraftExtend, or Decode for a chain) and reads what its model
// returns inside Forward, on the device's thread, before the next
// forward recycles that memory.
type Draft struct {
	rt   device.Runtime
	attn attention.Backend
	kv   *kvcache.Cache
}

// NewDraft is the runner of a drafter on rt with its attention backend
// and KV cache.
func NewDraft(rt device.Runtime, attn attention.Backend, kv *kvcache.Cache) *Draft {
	return &Draft{rt: rt, attn: attn, kv: kv}
}

// KV is the drafter's KV cache.
func (d *Draft) KV() *kvcache.Cache { return d.kv }

// Attention is the drafter's attention backend.
func (d *Draft) Attention() attention.Backend { return d.attn }

// Forward checks b, plans the drafter's attention for it and calls run
// (the drafter's model over b and d's attention) on the device's thread.
func (d *Draft) Forward(b *forward.Batch, run func(attention.Backend) error) error {
	if err := b.Finalize(); err != nil {
		return err
	}
	return d.rt.Run(func() error {
		if err := d.attn.Plan(b); err != nil {
			return err
		}
		return run(d.attn)
	})
}

// EncodeImage runs the model's vision tower over one preprocessed image
// (an Encode forward: bidirectional, no KV cache) on the runner's device
// with its attention backend, and returns the embeddings on the host,
// [model.VisionRunnable.ImageTokens(px) × hidden].
func (rn *Runner[R]) EncodeImage(px *vision.Pixels) ([]float32, error) {
	vm, ok := rn.model.(model.VisionRunnable)
	if !ok {
		return nil, fmt.Errorf("model %s has no vision tower", rn.model.Config().Architecture)
	}
	var out []float32
	err := rn.rt.Run(func() error {
		enc, err := vm.EncodeImage(px, rn.attn)
		if err != nil {
			return err
		}
		h, err := enc.Host()
		out = h.Data
		return err
	})
	return out, err
}
