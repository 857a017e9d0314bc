// Package sched is the continuous-batching scheduler: which requests run
// in a step and how many tokens each computes, from the waiting queue, the
// running set, the KV cache (page allocator, radix prefix cache, window
// region) and the budgets. It knows no model and no device; the engine's
// runner turns its decisions into a forward.
//
// A step is two calls. Schedule gives every decoding request a slot for
// its next token (retracting the newest request when pages run out) and
// admits waiting requests; the runner then encodes images and drafts
// speculative trees for what Schedule left running; Fill sizes each
// running request's share of the step (prefill chunks within the token
// budget, one decode token, or a verified tree).
package sched

import "github.com/gosling-ai/gosling/kvcache"

// Req is a request as the scheduler sees it: its tokens and what it holds
// in the KV cache. The engine's request embeds one.
type Req struct {
	// Tokens are the prompt followed by every output token so far, one
	// slice grown by Append. The cache holds the KV of Tokens[:Computed];
	// a (re-)admitted request prefills the rest, and a decoding request
	// has exactly one left: its newest output, whose forward yields the
	// next token's logits.
	Tokens    []int
	NumPrompt int
	// Keys are Tokens as the prefix cache sees them (an image's
	// placeholder tokens replaced by its key), grown alongside; nil when
	// they equal Tokens.
	Keys []int
	// Spans are the prompt's bidirectional spans [start, end): a prefill
	// chunk never ends inside one, or its first tokens would not see the
	// rest.
	Spans [][2]int
	// ScorePrompt: the prompt is scored, which needs the logits of
	// every prompt row, so until it has been prefilled once it computes
	// in full (no prefix reuse).
	ScorePrompt bool

	Seq          *kvcache.Seq       // nil while waiting
	Computed     int                // tokens of Tokens whose KV is in the cache
	PromptDone   bool               // the prompt has been prefilled once
	Lock         *kvcache.RadixNode // prefix-cache path pinned by this request
	CachedTokens int                // prompt tokens served from the prefix cache
	// InFlight are the output tokens at the end of Tokens that a forward
	// still running is drawing (the engine's overlap schedule): their
	// entries hold -1 until Resolve. Admission passes over a request
	// that has any.
	InFlight int
}

// AppendInFlight adds an output token that a forward in flight draws.
func (r *Req) AppendInFlight() {
	r.Append(-1)
	r.InFlight++
}

// Resolve sets the oldest in-flight token to id and returns its index.
func (r *Req) Resolve(id int) int {
	at := len(r.Tokens) - r.InFlight
	r.Tokens[at] = id
	if r.Keys != nil {
		r.Keys[at] = id
	}
	r.InFlight--
	return at
}

// DropInFlight removes the in-flight tokens (the request ended before
// they were drawn) and keeps Computed within the tokens that remain.
func (r *Req) DropInFlight() {
	if r.InFlight == 0 {
		return
	}
	n := len(r.Tokens) - r.InFlight
	r.Tokens = r.Tokens[:n]
	if r.Keys != nil {
		r.Keys = r.Keys[:n]
	}
	r.InFlight = 0
	r.Computed = min(r.Computed, n)
}

// Append adds an output token.
func (r *Req) Append(id int) {
	r.Tokens = append(r.Tokens, id)
	if r.Keys != nil {
		r.Keys = append(r.Keys, id)
	}
}

// PromptIDs are the prompt's tokens (capacity-limited: appending to it copies).
func (r *Req) PromptIDs() []int { return r.Tokens[:r.NumPrompt:r.NumPrompt] }

// NumOutput is how many tokens have been generated.
func (r *Req) NumOutput() int { return len(r.Tokens) - r.NumPrompt }

// CacheKeys are the tokens under which the prefix cache files r's KV.
func (r *Req) CacheKeys() []int {
	if r.Keys == nil {
		return r.Tokens
	}
	return r.Keys
}

// Prefilling reports whether more than the newest token is uncomputed.
func (r *Req) Prefilling() bool { return r.Computed < len(r.Tokens)-1 }

// WantsPromptRows: the prompt is still to be scored, so this prefill needs
// a logits row per token and reuses no cached prefix.
func (r *Req) WantsPromptRows() bool { return r.ScorePrompt && !r.PromptDone }

// SpanEnd is the end of the bidirectional span that token i falls inside
// (start < i < end), or i when none.
func (r *Req) SpanEnd(i int) int {
	for _, s := range r.Spans {
		if s[0] < i && i < s[1] {
			return s[1]
		}
	}
	return i
}
