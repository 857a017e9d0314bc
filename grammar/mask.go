package grammar

import (
	"math/bits"
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

	// runs memoizes plainRun by (rule, state), classRuns classRun.
	runMu     sync.Mutex
	runs      map[[2]int32]int32
	classRuns map[classRunKey]int32
	// canon memoizes canonicalKey by (rule, state) (under mu).
	canon map[[2]int32]canonKey
}

type canonKey struct {
	key uint64
	ok  bool
}

// positionTokens is the vocabulary split at one rule position, as if the
// position's frame were the bottom of the stack.
type positionTokens struct {
	once sync.Once
	// accepted: tokens consumed entirely within the frame (and frames it
	// pushes), whatever lies below. A bitset when dense, else a list.
	acceptedBits []uint64
	acceptedIDs  []int32
	// slice: more accepted tokens, plain ones (plainSlice.tokensUpTo),
	// a bitset shared by every position taking the same slice.
	slice []uint64
	// uncertain: tokens that can only be consumed by popping the frame and
	// continuing with a byte in the rule's follow set, or through more
	// than one guard of the frame; they are checked against the real
	// stack at each step. They are ranges [lo, hi) of indices in
	// uncVocab.sorted (the vocabulary the split walked): whole subtrees of
	// its trie, which the check at each step walks as a trie.
	uncVocab  *Vocab
	uncertain [][2]int32
	// escape0: more uncertain tokens, ranges alike, that the frame rejects
	// at their first byte, before which it can end: only the stack below
	// can take them, and a mask of its own says which it takes.
	escape0 [][2]int32
	// escape0Bits: escape0 as a bitset of ids, made on first use.
	escape0Once sync.Once
	escape0Bits []uint64
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
	p := c.lookup(rule, st)
	p.once.Do(func() { c.split(p, rule, st) })
	return p
}

// lookup returns the positionTokens of (rule, st), not yet computed if
// nobody has asked for it.
func (c *Compiled) lookup(rule, st int32) *positionTokens {
	c.mu.Lock()
	defer c.mu.Unlock()
	var key uint64
	ck, canonical := c.canonicalKey(rule, st)
	switch _, plain := c.plainRun(rule, st); {
	case canonical:
		key = ck
	case plain && len(c.g.rules[rule].states) > plainKeyStates:
		// The split is a slice and a walk of the other tokens: cheap
		// enough to key the state itself, where a signature would look a
		// whole token's length of states ahead (a counted string's chain).
		key = sigMix(sigMix(0x2545f4914f6cdd1d, c.content[rule]), uint64(st))
	case len(c.g.rules[rule].states) > lazySignatureStates:
		key = c.lazySignature(rule, st)
	default:
		if c.signatures[rule] == nil {
			c.signatures[rule] = c.ruleSignatures(rule)
		}
		key = c.signatures[rule][st]
	}
	if c.shared[rule] {
		// The split depends on what the frame consumes (the signature)
		// and on the bytes that may follow the rule, nothing else.
		f := c.g.follow[rule]
		return c.v.splitFor(sigMix(sigMix(sigMix(sigMix(key, f[0]), f[1]), f[2]), f[3]))
	}
	p, ok := c.positions[key]
	if !ok {
		p = &positionTokens{}
		c.positions[key] = p
	}
	return p
}

// canonStates bounds the states canonicalKey numbers.
const canonStates = 96

