package kvcache

import (
	"fmt"
	"slices"
)

// RadixCache shares KV pages between requests with a common token prefix.
//
// The tree is page-granular: every edge holds a whole number of pages
// (len(tokens) == len(pages)*PageSize), so a matched prefix is always a
// run of complete pages that can be mapped straight into a request's
// ReqToToken row. Pages in the tree belong to the tree; a running request
// pins its matched path (lockRef) so eviction cannot free what it reads.
// Unpinned leaves are evicted least recently used first.
type RadixCache struct {
	free     func(pages []int32) // returns evicted pages (and their window pages)
	pageSize int
	root     *RadixNode
	clock    uint64
	cached   int // pages held by the tree
	pinned   int // pages on paths with lockRef > 0
}

// RadixNode is one edge of the tree and the node it leads to.
type RadixNode struct {
	parent     *RadixNode
	children   map[string]*RadixNode // keyed by the edge's first page of tokens
	tokens     []int
	pages      []int32
	lockRef    int
	lastAccess uint64
}

// NewRadixCache makes an empty tree over an allocator.
func NewRadixCache(alloc *Allocator) *RadixCache {
	return &RadixCache{free: alloc.Free, pageSize: alloc.PageSize(), root: &RadixNode{children: map[string]*RadixNode{}}}
}

// Root is the empty-prefix node (a valid lock target that pins nothing).
func (c *RadixCache) Root() *RadixNode { return c.root }

func (c *RadixCache) key(tokens []int) string {
	b := make([]byte, 0, 4*c.pageSize)
	for _, t := range tokens[:c.pageSize] {
		b = append(b, byte(t), byte(t>>8), byte(t>>16), byte(t>>24))
	}
	return string(b)
}

// CachedPages is how many pages the tree holds; EvictablePages how many
// of them no running request pins.
func (c *RadixCache) CachedPages() int    { return c.cached }
func (c *RadixCache) EvictablePages() int { return c.cached - c.pinned }

// Match finds the longest cached prefix of tokens, in whole pages, and
// returns its pages and the deepest node reached. Callers that need logits
// for the last token should match tokens[:len-1].
func (c *RadixCache) Match(tokens []int) (pages []int32, node *RadixNode) {
	c.clock++
	node = c.root
	for len(tokens) >= c.pageSize {
		child, ok := node.children[c.key(tokens)]
		if !ok {
			break
		}
		n := commonPages(child.tokens, tokens, c.pageSize)
		if n < len(child.pages) {
			child = c.split(child, n)
		}
		child.lastAccess = c.clock
		pages = append(pages, child.pages...)
		tokens = tokens[len(child.tokens):]
		node = child
	}
	return pages, node
}

// commonPages counts the whole pages on which a and b agree.
func commonPages(a, b []int, pageSize int) int {
	n := 0
	for (n+1)*pageSize <= min(len(a), len(b)) && slices.Equal(a[n*pageSize:(n+1)*pageSize], b[n*pageSize:(n+1)*pageSize]) {
		n++
	}
	return n
}

// split cuts child's edge after n pages, returning the new upper node.
func (c *RadixCache) split(child *RadixNode, n int) *RadixNode {
	at := n * c.pageSize
	upper := &RadixNode{
		parent: child.parent, children: map[string]*RadixNode{},
		tokens: child.tokens[:at:at], pages: child.pages[:n:n],
		lockRef: child.lockRef, lastAccess: child.lastAccess,
	}
	child.parent.children[c.key(child.tokens)] = upper
	child.tokens, child.pages = child.tokens[at:], child.pages[n:]
	child.parent = upper
	upper.children[c.key(child.tokens)] = child
	return upper
}

// Insert adds tokens (whole pages only; a partial last page is ignored) with
// the pages holding their KV. It returns how many leading pages the tree
// already had: the caller's pages in that range are duplicates it must
// free (or replace by the tree's), while the rest now belong to the tree.
// It also returns the node that ends the inserted prefix.
func (c *RadixCache) Insert(tokens []int, pages []int32) (dupPages int, node *RadixNode) {
	full := min(len(tokens)/c.pageSize, len(pages))
	tokens, pages = tokens[:full*c.pageSize], pages[:full]
	c.clock++
	node = c.root
	for len(pages) > 0 {
		child, ok := node.children[c.key(tokens)]
		if !ok {
			leaf := &RadixNode{parent: node, children: map[string]*RadixNode{},
				tokens: slices.Clone(tokens), pages: slices.Clone(pages), lastAccess: c.clock}
			node.children[c.key(tokens)] = leaf
			c.cached += len(pages)
			return dupPages, leaf
		}
		n := commonPages(child.tokens, tokens, c.pageSize)
		if n < len(child.pages) {
			child = c.split(child, n)
		}
		child.lastAccess = c.clock
		dupPages += n
		tokens, pages = tokens[n*c.pageSize:], pages[n:]
		node = child
	}
	return dupPages, node
}

// PathPages returns the pages from the root to node, in token order.
func (c *RadixCache) PathPages(node *RadixNode) []int32 {
	var segs [][]int32
	for n := node; n != c.root; n = n.parent {
		segs = append(segs, n.pages)
	}
	var out []int32
	for i := len(segs) - 1; i >= 0; i-- {
		out = append(out, segs[i]...)
	}
	return out
}

// Lock pins the path from node to the root.
func (c *RadixCache) Lock(node *RadixNode) {
	for n := node; n != c.root; n = n.parent {
		if n.lockRef == 0 {
			c.pinned += len(n.pages)
		}
		n.lockRef++
	}
}

// Unlock releases a pin taken by Lock.
func (c *RadixCache) Unlock(node *RadixNode) {
	for n := node; n != c.root; n = n.parent {
		if n.lockRef <= 0 {
			panic("kvcache: radix unlock without lock")
		}
		n.lockRef--
		if n.lockRef == 0 {
			c.pinned -= len(n.pages)
		}
	}
}

// Evict frees at least numPages unpinned pages, least recently used leaves
// first, and returns how many it freed (fewer when not enough are unpinned).
func (c *RadixCache) Evict(numPages int) int {
	freed := 0
	for freed < numPages {
		var victim *RadixNode
		c.walk(c.root, func(n *RadixNode) {
			if n != c.root && len(n.children) == 0 && n.lockRef == 0 && (victim == nil || n.lastAccess < victim.lastAccess) {
				victim = n
			}
		})
		if victim == nil {
			break
		}
		c.free(victim.pages)
		freed += len(victim.pages)
		c.cached -= len(victim.pages)
		delete(victim.parent.children, c.key(victim.tokens))
	}
	return freed
}

// Reset evicts everything; it fails while any path is pinned.
func (c *RadixCache) Reset() error {
	if c.pinned > 0 {
		return fmt.Errorf("%d cached pages are in use by running requests", c.pinned)
	}
	c.Evict(c.cached)
	return nil
}

func (c *RadixCache) walk(n *RadixNode, fn func(*RadixNode)) {
	fn(n)
	for _, ch := range n.children {
		c.walk(ch, fn)
	}
}
