package model

import (
	"fmt"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/device"
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

// CaptureFinalNorm is the capture point of the final norm's output: the
// hidden state the output head reads.
const CaptureFinalNorm = -1

// HiddenCapture is a Runnable that can keep its hidden states for a
// speculative drafter fed with them (EAGLE heads). Drafters find it by
// type assertion; an architecture without it cannot feed one.
type HiddenCapture interface {
	// SetCapture chooses what every later Forward keeps of each new token:
	// point i (0 <= i <= NumLayers) is the residual stream entering layer
	// i (0: the embeddings; NumLayers: after the last layer, before the
	// final norm), CaptureFinalNorm the final norm's output. nil: nothing.
	SetCapture(points []int) error
	// Captured is the latest Forward's capture: [NumTokens, len(points) *
	// HiddenSize], the points side by side in SetCapture's order, on the
	// ops' device; valid until the next Forward.
	Captured() tensor.T
	// TokenEmbedding is the input embedding [VocabSize, HiddenSize] and
	// OutputHead the matrix the logits come from [VocabSize, HiddenSize],
	// which EAGLE heads share with their target.
	TokenEmbedding() device.Matrix
	OutputHead() device.Matrix
}

// AllRows is 0, 1, …, n−1: every row of an n-token batch.
func AllRows(n int) []int32 {
	rows := make([]int32, n)
	for i := range rows {
		rows[i] = int32(i)
	}
	return rows
}
