package grammar

import (
	"slices"
	"sync"
)

// Compiled is a grammar bound to a vocabulary, with the per-position token
// split (see the package comment) computed on first use and shared by all
// its matchers. It is safe for concurrent use.
type Compiled struct {
	g *Grammar
	v *Vocab

	mu        sync.Mutex
	positions map[uint64]*positionTokens // by position signature
	// signatures[r][s] is the signature of state s of rule r, computed
	// the first time a position of r is seen (nil until then).
	signatures [][]uint64
	// lazySigs memoizes the signatures of large rules' states by depth.
	lazySigs map[sigKey]uint64
	// content[r] hashes rule r's automaton and those of the rules it
	// references; shared[r]: r references no rule that loops back, so
	// content[r] identifies it in any grammar and r's positions use the
	// vocabulary's split cache (Vocab.splits), shared across grammars.
	content []uint64
	shared  []bool
}

// positionTokens is the vocabulary split at one rule position, as if the
// position's frame were the bottom of the stack.
type positionTokens struct {
	once sync.Once
	// accepted: tokens consumed entirely within the frame (and frames it
	// pushes), whatever lies below. A bitset when dense, else a list.
	acceptedBits []uint64
	acceptedIDs  []int32
	// uncertain: tokens that can only be consumed by popping the frame and
	// continuing with a byte in the rule's follow set, or through more
	// than one guard of the frame; they are checked against the real
	// stack at each step.
	uncertain []int32
	// uncLCP[k]: the common prefix length of uncertain[k] and
	// uncertain[k-1], which are in byte order: the check at each step
	// walks them as a trie, sharing the work of common prefixes.
	uncLCP []uint16
	// conditional: tokens consumed within the frame through one guard of
	// it (a key of an object, its closing brace): allowed when the guard
	// holds on the frame's keys. A token may be listed under several.
	conditional []condToken
}

type condToken struct {
	id, guard int32
}

// Compile binds g to v.
func Compile(g *Grammar, v *Vocab) *Compiled {
	c := &Compiled{g: g, v: v, positions: map[uint64]*positionTokens{}, signatures: make([][]uint64, len(g.rules))}
	c.content, c.shared = g.contentHashes()
	return c
}

// contentHashes hashes each rule's automaton (states, accepting states,
// byte edges, guards, required keys) with the hashes of the rules it
// references, so that two rules with equal hashes (up to 64-bit
// collisions) in two grammars consume the same texts the same way. A rule
// on or above a reference cycle is not hashed by content (shared false):
// its hash is its id, and its positions stay in this Compiled's map.
func (g *Grammar) contentHashes() ([]uint64, []bool) {
	n := len(g.rules)
	hash := make([]uint64, n)
	shared := make([]bool, n)
	mark := make([]uint8, n) // 0 new, 1 in progress, 2 done
	var visit func(r int32) bool
	visit = func(r int32) bool {
		switch mark[r] {
		case 1:
			return false
		case 2:
			return shared[r]
		}
		mark[r] = 1
		ok := true
		for _, st := range g.rules[r].states {
			for _, e := range st.refs {
				if !visit(e.rule) {
					ok = false
				}
			}
		}
		mark[r] = 2
		shared[r] = ok
		if !ok {
			hash[r] = uint64(r)
			return false
		}
		h := sigMix(0x51ed270b27a8f3c1, g.required[r])
		for _, st := range g.rules[r].states {
			if st.accept {
				h = sigMix(h, 1)
			}
			h = sigMix(h, uint64(len(st.edges))<<32|uint64(len(st.refs)))
			for _, e := range st.edges {
				h = sigMix(h, uint64(e.lo)<<40|uint64(e.hi)<<32|uint64(uint32(e.to)))
			}
			for _, e := range st.refs {
				h = sigMix(h, hash[e.rule])
				h = sigMix(h, uint64(uint32(e.guard))<<32|uint64(uint32(e.to)))
			}
		}
		hash[r] = h
		return true
	}
	for r := range n {
		visit(int32(r))
	}
	return hash, shared
}

// Grammar returns the grammar.
func (c *Compiled) Grammar() *Grammar { return c.g }

// Vocab returns the vocabulary.
func (c *Compiled) Vocab() *Vocab { return c.v }

func (c *Compiled) position(rule, st int32) *positionTokens {
	c.mu.Lock()
	var key uint64
	if len(c.g.rules[rule].states) > lazySignatureStates {
		key = c.lazySignature(rule, st)
	} else {
		if c.signatures[rule] == nil {
			c.signatures[rule] = c.ruleSignatures(rule)
		}
		key = c.signatures[rule][st]
	}
	var p *positionTokens
	if c.shared[rule] {
		// The split depends on what the frame consumes (the signature)
		// and on the bytes that may follow the rule, nothing else.
		f := c.g.follow[rule]
		p = c.v.splitFor(sigMix(sigMix(sigMix(sigMix(key, f[0]), f[1]), f[2]), f[3]))
	} else {
		var ok bool
		if p, ok = c.positions[key]; !ok {
			p = &positionTokens{}
			c.positions[key] = p
		}
	}
	c.mu.Unlock()
	p.once.Do(func() { c.split(p, rule, st) })
	return p
}

