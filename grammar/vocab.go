package grammar

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Vocab is a tokenizer's vocabulary as the grammar sees it: the bytes each
// token id adds to the text. Ids without bytes (special tokens such as
// <|im_end|>, unassigned ids) are never allowed by a grammar; the caller
// decides about end-of-sequence tokens (Matcher.CanEnd).
//
// The tokens are kept sorted by their bytes with each one's common prefix
// with the previous: walked in this order they are a trie in depth-first
// order, so a walk shares the work of common prefixes and skips a whole
// subtree when a prefix is rejected.
type Vocab struct {
	size   int      // ids are [0, size): the mask width
	tokens [][]byte // by id; nil when the token has no bytes
	sorted []int32  // ids with bytes, sorted by bytes
	lcp    []int32  // lcp[i]: common prefix length of sorted[i] and sorted[i-1]
	rank   []int32  // rank[id]: id's index in sorted (-1: no bytes)
	// ends[nodeAt[i]+d-lcp[i]-1] is the end of the trie subtree below
	// sorted[i]'s first d bytes, for d in (lcp[i], len]: the first index
	// after i whose token does not start with them. Each trie node is
	// first reached at exactly one such (i, d).
	nodeAt []int32
	ends   []int32
	// text holds the tokens' bytes in sorted order, sorted[i]'s at
	// text[off[i]:off[i+1]]: a walk in that order reads memory in order.
	text   []byte
	off    []int32
	maxLen int
	// byFirst[b] is the index in sorted of the first token starting with
	// byte b or above: the tokens starting with b are
	// sorted[byFirst[b]:byFirst[b+1]].
	byFirst [257]int32

	// splits caches vocabulary splits by position signature and follow
	// set, for the rules whose content identifies them (Compiled.shared):
	// what a string's characters, a number or a common object admit is
	// split once per tokenizer, not once per grammar.
	splitMu   sync.Mutex
	splits    map[uint64]*positionTokens
	oldSplits map[uint64]*positionTokens // see maxSharedSplits

	plainSlice plainSlice

	// classes caches class slices (classslice.go) by class.
	classMu sync.Mutex
	classes map[classBytes]*classSlice

	// base is the vocabulary this one spells special tokens of (WithSpecial);
	// nil: none. spelled memoizes WithSpecial's vocabularies.
	base    *Vocab
	spellMu sync.Mutex
	spelled map[string]*Vocab

	// byFirstBits[b]: the tokens starting with b, a bitset, made on
	// first use (firstByteBits).
	bitsMu      sync.Mutex
	byFirstBits [256][]uint64
}

// firstByteBits is the bitset of the tokens starting with byte b.
func (v *Vocab) firstByteBits(b byte) []uint64 {
	v.bitsMu.Lock()
	defer v.bitsMu.Unlock()
	if v.byFirstBits[b] == nil {
		bits := make([]uint64, v.MaskWords())
		for _, id := range v.sorted[v.byFirst[b]:v.byFirst[int(b)+1]] {
			setBit(bits, id)
		}
		v.byFirstBits[b] = bits
	}
	return v.byFirstBits[b]
}

// maxSharedSplits bounds Vocab.splits and Vocab.oldSplits together: when
// the newer generation holds half of it, it becomes the older one and the
// older one is dropped (grammars keep the splits they hold). A split asked
// for from the older generation moves to the newer, so the splits in use
// (a string's characters, a number, what follows a key) outlive the
// dropping, where starting over would compute them again.
const maxSharedSplits = 4096

// splitFor returns the cached split under key, a new one (to be computed
// by the caller, through its once) if none.
func (v *Vocab) splitFor(key uint64) *positionTokens {
	v.splitMu.Lock()
	defer v.splitMu.Unlock()
	if p, ok := v.splits[key]; ok {
		return p
	}
	p, ok := v.oldSplits[key]
	if !ok {
		p = &positionTokens{}
	}
	if v.splits == nil || len(v.splits) >= maxSharedSplits/2 {
		v.oldSplits, v.splits = v.splits, map[uint64]*positionTokens{}
	}
	v.splits[key] = p
	return p
}

