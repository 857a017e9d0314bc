package grammar

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
	a, b  []stack
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
	type top struct{ rule, state int32 }
	var seen []top
	var tops []*positionTokens
	for _, st := range m.stacks {
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
		if p.acceptedBits != nil {
			for i, w := range p.acceptedBits {
				mask[i] |= w
			}
		}
		for _, id := range p.acceptedIDs {
			setBit(mask, id)
		}
	}
	if m.check == nil {
		m.check = newStepper(m.c.g)
	}
	req := m.c.g.required
	for i, st := range m.stacks {
		for _, ct := range tops[i].conditional {
			if mask[ct.id>>6]&(1<<(ct.id&63)) != 0 {
				continue
			}
			if ct.guard > 0 && st.seen&(1<<(ct.guard-1)) == 0 || ct.guard == guardRequired && req[st.rule]&^st.seen == 0 {
				setBit(mask, ct.id)
			}
		}
		for _, id := range tops[i].uncertain {
			if mask[id>>6]&(1<<(id&63)) != 0 {
				continue
			}
			if m.tokenFrom(st, m.c.v.tokens[id]) {
				setBit(mask, id)
			}
		}
	}
	if len(m.check.frames) > 4096 {
		m.check.frames = map[frameKey]*frame{}
	}
}

// tokenFrom reports whether the stack st can consume all of tok.
func (m *Matcher) tokenFrom(st stack, tok []byte) bool {
	m.a = append(m.a[:0], st)
	for _, b := range tok {
		m.b, _, _ = m.check.step(m.a, int(b), m.b[:0])
		if len(m.b) == 0 {
			return false
		}
		m.a, m.b = m.b, m.a
	}
	return true
}
