package tokenizer

import (
	"unicode/utf8"
)

// scoreModel is SentencePiece-style BPE driven by token scores instead of a
// merge list, as in llama2.c's tokenizer.bin and GGUF "llama" vocabularies:
// start from characters and repeatedly merge the adjacent pair whose
// concatenation is the highest-scoring vocabulary entry (leftmost on ties).
//
// karpathy's run.c rescans the whole sequence per merge, which is quadratic;
// a priority queue with stale-entry checks gives the same merge order in
// O(n log n).
type scoreModel struct {
	vocab  map[string]int
	pieces []string
	scores []float32
	// byteIDs[b] is the token for raw byte b, -1 when the vocabulary has none.
	byteIDs [256]int
	// bytesFirst: characters missing from the vocabulary become byte tokens
	// before merging, and merging then works on the byte tokens' strings
	// (run.c). Otherwise they stay characters during merging and become byte
	// tokens at the end (llama.cpp).
	bytesFirst bool
	// minScore: pairs scoring at or below it never merge (run.c starts its
	// best-score search at -1e10).
	minScore float32
	unkID    int

	cache wordCache
}

type scoreSymbol struct {
	text       string
	id         int32 // -1: a character not in the vocabulary
	prev, next int32
	gone       bool
}

type scoreCandidate struct {
	score           float32
	pos             int32 // left symbol
	leftID, rightID int32 // ids when queued, to detect stale entries
	merged          int32
}

func (m *scoreModel) tokenize(text string, out []int) []int {
	if text == "" {
		return out
	}
	if ids, ok := m.cache.get(text); ok {
		return append(out, ids...)
	}
	start := len(out)
	out = m.encode(text, out)
	m.cache.put(text, out[start:])
	return out
}

func (m *scoreModel) encode(text string, out []int) []int {
	syms := make([]scoreSymbol, 0, len(text))
	add := func(s string, id int) {
		n := int32(len(syms))
		syms = append(syms, scoreSymbol{text: s, id: int32(id), prev: n - 1, next: n + 1})
	}
	for i := 0; i < len(text); {
		_, size := utf8.DecodeRuneInString(text[i:])
		ch := text[i : i+size]
		i += size
		if id, ok := m.vocab[ch]; ok {
			add(ch, id)
			continue
		}
		if !m.bytesFirst {
			add(ch, -1)
			continue
		}
		for k := 0; k < len(ch); k++ {
			id := m.byteIDs[ch[k]]
			if id < 0 {
				id = m.unkID
			}
			if id < 0 {
				continue
			}
			add(m.pieces[id], id)
		}
	}
	if len(syms) == 0 {
		return out
	}
	syms[len(syms)-1].next = -1

	var h scoreHeap
	var buf []byte
	tryPair := func(left, right int32) {
		if left < 0 || right < 0 {
			return
		}
		buf = append(append(buf[:0], syms[left].text...), syms[right].text...)
		id, ok := m.vocab[string(buf)]
		if !ok || m.scores[id] <= m.minScore {
			return
		}
		h.push(scoreCandidate{score: m.scores[id], pos: left, leftID: syms[left].id, rightID: syms[right].id, merged: int32(id)})
	}
	for i := int32(0); i+1 < int32(len(syms)); i++ {
		tryPair(i, i+1)
	}
	for len(h) > 0 {
		c := h.pop()
		left := &syms[c.pos]
		if left.gone || left.next == -1 || left.id != c.leftID {
			continue
		}
		right := &syms[left.next]
		if right.id != c.rightID {
			continue
		}
		left.text = m.pieces[c.merged]
		left.id = c.merged
		right.gone = true
		left.next = right.next
		if left.next != -1 {
			syms[left.next].prev = c.pos
		}
		tryPair(left.prev, c.pos)
		tryPair(c.pos, left.next)
	}

	for i := int32(0); i != -1; i = syms[i].next {
		s := &syms[i]
		if s.id >= 0 {
			out = append(out, int(s.id))
			continue
		}
		for k := 0; k < len(s.text); k++ {
			if id := m.byteIDs[s.text[k]]; id >= 0 {
				out = append(out, id)
			} else if m.unkID >= 0 {
				out = append(out, m.unkID)
			}
		}
	}
	return out
}

// scoreHeap is a binary max-heap on score, then min on position.
type scoreHeap []scoreCandidate

func (h scoreHeap) less(i, j int) bool {
	if h[i].score != h[j].score {
		return h[i].score > h[j].score
	}
	return h[i].pos < h[j].pos
}

func (h *scoreHeap) push(c scoreCandidate) {
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

func (h *scoreHeap) pop() scoreCandidate {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	for i := 0; ; {
		l, r, best := 2*i+1, 2*i+2, i
		if l < len(s) && s.less(l, best) {
			best = l
		}
		if r < len(s) && s.less(r, best) {
			best = r
		}
		if best == i {
			break
		}
		s[i], s[best] = s[best], s[i]
		i = best
	}
	*h = s
	return top
}
