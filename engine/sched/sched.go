package sched

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/gosling-ai/gosling/kvcache"
)

// Request is what the scheduler schedules: the engine's request type,
// which carries a Req.
type Request interface {
	comparable
	Sched() *Req
}

// Config are the scheduler's budgets and policy.
type Config struct {
	MaxRunning       int // requests running at once
	MaxPrefillTokens int // prefill tokens of one step
	// ChunkedPrefillSize caps the prompt tokens one request prefills per
	// step; <= 0: no cap.
	ChunkedPrefillSize int
	// LPM admits the waiting requests that reuse the longest cached
	// prefix first (with a prefix cache); otherwise first come, first
	// served.
	LPM bool
	// KVCacheTokens is the cache's capacity, named when a request can
	// never fit.
	KVCacheTokens int
	// MaxForwardTokens caps the tokens of one step's forward, decodes and
	// verified trees included: the device reserved activation memory for
	// a forward of this size and no larger (engine/memory.go). Prefill
	// chunks are cut to what decodes leave; <= 0: no cap.
	MaxForwardTokens int
	// MaxLogitRows caps the logits rows of one step (a row costs a
	// vocabulary of float32 logits): a prompt being scored, which needs a
	// row per token, prefills at most what the other requests leave; <= 0:
	// no cap.
	MaxLogitRows int
}

// Scheduler holds the cache state the decisions are made against. The
// cache and the prefix cache are shared with the engine, which runs the
// forwards that fill them.
type Scheduler[R Request] struct {
	cfg   Config
	kv    *kvcache.Cache
	radix *kvcache.RadixCache // nil: prefix caching is off
	// OnRelease is called when a request's sequence is released (a
	// speculative draft model frees its own cache then); nil: nothing.
	OnRelease func(R)
}

// New schedules over kv, sharing prefixes through radix (nil: off).
func New[R Request](cfg Config, kv *kvcache.Cache, radix *kvcache.RadixCache) *Scheduler[R] {
	return &Scheduler[R]{cfg: cfg, kv: kv, radix: radix}
}

// Plan is what Schedule decided.
type Plan[R Request] struct {
	// Running are the requests of this step, in batch order: those that
	// kept running, then the admitted ones.
	Running []R
	// Waiting is the queue afterwards: retracted requests at its front,
	// then those not admitted.
	Waiting []R
	// Admitted are the requests admitted this step (the tail of Running).
	Admitted []R
	// Retracted are running requests given back to the queue because the
	// cache ran out of pages; their computed tokens went to the prefix
	// cache and they restart from there when re-admitted.
	Retracted []R
	// Ended are requests that end now, their sequences released.
	Ended []Ended[R]
}

// Ended is a request the scheduler ended.
type Ended[R Request] struct {
	Req R
	// Err is nil when the request reached the context limit (it ends
	// with what it has), else why it can never run.
	Err error
	// BadRequest: Err is the request's own fault (it needs more KV than
	// the cache holds).
	BadRequest bool
}

// Schedule gives every decoding request of running a slot for its next
// token, then admits from waiting while the running limit, the token
// budget and the cache allow.
func (s *Scheduler[R]) Schedule(waiting, running []R) Plan[R] {
	var p Plan[R]
	running = s.growDecoders(running, &waiting, &p)
	p.Admitted = s.admit(&waiting, len(running), &p)
	p.Running = append(running, p.Admitted...)
	p.Waiting = waiting
	return p
}

// growDecoders gives every decoding request a slot for its next token.
// When pages run out it evicts cached prefixes, then retracts the newest
// running request (its computed tokens go to the prefix cache) and
// re-queues it at the front; no request is dropped.
func (s *Scheduler[R]) growDecoders(running []R, waiting *[]R, p *Plan[R]) []R {
	for i := 0; i < len(running); i++ {
		r := running[i]
		st := r.Sched()
		if st.Prefilling() {
			continue
		}
		for {
			ok, err := s.Reserve(st.Seq, st.Computed+1)
			if err != nil { // the context limit, which the engine checks first
				s.Release(r)
				p.Ended = append(p.Ended, Ended[R]{Req: r})
				running = slices.Delete(running, i, i+1)
				i--
				break
			}
			if ok && s.PrepareWindow(r, st.Computed+1) {
				break
			}
			victim := running[len(running)-1]
			s.Release(victim)
			running = running[:len(running)-1]
			*waiting = append([]R{victim}, *waiting...)
			p.Retracted = append(p.Retracted, victim)
			if victim == r {
				i--
				break
			}
		}
	}
	return running
}

