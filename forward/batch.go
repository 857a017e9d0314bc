// Package forward describes one forward pass: which requests, which new
// tokens, where their K/V go, and which rows need logits. The scheduler
// builds a Batch; the model and the attention backends only read it.
package forward

import (
	"fmt"
	"slices"

	"github.com/gosling-ai/gosling/kvcache"
)

// Mode says what kind of forward a batch is; attention backends switch on it
// once (attention.Run), not in every file. Each mode has one producer.
//
// Under tensor parallelism every rank runs every batch (rank 0 hands each
// peer a copy), so no rank is ever without work in a step and there is no
// idle mode: a data-parallel attention layout, where one rank's share of
// a step can be empty, would be the first to need one.
type Mode uint8

const (
	// Extend: prefill of new tokens, possibly over a cached prefix
	// (runner.Build, a step of prompt chunks only).
	Extend Mode = iota
	// Decode: exactly one new token per request (runner.Build; a drafter's
	// chain level).
	Decode
	// Mixed: prefills and decodes in one forward (runner.Build; run as
	// Extend).
	Mixed
	// TargetVerify: the target model scores draft trees (runner.Build for
	// a step with Verify chunks; run as Extend, tree masks on).
	TargetVerify
	// DraftExtend: a drafter catches up on accepted tokens and expands its
	// tree (engine's draft model and EAGLE head, through runner.Draft).
	DraftExtend
	// Encode: bidirectional attention within each sequence, keys and values
	// taken from the forward's own k and v, no KV cache (vision encoders:
	// model.EncodeBatch).
	Encode
)

func (m Mode) String() string {
	return [...]string{"extend", "decode", "mixed", "target_verify", "draft_extend", "encode"}[m]
}

// IsExtendLike reports whether attention runs in its Extend form.
func (m Mode) IsExtendLike() bool {
	return m == Extend || m == Mixed || m == TargetVerify || m == DraftExtend
}

// Batch is one forward pass over NumReqs requests and NumTokens new tokens.
// New tokens are grouped by request, in request order.
type Batch struct {
	Mode Mode

	// Per request, length NumReqs.
	ReqRows      []int32 // row of the request in KV.Table
	PrefixLens   []int32 // tokens already in the KV cache
	ExtendLens   []int32 // new tokens in this forward (1 per request in Decode)
	ExtendStarts []int32 // offset of the request's first new token; set by Finalize

	// Per new token, length NumTokens.
	InputIDs  []int32
	Positions []int32 // RoPE positions (PrefixLen + i for plain text)
	OutSlots  []int32 // KV slot each new token's k and v are written to

	// LogitRows are the new-token rows whose logits the model returns, in
	// this order (the last token of each request, or every token for
	// prompt log-probabilities).
	LogitRows []int32

	// CustomMask, when non-nil, replaces causality for the requests whose
	// MaskStarts entry is >= 0 (target verification of a draft tree):
	// request r's mask is [ExtendLens[r], SeqLen(r)] row-major at
	// CustomMask[MaskStarts[r]:], true where the new token may attend the key.
	// Sliding windows still apply on top.
	CustomMask []bool
	MaskStarts []int32

	// Spans are bidirectional spans (image tokens and the like): a token
	// inside a span also attends to the later tokens of its span.
	Spans []Span

	// EmbedRows and EmbedData replace the token embeddings of some new
	// tokens (image placeholders): row EmbedRows[i] of the batch takes the
	// host vector EmbedData[i*hidden:(i+1)*hidden], a vision encoder's output.
	EmbedRows []int32
	EmbedData []float32

	// MRopePositions, when set, holds Qwen2-VL's three rotary position
	// streams (temporal, height, width) for every new token: [3*NumTokens],
	// stream-major. nil: each stream is Positions.
	MRopePositions []int32

	// KV is the cache the attention backends read and write (nil in Encode mode).
	KV *kvcache.Cache
	// Slots, when set, are each request's KV slots (SeqLen(r) of them)
	// copied when the batch was built, so that the forward reads no table
	// row the scheduler may rewrite while it runs (the engine's overlap
	// schedule); nil: SeqSlots reads KV.Table.
	Slots [][]int32
}

// Span marks tokens [Start, End) of request Req (sequence indices) as
// attending each other bidirectionally.
type Span struct {
	Req        int32
	Start, End int32
}

// NumReqs is the number of requests.
func (b *Batch) NumReqs() int { return len(b.ReqRows) }

// NumTokens is the number of new tokens.
func (b *Batch) NumTokens() int { return len(b.InputIDs) }

