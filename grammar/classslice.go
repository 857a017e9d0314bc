package grammar

import (
	"math/bits"
	"sync"
)

// Class slices: plain slices (slice.go) for a pattern's character class.
// Inside a patterned string ("pattern": "^[0-9a-zA-Z_-]{1,255}$", a
// UUID's hex digits, \S+) a DFA state takes every byte of an ASCII class
// alike, through a chain of states counting them or a loop; a split from
// there accepts the tokens made only of the class's bytes, up to as many
// as the chain has left, without walking them, and walks only the others.
// Each class's tokens are found once per vocabulary and shared by every
// grammar, as a string's plain characters are.

// classBytes is a set of ASCII bytes (bit b of word b>>6).
type classBytes [2]uint64

func (cb classBytes) has(b byte) bool { return b < 0x80 && cb[b>>6]&(1<<(b&63)) != 0 }

func (cb classBytes) count() int { return bits.OnesCount64(cb[0]) + bits.OnesCount64(cb[1]) }

// minClassBytes: narrower classes have few tokens, cheap to walk.
const minClassBytes = 10

// classSlice is the tokens of a vocabulary made only of one class's bytes.
type classSlice struct {
	// in[i>>6] bit i: sorted[i] is such a token.
	in []uint64
	// byLen[n]: the ids of those of n bytes; maxLen the longest.
	byLen  [][]int32
	maxLen int

	mu   sync.Mutex
	upTo [][]uint64 // upTo[k]: those of at most k bytes, made on first use
}

// maxClassSlices bounds Vocab.classes: a pattern's classes recur
// (identifiers, hex digits, non-blanks); a handful are in use at a time.
const maxClassSlices = 16

// classSlice returns the class's tokens, found on first use: a walk of the
// sorted vocabulary that skips every subtree whose prefix leaves the class.
func (v *Vocab) classSlice(cb classBytes) *classSlice {
	v.classMu.Lock()
	defer v.classMu.Unlock()
	if cs, ok := v.classes[cb]; ok {
		return cs
	}
	cs := &classSlice{in: make([]uint64, (len(v.sorted)+63)/64)}
	var byLen [][]int32
	for i := 0; i < len(v.sorted); {
		tok := v.sortedToken(i)
		if !cb.has(tok[0]) {
			i = int(v.byFirst[int(tok[0])+1])
			continue
		}
		f := 1
		for f < len(tok) && cb.has(tok[f]) {
			f++
		}
		if f < len(tok) {
			// Every token starting with tok[:f+1] leaves the class there.
			i = v.subtreeEnd(i, f+1)
			continue
		}
		cs.in[i>>6] |= 1 << (i & 63)
		for len(byLen) <= len(tok) {
			byLen = append(byLen, nil)
		}
		byLen[len(tok)] = append(byLen[len(tok)], v.sorted[i])
		i++
	}
	cs.byLen, cs.maxLen = byLen, max(len(byLen)-1, 0)
	if v.classes == nil || len(v.classes) >= maxClassSlices {
		v.classes = map[classBytes]*classSlice{}
	}
	v.classes[cb] = cs
	return cs
}

// tokensUpTo is the bitset (words long) of the class's tokens of at most k
// bytes.
func (cs *classSlice) tokensUpTo(k, words int) []uint64 {
	k = min(k, cs.maxLen)
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.upTo == nil {
		cs.upTo = make([][]uint64, cs.maxLen+1)
	}
	if cs.upTo[k] == nil {
		b := make([]uint64, words)
		for n := 1; n <= k; n++ {
			for _, id := range cs.byLen[n] {
				setBit(b, id)
			}
		}
		cs.upTo[k] = b
	}
	return cs.upTo[k]
}

