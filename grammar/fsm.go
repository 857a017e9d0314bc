package grammar

import (
	"fmt"
	"slices"
	"sync"
)

// A rule body compiles to a Thompson NFA, then by subset construction to a
// DFA whose edges are disjoint byte ranges plus rule references. The DFA is
// what the matcher walks: one byte moves one stack top to exactly one state,
// so ambiguity only comes from rule references and alternatives that span
// rules, which keeps the stack sets small.

// maxRuleStates bounds one rule's NFA (counted repetition multiplies it):
// beyond it the grammar is refused rather than built slowly.
const maxRuleStates = 200_000

type nfaState struct {
	edges []edge
	refs  []refEdge
	// eps: the first two epsilon moves inline (most Thompson states have
	// at most two), the rest in more.
	nEps uint8
	eps  [2]int32
	more []int32
}

type nfa struct {
	states []nfaState
}

func (a *nfa) add() int32 {
	a.states = append(a.states, nfaState{})
	return int32(len(a.states) - 1)
}

// link adds an epsilon move from -> to.
func (a *nfa) link(from, to int32) {
	st := &a.states[from]
	if st.nEps < 2 {
		st.eps[st.nEps] = to
		st.nEps++
		return
	}
	st.more = append(st.more, to)
}

// build adds n between fresh states and returns them (start, end).
func (a *nfa) build(n *node) (int32, int32, error) {
	if len(a.states) > maxRuleStates {
		return 0, 0, fmt.Errorf("a rule needs more than %d automaton states (a counted repetition too large)", maxRuleStates)
	}
	start := a.add()
	switch n.kind {
	case nEmpty:
		return start, start, nil
	case nNone:
		return start, a.add(), nil // no path from start to end
	case nClass:
		end := a.add()
		for _, r := range n.ranges {
			a.states[start].edges = append(a.states[start].edges, edge{lo: r.lo, hi: r.hi, to: end})
		}
		return start, end, nil
	case nRef:
		end := a.add()
		a.states[start].refs = append(a.states[start].refs, refEdge{rule: n.rule, to: end, guard: n.guard})
		return start, end, nil
	case nSeq:
		cur := start
		for _, k := range n.kids {
			s, e, err := a.build(k)
			if err != nil {
				return 0, 0, err
			}
			a.link(cur, s)
			cur = e
		}
		return start, cur, nil
	case nAlt:
		end := a.add()
		for _, k := range n.kids {
			s, e, err := a.build(k)
			if err != nil {
				return 0, 0, err
			}
			a.link(start, s)
			a.link(e, end)
		}
		return start, end, nil
	case nRepeat:
		cur := start
		kid := n.kids[0]
		for range n.min {
			s, e, err := a.build(kid)
			if err != nil {
				return 0, 0, err
			}
			a.link(cur, s)
			cur = e
		}
		if n.max < 0 {
			s, e, err := a.build(kid)
			if err != nil {
				return 0, 0, err
			}
			a.link(cur, s)
			a.link(e, s)
			end := a.add()
			a.link(cur, end)
			a.link(e, end)
			return start, end, nil
		}
		end := a.add()
		a.link(cur, end)
		for range n.max - n.min {
			s, e, err := a.build(kid)
			if err != nil {
				return 0, 0, err
			}
			a.link(cur, s)
			a.link(e, end)
			cur = e
		}
		return start, end, nil
	case nMembers:
		return a.buildMembers(start, n)
	case nAutomaton:
		return a.buildAutomaton(start, n.auto)
	}
	return 0, 0, fmt.Errorf("grammar: unknown node kind %d", n.kind)
}

