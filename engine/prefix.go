package engine

import "github.com/gosling-ai/gosling/kvcache"

// Prefix caching: the glue between a request's sequence and the radix
// tree. A request pins the tree path it matched (lockNode); when its
// prefill completes, and again when it finishes or is retracted, the
// tokens it computed are inserted so later requests can reuse them.

// matchPrefix maps the longest cached prefix of r's prefill tokens into
// its fresh sequence and pins it. At least one token is left to compute,
// since the last token's logits are needed.
func (e *Engine) matchPrefix(r *request, tokens []int) {
	r.lockNode = nil
	if e.radix == nil || r.wantsPromptLogprobs() {
		return
	}
	pages, node := e.radix.Match(tokens[:len(tokens)-1])
	if n := e.kv.UsablePrefix(pages); n < len(pages) {
		pages, node = e.radix.Match(tokens[:n*e.kv.PageSize()])
	}
	e.radix.Lock(node)
	r.lockNode = node
	e.kv.SetSharedPrefix(r.seq, pages)
	r.computed = len(pages) * e.kv.PageSize()
}

// cacheComputed inserts the tokens whose KV r has computed into the tree,
// hands their whole pages to it, and re-pins r on the deeper path. Pages r
// computed that the tree already had (another request got there first) are
// swapped for the tree's and freed.
func (e *Engine) cacheComputed(r *request) {
	if e.radix == nil || r.seq == nil || r.computed == 0 {
		return
	}
	tokens := r.cacheKeys()[:r.computed]
	seq := r.seq
	full := min(r.computed/e.kv.PageSize(), len(seq.Pages))
	if full <= seq.Shared {
		return // nothing new to share
	}
	dup, node := e.radix.Insert(tokens, seq.Pages[:full])
	if dup > seq.Shared {
		e.kv.FreePages(seq.Pages[seq.Shared:dup])
	}
	e.radix.Lock(node)
	if r.lockNode != nil {
		e.radix.Unlock(r.lockNode)
	}
	r.lockNode = node
	e.kv.SetSharedPrefix(seq, e.radix.PathPages(node))
}

// cacheOnPrefillDone shares a request's prompt as soon as it is computed,
// so concurrent requests with the same prefix reuse it. Models with a
// window region wait until the request ends: a shared page keeps its
// window page for as long as it is cached, which would hold a running
// request's whole prompt in the window region.
func (e *Engine) cacheOnPrefillDone(r *request) {
	if e.kv.SWA == nil {
		e.cacheComputed(r)
	}
}

// releaseSeq caches what r computed (when prefix caching is on), unpins
// it and frees the rest of its pages and its table row.
func (e *Engine) releaseSeq(r *request) {
	if r.seq == nil {
		return
	}
	e.cacheComputed(r)
	if r.lockNode != nil {
		e.radix.Unlock(r.lockNode)
		r.lockNode = nil
	}
	e.kv.Release(r.seq)
	r.seq = nil
	r.computed = 0
	if e.spec != nil && e.spec.draft != nil {
		e.spec.draft.release(r)
	}
}

// reserve gives seq slots for newLen tokens, evicting unpinned cached
// prefixes when the allocator is short. It reports false, changing
// nothing, when even that is not enough.
func (e *Engine) reserve(seq *kvcache.Seq, newLen int) (bool, error) {
	if e.radix != nil {
		if short := e.kv.PagesNeeded(seq, newLen) - e.kv.Alloc.NumFree(); short > 0 {
			e.radix.Evict(short)
		}
	}
	return e.kv.Grow(seq, newLen)
}

// FlushCache drops every cached prefix that no running request uses.
func (e *Engine) FlushCache() error {
	if e.radix == nil {
		return nil
	}
	errc := make(chan error, 1)
	select {
	case e.control <- func() {
		err := e.radix.Reset()
		e.publishKV() // Stats shows the freed pages once FlushCache returns
		errc <- err
	}:
	case <-e.stop:
		return ErrClosed
	}
	return <-errc
}
