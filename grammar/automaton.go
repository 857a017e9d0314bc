package grammar

import (
	"fmt"
	"slices"
)

// An automaton is a node without rule references compiled alone to a DFA
// over bytes (state 0 the start), for the set operations JSON Schema asks
// of strings and keys and a node cannot express: the intersection of
// patterns and lengths, a pattern's complement (not, patternProperties),
// the keys no property names. Every state can reach an accepting one, so a
// matcher inside an automaton never walks into a dead end.
type automaton struct {
	states []state
}

// maxAutomatonStates bounds a product: beyond it the schema is refused.
const maxAutomatonStates = 50_000

func newAutomaton(n *node) (*automaton, error) {
	states, err := compileRule(n)
	if err != nil {
		return nil, err
	}
	for _, st := range states {
		if len(st.refs) > 0 {
			return nil, fmt.Errorf("grammar: an automaton node references a rule")
		}
	}
	return trimAutomaton(states, false), nil
}

// empty reports that the automaton matches nothing.
func (a *automaton) empty() bool { return len(a.states) == 0 }

// trimAutomaton drops the states from which no accepting state is
// reachable, and the edges into them; min: and merges equivalent states.
func trimAutomaton(states []state, min bool) *automaton {
	live := make([]bool, len(states))
	for changed := true; changed; {
		changed = false
		for i, st := range states {
			if live[i] {
				continue
			}
			if st.accept {
				live[i], changed = true, true
				continue
			}
			for _, e := range st.edges {
				if live[e.to] {
					live[i], changed = true, true
					break
				}
			}
		}
	}
	if len(states) == 0 || !live[0] {
		return &automaton{}
	}
	// Renumber the live states reachable from the start, start first.
	id := make([]int32, len(states))
	for i := range id {
		id[i] = -1
	}
	order := []int32{0}
	id[0] = 0
	for i := 0; i < len(order); i++ {
		for _, e := range states[order[i]].edges {
			if live[e.to] && id[e.to] < 0 {
				id[e.to] = int32(len(order))
				order = append(order, e.to)
			}
		}
	}
	out := make([]state, len(order))
	for i, old := range order {
		st := state{accept: states[old].accept}
		for _, e := range states[old].edges {
			if live[e.to] {
				st.edges = append(st.edges, edge{lo: e.lo, hi: e.hi, to: id[e.to]})
			}
		}
		out[i] = st
	}
	if !min || len(out) > maxMinimizeStates {
		return &automaton{states: out}
	}
	return minimize(out)
}

// maxMinimizeStates: larger automata (counted chains, whose refinement
// takes a round per character) are kept as they are.
const maxMinimizeStates = 4096

// minimize merges equivalent states (Moore's refinement: states stay
// together while their acceptance and their edges' classes agree, until
// the number of classes stops growing). Set operations on unminimized
// automata multiply states that behave alike: a search pattern keeps
// tracking partial matches after it has matched.
func minimize(states []state) *automaton {
	n := len(states)
	class := make([]uint64, n)
	for i, st := range states {
		if st.accept {
			class[i] = 1
		}
	}
	classes := 0
	next := make([]uint64, n)
	var norm []edge
	// edgesOf lists s's edges by target class, adjacent ranges with one
	// class merged (e.to holds an index into class).
	edgesOf := func(st *state, class []uint64, out []edge) []edge {
		out = out[:0]
		for _, e := range st.edges {
			if k := len(out); k > 0 && class[out[k-1].to] == class[e.to] && int(out[k-1].hi)+1 == int(e.lo) {
				out[k-1].hi = e.hi
				continue
			}
			out = append(out, e)
		}
		return out
	}
	for {
		seen := map[uint64]struct{}{}
		for i := range states {
			norm = edgesOf(&states[i], class, norm)
			h := sigMix(0x51ed27, class[i])
			for _, e := range norm {
				h = sigMix(h, uint64(e.lo)<<8|uint64(e.hi))
				h = sigMix(h, class[e.to])
			}
			next[i] = h
			seen[h] = struct{}{}
		}
		class, next = next, class
		if len(seen) == classes {
			break
		}
		classes = len(seen)
	}
	if classes == n {
		return &automaton{states: states}
	}
	// The quotient, start first.
	id := map[uint64]int32{}
	var rep []int32
	order := []int32{0}
	id[class[0]] = 0
	rep = append(rep, 0)
	for i := 0; i < len(order); i++ {
		for _, e := range states[rep[i]].edges {
			if _, ok := id[class[e.to]]; !ok {
				id[class[e.to]] = int32(len(rep))
				rep = append(rep, e.to)
				order = append(order, e.to)
			}
		}
	}
	out := make([]state, len(rep))
	for i, r := range rep {
		out[i].accept = states[r].accept
		for _, e := range edgesOf(&states[r], class, nil) {
			out[i].edges = append(out[i].edges, edge{lo: e.lo, hi: e.hi, to: id[class[e.to]]})
		}
	}
	return &automaton{states: out}
}

// intersect is a ∩ b.
func intersect(a, b *automaton) (*automaton, error) {
	return product(a, b, func(x, y bool) bool { return x && y }, true, true)
}

// subtract is a ∖ b.
func subtract(a, b *automaton) (*automaton, error) {
	return product(a, b, func(x, y bool) bool { return x && !y }, false, true)
}