// Warm computes the split of the grammar's start position, so that the
// first decoding step does not pay for it.
func (c *Compiled) Warm() { c.position(c.g.root, 0) }

// split walks the sorted vocabulary from a lone frame at (rule, st).
func (c *Compiled) split(p *positionTokens, rule, st int32) {
	v := c.v
	follow := c.g.follow[rule]
	s := newStepper(c.g)
	s.split = true
	// sets[d]: stacks after the first d bytes of the current token;
	// escapes[d]: the frame could pop after them and byte d is in the
	// rule's follow set.
	sets := make([][]stack, v.maxLen+1)
	escapes := make([]bool, v.maxLen+1)
	sets[0] = []stack{{rule: rule, state: st}}
	// fast[d] >= 0: the stacks after d bytes are the lone frame at that
	// state of rule (sets[d] may not hold it yet). From a state without
	// references that cannot end, a byte is one DFA edge: no stack work.
	// Inside strings and counted chains almost every byte goes this way.
	states := c.g.rules[rule].states
	fast := make([]int32, v.maxLen+1)
	fast[0] = st
	var accepted []int32
	valid := 0 // sets[0..valid] hold the previous token's prefixes
	n := len(v.sorted)
	// Only tokens whose first byte the frame can take, or (when it can
	// end right away) that can follow the rule, need a look: the others
	// are rejected. A narrow position (a key's next character) then scans
	// a few hundred tokens, not the vocabulary.
	_, endsNow, _ := s.step(sets[0], -1, nil)
	var firstOK [4]uint64
	for b := range 256 {
		next, _, _ := s.step(sets[0], b, nil)
		if len(next) > 0 || endsNow && follow[b>>6]&(1<<(b&63)) != 0 {
			firstOK[b>>6] |= 1 << (b & 63)
		}
	}
	for i := 0; i < n; {
		if b := v.text[v.off[i]]; firstOK[b>>6]&(1<<(b&63)) == 0 {
			i = int(v.byFirst[int(b)+1]) // skip every token starting with b
			valid = 0
			continue
		}
		tok := v.sortedToken(i)
		d := min(int(v.lcp[i]), valid)
		rejectedAt := -1
		for ; d < len(tok); d++ {
			b := tok[d]
			if f := fast[d]; f >= 0 {
				if fs := &states[f]; len(fs.refs) == 0 && !fs.accept {
					escapes[d] = false
					fast[d+1] = fs.next(b)
					if fast[d+1] < 0 {
						rejectedAt = d + 1
						break
					}
					continue
				}
				sets[d] = append(sets[d][:0], stack{rule: rule, state: f})
			}
			var e bool
			sets[d+1], e, _ = s.step(sets[d], int(b), sets[d+1][:0])
			escapes[d] = e && follow[b>>6]&(1<<(b&63)) != 0
			if len(sets[d+1]) == 0 {
				rejectedAt = d + 1
				break
			}
			fast[d+1] = -1
			if top := sets[d+1][0]; len(sets[d+1]) == 1 && top.parent == nil && top.rule == rule && top.cond == 0 && top.seen == 0 {
				fast[d+1] = top.state
			}
		}
		if rejectedAt < 0 {
			id := v.sorted[i]
			switch g := tokenGuard(sets[len(tok)], fast[len(tok)]); g {
			case 0:
				accepted = append(accepted, id)
			case condComplex:
				p.uncertain = append(p.uncertain, id)
			default:
				from := len(p.conditional)
				for _, st := range sets[len(tok)] {
					ct := condToken{id: id, guard: st.cond}
					if !slices.Contains(p.conditional[from:], ct) {
						p.conditional = append(p.conditional, ct)
					}
				}
			}
			valid = len(tok)
			i++
			continue
		}
		// Every token sharing tok[:rejectedAt] fails the same way.
		j := i + 1
		for j < n && int(v.lcp[j]) >= rejectedAt {
			j++
		}
		// A token is uncertain when, at some byte where the frame could
		// pop, that byte may follow the rule: what lies below decides. The
		// split does not look below (so that grammars share it); the check
		// at each step walks these tokens as a trie from the real stacks.
		if slices.Contains(escapes[:rejectedAt], true) {
			p.uncertain = append(p.uncertain, v.sorted[i:j]...)
		}
		valid = rejectedAt - 1
		i = j
	}
	p.uncLCP = make([]uint16, len(p.uncertain))
	for k := 1; k < len(p.uncertain); k++ {
		a, b := v.tokens[p.uncertain[k-1]], v.tokens[p.uncertain[k]]
		n := 0
		for n < len(a) && n < len(b) && a[n] == b[n] {
			n++
		}
		p.uncLCP[k] = uint16(min(n, 1<<16-1))
	}
	if len(accepted) > v.size/32 {
		p.acceptedBits = make([]uint64, v.MaskWords())
		for _, id := range accepted {
			setBit(p.acceptedBits, id)
		}
	} else {
		p.acceptedIDs = accepted
	}
}