// closure returns the sorted epsilon closure of set, keeping only the
// states that matter to a DFA state: those with edges or references, and
// end. Pure epsilon states (most of a Thompson NFA) would only make sets
// longer and tell apart sets that behave alike. The result is appended to
// out; stack is scratch.
func (a *nfa) closure(set []int32, end int32, mark []uint32, epoch uint32, stack, out []int32) ([]int32, []int32) {
	stack = append(stack[:0], set...)
	for _, s := range set {
		mark[s] = epoch
	}
	for len(stack) > 0 {
		s := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		st := &a.states[s]
		if len(st.edges) > 0 || len(st.refs) > 0 || s == end {
			out = append(out, s)
		}
		for _, t := range st.eps[:st.nEps] {
			if mark[t] != epoch {
				mark[t] = epoch
				stack = append(stack, t)
			}
		}
		for _, t := range st.more {
			if mark[t] != epoch {
				mark[t] = epoch
				stack = append(stack, t)
			}
		}
	}
	slices.Sort(out)
	return out, stack
}

// compileRule turns a rule body into the DFA states of rule r.
func compileRule(n *node) ([]state, error) {
	if n.kind == nRef {
		// A rule that is another (a conjunction of one schema): no NFA.
		return []state{{refs: []refEdge{{rule: n.rule, to: 1, guard: n.guard}}}, {accept: true}}, nil
	}
	sc := scratchPool.Get().(*ruleScratch)
	defer scratchPool.Put(sc)
	return sc.compile(n)
}

// ruleScratch is compileRule's working memory, reused across rules (a
// schema compiles hundreds of small ones): sets of NFA states are kept in
// one arena and found by hash, not as string keys of fresh maps.
type ruleScratch struct {
	mark  []uint32
	epoch uint32
	arena []int32
	// ids: DFA states by the hash of their NFA set; byTargets: DFA
	// states by the hash of the target set before its closure.
	ids, byTargets map[uint64][]span
	sets           []span // sets[i]: DFA state i's NFA states in arena
	stack, closed  []int32
	bounds         []int
	all, active    []edge
	targets        []int32
	refs           []refTarget
}

// maxClearedSets: past this many DFA states a rule's scratch maps are
// dropped rather than cleared.
const maxClearedSets = 256

// span is arena[off:off+n]; id is the DFA state it stands for.
type span struct{ off, n, id int32 }

type refTarget struct {
	rule, guard int32
	to          []int32
}

var scratchPool = sync.Pool{New: func() any {
	return &ruleScratch{ids: map[uint64][]span{}, byTargets: map[uint64][]span{}}
}}

func hashSet(set []int32) uint64 {
	h := uint64(0xcbf29ce484222325)
	for _, s := range set {
		h = (h ^ uint64(uint32(s))) * 0x100000001b3
	}
	return h
}

func (sc *ruleScratch) slice(sp span) []int32 { return sc.arena[sp.off : sp.off+sp.n] }

// find returns the id stored under set in m, or -1.
func (sc *ruleScratch) find(m map[uint64][]span, h uint64, set []int32) int32 {
	for _, sp := range m[h] {
		if slices.Equal(sc.slice(sp), set) {
			return sp.id
		}
	}
	return -1
}

func (sc *ruleScratch) store(m map[uint64][]span, h uint64, set []int32, id int32) span {
	sp := span{off: int32(len(sc.arena)), n: int32(len(set)), id: id}
	sc.arena = append(sc.arena, set...)
	m[h] = append(m[h], sp)
	return sp
}