// canonicalKey hashes what a position does in terms that do not name its
// rule: the states reachable from state st of rule, numbered in the order
// a breadth-first walk first reaches them, each with its accepting flag,
// byte edges and references (by the content hash of the rule pushed, and
// the guard). Positions with equal keys and follow sets split the
// vocabulary alike in any rule of any grammar: the string characters of
// an object's extra keys (whose rule also spells the named keys it
// excludes), what follows a key of any name, the last characters of
// counted strings of any length. ok is false for a rule whose content
// does not identify it (Compiled.shared) or past canonStates states; c.mu
// is held.
func (c *Compiled) canonicalKey(rule, st int32) (uint64, bool) {
	if !c.shared[rule] {
		return 0, false
	}
	k := [2]int32{rule, st}
	if v, ok := c.canon[k]; ok {
		return v.key, v.ok
	}
	if c.canon == nil {
		c.canon = map[[2]int32]canonKey{}
	}
	states := c.g.rules[rule].states
	var order [canonStates]int32
	order[0] = st
	n := 1
	number := func(s int32) (int32, bool) {
		for i := range n {
			if order[i] == s {
				return int32(i), true
			}
		}
		if n == canonStates {
			return 0, false
		}
		order[n] = s
		n++
		return int32(n - 1), true
	}
	h := uint64(0x6a09e667f3bcc909)
	for i := 0; i < n; i++ {
		s := &states[order[i]]
		if s.accept {
			h = sigMix(h, 1)
		}
		h = sigMix(h, uint64(len(s.edges))<<32|uint64(len(s.refs)))
		for _, e := range s.edges {
			to, ok := number(e.to)
			if !ok {
				c.canon[k] = canonKey{}
				return 0, false
			}
			h = sigMix(h, uint64(e.lo)<<40|uint64(e.hi)<<32|uint64(to))
		}
		for _, r := range s.refs {
			to, ok := number(r.to)
			if !ok {
				c.canon[k] = canonKey{}
				return 0, false
			}
			h = sigMix(h, c.content[r.rule])
			h = sigMix(h, uint64(uint32(r.guard))<<32|uint64(to))
		}
	}
	c.canon[k] = canonKey{h, true}
	return h, true
}

// Warm computes the split of the grammar's start position, so that the
// first decoding step does not pay for it.
func (c *Compiled) Warm() { c.position(c.g.root, 0) }

// reference picks, for state q of rule, a state t of the same rule that
// most of q's bytes lead to and that itself loops to t on most bytes: a
// key being written that still spells the start of a named key, beside
// the state of any other key; a string's character beside the string. The
// split of q then walks only the tokens whose bytes take q and t to
// different stacks, and takes the rest of t's split (see split). t has no
// reference of its own (its bytes mostly lead to t itself), so references
// never chain. -1: none.
func (g *Grammar) reference(rule, q int32) int32 {
	states := g.rules[rule].states
	st := &states[q]
	if len(st.edges) == 0 {
		return -1
	}
	// t: the target of most bytes.
	var to [256]int32
	for b := range to {
		to[b] = -1
	}
	count := map[int32]int{}
	for _, e := range st.edges {
		for b := int(e.lo); b <= int(e.hi); b++ {
			to[b] = e.to
		}
		count[e.to] += int(e.hi) - int(e.lo) + 1
	}
	t, best := int32(-1), 0
	for x, n := range count {
		if n > best || n == best && x < t {
			t, best = x, n
		}
	}
	if t == q {
		return -1
	}
	// t must agree with q on three quarters of the bytes either takes,
	// and take more than half of them to itself (so that t is its own
	// most common target, and has no reference).
	ts := &states[t]
	agree, self, total := 0, 0, 0
	for b := range 256 {
		tt := ts.next(byte(b))
		if to[b] < 0 && tt < 0 {
			continue
		}
		total++
		if to[b] == tt {
			agree++
		}
		if tt == t {
			self++
		}
	}
	if agree*4 < total*3 || self*2 <= total {
		return -1
	}
	return t
}

// walker holds the stacks of one split walk after each prefix length of
// the current token.
type walker struct {
	c      *Compiled
	s      *stepper
	rule   int32
	sets   [][]stack
	fast   []int32 // fast[d] >= 0: sets[d] is the lone frame at that state
	esc    []bool  // esc[d]: the frame could pop before byte d, which may follow the rule
	anyEsc []bool  // anyEsc[d]: esc[k] for some k < d
}

func (c *Compiled) newWalker(rule, st int32) *walker {
	n := c.v.maxLen + 1
	s := newStepper(c.g)
	s.split = true
	w := &walker{c: c, s: s, rule: rule, sets: make([][]stack, n), fast: make([]int32, n), esc: make([]bool, n), anyEsc: make([]bool, n+1)}
	w.sets[0] = []stack{{rule: rule, state: st}}
	w.fast[0] = st
	return w
}