// condMany: a token taken through different single guards.
const condMany = -3

// tokenGuard sums up the paths that consumed a token, the stacks after it
// (or fast >= 0: the frame alone, no guard): 0 if one took no guard of
// the bottom frame, condComplex if one took several, the guard if all
// took the same one, condMany if they took different ones.
func tokenGuard(sets []stack, fast int32) int32 {
	if fast >= 0 {
		return 0
	}
	g := int32(0)
	for _, st := range sets {
		switch {
		case st.cond == 0:
			return 0
		case st.cond == condComplex:
			g = condComplex
		case g == condComplex:
		case g == 0 || g == st.cond:
			g = st.cond
		default:
			g = condMany
		}
	}
	return g
}

// lazySignatureStates: rules with more states (long counted chains) have
// their signatures computed per state asked for, not for the whole rule:
// a position needs only the states within a token's length of it.
const lazySignatureStates = 512

type sigKey struct{ rule, state, depth int32 }

// lazySignature is ruleSignatures' value for one state, computed from the
// states a token's length ahead (memoized in c.lazySigs). Below its
// fixed point the eager computation stops early with the same values.
func (c *Compiled) lazySignature(rule, st int32) uint64 {
	if c.lazySigs == nil {
		c.lazySigs = map[sigKey]uint64{}
	}
	depth := int32(max(c.v.maxLen, 1))
	return c.sigAt(rule, st, depth)
}

func (c *Compiled) sigAt(rule, s, d int32) uint64 {
	if d == 0 {
		return 0x9e3779b97f4a7c15
	}
	k := sigKey{rule, s, d}
	if h, ok := c.lazySigs[k]; ok {
		return h
	}
	st := &c.g.rules[rule].states[s]
	h := sigMix(0xcbf29ce484222325, c.content[rule])
	if st.accept {
		h = sigMix(h, 1)
	}
	for _, e := range st.edges {
		h = sigMix(h, uint64(e.lo)<<8|uint64(e.hi))
		h = sigMix(h, c.sigAt(rule, e.to, d-1))
	}
	for _, r := range st.refs {
		h = sigMix(h, c.content[r.rule])
		h = sigMix(h, uint64(uint32(r.guard)))
		if c.g.null[r.rule] {
			h = sigMix(h, uint64(r.to)<<32|0xdead)
		} else {
			h = sigMix(h, c.sigAt(rule, r.to, d-1))
		}
	}
	c.lazySigs[k] = h
	return h
}

func sigMix(h, v uint64) uint64 {
	h ^= v + 0x9e3779b97f4a7c15 + h<<6 + h>>2
	return h * 0xff51afd7ed558ccd
}

// ruleSignatures hashes, for every state of a rule, what the state does
// over the next maxLen bytes (the longest token): states with equal
// signatures split the vocabulary identically and share one split. This
// is what keeps a string of maxLength 8192, a chain of 8192 states, from
// needing 8192 vocabulary walks: all but its last ~maxLen states agree.
//
// sig(s, 0) is a constant; sig(s, d) mixes the rule, whether s accepts,
// each byte edge's range with sig(target, d-1), and each reference's rule
// with sig(return state, d-1) when the referenced rule consumes at least
// a byte, or the return state's identity when it may consume none (then
// the remaining depth is not bounded by d-1). Equal signatures imply
// (up to 64-bit collisions) equal behaviour for every token. Cost: states
// × maxLen × edges, once per rule per Compiled.
func (c *Compiled) ruleSignatures(rule int32) []uint64 {
	states := c.g.rules[rule].states
	prev := make([]uint64, len(states))
	cur := make([]uint64, len(states))
	for i := range prev {
		prev[i] = 0x9e3779b97f4a7c15
	}
	mix := sigMix
	depth := c.v.maxLen
	if depth == 0 {
		depth = 1
	}
	for range depth {
		changed := false
		for s := range states {
			st := &states[s]
			h := mix(0xcbf29ce484222325, c.content[rule])
			if st.accept {
				h = mix(h, 1)
			}
			for _, e := range st.edges {
				h = mix(h, uint64(e.lo)<<8|uint64(e.hi))
				h = mix(h, prev[e.to])
			}
			for _, r := range st.refs {
				h = mix(h, c.content[r.rule])
				h = mix(h, uint64(uint32(r.guard)))
				if c.g.null[r.rule] {
					h = mix(h, uint64(r.to)<<32|0xdead)
				} else {
					h = mix(h, prev[r.to])
				}
			}
			cur[s] = h
			if !changed && h != prev[s] {
				changed = true
			}
		}
		prev, cur = cur, prev
		if !changed {
			break // a fixed point: deeper levels add nothing
		}
	}
	return prev
}