// SeqLen is request r's length after this forward.
func (b *Batch) SeqLen(r int) int { return int(b.PrefixLens[r] + b.ExtendLens[r]) }

// MaskRow is the custom-mask row of request r's new token t over keys
// [0, SeqLen(r)), or nil when the request is causal.
func (b *Batch) MaskRow(r, t int) []bool {
	if b.CustomMask == nil || b.MaskStarts[r] < 0 {
		return nil
	}
	n := b.SeqLen(r)
	at := int(b.MaskStarts[r]) + t*n
	return b.CustomMask[at : at+n]
}

// SeqSlots is request r's KV slots for all its tokens after this forward
// (cached prefix and new tokens), in token order.
func (b *Batch) SeqSlots(r int) []int32 {
	if b.Slots != nil {
		return b.Slots[r]
	}
	return b.KV.Table.Row(int(b.ReqRows[r]))[:b.SeqLen(r)]
}

// Finalize fills ExtendStarts and checks that the arrays agree, so that a
// scheduler bug fails here with a message instead of in a kernel.
func (b *Batch) Finalize() error {
	n := b.NumReqs()
	if len(b.PrefixLens) != n || len(b.ExtendLens) != n {
		return fmt.Errorf("forward batch: %d requests but %d prefix and %d extend lengths", n, len(b.PrefixLens), len(b.ExtendLens))
	}
	b.ExtendStarts = b.ExtendStarts[:0]
	total := int32(0)
	for r := range n {
		if b.Mode == Decode && b.ExtendLens[r] != 1 {
			return fmt.Errorf("forward batch: decode request %d has %d new tokens", r, b.ExtendLens[r])
		}
		b.ExtendStarts = append(b.ExtendStarts, total)
		total += b.ExtendLens[r]
	}
	if int(total) != len(b.InputIDs) || len(b.Positions) != len(b.InputIDs) || len(b.OutSlots) != len(b.InputIDs) {
		return fmt.Errorf("forward batch: %d new tokens by extend lengths, but %d ids, %d positions, %d slots",
			total, len(b.InputIDs), len(b.Positions), len(b.OutSlots))
	}
	if b.Slots != nil {
		if len(b.Slots) != n {
			return fmt.Errorf("forward batch: %d slot lists for %d requests", len(b.Slots), n)
		}
		for r, s := range b.Slots {
			if len(s) != b.SeqLen(r) {
				return fmt.Errorf("forward batch: request %d has %d slots for %d tokens", r, len(s), b.SeqLen(r))
			}
		}
	}
	if b.CustomMask != nil {
		if len(b.MaskStarts) != n {
			return fmt.Errorf("forward batch: %d mask starts for %d requests", len(b.MaskStarts), n)
		}
		for r, at := range b.MaskStarts {
			if at >= 0 && int(at)+int(b.ExtendLens[r])*b.SeqLen(r) > len(b.CustomMask) {
				return fmt.Errorf("forward batch: custom mask of request %d runs past the mask buffer", r)
			}
		}
	}
	for _, s := range b.Spans {
		if s.Req < 0 || int(s.Req) >= n || s.Start < 0 || s.Start > s.End || int(s.End) > b.SeqLen(int(s.Req)) {
			return fmt.Errorf("forward batch: invalid bidirectional span %+v", s)
		}
	}
	if b.Mode == Encode && (b.KV != nil || b.PrefixLens != nil && slices.ContainsFunc(b.PrefixLens, func(p int32) bool { return p != 0 })) {
		return fmt.Errorf("forward batch: an encode batch has no KV cache and no prefix")
	}
	if b.MRopePositions != nil && len(b.MRopePositions) != 3*len(b.InputIDs) {
		return fmt.Errorf("forward batch: %d M-RoPE positions for %d tokens, want 3 per token", len(b.MRopePositions), len(b.InputIDs))
	}
	for _, row := range b.EmbedRows {
		if row < 0 || int(row) >= len(b.InputIDs) {
			return fmt.Errorf("forward batch: embedding row %d out of range [0,%d)", row, len(b.InputIDs))
		}
	}
	if len(b.EmbedRows) > 0 && len(b.EmbedData)%len(b.EmbedRows) != 0 {
		return fmt.Errorf("forward batch: %d embedding values for %d rows", len(b.EmbedData), len(b.EmbedRows))
	}
	for _, row := range b.LogitRows {
		if row < 0 || int(row) >= len(b.InputIDs) {
			return fmt.Errorf("forward batch: logit row %d out of range [0,%d)", row, len(b.InputIDs))
		}
	}
	return nil
}