func (sc *ruleScratch) compile(n *node) ([]state, error) {
	a := nfa{states: make([]nfaState, 0, min(2*n.size()+8, maxRuleStates))}
	start, end, err := a.build(n)
	if err != nil {
		return nil, err
	}
	if len(sc.mark) < len(a.states) || sc.epoch > 1<<31 {
		sc.mark = make([]uint32, max(len(a.states), len(sc.mark)))
		sc.epoch = 0
	}
	if len(sc.sets) > maxClearedSets {
		// Clearing a map costs its capacity, which a large rule grew:
		// the many small rules after it start from fresh maps.
		sc.ids, sc.byTargets = map[uint64][]span{}, map[uint64][]span{}
	} else {
		clear(sc.ids)
		clear(sc.byTargets)
	}
	sc.arena, sc.sets = sc.arena[:0], sc.sets[:0]
	var out []state
	internTargets := func(targets []int32) int32 {
		th := hashSet(targets)
		if id := sc.find(sc.byTargets, th, targets); id >= 0 {
			return id
		}
		sc.epoch++
		sc.closed, sc.stack = a.closure(targets, end, sc.mark, sc.epoch, sc.stack, sc.closed[:0])
		ch := hashSet(sc.closed)
		id := sc.find(sc.ids, ch, sc.closed)
		if id < 0 {
			id = int32(len(sc.sets))
			sc.sets = append(sc.sets, sc.store(sc.ids, ch, sc.closed, id))
			out = append(out, state{})
		}
		sc.store(sc.byTargets, th, targets, id)
		return id
	}
	internTargets([]int32{start})
	for i := 0; i < len(sc.sets); i++ {
		if len(sc.sets) > maxRuleStates {
			return nil, fmt.Errorf("a rule needs more than %d automaton states", maxRuleStates)
		}
		var st state
		// Byte edges: split the union of ranges at every boundary, so each
		// elementary interval has one target set.
		sc.bounds, sc.all, sc.refs = sc.bounds[:0], sc.all[:0], sc.refs[:0]
		sp := sc.sets[i]
		for k := sp.off; k < sp.off+sp.n; k++ {
			s := sc.arena[k]
			if s == end {
				st.accept = true
			}
			for _, e := range a.states[s].edges {
				sc.all = append(sc.all, e)
				sc.bounds = append(sc.bounds, int(e.lo), int(e.hi)+1)
			}
			for _, r := range a.states[s].refs {
				k := 0
				for k < len(sc.refs) && (sc.refs[k].rule != r.rule || sc.refs[k].guard != r.guard) {
					k++
				}
				if k == len(sc.refs) {
					if k < cap(sc.refs) {
						sc.refs = sc.refs[:k+1]
						sc.refs[k].rule, sc.refs[k].guard, sc.refs[k].to = r.rule, r.guard, sc.refs[k].to[:0]
					} else {
						sc.refs = append(sc.refs, refTarget{rule: r.rule, guard: r.guard})
					}
				}
				sc.refs[k].to = append(sc.refs[k].to, r.to)
			}
		}
		slices.Sort(sc.bounds)
		sc.bounds = slices.Compact(sc.bounds)
		slices.SortFunc(sc.all, func(a, b edge) int { return int(a.lo) - int(b.lo) })
		sc.active = sc.active[:0]
		next := 0
		for bi := 0; bi+1 < len(sc.bounds); bi++ {
			lo, hi := sc.bounds[bi], sc.bounds[bi+1]-1
			sc.active = slices.DeleteFunc(sc.active, func(e edge) bool { return int(e.hi) < lo })
			for next < len(sc.all) && int(sc.all[next].lo) <= lo {
				sc.active = append(sc.active, sc.all[next])
				next++
			}
			sc.targets = sc.targets[:0]
			for _, e := range sc.active {
				sc.targets = append(sc.targets, e.to)
			}
			if len(sc.targets) == 0 {
				continue
			}
			to := internTargets(dedupe(sc.targets))
			if n := len(st.edges); n > 0 && st.edges[n-1].to == to && int(st.edges[n-1].hi)+1 == lo {
				st.edges[n-1].hi = byte(hi)
				continue
			}
			st.edges = append(st.edges, edge{lo: byte(lo), hi: byte(hi), to: to})
		}
		for _, r := range sc.refs {
			to := internTargets(dedupe(r.to))
			st.refs = append(st.refs, refEdge{rule: r.rule, to: to, guard: r.guard})
		}
		out[i] = st
	}
	return out, nil
}

func dedupe(s []int32) []int32 {
	slices.Sort(s)
	return slices.Compact(s)
}