// admit takes waiting requests in policy order while table rows, the
// running limit and pages for their whole prefill allow. A request that
// cannot fit even into an empty cache ends; otherwise it waits.
func (s *Scheduler[R]) admit(waiting *[]R, numRunning int, p *Plan[R]) []R {
	if len(*waiting) == 0 {
		return nil
	}
	if s.cfg.LPM && s.radix != nil {
		// Longest prefix match first: requests that reuse the most cached
		// tokens go first, while their prefix is still cached.
		slices.SortStableFunc(*waiting, func(a, b R) int {
			return cmp.Compare(s.cachedPrefixLen(b.Sched()), s.cachedPrefixLen(a.Sched()))
		})
	}
	var admitted []R
	budget := s.cfg.MaxPrefillTokens
	for len(*waiting) > 0 && numRunning+len(admitted) < s.cfg.MaxRunning {
		r := (*waiting)[0]
		st := r.Sched()
		if st.InFlight > 0 {
			break // retracted while its last token is drawn: next step
		}
		tokens := st.CacheKeys()
		if len(admitted) > 0 && len(tokens) > budget {
			break // this step's prefill budget is spent
		}
		seq, ok := s.kv.NewSeq()
		if !ok {
			break
		}
		st.Seq = seq
		s.matchPrefix(st, tokens)
		ok, err := s.Reserve(seq, len(tokens))
		if err != nil || !ok {
			s.Release(r)
			if err == nil && numRunning+len(admitted) > 0 {
				break // wait for running requests to free pages
			}
			bad := err == nil
			if bad {
				err = fmt.Errorf("the request needs %d tokens of KV cache, more than the %d the cache holds; raise --kv-cache-tokens", len(tokens), s.cfg.KVCacheTokens)
			}
			*waiting = (*waiting)[1:]
			p.Ended = append(p.Ended, Ended[R]{Req: r, Err: err, BadRequest: bad})
			continue
		}
		if !st.PromptDone {
			st.CachedTokens = st.Computed
		}
		budget -= len(tokens) - st.Computed
		admitted = append(admitted, r)
		*waiting = (*waiting)[1:]
	}
	return admitted
}

func (s *Scheduler[R]) cachedPrefixLen(r *Req) int {
	tokens := r.CacheKeys()
	pages, _ := s.radix.Match(tokens[:len(tokens)-1])
	return len(pages)
}

// Kind is what a request computes in a step.
type Kind int

const (
	Prefill Kind = iota // a chunk of tokens not yet in the cache
	Decode              // its newest token
	Verify              // its newest token and a drafted tree after it
)

// Chunk is one request's share of a step: N new tokens from its
// Computed on.
type Chunk[R Request] struct {
	Req  R
	N    int
	Kind Kind
}

// Fill sizes each running request's share of the step, in order: a
// prefilling request gets what is left of its prompt, at most
// ChunkedPrefillSize and, unless it is the step's first, what is left of
// the token budget, never ending inside a bidirectional span; a decoding
// request verifies the tree of tree(r) tokens when that is positive, else
// decodes one token. A request whose chunk is empty (budget spent) or
// whose window pages are short sits the step out.
//
// Invariant: the chunks' tokens sum to at most MaxForwardTokens and their
// logits rows to at most MaxLogitRows (when set). Decodes and verified
// trees are never cut (MaxForwardTokens is at least every running
// request's tree), so the cap falls on prefill chunks: they are cut to
// what the decodes leave, or wait for the next step. The one exception
// is a bidirectional span longer than what the decodes leave of the cap,
// which runs whole when no other prefill shares its step (or it would
// never run).
func (s *Scheduler[R]) Fill(running []R, tree func(R) int) []Chunk[R] {
	budget := s.cfg.MaxPrefillTokens
	var decodes, prefills int
	// Decode and verify tokens and rows come first: they are not cut.
	tokensLeft, rowsLeft := s.cfg.MaxForwardTokens, s.cfg.MaxLogitRows
	for _, r := range running {
		if r.Sched().Prefilling() {
			continue
		}
		n := 1
		if tree != nil && tree(r) > 0 {
			n = tree(r)
		}
		tokensLeft -= n
		rowsLeft -= n
	}
	chunks := make([]Chunk[R], 0, len(running))
	for _, r := range running {
		st := r.Sched()
		c := Chunk[R]{Req: r}
		switch {
		case st.Prefilling():
			c.Kind = Prefill
			c.N = len(st.Tokens) - st.Computed
			if s.cfg.ChunkedPrefillSize > 0 {
				c.N = min(c.N, s.cfg.ChunkedPrefillSize)
			}
			if prefills > 0 || decodes > 0 {
				c.N = min(c.N, budget) // the first prefill may exceed the budget, or nothing moves
			}
			if s.cfg.MaxForwardTokens > 0 {
				c.N = min(c.N, tokensLeft)
			}
			scored := st.WantsPromptRows()
			if scored && s.cfg.MaxLogitRows > 0 {
				c.N = min(c.N, rowsLeft)
			}
			if c.N <= 0 {
				continue // waits for budget
			}
			c.N = st.SpanEnd(st.Computed+c.N) - st.Computed
			if s.cfg.MaxForwardTokens > 0 && c.N > tokensLeft && prefills > 0 {
				continue // a span past what the other prefills left: next step
			}
			if !s.PrepareWindow(r, st.Computed+c.N) {
				continue // waits for window pages
			}
			budget -= c.N
			tokensLeft -= c.N
			if scored {
				rowsLeft -= c.N
			} else {
				rowsLeft-- // its last row, when the chunk ends the prompt
			}
			prefills++
		case tree != nil && tree(r) > 0:
			c.Kind, c.N = Verify, tree(r)
		default:
			c.Kind, c.N = Decode, 1
			decodes++
		}
		chunks = append(chunks, c)
	}
	return chunks
}