// stateClass is the ASCII bytes that take state s to its most common
// target, and that target; ok false when s is not fast (a byte from it
// may pop the frame or push a rule) or the class is narrower than
// minClassBytes.
func stateClass(s *state) (cb classBytes, to int32, ok bool) {
	if !fastState(s) {
		return cb, -1, false
	}
	var count map[int32]int
	for _, e := range s.edges {
		if e.lo >= 0x80 {
			break
		}
		if count == nil {
			count = map[int32]int{}
		}
		count[e.to] += int(min(e.hi, 0x7f)) - int(e.lo) + 1
	}
	best := 0
	for t, n := range count {
		if n > best || n == best && t < to {
			to, best = t, n
		}
	}
	if best < minClassBytes {
		return cb, -1, false
	}
	for _, e := range s.edges {
		if e.lo >= 0x80 {
			break
		}
		if e.to == to {
			for b := int(e.lo); b <= int(min(e.hi, 0x7f)); b++ {
				cb[b>>6] |= 1 << (b & 63)
			}
		}
	}
	return cb, to, true
}

// classStep is where every byte of cb leads from s, when s is fast and
// they all lead to one state.
func classStep(s *state, cb classBytes) (to int32, ok bool) {
	if !fastState(s) {
		return -1, false
	}
	to = -1
	for w, x := range cb {
		for ; x != 0; x &= x - 1 {
			t := s.next(byte(w*64 + bits.TrailingZeros64(x)))
			if t < 0 || to >= 0 && t != to {
				return -1, false
			}
			to = t
		}
	}
	return to, to >= 0
}

// classRejects: s is fast and takes no byte of cb.
func classRejects(s *state, cb classBytes) bool {
	if !fastState(s) {
		return false
	}
	for w, x := range cb {
		for ; x != 0; x &= x - 1 {
			if s.next(byte(w*64+bits.TrailingZeros64(x))) >= 0 {
				return false
			}
		}
	}
	return true
}

// classRun decides whether a split from state q of rule can take a class
// slice: the class of q's bytes (stateClass) and k >= 0 such that every
// token of at most k of its bytes is consumed from q through fast states
// and every longer one is rejected without popping the frame (k is a
// vocabulary's longest token when the bytes loop). Results are memoized
// per Compiled by (rule, state, class): a counted chain is walked once.
func (c *Compiled) classRun(rule, q int32) (cb classBytes, k int, ok bool) {
	states := c.g.rules[rule].states
	cb, _, ok = stateClass(&states[q])
	if !ok {
		return cb, 0, false
	}
	type key = classRunKey
	c.runMu.Lock()
	defer c.runMu.Unlock()
	if c.classRuns == nil {
		c.classRuns = map[classRunKey]int32{}
	}
	const notOK, loops = -1, 1 << 30
	var path []int32
	onPath := map[int32]bool{}
	cur := q
	var run int32
	for {
		if r, hit := c.classRuns[key{rule, cur, cb}]; hit {
			run = r
			break
		}
		if onPath[cur] {
			run = loops
			break
		}
		next, stepOK := classStep(&states[cur], cb)
		if !stepOK {
			run = notOK
			if classRejects(&states[cur], cb) {
				run = 0
			}
			c.classRuns[key{rule, cur, cb}] = run
			break
		}
		path = append(path, cur)
		onPath[cur] = true
		cur = next
	}
	for i := len(path) - 1; i >= 0; i-- {
		if run != notOK && run != loops {
			run++
		}
		c.classRuns[key{rule, path[i], cb}] = run
	}
	r := c.classRuns[key{rule, q, cb}]
	return cb, int(r), r != notOK
}

// classRunKey is a memoized classRun: a state and the class walked.
type classRunKey struct {
	rule, state int32
	cb          classBytes
}

// classChain is the states after 0, 1, ..., n bytes of cb from state q of
// rule, for n at most classRun's k (each step is one DFA edge that every
// byte of cb takes alike).
func (c *Compiled) classChain(rule, q int32, cb classBytes, n int) []int32 {
	states := c.g.rules[rule].states
	var rep byte // a byte of the class: all of them lead alike
	for b := range 128 {
		if cb.has(byte(b)) {
			rep = byte(b)
			break
		}
	}
	chain := make([]int32, 1, n+1)
	chain[0] = q
	for j := 0; j < n; j++ {
		chain = append(chain, states[chain[j]].next(rep))
	}
	return chain
}
