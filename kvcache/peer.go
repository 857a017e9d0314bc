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