// NewVocab builds a vocabulary of size ids; tokens[id] are id's bytes (nil
// or empty: never allowed). len(tokens) <= size: a model's embedding table
// is often larger than its tokenizer.
func NewVocab(tokens [][]byte, size int) *Vocab {
	v := &Vocab{size: max(size, len(tokens)), tokens: make([][]byte, max(size, len(tokens)))}
	for id, t := range tokens {
		if len(t) == 0 {
			continue
		}
		v.tokens[id] = t
		v.sorted = append(v.sorted, int32(id))
		v.maxLen = max(v.maxLen, len(t))
	}
	slices.SortStableFunc(v.sorted, func(a, b int32) int { return bytes.Compare(v.tokens[a], v.tokens[b]) })
	v.off = make([]int32, len(v.sorted)+1)
	for i, id := range v.sorted {
		v.text = append(v.text, v.tokens[id]...)
		v.off[i+1] = int32(len(v.text))
	}
	v.lcp = make([]int32, len(v.sorted))
	for i := 1; i < len(v.sorted); i++ {
		a, b := v.tokens[v.sorted[i-1]], v.tokens[v.sorted[i]]
		n := 0
		for n < len(a) && n < len(b) && a[n] == b[n] {
			n++
		}
		v.lcp[i] = int32(n)
	}
	v.rank = make([]int32, v.size)
	for i := range v.rank {
		v.rank[i] = -1
	}
	for i, id := range v.sorted {
		v.rank[id] = int32(i)
	}
	v.nodeAt = make([]int32, len(v.sorted)+1)
	for i := range v.sorted {
		v.nodeAt[i+1] = v.nodeAt[i] + v.off[i+1] - v.off[i] - v.lcp[i]
	}
	v.ends = make([]int32, v.nodeAt[len(v.sorted)])
	// open[d-1]: the node at depth d on the current path, waiting for its
	// end: the first token whose common prefix with its predecessor is
	// shorter than d.
	var open []int32
	for i := range v.sorted {
		for l := int(v.lcp[i]); len(open) > l; open = open[:len(open)-1] {
			v.ends[open[len(open)-1]] = int32(i)
		}
		for d := int(v.lcp[i]) + 1; d <= int(v.off[i+1]-v.off[i]); d++ {
			open = append(open, v.nodeAt[i]+int32(d)-v.lcp[i]-1)
		}
	}
	for _, o := range open {
		v.ends[o] = int32(len(v.sorted))
	}
	i := 0
	for b := range 257 {
		for i < len(v.sorted) && int(v.tokens[v.sorted[i]][0]) < b {
			i++
		}
		v.byFirst[b] = int32(i)
	}
	return v
}

// subtreeEnd is the first sorted index after i whose token does not start
// with sorted[i]'s first d bytes, for d > lcp[i].
func (v *Vocab) subtreeEnd(i, d int) int {
	return int(v.ends[int(v.nodeAt[i])+d-int(v.lcp[i])-1])
}

// sortedToken is the i-th token in sorted order.
func (v *Vocab) sortedToken(i int) []byte { return v.text[v.off[i]:v.off[i+1]] }

// Size is the number of token ids, the width of a mask.
func (v *Vocab) Size() int { return v.size }

// Token returns id's bytes (nil when it has none).
func (v *Vocab) Token(id int) []byte {
	if id < 0 || id >= len(v.tokens) {
		return nil
	}
	return v.tokens[id]
}

// MaskWords is the length of a mask: one bit per token id.
func (v *Vocab) MaskWords() int { return (v.size + 63) / 64 }

// MaskAllows reports whether bit id of mask is set.
func MaskAllows(mask []uint64, id int) bool {
	return id >= 0 && id/64 < len(mask) && mask[id/64]&(1<<(id%64)) != 0
}

func setBit(mask []uint64, id int32) { mask[id>>6] |= 1 << (id & 63) }

// WithSpecial is v with special tokens spelled (id → its text), so that a
// grammar compiled against it may emit those ids where it writes their
// text: a Mistral forced tool call opens with [TOOL_CALLS], a control
// token (without bytes in v) the model was trained to emit. The text's
// ordinary tokens spell it too. The ids must have no bytes in v; the
// result is memoized, and Base is v.
func (v *Vocab) WithSpecial(spell map[int]string) (*Vocab, error) {
	ids := make([]int, 0, len(spell))
	for id, text := range spell {
		if id < 0 || id >= v.size || len(v.tokens[id]) > 0 || text == "" {
			return nil, fmt.Errorf("grammar: token %d cannot be spelled %q: it is outside the vocabulary, has bytes already, or the text is empty", id, text)
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var key strings.Builder
	for _, id := range ids {
		fmt.Fprintf(&key, "%d=%q;", id, spell[id])
	}
	v.spellMu.Lock()
	defer v.spellMu.Unlock()
	if w, ok := v.spelled[key.String()]; ok {
		return w, nil
	}
	tokens := slices.Clone(v.tokens)
	for _, id := range ids {
		tokens[id] = []byte(spell[id])
	}
	w := NewVocab(tokens, v.size)
	w.plain()
	w.base = v
	if v.spelled == nil {
		v.spelled = map[string]*Vocab{}
	}
	v.spelled[key.String()] = w
	return w, nil
}

// Base is the vocabulary v spells special tokens of (WithSpecial), or v.
func (v *Vocab) Base() *Vocab {
	if v.base != nil {
		return v.base
	}
	return v
}