// buildMembers lays out an nMembers node from start: state at[c][i] is
// "at member i with c members written" (c capped at the highest count the
// bounds tell apart); a member is built bare from c = 0 and behind sep
// after. Without bounds c is 0 or 1, so each member is built twice.
func (a *nfa) buildMembers(start int32, n *node) (int32, int32, error) {
	count := len(n.kids)
	if count > 1 && count <= maxAnyOrderMembers && n.min == 0 && n.max < 0 {
		return a.buildMembersAnyOrder(start, n)
	}
	levels := max(n.min, 1) // counts at or above this one are alike
	if n.max >= 0 {
		levels = n.max
	}
	at := make([][]int32, levels+1)
	for c := range at {
		at[c] = make([]int32, count+1)
		for i := range at[c] {
			if c == 0 && i == 0 {
				at[c][i] = start
			} else {
				at[c][i] = a.add()
			}
		}
	}
	up := func(c int) int { return min(c+1, levels) } // n.max bounds c+1 below
	link := func(from int32, parts ...*node) (int32, error) {
		cur := from
		for _, p := range parts {
			s, e, err := a.build(p)
			if err != nil {
				return 0, err
			}
			a.link(cur, s)
			cur = e
		}
		return cur, nil
	}
	// write adds member m from at[c][i] to at[c+1][j].
	write := func(c, i, j int, m *node) error {
		if n.max >= 0 && c >= n.max {
			return nil
		}
		parts := []*node{m}
		if c > 0 {
			parts = []*node{n.sep, m}
		}
		e, err := link(at[c][i], parts...)
		if err != nil {
			return err
		}
		a.link(e, at[up(c)][j])
		return nil
	}
	for c := range levels + 1 {
		for i, m := range n.kids {
			if err := write(c, i, i+1, m); err != nil {
				return 0, 0, err
			}
			if !n.required[i] {
				a.link(at[c][i], at[c][i+1])
			}
		}
		if n.extra != nil {
			// Extra members loop at the end.
			if err := write(c, count, count, n.extra); err != nil {
				return 0, 0, err
			}
		}
	}
	end := a.add()
	for c := n.min; c <= levels; c++ {
		a.link(at[c][count], end)
	}
	return start, end, nil
}

// maxAnyOrderMembers: objects with at most this many named members take
// them in any order (a state per subset written, each member built once
// per subset without it); larger ones in the order of "properties".
const maxAnyOrderMembers = 4

// buildMembersAnyOrder lays out the named members in any order, each at
// most once, then the extra members once every required one is written.
func (a *nfa) buildMembersAnyOrder(start int32, n *node) (int32, int32, error) {
	count := len(n.kids)
	reqMask := 0
	for i, r := range n.required {
		if r {
			reqMask |= 1 << i
		}
	}
	at := make([]int32, 1<<count)
	at[0] = start
	for m := 1; m < len(at); m++ {
		at[m] = a.add()
	}
	afterExtra, end := a.add(), a.add()
	link := func(from, to int32, sep bool, m *node) error {
		cur := from
		parts := []*node{m}
		if sep {
			parts = []*node{n.sep, m}
		}
		for _, p := range parts {
			s, e, err := a.build(p)
			if err != nil {
				return err
			}
			a.link(cur, s)
			cur = e
		}
		a.link(cur, to)
		return nil
	}
	for m := range at {
		for i, kid := range n.kids {
			if m&(1<<i) == 0 {
				if err := link(at[m], at[m|1<<i], m != 0, kid); err != nil {
					return 0, 0, err
				}
			}
		}
		if m&reqMask != reqMask {
			continue
		}
		a.link(at[m], end)
		if n.extra != nil {
			if err := link(at[m], afterExtra, m != 0, n.extra); err != nil {
				return 0, 0, err
			}
		}
	}
	if n.extra != nil {
		if err := link(afterExtra, afterExtra, true, n.extra); err != nil {
			return 0, 0, err
		}
		a.link(afterExtra, end)
	}
	return start, end, nil
}
