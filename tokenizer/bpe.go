package tokenizer

import (
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"
)

// model turns one pre-tokenized piece into ids.
type model interface {
	tokenize(piece string, out []int) []int
}

// mergeTarget is what a pair of adjacent ids becomes, and how early (rank)
// that merge was learned; lower ranks merge first.
type mergeTarget struct {
	rank int32
	id   int32
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// bpeModel is Hugging Face's BPE model: merges applied in rank order on the
// characters of each piece.
type bpeModel struct {
	vocab  map[string]int
	merges map[uint64]mergeTarget

	unkID        int // -1: characters outside the vocabulary are dropped
	fuseUnk      bool
	byteFallback bool
	byteIDs      [256]int // ids of "<0xNN>", -1 when absent
	ignoreMerges bool
	// continuingSubwordPrefix / endOfWordSuffix decorate non-first and last
	// characters (WordPiece-style BPE vocabularies).
	continuingSubwordPrefix string
	endOfWordSuffix         string

	cache wordCache
}

// bpeMerge is one merge rule as listed in the file.
type bpeMerge struct{ left, right string }

// newBPEModel builds the merge table. continuingPrefix is stripped from the
// right half of each merge to name the merged token, as the reference does.
func newBPEModel(vocab map[string]int, merges []bpeMerge, continuingPrefix string) (*bpeModel, error) {
	m := &bpeModel{
		vocab:                   vocab,
		merges:                  make(map[uint64]mergeTarget, len(merges)),
		unkID:                   -1,
		continuingSubwordPrefix: continuingPrefix,
	}
	for i := range m.byteIDs {
		m.byteIDs[i] = -1
		if id, ok := vocab[fmt.Sprintf("<0x%02X>", i)]; ok {
			m.byteIDs[i] = id
		}
	}
	for rank, mg := range merges {
		a, okA := vocab[mg.left]
		b, okB := vocab[mg.right]
		if !okA || !okB {
			return nil, fmt.Errorf("merge %d (%q %q) uses a token missing from the vocabulary", rank, mg.left, mg.right)
		}
		merged := mg.left + strings.TrimPrefix(mg.right, continuingPrefix)
		id, ok := vocab[merged]
		if !ok {
			return nil, fmt.Errorf("merge %d (%q %q) produces %q, missing from the vocabulary", rank, mg.left, mg.right, merged)
		}
		// A repeated pair keeps its last rank, as the reference's map collect does.
		m.merges[pairKey(int32(a), int32(b))] = mergeTarget{rank: int32(rank), id: int32(id)}
	}
	return m, nil
}

func (m *bpeModel) tokenize(piece string, out []int) []int {
	if piece == "" {
		return out
	}
	if m.ignoreMerges {
		if id, ok := m.vocab[piece]; ok {
			return append(out, id)
		}
	}
	if ids, ok := m.cache.get(piece); ok {
		return append(out, ids...)
	}
	start := len(out)
	out = m.mergeWord(piece, out)
	m.cache.put(piece, out[start:])
	return out
}

// symbol is one node of the doubly linked list a word is merged on.
type symbol struct {
	id         int32
	prev, next int32
	gone       bool
}

// mergeWord follows the reference BPE: look each character up (falling back
// to byte tokens, then to unk), then repeatedly apply the lowest-ranked merge
// present, leftmost first on ties.
func (m *bpeModel) mergeWord(w string, out []int) []int {
	syms := make([]symbol, 0, len(w))
	add := func(id int) {
		n := int32(len(syms))
		syms = append(syms, symbol{id: int32(id), prev: n - 1, next: n + 1})
	}
	unk, unkPending := -1, false
	flushUnk := func() {
		if unkPending {
			add(unk)
			unkPending = false
		}
	}
	for i := 0; i < len(w); {
		_, size := utf8.DecodeRuneInString(w[i:])
		end := i + size
		s := w[i:end]
		if i > 0 && m.continuingSubwordPrefix != "" {
			s = m.continuingSubwordPrefix + s
		}
		if end == len(w) && m.endOfWordSuffix != "" {
			s += m.endOfWordSuffix
		}
		if id, ok := m.vocab[s]; ok {
			flushUnk()
			add(id)
			i = end
			continue
		}
		if m.byteFallback && m.allBytesKnown(s) {
			// The reference adds byte tokens without flushing a pending unk,
			// so the unk (if any) lands after them; keep that order.
			for k := 0; k < len(s); k++ {
				add(m.byteIDs[s[k]])
			}
			i = end
			continue
		}
		if m.unkID >= 0 {
			if unkPending && !m.fuseUnk {
				add(unk)
			}
			unk, unkPending = m.unkID, true
		}
		i = end
	}
	flushUnk()
	if len(syms) == 0 {
		return out
	}
	syms[len(syms)-1].next = -1
	m.mergeAll(syms)
	for i := int32(0); i != -1; i = syms[i].next {
		out = append(out, int(syms[i].id))
	}
	return out
}

func (m *bpeModel) allBytesKnown(s string) bool {
	for k := 0; k < len(s); k++ {
		if m.byteIDs[s[k]] < 0 {
			return false
		}
	}
	return true
}

// mergeCandidate is a queued merge of the symbol at pos with its successor.
type mergeCandidate struct {
	rank, id int32
	pos      int32
}

func (m *bpeModel) mergeAll(syms []symbol) {
	var h candidateHeap
	for i := 0; i+1 < len(syms); i++ {
		if t, ok := m.merges[pairKey(syms[i].id, syms[i+1].id)]; ok {
			h.push(mergeCandidate{rank: t.rank, id: t.id, pos: int32(i)})
		}
	}
	for len(h) > 0 {
		top := h.pop()
		left := &syms[top.pos]
		if left.gone || left.next == -1 {
			continue
		}
		rightPos := left.next
		right := &syms[rightPos]
		// Skip entries made stale by an earlier merge of either side.
		if t, ok := m.merges[pairKey(left.id, right.id)]; !ok || t.id != top.id {
			continue
		}
		left.id = top.id
		left.next = right.next
		right.gone = true
		if right.next != -1 {
			syms[right.next].prev = top.pos
		}
		if left.prev != -1 {
			if t, ok := m.merges[pairKey(syms[left.prev].id, left.id)]; ok {
				h.push(mergeCandidate{rank: t.rank, id: t.id, pos: left.prev})
			}
		}
		if left.next != -1 {
			if t, ok := m.merges[pairKey(left.id, syms[left.next].id)]; ok {
				h.push(mergeCandidate{rank: t.rank, id: t.id, pos: top.pos})
			}
		}
	}
}

// candidateHeap is a binary min-heap on (rank, pos), written out instead of
// container/heap to avoid interface calls in the hottest loop.
type candidateHeap []mergeCandidate

func (h candidateHeap) less(i, j int) bool {
	if h[i].rank != h[j].rank {
		return h[i].rank < h[j].rank
	}
	return h[i].pos < h[j].pos
}

func (h *candidateHeap) push(c mergeCandidate) {
	*h = append(*h, c)
	s := *h
	for i := len(s) - 1; i > 0; {
		parent := (i - 1) / 2
		if !s.less(i, parent) {
			break
		}
		s[i], s[parent] = s[parent], s[i]
		i = parent
	}
}

func (h *candidateHeap) pop() mergeCandidate {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	for i := 0; ; {
		l, r, smallest := 2*i+1, 2*i+2, i
		if l < len(s) && s.less(l, smallest) {
			smallest = l
		}
		if r < len(s) && s.less(r, smallest) {
			smallest = r
		}
		if smallest == i {
			break
		}
		s[i], s[smallest] = s[smallest], s[i]
		i = smallest
	}
	*h = s
	return top
}

// wordCache remembers the ids of recently seen pieces. Natural text repeats
// the same words constantly, so most pieces skip merging entirely. Long
// pieces are not cached (the reference uses the same 256-byte limit).
type wordCache struct {
	mu sync.RWMutex
	m  map[string][]int
}

const (
	wordCacheMaxPiece   = 256
	wordCacheMaxEntries = 1 << 16
)

func (c *wordCache) get(piece string) ([]int, bool) {
	if len(piece) >= wordCacheMaxPiece {
		return nil, false
	}
	c.mu.RLock()
	ids, ok := c.m[piece]
	c.mu.RUnlock()
	return ids, ok
}

func (c *wordCache) put(piece string, ids []int) {
	if len(piece) >= wordCacheMaxPiece {
		return
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= wordCacheMaxEntries {
		// Dropping everything is crude but bounded, and refills quickly.
		c.m = make(map[string][]int)
	}
	// Clone the key: piece may be a slice of a large input we must not pin.
	c.m[strings.Clone(piece)] = append([]int(nil), ids...)
	c.mu.Unlock()
}