// product walks the pairs of states of a and b reachable together (b's
// state -1 once b has no move); accept decides a pair from its parts'
// acceptance. needB: a pair without b's move is dead (intersection).
// min: the result is minimized.
func product(a, b *automaton, accept func(x, y bool) bool, needB, min bool) (*automaton, error) {
	if a.empty() || needB && b.empty() {
		return &automaton{}, nil
	}
	type pair struct{ x, y int32 }
	ids := map[pair]int32{}
	var pairs []pair
	visit := func(p pair) int32 {
		if id, ok := ids[p]; ok {
			return id
		}
		id := int32(len(pairs))
		ids[p] = id
		pairs = append(pairs, p)
		return id
	}
	startB := int32(0)
	if b.empty() {
		startB = -1
	}
	visit(pair{0, startB})
	var out []state
	var bounds []int
	for i := 0; i < len(pairs); i++ {
		if len(pairs) > maxAutomatonStates {
			return nil, &UnsupportedError{Keyword: "pattern", Reason: fmt.Sprintf("combining these string constraints needs more than %d automaton states", maxAutomatonStates)}
		}
		p := pairs[i]
		sa := &a.states[p.x]
		var sb *state
		if p.y >= 0 {
			sb = &b.states[p.y]
		}
		st := state{accept: accept(sa.accept, sb != nil && sb.accept)}
		bounds = bounds[:0]
		for _, e := range sa.edges {
			bounds = append(bounds, int(e.lo), int(e.hi)+1)
		}
		if sb != nil {
			for _, e := range sb.edges {
				bounds = append(bounds, int(e.lo), int(e.hi)+1)
			}
		}
		slices.Sort(bounds)
		bounds = slices.Compact(bounds)
		for k := 0; k+1 < len(bounds); k++ {
			lo, hi := bounds[k], bounds[k+1]-1
			ta := sa.next(byte(lo))
			if ta < 0 {
				continue
			}
			tb := int32(-1)
			if sb != nil {
				tb = sb.next(byte(lo))
			}
			if tb < 0 && needB {
				continue
			}
			to := visit(pair{ta, tb})
			if n := len(st.edges); n > 0 && st.edges[n-1].to == to && int(st.edges[n-1].hi)+1 == lo {
				st.edges[n-1].hi = byte(hi)
				continue
			}
			st.edges = append(st.edges, edge{lo: byte(lo), hi: byte(hi), to: to})
		}
		out = append(out, st)
	}
	return trimAutomaton(out, min), nil
}

// node embeds the automaton in a rule body.
func (a *automaton) node() *node {
	if a.empty() {
		return none()
	}
	return &node{kind: nAutomaton, auto: a}
}

// buildAutomaton lays the automaton's states out in the NFA from start.
func (n *nfa) buildAutomaton(start int32, a *automaton) (int32, int32, error) {
	ids := make([]int32, len(a.states))
	ids[0] = start
	for i := 1; i < len(ids); i++ {
		ids[i] = n.add()
	}
	end := n.add()
	for i, st := range a.states {
		for _, e := range st.edges {
			n.states[ids[i]].edges = append(n.states[ids[i]].edges, edge{lo: e.lo, hi: e.hi, to: ids[e.to]})
		}
		if st.accept {
			n.link(ids[i], end)
		}
	}
	return start, end, nil
}

// repeatAutomaton is x{min,max} (max < 0: unbounded) laid out directly,
// one copy of x's states per count, for an x (one character) whose start
// does not accept and whose accepting states have no edges: each copy then
// matches exactly one x, and the chain is deterministic as it stands. It
// returns nil when x is not of that shape.
func repeatAutomaton(x *automaton, min, max int) *automaton {
	if x.empty() || x.states[0].accept || max >= 0 && max < min {
		return nil
	}
	// inner: x's states that do not accept, numbered from 0 (the start).
	inner := make([]int32, len(x.states))
	n := int32(0)
	for i, st := range x.states {
		if st.accept {
			if len(st.edges) > 0 {
				return nil
			}
			inner[i] = -1
			continue
		}
		inner[i] = n
		n++
	}
	copies := max
	if max < 0 {
		copies = min + 1 // the last copy loops back to itself
	}
	final := int32(copies) * n // after max characters
	out := make([]state, final+1)
	out[final].accept = max >= 0
	for c := range copies {
		next := int32(c+1) * n // where a finished character continues
		if max < 0 && c == copies-1 {
			next = int32(c) * n
		} else if c == copies-1 {
			next = final
		}
		for i, st := range x.states {
			if inner[i] < 0 {
				continue
			}
			id := int32(c)*n + inner[i]
			out[id].accept = inner[i] == 0 && c >= min
			for _, e := range st.edges {
				to := next
				if inner[e.to] >= 0 {
					to = int32(c)*n + inner[e.to]
				}
				out[id].edges = append(out[id].edges, edge{lo: e.lo, hi: e.hi, to: to})
			}
		}
	}
	if max == 0 {
		return &automaton{states: []state{{accept: true}}}
	}
	return &automaton{states: out}
}

// quotedStates are the DFA states of a string whose body is a: '"', the
// body, '"'. The body's characters never begin with an unescaped quote,
// so its accepting states take the closing quote without ambiguity.
func quotedStates(a *automaton) []state {
	n := int32(len(a.states))
	out := make([]state, n+2)
	out[0].edges = []edge{{lo: '"', hi: '"', to: 1}}
	final := n + 1
	out[final].accept = true
	for i, st := range a.states {
		var edges []edge
		for _, e := range st.edges {
			edges = append(edges, edge{lo: e.lo, hi: e.hi, to: e.to + 1})
		}
		if st.accept {
			k := 0
			for k < len(edges) && edges[k].hi < '"' {
				k++
			}
			edges = slices.Insert(edges, k, edge{lo: '"', hi: '"', to: final})
		}
		out[i+1].edges = edges
	}
	return out
}
