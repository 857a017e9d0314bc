package grammar

import (
	"sync"
)

// Compiled is a grammar bound to a vocabulary, with the per-position token
// split (see the package comment) computed on first use and shared by all
// its matchers. It is safe for concurrent use.
type Compiled struct {
	g *Grammar
	v *Vocab

	mu        sync.Mutex
	positions map[uint64]*positionTokens
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
	// continuing with a byte in the rule's follow set; they are checked
	// against the real stack at each step.
	uncertain []int32
}

// Compile binds g to v.
func Compile(g *Grammar, v *Vocab) *Compiled {
	return &Compiled{g: g, v: v, positions: map[uint64]*positionTokens{}}
}

// Grammar returns the grammar.
func (c *Compiled) Grammar() *Grammar { return c.g }

// Vocab returns the vocabulary.
func (c *Compiled) Vocab() *Vocab { return c.v }

func (c *Compiled) position(rule, st int32) *positionTokens {
	key := uint64(uint32(rule))<<32 | uint64(uint32(st))
	c.mu.Lock()
	p, ok := c.positions[key]
	if !ok {
		p = &positionTokens{}
		c.positions[key] = p
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
	// sets[d]: stacks after the first d bytes of the current token;
	// escapes[d]: the frame could pop after them and byte d is in the
	// rule's follow set.
	sets := make([][]stack, v.maxLen+1)
	escapes := make([]bool, v.maxLen+1)
	sets[0] = []stack{{rule: rule, state: st}}
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
		if b := v.tokens[v.sorted[i]][0]; firstOK[b>>6]&(1<<(b&63)) == 0 {
			i = int(v.byFirst[int(b)+1]) // skip every token starting with b
			valid = 0
			continue
		}
		tok := v.tokens[v.sorted[i]]
		d := min(int(v.lcp[i]), valid)
		rejectedAt := -1
		for ; d < len(tok); d++ {
			b := tok[d]
			var e bool
			sets[d+1], e, _ = s.step(sets[d], int(b), sets[d+1][:0])
			escapes[d] = e && follow[b>>6]&(1<<(b&63)) != 0
			if len(sets[d+1]) == 0 {
				rejectedAt = d + 1
				break
			}
		}
		if rejectedAt < 0 {
			accepted = append(accepted, v.sorted[i])
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
		// pop, a return position of the rule can take the rest of it.
		for _, id := range v.sorted[i:j] {
			t := v.tokens[id]
			for e := range rejectedAt {
				if escapes[e] && c.continues(s, rule, t[e:], 0) {
					p.uncertain = append(p.uncertain, id)
					break
				}
			}
		}
		valid = rejectedAt - 1
		i = j
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

// maxContinueDepth bounds how many completed rules continues looks
// through; beyond it a token stays uncertain (checked at run time).
const maxContinueDepth = 4

// continues reports whether rest can follow a completed rule: some
// position the rule returns to consumes it, possibly completing in turn.
// It may say true wrongly (the token is then checked at each step), never
// false wrongly.
func (c *Compiled) continues(s *stepper, rule int32, rest []byte, depth int) bool {
	if len(rest) == 0 {
		return true
	}
	if depth >= maxContinueDepth {
		return true
	}
	for _, rp := range c.g.returns[rule] {
		cur := []stack{{rule: rp.rule, state: rp.state}}
		var next []stack
		consumed := true
		for k, b := range rest {
			var ended bool
			next, ended, _ = s.step(cur, int(b), next[:0])
			if ended && c.continues(s, rp.rule, rest[k:], depth+1) {
				return true
			}
			if len(next) == 0 {
				consumed = false
				break
			}
			cur, next = next, cur
		}
		if consumed {
			return true
		}
	}
	return false
}
