package grammar

import (
	"slices"
	"sync"
	"unicode/utf8"
)

// Plain text is the characters a JSON string holds unescaped: every
// Unicode scalar value from U+0020 on but '"' and '\\'. A plain token is
// a token whose bytes are plain characters, whole (most of a vocabulary:
// words, pieces of words, punctuation, CJK). Inside a string the same DFA
// state, or a chain of states counting characters, takes every plain
// character alike; a split from there accepts the plain tokens of at most
// as many characters as the chain has left without walking them, and
// walks only the others (Vocab.rest), a few thousand tokens. This is
// LLGuidance's "slices" idea, for the slice every JSON grammar has.
type plainSlice struct {
	once sync.Once
	// chars[id]: the characters of plain token id, 0 for other tokens.
	chars []int32
	// maxChars: the most characters of a plain token.
	maxChars int
	// rest is the vocabulary less the plain tokens (same ids).
	rest *Vocab
	// start is the DFA of one plain character (state 0 the start).
	start *automaton

	// upTo[k]: the plain tokens of at most k characters, a bitset, for k
	// up to maxChars (2 MB for llama3's 128): a counted string's
	// positions each take one.
	upTo [][]uint64
}

func isPlainByte(b byte) bool { return b >= 0x20 && b != '"' && b != '\\' }

func (v *Vocab) plain() *plainSlice {
	ps := &v.plainSlice
	ps.once.Do(func() {
		ps.chars = make([]int32, v.size)
		rest := make([][]byte, len(v.tokens))
		for id, t := range v.tokens {
			if len(t) == 0 {
				continue
			}
			plain := utf8.Valid(t)
			for _, b := range t {
				if !isPlainByte(b) {
					plain = false
					break
				}
			}
			if !plain {
				rest[id] = t
				continue
			}
			n := utf8.RuneCount(t)
			ps.chars[id] = int32(n)
			ps.maxChars = max(ps.maxChars, n)
		}
		byChars := make([][]int32, ps.maxChars+1)
		for id, n := range ps.chars {
			if n > 0 {
				byChars[n] = append(byChars[n], int32(id))
			}
		}
		ps.upTo = make([][]uint64, ps.maxChars+1)
		ps.upTo[0] = make([]uint64, v.MaskWords())
		for k := 1; k <= ps.maxChars; k++ {
			ps.upTo[k] = slices.Clone(ps.upTo[k-1])
			for _, id := range byChars[k] {
				setBit(ps.upTo[k], id)
			}
		}
		ps.rest = NewVocab(rest, v.size)
		a, err := newAutomaton(utf8Node([]runeRange{{0x20, '"' - 1}, {'"' + 1, '\\' - 1}, {'\\' + 1, 0x10FFFF}}))
		if err != nil {
			panic("grammar: the plain character does not compile: " + err.Error())
		}
		ps.start = a
	})
	return ps
}

// tokensUpTo is the bitset of the plain tokens of at most k characters.
func (ps *plainSlice) tokensUpTo(k int) []uint64 { return ps.upTo[min(k, ps.maxChars)] }

// fastState: a byte from s is one DFA edge, with no stack work and no end
// of the frame before it.
func fastState(s *state) bool { return len(s.refs) == 0 && !s.accept }

// plainStep reports where every plain character leads from state q of
// rule: ok when each is consumed through fast states (q included) and all
// end in the same state to.
func (g *Grammar) plainStep(ps *plainSlice, rule, q int32) (to int32, ok bool) {
	states := g.rules[rule].states
	type pair struct{ a, s int32 }
	seen := []pair{{0, q}}
	to = -1
	for i := 0; i < len(seen); i++ {
		p := seen[i]
		as := &ps.start.states[p.a]
		if as.accept {
			// A whole character: where it ends must be one state.
			if to >= 0 && to != p.s {
				return -1, false
			}
			to = p.s
			continue
		}
		ss := &states[p.s]
		if !fastState(ss) {
			return -1, false
		}
		// Each range of the character's bytes must be covered by ss's
		// edges (sorted, disjoint): walk both lists together.
		k := 0
		for _, e := range as.edges {
			for b := int(e.lo); b <= int(e.hi); {
				for k < len(ss.edges) && int(ss.edges[k].hi) < b {
					k++
				}
				if k == len(ss.edges) || int(ss.edges[k].lo) > b {
					return -1, false
				}
				if x := (pair{e.to, ss.edges[k].to}); !slices.Contains(seen, x) {
					seen = append(seen, x)
				}
				b = int(ss.edges[k].hi) + 1
			}
		}
	}
	return to, to >= 0
}

// rejectsPlain: no plain character can start from s, and s is fast (a
// token cannot pop the frame there).
func rejectsPlain(s *state) bool {
	if !fastState(s) {
		return false
	}
	for _, e := range s.edges {
		for b := int(e.lo); b <= int(e.hi); b++ {
			if isPlainByte(byte(b)) && (b < 0x80 || b >= 0xC2 && b <= 0xF4) {
				return false
			}
		}
	}
	return true
}

// plainRun decides whether a split from state q of rule can take the plain
// tokens as a slice: k >= 0 when every plain token of at most k characters
// is consumed from q through fast states (no guard, no end, no stack) and
// every longer one is rejected without popping the frame; k is maxChars
// when the characters loop. ok false: plain tokens must be walked.
// Results are memoized per Compiled: a counted string's positions follow
// one chain, walked once.
func (c *Compiled) plainRun(rule, q int32) (k int, ok bool) {
	ps := c.v.plain()
	c.runMu.Lock()
	defer c.runMu.Unlock()
	if c.runs == nil {
		c.runs = map[[2]int32]int32{}
	}
	const notOK = -1
	// path: the states from q along uniform steps not yet memoized.
	var path []int32
	onPath := map[int32]bool{}
	cur := q
	var run int32
	for {
		if r, hit := c.runs[[2]int32{rule, cur}]; hit {
			run = r
			break
		}
		if onPath[cur] {
			run = int32(ps.maxChars) // the characters loop
			break
		}
		next, stepOK := c.g.plainStep(ps, rule, cur)
		if !stepOK {
			run = notOK
			if rejectsPlain(&c.g.rules[rule].states[cur]) {
				run = 0
			}
			c.runs[[2]int32{rule, cur}] = run
			break
		}
		path = append(path, cur)
		onPath[cur] = true
		cur = next
	}
	for i := len(path) - 1; i >= 0; i-- {
		if run != notOK {
			run = min(run+1, int32(ps.maxChars))
		}
		c.runs[[2]int32{rule, path[i]}] = run
	}
	r := c.runs[[2]int32{rule, q}]
	return int(r), r != notOK
}