// advance computes the stacks after d+1 bytes from those after d (b is
// byte d); false: none.
func (w *walker) advance(d int, b byte) bool {
	states := w.c.g.rules[w.rule].states
	if f := w.fast[d]; f >= 0 {
		// From a state without references, a byte is one DFA edge: no
		// stack work. Inside strings, numbers and counted chains almost
		// every byte goes this way. Where the state accepts, the lone
		// frame could pop before b.
		if fs := &states[f]; len(fs.refs) == 0 {
			w.esc[d] = fs.accept && w.c.g.follow[w.rule][b>>6]&(1<<(b&63)) != 0
			w.anyEsc[d+1] = w.anyEsc[d] || w.esc[d]
			w.fast[d+1] = fs.next(b)
			if w.fast[d+1] < 0 {
				w.sets[d+1] = w.sets[d+1][:0]
				return false
			}
			return true
		}
		w.sets[d] = append(w.sets[d][:0], stack{rule: w.rule, state: f})
	}
	var e bool
	w.sets[d+1], e, _ = w.s.step(w.sets[d], int(b), w.sets[d+1][:0])
	follow := w.c.g.follow[w.rule]
	w.esc[d] = e && follow[b>>6]&(1<<(b&63)) != 0
	w.anyEsc[d+1] = w.anyEsc[d] || w.esc[d]
	w.fast[d+1] = -1
	if len(w.sets[d+1]) == 0 {
		return false
	}
	if top := w.sets[d+1][0]; len(w.sets[d+1]) == 1 && top.parent == nil && top.rule == w.rule && top.cond == 0 && top.seen == 0 {
		w.fast[d+1] = top.state
	}
	return true
}

// same reports that w and x hold the same stacks after d bytes, having
// passed the same escapes: every token continuing the prefix ends the same
// way from both.
func (w *walker) same(x *walker, d int) bool {
	if w.anyEsc[d] != x.anyEsc[d] {
		return false
	}
	if w.fast[d] >= 0 || x.fast[d] >= 0 {
		return w.fast[d] == x.fast[d]
	}
	return slices.Equal(w.sets[d], x.sets[d])
}

