package spec

// Tree is one request's draft for one step. Node 0 is the root: the
// request's newest token, whose KV is not yet in the cache. Every other
// node is a drafted token that would follow its parent. Invariant:
// Parents[i] < i for i > 0 (a parent precedes its children), so a node's
// depth never exceeds its index, and nodes are in the drafter's order of
// preference (Truncate keeps a prefix). Siblings have distinct tokens.
type Tree struct {
	Tokens  []int
	Parents []int // Parents[0] == -1
	// Pad counts the last nodes, which are padding (PadTo): verified to
	// give a step its fixed shape, never drafts.
	Pad int
}

// NewTree is a tree holding only the root.
func NewTree(root int) Tree { return Tree{Tokens: []int{root}, Parents: []int{-1}} }

// Len is the number of nodes, the root included.
func (t *Tree) Len() int { return len(t.Tokens) }

// Add appends tok as a child of parent and returns its index.
func (t *Tree) Add(parent, tok int) int {
	t.Tokens = append(t.Tokens, tok)
	t.Parents = append(t.Parents, parent)
	return len(t.Tokens) - 1
}

// Child is the index of node's child holding tok, or -1.
func (t *Tree) Child(node, tok int) int {
	for i := node + 1; i < len(t.Tokens); i++ {
		if t.Parents[i] == node && t.Tokens[i] == tok {
			return i
		}
	}
	return -1
}

// Drafts is the number of drafted nodes: the nodes less the root and
// the padding.
func (t *Tree) Drafts() int { return t.Len() - 1 - t.Pad }

// PadTo appends padding nodes until the tree has n nodes, each the child
// of the node before it: a chain stays a chain, and every padding node
// comes after every drafted one, so no drafted node attends to one.
// Their token is the root's.
func (t *Tree) PadTo(n int) {
	for t.Len() < n {
		t.Add(t.Len()-1, t.Tokens[0])
		t.Pad++
	}
}

// Children are node's drafted children in order (padding excluded).
func (t *Tree) Children(node int) []int {
	var out []int
	for i := node + 1; i < len(t.Tokens)-t.Pad; i++ {
		if t.Parents[i] == node {
			out = append(out, i)
		}
	}
	return out
}

// Depth is the number of edges from the root to node.
func (t *Tree) Depth(node int) int {
	d := 0
	for ; node > 0; node = t.Parents[node] {
		d++
	}
	return d
}

// IsChain reports whether every node is its predecessor's child: then
// node i sits at depth i and a causal mask is the tree mask.
func (t *Tree) IsChain() bool {
	for i := 1; i < len(t.Parents); i++ {
		if t.Parents[i] != i-1 {
			return false
		}
	}
	return true
}

// Truncate keeps the first maxNodes nodes (the root included) whose depth
// is at most maxDepth; the kept nodes' parents are kept too, since a
// parent precedes its children.
func (t Tree) Truncate(maxNodes, maxDepth int) Tree {
	out := NewTree(t.Tokens[0])
	index := make([]int, len(t.Tokens)) // old node → new node, -1 dropped
	depth := make([]int, len(t.Tokens))
	for i := 1; i < len(t.Tokens) && out.Len() < maxNodes; i++ {
		index[i] = -1
		p := t.Parents[i]
		if index[p] < 0 {
			continue
		}
		if depth[i] = depth[p] + 1; depth[i] > maxDepth {
			continue
		}
		index[i] = out.Add(index[p], t.Tokens[i])
	}
	return out
}

// AppendMask appends the tree's attention mask for a request with
// prefixLen cached tokens: Len() rows of prefixLen+Len() keys, row-major,
// true where node i may attend the key: the whole prefix, then node i's
// ancestors and itself (tree node j is key prefixLen+j).
func (t *Tree) AppendMask(dst []bool, prefixLen int) []bool {
	n := t.Len()
	for i := range n {
		row := len(dst)
		for range prefixLen {
			dst = append(dst, true)
		}
		dst = append(dst, make([]bool, n)...)
		for j := i; j >= 0; j = t.Parents[j] {
			dst[row+prefixLen+j] = true
		}
	}
	return dst
}

// FirstPath is the chain from the root through each node's first child.
func (t Tree) FirstPath() Tree {
	out := NewTree(t.Tokens[0])
	for node := 0; ; {
		children := t.Children(node)
		if len(children) == 0 {
			return out
		}
		node = children[0]
		out.Add(out.Len()-1, t.Tokens[node])
	}
}

// Limit bounds one request's tree: depth (drafts past max_tokens are
// useless) and nodes, the root included (the context's KV room).
type Limit struct {
	MaxDepth, MaxNodes int
}
