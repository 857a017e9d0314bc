package kvcache

import "fmt"

// Peer is a cache over c's pages, requests and sliding-window map with
// pool as its storage: a tensor-parallel rank's KV heads kept under the
// same slots as rank 0's, so one scheduler's bookkeeping (allocators,
// table, radix cache) serves every rank and a batch's slots mean the same
// on each. pool must have c.Pool's slots, page size and layer layout.
func (c *Cache) Peer(pool *Pool) (*Cache, error) {
	p := c.Pool
	if pool.NumSlots != p.NumSlots || pool.pageSize != p.pageSize || pool.Spec.NumLayers != p.Spec.NumLayers ||
		pool.Spec.SWATokens != p.Spec.SWATokens || pool.OnDevice() != p.OnDevice() {
		return nil, fmt.Errorf("kvcache: a peer pool of %d slots (page %d, %d layers, window region %d) does not mirror %d slots (page %d, %d layers, window region %d)",
			pool.NumSlots, pool.pageSize, pool.Spec.NumLayers, pool.Spec.SWATokens, p.NumSlots, p.pageSize, p.Spec.NumLayers, p.Spec.SWATokens)
	}
	pool.swaPage = p.swaPage // the window pages PrepareSWA assigns, shared
	return &Cache{Alloc: c.Alloc, Table: c.Table, Pool: pool, SWA: c.SWA}, nil
}

// WindowPages is the window-region page of each of pages (0: none; nil
// when the cache has no window region): with the request table's rows,
// what a mirror of this cache in another process needs to address the
// same K/V (SetWindowPages).
func (c *Cache) WindowPages(pages []int32) []int32 {
	if c.SWA == nil {
		return nil
	}
	out := make([]int32, len(pages))
	for i, p := range pages {
		out[i] = c.Pool.swaPage[p]
	}
	return out
}

// SetWindowPages records on a mirror what WindowPages reported.
func (c *Cache) SetWindowPages(pages, window []int32) error {
	if len(window) == 0 {
		return nil
	}
	if c.Pool.swaPage == nil || len(pages) != len(window) {
		return fmt.Errorf("kvcache: %d window pages for %d pages of a cache with%s a window region", len(window), len(pages), map[bool]string{true: "out", false: ""}[c.Pool.swaPage == nil])
	}
	for i, p := range pages {
		if p < 0 || int(p) >= len(c.Pool.swaPage) {
			return fmt.Errorf("kvcache: page %d outside the cache's %d", p, len(c.Pool.swaPage))
		}
		c.Pool.swaPage[p] = window[i]
	}
	return nil
}
