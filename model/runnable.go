package model

import (
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
	// b.LogitRows: [len(b.LogitRows), VocabSize].
	Forward(b *forward.Batch, attn attention.Backend) (tensor.T, error)
}
