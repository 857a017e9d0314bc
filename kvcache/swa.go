package kvcache

// The sliding-window region. Layers with a window read only the last
// `window` tokens of a sequence, so they keep K/V in a smaller region that
// holds just those: each full page a sequence owns gets a window page when
// its tokens are about to be computed (PrepareSWA), and gives it back once
// every layer's window has moved past it (SlideSWA). The full page id
// stays the token's address everywhere (ReqToToken, radix tree, kernels);
// the pool maps it to the window page for windowed layers, so attention
// backends need no change.
//
// Pages owned by the radix tree keep whatever window pages they have (a
// request resuming from a cached prefix needs the prefix's last window of
// K/V); UsablePrefix cuts a match back to where that window is present.
// Running requests never free the window pages of shared pages, which
// other requests may be reading.

// swaPages is the size of the window region in pages, the reserved one included.
func swaPages(spec Spec, pageSize int) int {
	return (spec.SWATokens+pageSize-1)/pageSize + 1
}

// PrepareSWA gives window pages to the pages holding tokens [0, hi) that
// lack them. It returns false, changing nothing, when the window region
// is short (the caller may evict cached prefixes and retry).
func (c *Cache) PrepareSWA(s *Seq, hi int) bool {
	if c.SWA == nil {
		return true
	}
	from := max(s.SWAEnd, s.Shared)
	to := min((hi+c.PageSize()-1)/c.PageSize(), len(s.Pages))
	if to <= from {
		return true
	}
	pages, ok := c.SWA.Alloc(to - from)
	if !ok {
		return false
	}
	for i, w := range pages {
		c.Pool.swaPage[s.Pages[from+i]] = w
	}
	if s.SWAEnd < s.Shared {
		s.SWALive = s.Shared
	}
	s.SWAEnd = to
	return true
}

// SWAPagesNeeded is how many window pages PrepareSWA(s, hi) would take.
func (c *Cache) SWAPagesNeeded(s *Seq, hi int) int {
	if c.SWA == nil {
		return 0
	}
	return max(0, min((hi+c.PageSize()-1)/c.PageSize(), len(s.Pages))-max(s.SWAEnd, s.Shared))
}

// SlideSWA frees the window pages of owned pages that hold only tokens
// before firstNeeded, the oldest sequence index any windowed layer will
// read again.
func (c *Cache) SlideSWA(s *Seq, firstNeeded int) {
	if c.SWA == nil {
		return
	}
	upTo := min(firstNeeded/c.PageSize(), s.SWAEnd)
	for p := max(s.SWALive, s.Shared); p < upTo; p++ {
		c.SWA.Free([]int32{c.Pool.swaPage[s.Pages[p]]})
		c.Pool.swaPage[s.Pages[p]] = 0
	}
	s.SWALive = max(s.SWALive, upTo)
}

// UsablePrefix is how many leading pages of a matched prefix a request
// can resume from: the windowed layers need the K/V of the last window of
// tokens before the resume point, so the match is cut back to the longest
// prefix whose final window still has its window pages. (The tree keeps
// pages whose window pages were freed: their full-layer K/V is valid and a
// longer match through them can still be used.)
func (c *Cache) UsablePrefix(pages []int32) int {
	if c.SWA == nil {
		return len(pages)
	}
	ps, window := c.PageSize(), c.Pool.Spec.MaxWindow()
	for n := len(pages); n > 0; n-- {
		first := max(0, n*ps-window+1) / ps // first page the window touches
		ok := true
		for p := first; p < n && ok; p++ {
			ok = c.Pool.swaPage[pages[p]] != 0
		}
		if ok {
			return n
		}
	}
	return 0
}

// SWAPagesInUse is the number of window pages handed out.
func (c *Cache) SWAPagesInUse() int {
	if c.SWA == nil {
		return 0
	}
	return c.SWA.NumPages() - 1 - c.SWA.NumFree()
}
