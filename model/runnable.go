package model

import (
	"fmt"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/tensor"
)

// Runnable is an architecture with its weights bound, ready to run batches.
type Runnable interface {
	Config() *Config
	// KVSpec is the per-token K/V layout the cache must provide.
	KVSpec() kvcache.Spec
	// AttentionLayers describes every attention layer (heads, dims,
	// windows), which is what backend resolution checks against.
	AttentionLayers() []attention.Layer
	// Forward runs one batch through the network and returns the logits of
	// b.LogitRows: [len(b.LogitRows), VocabSize]. The caller finalizes b
	// and plans it (attn.Plan(b)) first, as SGLang's model runner sets up
	// the attention metadata before the model runs: the plan's uploads then
	// stay outside a CUDA graph replaying Forward.
	//
	// The logits are float32 and stay where the model ran: a host tensor
	// on the CPU, a device tensor (Dev != 0) on a GPU, valid until the next
	// Forward (the device ops' next BeginForward). Forward must not copy
	// them back: the caller brings rows to the host only when it needs
	// them (the engine samples ordinary requests on the device).
	Forward(b *forward.Batch, attn attention.Backend) (tensor.T, error)
}

// CheckInputIDs reports the first token id outside [0, vocab): a Forward
// refuses such a batch instead of embedding a zero (or stray) row.
func CheckInputIDs(ids []int32, vocab int) error {
	for _, id := range ids {
		if id < 0 || int(id) >= vocab {
			return fmt.Errorf("token id %d outside the vocabulary [0, %d)", id, vocab)
		}
	}
	return nil
}
