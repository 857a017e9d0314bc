package grammar

import "math/bits"

// Matcher follows one generation through a compiled grammar. It is not
// safe for concurrent use (a request samples one token at a time).
type Matcher struct {
	c      *Compiled
	s      *stepper
	stacks []stack
	spare  []stack
	// check is the scratch stepper of FillMask's uncertain-token checks;
	// its frames are dropped after each mask.
	check *stepper
	walk  [][]stack
	// unc: the uncertain tokens a stack consumes, by position and stack
	// (checkUncertain).
	unc map[uncKey][]int32
	// below[d]: the scratch mask of the stack d frames down
	// (checkEscape0).
	below [][]uint64
}

// NewMatcher starts at the beginning of the grammar.
func (c *Compiled) NewMatcher() *Matcher {
	return &Matcher{
		c:      c,
		s:      newStepper(c.g),
		stacks: []stack{{rule: c.g.root}},
	}
}

// AcceptBytes advances over text; on false the matcher is unchanged.
func (m *Matcher) AcceptBytes(text []byte) bool {
	cur := append(m.spare[:0], m.stacks...)
	var next []stack
	for _, b := range text {
		next, _, _ = m.s.step(cur, int(b), next[:0])
		if len(next) == 0 {
			return false
		}
		cur, next = next, cur
	}
	m.spare = m.stacks
	m.stacks = cur
	return true
}

// AcceptToken advances over token id's bytes. Tokens without bytes are
// refused.
func (m *Matcher) AcceptToken(id int) bool {
	t := m.c.v.Token(id)
	if len(t) == 0 {
		return false
	}
	return m.AcceptBytes(t)
}

// CanEnd reports whether the text so far is a complete match: where an
// end-of-sequence token is allowed.
func (m *Matcher) CanEnd() bool {
	_, ended, _ := m.s.step(m.stacks, -1, nil)
	return ended
}

// Done reports that the text is complete and nothing can follow it: the
// generation should stop.
func (m *Matcher) Done() bool {
	_, ended, live := m.s.step(m.stacks, -1, nil)
	return ended && !live
}

// FillMask sets bit id of mask (MaskWords long) for every token whose bytes
// can come next. End-of-sequence is the caller's, through CanEnd.
func (m *Matcher) FillMask(mask []uint64) {
	clear(mask)
	if m.check == nil {
		m.check = newStepper(m.c.g)
	}
	m.fill(m.stacks, mask, 0)
	if len(m.check.frames) > 4096 {
		m.check.frames = map[frameKey]*frame{}
	}
}

// fill sets in mask the tokens the stacks can consume; depth counts the
// frames popped to get there (checkUncertain).
func (m *Matcher) fill(stacks []stack, mask []uint64, depth int) {
	type top struct{ rule, state int32 }
	var seen []top
	var tops []*positionTokens
	for _, st := range stacks {
		t := top{st.rule, st.state}
		dup := false
		for _, x := range seen {
			if x == t {
				dup = true
				break
			}
		}
		p := m.c.position(st.rule, st.state)
		tops = append(tops, p)
		if dup {
			continue
		}
		seen = append(seen, t)
		for _, bits := range [][]uint64{p.slice, p.acceptedBits} {
			for i, w := range bits {
				mask[i] |= w
			}
		}
		for _, id := range p.acceptedIDs {
			setBit(mask, id)
		}
	}
	req := m.c.g.required
	for i, st := range stacks {
		for _, ct := range tops[i].conditional {
			if mask[ct.id>>6]&(1<<(ct.id&63)) != 0 {
				continue
			}
			if ct.guard > 0 && st.seen&(1<<(ct.guard-1)) == 0 || ct.guard == guardRequired && req[st.rule]&^st.seen == 0 {
				setBit(mask, ct.id)
			}
		}
		m.checkUncertain(st, tops[i], mask, depth)
	}
}

// checkUncertain sets the bits of p's uncertain tokens that the stack st
// can consume. The answer depends on st and p alone, so it is kept (in
// m.unc) for the next steps: inside a string the stack stays the same
// from character to character. Otherwise it walks the tokens in byte
// order, keeping the stacks after each prefix (m.walk[d] after d bytes),
// so a common prefix is stepped once and a prefix that fails skips every
// token sharing it.
func (m *Matcher) checkUncertain(st stack, p *positionTokens, mask []uint64, depth int) {
	if len(p.uncertain) == 0 && len(p.escape0) == 0 {
		return
	}
	key := uncKey{p, st}
	if ids, ok := m.unc[key]; ok {
		for _, id := range ids {
			setBit(mask, id)
		}
		return
	}
	if m.walk == nil {
		m.walk = make([][]stack, m.c.v.maxLen+1)
	}
	var ids []int32
	uv := p.uncVocab
	m.walk[0] = append(m.walk[0][:0], st)
	for _, r := range p.uncertain {
		valid := 0 // m.walk[0..valid] hold the previous token's prefixes
		for i := int(r[0]); i < int(r[1]); {
			l := int(uv.lcp[i])
			tok := uv.sortedToken(i)
			d := min(l, valid)
			failAt := -1
			for ; d < len(tok); d++ {
				m.walk[d+1], _, _ = m.check.step(m.walk[d], int(tok[d]), m.walk[d+1][:0])
				if len(m.walk[d+1]) == 0 {
					failAt = d + 1
					break
				}
			}
			if failAt < 0 {
				valid = d
				id := uv.sorted[i]
				ids = append(ids, id)
				setBit(mask, id)
				i++
				continue
			}
			// Skip the tokens starting with tok[:failAt].
			valid = failAt - 1
			if failAt > l {
				i = min(uv.subtreeEnd(i, failAt), int(r[1]))
				continue
			}
			for i++; i < int(r[1]) && int(uv.lcp[i]) >= failAt; i++ {
			}
		}
	}
	if len(p.escape0) > 0 {
		ids = m.checkEscape0(st, p, mask, depth, ids)
	}
	if m.unc == nil || len(m.unc) >= maxUncertainAnswers {
		m.unc = map[uncKey][]int32{}
	}
	m.unc[key] = ids
}

// checkEscape0 decides p's tokens that only popping st's frame before
// their first byte can take (positionTokens.escape0): those the stack
// below takes, its mask computed as FillMask's (its positions' splits, so
// not byte by byte: after a value, most of the vocabulary starts with a
// blank, a comma or a bracket). It appends them to ids.
func (m *Matcher) checkEscape0(st stack, p *positionTokens, mask []uint64, depth int, ids []int32) []int32 {
	f := st.parent
	if f == nil {
		return ids // the end of the grammar: nothing follows
	}
	if _, ends, _ := m.check.step([]stack{{rule: st.rule, state: st.state, seen: st.seen}}, -1, nil); !ends {
		return ids // the frame cannot end here (its guards say so)
	}
	for len(m.below) <= depth {
		m.below = append(m.below, make([]uint64, len(mask)))
	}
	below := m.below[depth]
	clear(below)
	m.fill([]stack{{rule: f.rule, state: f.state, parent: f.parent, seen: f.seen}}, below, depth+1)
	p.escape0Once.Do(func() { p.escape0Bits = p.rangeBits(p.escape0, len(mask)) })
	for w, x := range p.escape0Bits {
		for x &= below[w]; x != 0; x &= x - 1 {
			id := int32(w*64 + bits.TrailingZeros64(x))
			setBit(mask, id)
			ids = append(ids, id)
		}
	}
	return ids
}

// maxUncertainAnswers bounds Matcher.unc.
const maxUncertainAnswers = 256

type uncKey struct {
	p  *positionTokens
	st stack
}
