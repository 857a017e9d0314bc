package grammar

import (
	"encoding/binary"
	"fmt"
	"slices"
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
	eps   []int32
}

type nfa struct {
	states []nfaState
}

func (a *nfa) add() int32 {
	a.states = append(a.states, nfaState{})
	return int32(len(a.states) - 1)
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
		a.states[start].refs = append(a.states[start].refs, refEdge{rule: n.rule, to: end})
		return start, end, nil
	case nSeq:
		cur := start
		for _, k := range n.kids {
			s, e, err := a.build(k)
			if err != nil {
				return 0, 0, err
			}
			a.states[cur].eps = append(a.states[cur].eps, s)
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
			a.states[start].eps = append(a.states[start].eps, s)
			a.states[e].eps = append(a.states[e].eps, end)
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
			a.states[cur].eps = append(a.states[cur].eps, s)
			cur = e
		}
		if n.max < 0 {
			s, e, err := a.build(kid)
			if err != nil {
				return 0, 0, err
			}
			a.states[cur].eps = append(a.states[cur].eps, s)
			a.states[e].eps = append(a.states[e].eps, s)
			end := a.add()
			a.states[cur].eps = append(a.states[cur].eps, end)
			a.states[e].eps = append(a.states[e].eps, end)
			return start, end, nil
		}
		end := a.add()
		a.states[cur].eps = append(a.states[cur].eps, end)
		for range n.max - n.min {
			s, e, err := a.build(kid)
			if err != nil {
				return 0, 0, err
			}
			a.states[cur].eps = append(a.states[cur].eps, s)
			a.states[e].eps = append(a.states[e].eps, end)
			cur = e
		}
		return start, end, nil
	case nMembers:
		return a.buildMembers(start, n)
	}
	return 0, 0, fmt.Errorf("grammar: unknown node kind %d", n.kind)
}

// closure returns the sorted epsilon closure of set.
func (a *nfa) closure(set []int32, mark []uint32, epoch uint32) []int32 {
	out := slices.Clone(set)
	for _, s := range out {
		mark[s] = epoch
	}
	for i := 0; i < len(out); i++ {
		for _, t := range a.states[out[i]].eps {
			if mark[t] != epoch {
				mark[t] = epoch
				out = append(out, t)
			}
		}
	}
	slices.Sort(out)
	return out
}

