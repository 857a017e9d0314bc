// Package grammar compiles structured-output constraints — JSON Schema,
// "any JSON", regular expressions and EBNF — into a byte-level pushdown
// automaton, and computes, at each decoding step, which tokens of a
// vocabulary may come next.
//
// The shape follows XGrammar's design:
//
//   - a grammar is a set of rules; each rule is a deterministic automaton
//     over bytes whose edges are byte ranges or references to other rules
//     (a rule reference pushes a frame: this is the pushdown part);
//   - a Matcher holds the set of live stacks (a GLR-style forest: rules
//     may be ambiguous) and advances them byte by byte;
//   - a token mask is the set of vocabulary tokens whose bytes the stacks
//     can consume. Walking the vocabulary's sorted token list (a trie in
//     depth-first order) for every step would touch every token; instead,
//     for each rule position (rule, state) the tokens are split once into
//     those accepted whatever frames lie below, those rejected whatever lies
//     below, and the few "uncertain" ones that run past the end of the rule
//     and depend on the caller. A step ORs the cached accepted sets of its
//     stack tops and checks only the uncertain tokens against the real
//     stacks. The split is computed the first time a position is seen and
//     kept in the Compiled grammar, shared by every request that uses it;
//     positions of rules identified by their content (no reference cycle
//     above them: strings, numbers, most objects) are kept on the Vocab,
//     shared by every grammar compiled against that tokenizer (XGrammar's
//     tokenizer info);
//   - a split touches few tokens: where a string takes every plain
//     character alike, the plain tokens short enough are one precomputed
//     bitset and only the others are walked (slice.go, LLGuidance's
//     slices); where a state differs from a neighbouring one only on a few
//     bytes (a key spelling the start of a named key), the walk skips
//     every prefix that takes both to the same stacks and copies the
//     neighbour's split for it (Grammar.reference).
package grammar

// node is a rule body before compilation: a regular expression over bytes
// whose atoms may also be references to rules.
type node struct {
	kind     nodeKind
	ranges   []byteRange // nClass: one byte in any of these ranges
	kids     []*node     // nSeq, nAlt: parts; nRepeat: kids[0]
	min, max int         // nRepeat: max < 0 is unbounded
	rule     int32       // nRef
	guard    int32       // nRef: a guard on the frame pushing it (refEdge.guard)
	// nMembers: kids are object members in order, required[i] says
	// whether kid i must appear; sep goes between two present members and
	// extra (nil: none) may repeat after them; min and max count them.
	required   []bool
	sep, extra *node
	auto       *automaton // nAutomaton
}

type nodeKind uint8

const (
	nEmpty nodeKind = iota // matches the empty string
	nNone                  // matches nothing
	nClass
	nSeq
	nAlt
	nRepeat
	nRef
	nMembers
	nAutomaton // a DFA built by set operations (automaton.go)
)

// byteRange is the closed range [lo, hi].
type byteRange struct{ lo, hi byte }

func empty() *node { return &node{kind: nEmpty} }
func none() *node  { return &node{kind: nNone} }

// lit matches s byte for byte.
func lit(s string) *node {
	if len(s) == 1 {
		return byteClass(byteRange{s[0], s[0]})
	}
	kids := make([]*node, len(s))
	for i := range len(s) {
		kids[i] = byteClass(byteRange{s[i], s[i]})
	}
	return seq(kids...)
}

func byteClass(r ...byteRange) *node { return &node{kind: nClass, ranges: r} }

// seq concatenates; an nNone part makes the whole nNone.
func seq(kids ...*node) *node {
	var out []*node
	for _, k := range kids {
		switch k.kind {
		case nEmpty:
			continue
		case nNone:
			return none()
		case nSeq:
			out = append(out, k.kids...)
			continue
		}
		out = append(out, k)
	}
	switch len(out) {
	case 0:
		return empty()
	case 1:
		return out[0]
	}
	return &node{kind: nSeq, kids: out}
}

// alt is a choice; nNone branches are dropped.
func alt(kids ...*node) *node {
	var out []*node
	for _, k := range kids {
		switch k.kind {
		case nNone:
			continue
		case nAlt:
			out = append(out, k.kids...)
			continue
		}
		out = append(out, k)
	}
	switch len(out) {
	case 0:
		return none()
	case 1:
		return out[0]
	}
	return &node{kind: nAlt, kids: out}
}

// repeat matches between min and max copies of n (max < 0: unbounded).
func repeat(n *node, min, max int) *node {
	if max >= 0 && max < min {
		return none()
	}
	if max == 0 || n.kind == nEmpty {
		return empty()
	}
	if n.kind == nNone {
		if min == 0 {
			return empty()
		}
		return none()
	}
	if min == 1 && max == 1 {
		return n
	}
	return &node{kind: nRepeat, kids: []*node{n}, min: min, max: max}
}

func star(n *node) *node { return repeat(n, 0, -1) }
func plus(n *node) *node { return repeat(n, 1, -1) }
func opt(n *node) *node  { return repeat(n, 0, 1) }
func ref(rule int32) *node {
	return &node{kind: nRef, rule: rule}
}

// guardedRef is a reference taken only when the guard holds on the frame
// that pushes it (see refEdge.guard).
func guardedRef(rule, guard int32) *node {
	return &node{kind: nRef, rule: rule, guard: guard}
}

// members is a list of object members, each present or not (required ones
// always), with sep between present ones, then extra members, repeated;
// between min and max members in all (max < 0: any number).
// It compiles to a graph linear in the members: written as a tree, the
// choice of the first present member copies the rest once per optional
// leading member.
func members(kids []*node, required []bool, sep, extra *node, min, max int) *node {
	return &node{kind: nMembers, kids: kids, required: required, sep: sep, extra: extra, min: min, max: max}
}

// size estimates the NFA states n compiles to, to bound expansions of
// counted repetition before they are built.
func (n *node) size() int {
	switch n.kind {
	case nClass, nRef:
		return 1
	case nAutomaton:
		return len(n.auto.states)
	case nSeq, nAlt, nMembers:
		s := 1
		for _, k := range n.kids {
			s += k.size()
		}
		return s
	case nRepeat:
		copies := n.max
		if copies < 0 {
			copies = n.min + 1
		}
		return copies*n.kids[0].size() + 1
	}
	return 1
}