// split walks the sorted vocabulary from a lone frame at (rule, st). With
// a reference state whose split differs (Grammar.reference), it walks
// the reference's stacks beside its own and skips every token whose
// prefix takes both to the same stacks: such a token ends the same way
// from both, and the reference's split says how.
func (c *Compiled) split(p *positionTokens, rule, st int32) {
	follow := c.g.follow[rule]
	w := c.newWalker(rule, st)
	// v is the vocabulary walked: all of it, or the tokens other than
	// plain text where the position takes plain tokens as a slice.
	v := c.v
	var slice []uint64
	var ref *positionTokens
	var rw *walker
	// inClass: sorted indices of tokens a class slice decides (skipped);
	// chain[j]: the state after j bytes of class from st.
	var inClass []uint64
	var class classBytes
	var chain []int32
	ps := v.plain()
	k, plain := c.plainRun(rule, st)
	if plain {
		v = ps.rest
		if k > 0 {
			slice = ps.tokensUpTo(k)
		}
	}
	p.uncVocab = v
	if t := c.g.reference(rule, st); t >= 0 && v == c.v {
		if ref = c.lookup(rule, t); ref == p {
			ref = nil // the same split: nothing to share
		} else {
			ref.once.Do(func() { c.split(ref, rule, t) })
			rw = c.newWalker(rule, t)
		}
	}
	// Without a slice or a reference to share, a class of bytes the state
	// takes alike may give one.
	if !plain && ref == nil {
		if cb, k, ok := c.classRun(rule, st); ok {
			cs := v.classSlice(cb)
			inClass, class = cs.in, cb
			if k > 0 {
				slice = cs.tokensUpTo(k, v.MaskWords())
			}
			chain = c.classChain(rule, st, cb, min(k, v.maxLen))
		}
	}
	// skipped: sorted index ranges [lo, hi) the reference decides.
	var skipped [][2]int32
	var accepted []int32
	valid := 0 // sets[0..valid] hold the previous token's prefixes
	n := len(v.sorted)
	// Only tokens whose first byte the frame can take, or (when it can
	// end right away) that can follow the rule, need a look: the others
	// are rejected. A narrow position (a key's next character) then scans
	// a few hundred tokens, not the vocabulary.
	firstOK := c.firstBytes(w, follow)
	for i := 0; i < n; {
		if b := v.text[v.off[i]]; firstOK[b>>6]&(1<<(b&63)) == 0 {
			i = int(v.byFirst[int(b)+1]) // skip every token starting with b
			valid = 0
			continue
		}
		if inClass != nil && inClass[i>>6]&(1<<(i&63)) != 0 {
			// The slice has it, or it is too long for the chain and
			// rejected; the next walked token shares with the last one
			// at most what each token between shares with its
			// predecessor.
			valid = min(valid, int(v.lcp[i]))
			i++
			continue
		}
		tok := v.sortedToken(i)
		d := min(int(v.lcp[i]), valid)
		if chain != nil {
			// The token's leading run of class bytes leads along the
			// chain: its prefixes' stacks are the chain's lone frames
			// (fast states: no escape), set, not walked.
			f := 0
			for f < len(tok) && f < len(chain)-1 && class.has(tok[f]) {
				f++
			}
			for ; d < f; d++ {
				w.esc[d], w.anyEsc[d+1], w.fast[d+1] = false, false, chain[d+1]
			}
		}
		rejectedAt, mergedAt := -1, -1
		for ; d < len(tok); d++ {
			if rw != nil && d > int(v.lcp[i]) && w.same(rw, d) {
				mergedAt = d
				break
			}
			b := tok[d]
			if rw != nil {
				rw.advance(d, b)
			}
			if !w.advance(d, b) {
				rejectedAt = d + 1
				break
			}
		}
		if mergedAt < 0 && rejectedAt < 0 && rw != nil && d == len(tok) && d > int(v.lcp[i]) && w.same(rw, d) {
			mergedAt = d
		}
		if mergedAt > 0 {
			j := v.subtreeEnd(i, mergedAt)
			if k := len(skipped); k > 0 && skipped[k-1][1] == int32(i) {
				skipped[k-1][1] = int32(j)
			} else {
				skipped = append(skipped, [2]int32{int32(i), int32(j)})
			}
			valid = mergedAt
			i = j
			continue
		}
		if rejectedAt < 0 {
			id := v.sorted[i]
			switch g := tokenGuard(w.sets[len(tok)], w.fast[len(tok)]); g {
			case 0:
				accepted = append(accepted, id)
			case condComplex:
				p.addUncertain(int32(i), int32(i+1))
			default:
				from := len(p.conditional)
				for _, st := range w.sets[len(tok)] {
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
		// Every token sharing tok[:rejectedAt] fails the same way. (A
		// prefix can fail within the one shared with the token before
		// when that one was a class token, skipped: too long for the
		// chain.)
		j := i + 1
		if rejectedAt > int(v.lcp[i]) {
			j = v.subtreeEnd(i, rejectedAt)
		} else {
			for j < n && int(v.lcp[j]) >= rejectedAt {
				j++
			}
		}
		// A token is uncertain when, at some byte where the frame could
		// pop, that byte may follow the rule: what lies below decides. The
		// split does not look below (so that grammars share it); the check
		// at each step walks these tokens as a trie from the real stacks.
		switch {
		case rejectedAt == 1 && w.anyEsc[1]:
			if n := len(p.escape0); n > 0 && p.escape0[n-1][1] == int32(i) {
				p.escape0[n-1][1] = int32(j)
			} else {
				p.escape0 = append(p.escape0, [2]int32{int32(i), int32(j)})
			}
		case w.anyEsc[rejectedAt]:
			p.addUncertain(int32(i), int32(j))
		}
		valid = rejectedAt - 1
		i = j
	}
	var accBits []uint64
	if ref != nil {
		accepted, accBits = c.mergeReference(p, ref, skipped, accepted)
	}
	p.slice = slice
	if accBits != nil {
		count := 0
		for _, x := range accBits {
			count += bits.OnesCount64(x)
		}
		if count > v.size/32 {
			p.acceptedBits = accBits
			return
		}
		for w, x := range accBits {
			for ; x != 0; x &= x - 1 {
				accepted = append(accepted, int32(w*64+bits.TrailingZeros64(x)))
			}
		}
	}
	if len(accepted) > v.size/32 {
		p.acceptedBits = make([]uint64, c.v.MaskWords())
		for _, id := range accepted {
			setBit(p.acceptedBits, id)
		}
	} else {
		p.acceptedIDs = accepted
	}
}

// firstBytes are the bytes a token may start with from w's start: those
// the frame takes, and those that may follow the rule when it can end.
func (c *Compiled) firstBytes(w *walker, follow [4]uint64) [4]uint64 {
	var firstOK [4]uint64
	if st := &c.g.rules[w.rule].states[w.fast[0]]; len(st.refs) == 0 {
		// The state's own edges, and what follows the rule if it ends.
		for _, e := range st.edges {
			for b := int(e.lo); b <= int(e.hi); b++ {
				firstOK[b>>6] |= 1 << (b & 63)
			}
		}
		if st.accept {
			firstOK = or4(firstOK, follow)
		}
		return firstOK
	}
	_, endsNow, _ := w.s.step(w.sets[0], -1, nil)
	var next []stack
	for b := range 256 {
		next, _, _ = w.s.step(w.sets[0], b, next[:0])
		if len(next) > 0 || endsNow && follow[b>>6]&(1<<(b&63)) != 0 {
			firstOK[b>>6] |= 1 << (b & 63)
		}
	}
	return firstOK
}

// mergeReference adds to p what ref says of the tokens in skipped (sorted
// index ranges), to p's own findings (accepted, p.uncertain and
// p.conditional, which cover only tokens outside skipped). It returns the
// accepted tokens as ids, or (when ref's are a bitset) as a bitset.
func (c *Compiled) mergeReference(p, ref *positionTokens, skipped [][2]int32, accepted []int32) ([]int32, []uint64) {
	v := c.v
	// in: whether ref decides id. Asked mostly in increasing byte order,
	// so the search starts at the range that answered last.
	last := 0
	in := func(id int32) bool {
		r := v.rank[id]
		if last >= len(skipped) || skipped[last][0] > r {
			last = 0
		}
		for last < len(skipped) && skipped[last][1] <= r {
			last++
		}
		return last < len(skipped) && skipped[last][0] <= r
	}
	if ref.acceptedBits != nil || ref.slice != nil {
		// Most tokens come from ref: its bits, less the tokens outside
		// skipped (p's walk decided them), plus p's own.
		var bits []uint64
		for _, b := range [][]uint64{ref.slice, ref.acceptedBits} {
			if bits == nil {
				bits = slices.Clone(b)
				continue
			}
			for i, w := range b {
				bits[i] |= w
			}
		}
		for _, id := range ref.acceptedIDs {
			setBit(bits, id)
		}
		lo := int32(0)
		for _, s := range append(skipped, [2]int32{int32(len(v.sorted)), 0}) {
			for _, id := range v.sorted[lo:s[0]] {
				bits[id>>6] &^= 1 << (id & 63)
			}
			lo = s[1]
		}
		for _, id := range accepted {
			setBit(bits, id)
		}
		c.mergeLists(p, ref, skipped, in)
		return nil, bits
	}
	for _, id := range ref.acceptedIDs {
		if in(id) {
			accepted = append(accepted, id)
		}
	}
	c.mergeLists(p, ref, skipped, in)
	return accepted, nil
}

// mergeLists adds ref's uncertain and conditional tokens that ref decides
// (those in skipped, for which in is true) to p's. p walked c.v; ref's ranges may be of another vocabulary
// (the tokens other than plain text), whose tokens are then placed in c.v
// one by one.
func (c *Compiled) mergeLists(p, ref *positionTokens, skipped [][2]int32, in func(int32) bool) {
	own := p.uncertain
	var theirs [][2]int32
	// ref's escape0 tokens never reach skipped (a prefix of a byte or more
	// that both take); they go through the byte-wise check if they do.
	for _, r := range slices.Concat(ref.uncertain, ref.escape0) {
		if ref.uncVocab == c.v {
			theirs = append(theirs, r)
			continue
		}
		for _, id := range ref.uncVocab.sorted[r[0]:r[1]] {
			k := c.v.rank[id]
			theirs = append(theirs, [2]int32{k, k + 1})
		}
	}
	slices.SortFunc(theirs, func(a, b [2]int32) int { return int(a[0] - b[0]) })
	theirs = mergeRanges(theirs)
	// decided: theirs within skipped, both sorted and disjoint.
	var decided [][2]int32
	for i, j := 0, 0; i < len(theirs) && j < len(skipped); {
		if lo, hi := max(theirs[i][0], skipped[j][0]), min(theirs[i][1], skipped[j][1]); lo < hi {
			decided = append(decided, [2]int32{lo, hi})
		}
		if theirs[i][1] < skipped[j][1] {
			i++
		} else {
			j++
		}
	}
	// own lies outside skipped: the two interleave.
	p.uncertain = nil
	k := 0
	for _, r := range decided {
		for k < len(own) && own[k][0] < r[0] {
			p.addUncertain(own[k][0], own[k][1])
			k++
		}
		p.addUncertain(r[0], r[1])
	}
	for ; k < len(own); k++ {
		p.addUncertain(own[k][0], own[k][1])
	}
	for _, ct := range ref.conditional {
		if in(ct.id) {
			p.conditional = append(p.conditional, ct)
		}
	}
}

// addUncertain appends the range [lo, hi) of uncVocab.sorted to the
// uncertain tokens, which stay sorted.
func (p *positionTokens) addUncertain(lo, hi int32) {
	if n := len(p.uncertain); n > 0 && p.uncertain[n-1][1] == lo {
		p.uncertain[n-1][1] = hi
		return
	}
	p.uncertain = append(p.uncertain, [2]int32{lo, hi})
}

// rangeBits is the bitset (of words words) of the ids in ranges of
// p.uncVocab.sorted.
func (p *positionTokens) rangeBits(ranges [][2]int32, words int) []uint64 {
	v := p.uncVocab
	b := make([]uint64, words)
	for _, r := range ranges {
		for lo := r[0]; lo < r[1]; {
			// Whole groups of a first byte (a blank, a comma) are cached.
			if c := v.text[v.off[lo]]; lo == v.byFirst[c] && r[1] >= v.byFirst[int(c)+1] {
				for i, w := range v.firstByteBits(c) {
					b[i] |= w
				}
				lo = v.byFirst[int(c)+1]
				continue
			}
			setBit(b, v.sorted[lo])
			lo++
		}
	}
	return b
}

// mergeRanges joins the adjacent ranges of sorted, disjoint ones.
func mergeRanges(rs [][2]int32) [][2]int32 {
	out := rs[:0]
	for _, r := range rs {
		if n := len(out); n > 0 && out[n-1][1] == r[0] {
			out[n-1][1] = r[1]
			continue
		}
		out = append(out, r)
	}
	return out
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

// plainKeyStates: rules with more states key their positions that take
// plain tokens as a slice by state, not by signature.
const plainKeyStates = 256

// lazySignatureStates: rules with more states (long counted chains) have
// their signatures computed per state asked for, not for the whole rule:
// a position needs only the states within a token's length of it. Below
// it, the whole rule's signatures (which stop as soon as the states stop
// parting) cost less than the memoized walk of one state's.
const lazySignatureStates = 4096

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
// × edges × the depth at which the states stop parting (at most maxLen),
// once per rule per Compiled.
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
	seen := map[uint64]struct{}{}
	classes := 1
	for range depth {
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
		}
		prev, cur = cur, prev
		// Two states apart at depth d stay apart deeper; once a level
		// parts no more states than the last, no deeper level will (as in
		// Moore's minimization): the signatures say what depth maxLen
		// would, under other values.
		n := countDistinct(prev, seen)
		if n == classes {
			break
		}
		classes = n
	}
	return prev
}

// countDistinct is the number of distinct values in x (seen is scratch).
func countDistinct(x []uint64, seen map[uint64]struct{}) int {
	clear(seen)
	for _, v := range x {
		seen[v] = struct{}{}
	}
	return len(seen)
}