// compileRule turns a rule body into the DFA states of rule r.
func compileRule(n *node) ([]state, error) {
	var a nfa
	start, end, err := a.build(n)
	if err != nil {
		return nil, err
	}
	mark := make([]uint32, len(a.states))
	epoch := uint32(0)
	ids := map[string]int32{}
	var sets [][]int32
	var out []state
	var keyBuf []byte
	intern := func(set []int32) int32 {
		keyBuf = keyBuf[:0]
		for _, s := range set {
			keyBuf = binary.LittleEndian.AppendUint32(keyBuf, uint32(s))
		}
		if id, ok := ids[string(keyBuf)]; ok {
			return id
		}
		id := int32(len(sets))
		ids[string(keyBuf)] = id
		sets = append(sets, set)
		out = append(out, state{})
		return id
	}
	// byTargets maps a target set before its closure to its DFA state:
	// many intervals of many states move to the same targets, and the
	// closure is the expensive part.
	byTargets := map[string]int32{}
	var targetKey []byte
	internTargets := func(targets []int32) int32 {
		targetKey = targetKey[:0]
		for _, s := range targets {
			targetKey = binary.LittleEndian.AppendUint32(targetKey, uint32(s))
		}
		if id, ok := byTargets[string(targetKey)]; ok {
			return id
		}
		k := string(targetKey)
		epoch++
		id := intern(a.closure(targets, mark, epoch))
		byTargets[k] = id
		return id
	}
	epoch++
	intern(a.closure([]int32{start}, mark, epoch))
	for i := 0; i < len(sets); i++ {
		if len(sets) > maxRuleStates {
			return nil, fmt.Errorf("a rule needs more than %d automaton states", maxRuleStates)
		}
		set := sets[i]
		var st state
		// Byte edges: split the union of ranges at every boundary, so each
		// elementary interval has one target set.
		var bounds []int
		var all []edge
		refTargets := map[int32][]int32{}
		var refOrder []int32
		for _, s := range set {
			if s == end {
				st.accept = true
			}
			for _, e := range a.states[s].edges {
				all = append(all, e)
				bounds = append(bounds, int(e.lo), int(e.hi)+1)
			}
			for _, r := range a.states[s].refs {
				if _, ok := refTargets[r.rule]; !ok {
					refOrder = append(refOrder, r.rule)
				}
				refTargets[r.rule] = append(refTargets[r.rule], r.to)
			}
		}
		slices.Sort(bounds)
		bounds = slices.Compact(bounds)
		slices.SortFunc(all, func(a, b edge) int { return int(a.lo) - int(b.lo) })
		var active []edge // edges covering the current interval
		next := 0
		for bi := 0; bi+1 < len(bounds); bi++ {
			lo, hi := bounds[bi], bounds[bi+1]-1
			active = slices.DeleteFunc(active, func(e edge) bool { return int(e.hi) < lo })
			for next < len(all) && int(all[next].lo) <= lo {
				active = append(active, all[next])
				next++
			}
			var targets []int32
			for _, e := range active {
				targets = append(targets, e.to)
			}
			if len(targets) == 0 {
				continue
			}
			to := internTargets(dedupe(targets))
			if n := len(st.edges); n > 0 && st.edges[n-1].to == to && int(st.edges[n-1].hi)+1 == lo {
				st.edges[n-1].hi = byte(hi)
				continue
			}
			st.edges = append(st.edges, edge{lo: byte(lo), hi: byte(hi), to: to})
		}
		for _, rule := range refOrder {
			to := internTargets(dedupe(refTargets[rule]))
			st.refs = append(st.refs, refEdge{rule: rule, to: to})
		}
		out[i] = st
	}
	return out, nil
}

func dedupe(s []int32) []int32 {
	slices.Sort(s)
	return slices.Compact(s)
}

// buildMembers lays out an nMembers node from start: state none[i] is "at
// member i, nothing written yet", some[i] "at member i after a written
// one"; each member is built twice (bare from none, behind sep from some).
func (a *nfa) buildMembers(start int32, n *node) (int32, int32, error) {
	count := len(n.kids)
	none, some := make([]int32, count+1), make([]int32, count+1)
	none[0] = start
	for i := range count + 1 {
		if i > 0 {
			none[i] = a.add()
		}
		some[i] = a.add()
	}
	link := func(from int32, parts ...*node) (int32, error) {
		cur := from
		for _, p := range parts {
			s, e, err := a.build(p)
			if err != nil {
				return 0, err
			}
			a.states[cur].eps = append(a.states[cur].eps, s)
			cur = e
		}
		return cur, nil
	}
	for i, m := range n.kids {
		e, err := link(none[i], m)
		if err != nil {
			return 0, 0, err
		}
		a.states[e].eps = append(a.states[e].eps, some[i+1])
		if e, err = link(some[i], n.sep, m); err != nil {
			return 0, 0, err
		}
		a.states[e].eps = append(a.states[e].eps, some[i+1])
		if !n.required[i] {
			a.states[none[i]].eps = append(a.states[none[i]].eps, none[i+1])
			a.states[some[i]].eps = append(a.states[some[i]].eps, some[i+1])
		}
	}
	end := a.add()
	a.states[none[count]].eps = append(a.states[none[count]].eps, end)
	a.states[some[count]].eps = append(a.states[some[count]].eps, end)
	if n.extra != nil {
		// Extra members: the first bare when nothing came before, then
		// each behind sep, looping back to some[count].
		e, err := link(none[count], n.extra)
		if err != nil {
			return 0, 0, err
		}
		a.states[e].eps = append(a.states[e].eps, some[count])
		if e, err = link(some[count], n.sep, n.extra); err != nil {
			return 0, 0, err
		}
		a.states[e].eps = append(a.states[e].eps, some[count])
	}
	return start, end, nil
}
