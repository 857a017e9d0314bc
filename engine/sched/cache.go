package sched

import "github.com/gosling-ai/gosling/kvcache"

// Prefix caching: the glue between a request's sequence and the radix
// tree. A request pins the tree path it matched (Lock); when its prefill
// completes, and again when it finishes or is retracted, the tokens it
// computed are inserted so later requests can reuse them.

// matchPrefix maps the longest cached prefix of r's prefill tokens into
// its fresh sequence and pins it. At least one token is left to compute,
// since the last token's logits are needed.
func (s *Scheduler[R]) matchPrefix(r *Req, tokens []int) {
	r.Lock = nil
	if s.radix == nil || r.WantsPromptRows() {
		return
	}
	pages, node := s.radix.Match(tokens[:len(tokens)-1])
	if n := s.kv.UsablePrefix(pages); n < len(pages) {
		pages, node = s.radix.Match(tokens[:n*s.kv.PageSize()])
	}
	s.radix.Lock(node)
	r.Lock = node
	s.kv.SetSharedPrefix(r.Seq, pages)
	r.Computed = len(pages) * s.kv.PageSize()
}

// cacheComputed inserts the tokens whose KV r has computed into the tree,
// hands their whole pages to it, and re-pins r on the deeper path. Pages r
// computed that the tree already had (another request got there first) are
// swapped for the tree's and freed.
func (s *Scheduler[R]) cacheComputed(r *Req) {
	if s.radix == nil || r.Seq == nil || r.Computed == 0 {
		return
	}
	tokens := r.CacheKeys()[:r.Computed]
	seq := r.Seq
	full := min(r.Computed/s.kv.PageSize(), len(seq.Pages))
	if full <= seq.Shared {
		return // nothing new to share
	}
	dup, node := s.radix.Insert(tokens, seq.Pages[:full])
	if dup > seq.Shared {
		s.kv.FreePages(seq.Pages[seq.Shared:dup])
	}
	s.radix.Lock(node)
	if r.Lock != nil {
		s.radix.Unlock(r.Lock)
	}
	r.Lock = node
	s.kv.SetSharedPrefix(seq, s.radix.PathPages(node))
}

// PromptDone shares a request's prompt as soon as it is computed, so
// concurrent requests with the same prefix reuse it. Models with a window
// region wait until the request ends: a shared page keeps its window page
// for as long as it is cached, which would hold a running request's whole
// prompt in the window region.
func (s *Scheduler[R]) PromptDone(r R) {
	r.Sched().PromptDone = true
	if s.kv.SWA == nil {
		s.cacheComputed(r.Sched())
	}
}

// Release caches what r computed (when prefix caching is on), unpins it
// and frees the rest of its pages and its table row. Releasing a request
// that holds nothing does nothing.
func (s *Scheduler[R]) Release(r R) {
	st := r.Sched()
	if st.Seq == nil {
		return
	}
	s.cacheComputed(st)
	if st.Lock != nil {
		s.radix.Unlock(st.Lock)
		st.Lock = nil
	}
	s.kv.Release(st.Seq)
	st.Seq = nil
	st.Computed = 0
	if s.OnRelease != nil {
		s.OnRelease(r)
	}
}

// Reserve gives seq slots for newLen tokens, evicting unpinned cached
// prefixes when the allocator is short. It reports false, changing
// nothing, when even that is not enough.
func (s *Scheduler[R]) Reserve(seq *kvcache.Seq, newLen int) (bool, error) {
	if s.radix != nil {
		if short := s.kv.PagesNeeded(seq, newLen) - s.kv.Alloc.NumFree(); short > 0 {
			s.radix.Evict(short)
		}
	}
	return s.kv.Grow(seq, newLen)
}

// PrepareWindow readies the window region for computing r's tokens up to
// hi: it frees window pages no windowed layer will read again (queries
// from Computed on look back at most window-1 tokens) and gives window
// pages to the tokens about to be computed, evicting cached prefixes when
// the region is short. It reports false when it still is.
func (s *Scheduler[R]) PrepareWindow(r R, hi int) bool {
	if s.kv.SWA == nil {
		return true
	}
	st := r.Sched()
	s.kv.SlideSWA(st.Seq, st.Computed-s.kv.Pool.Spec.MaxWindow()+1)
	if s.kv.PrepareSWA(st.Seq, hi) {
		return true
	}
	if s.radix != nil {
		for s.kv.SWAPagesNeeded(st.Seq, hi) > s.kv.SWA.NumFree() && s.radix.Evict(1) > 0 {
		}
	}
	return s.kv.PrepareSWA(st.Seq, hi)
}
