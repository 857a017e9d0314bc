package grammar

import (
	"fmt"
	"strings"
)

// edge moves a stack top on a byte in [lo, hi].
type edge struct {
	lo, hi byte
	to     int32
}

// refEdge pushes rule; when it completes, the caller continues at to.
//
// guard makes the push depend on the keys the pushing frame has written
// (stack.seen), which is how an object's members come in any order, each
// at most once, without a state per subset: guard k+1 > 0 pushes only
// when bit k is clear and sets it in the frame the rule returns to;
// guardRequired pushes only when every bit of the rule's required set
// (Grammar.required) is set.
type refEdge struct {
	rule  int32
	to    int32
	guard int32
}

const guardRequired = -1

// state is one DFA state of a rule. edges are sorted and disjoint.
type state struct {
	edges  []edge
	refs   []refEdge
	accept bool
}

// next returns the state reached on b, -1 if none.
func (s *state) next(b byte) int32 {
	for _, e := range s.edges {
		if b < e.lo {
			return -1
		}
		if b <= e.hi {
			return e.to
		}
	}
	return -1
}

type rule struct {
	name   string
	states []state // states[0] is the start
}

// Grammar is a compiled, tokenizer-independent pushdown automaton. It is
// immutable and safe for concurrent use.
type Grammar struct {
	rules []rule
	root  int32
	// follow[r] holds the bytes that may come right after rule r completes,
	// over all the places r is referenced: a token running past the end of
	// r can only continue with one of them.
	follow [][4]uint64
	// first[r] holds the bytes rule r can start with: a push of r
	// before a byte outside it leads nowhere unless r matches the empty
	// string (the stepper skips it).
	first [][4]uint64
	// null[r]: rule r matches the empty string.
	null []bool
	// required[r]: the key bits guardRequired asks of a frame of rule r.
	required []uint64
}

// builder collects rule bodies; rules may reference each other (and
// themselves) before they are defined.
type builder struct {
	names  []string
	bodies []*node
	byName map[string]int32
	// built[r]: rule r's DFA states, given ready (no body to compile).
	built map[int32][]state
	// required[r]: see Grammar.required.
	required map[int32]uint64
}

func newBuilder() *builder { return &builder{byName: map[string]int32{}} }

// declare returns a new rule id; define gives it a body later.
func (b *builder) declare(name string) int32 {
	id := int32(len(b.names))
	b.names = append(b.names, name)
	b.bodies = append(b.bodies, nil)
	return id
}

func (b *builder) define(id int32, body *node) { b.bodies[id] = body }

// defineStates gives rule id its DFA states directly.
func (b *builder) defineStates(id int32, states []state) {
	if b.built == nil {
		b.built = map[int32][]state{}
	}
	b.built[id] = states
	b.bodies[id] = empty()
}

// requireKeys sets the key bits guardRequired asks of rule id's frames.
func (b *builder) requireKeys(id int32, bits uint64) {
	if b.required == nil {
		b.required = map[int32]uint64{}
	}
	b.required[id] = bits
}

// rule declares and defines in one go.
func (b *builder) rule(name string, body *node) int32 {
	id := b.declare(name)
	b.define(id, body)
	return id
}

// build compiles every rule; root is the start rule.
func (b *builder) build(root int32) (*Grammar, error) {
	g := &Grammar{root: root, rules: make([]rule, len(b.names))}
	total := 0
	for i, body := range b.bodies {
		if body == nil {
			return nil, fmt.Errorf("rule %q is referenced but never defined", b.names[i])
		}
		states, ok := b.built[int32(i)]
		if !ok {
			var err error
			if states, err = compileRule(body); err != nil {
				return nil, fmt.Errorf("rule %q: %w", b.names[i], err)
			}
		}
		total += len(states)
		if total > 4*maxRuleStates {
			return nil, fmt.Errorf("the grammar needs more than %d automaton states", 4*maxRuleStates)
		}
		g.rules[i] = rule{name: b.names[i], states: states}
	}
	g.null = g.nullable()
	if err := g.checkLeftRecursion(); err != nil {
		return nil, err
	}
	g.required = make([]uint64, len(g.rules))
	for r, m := range b.required {
		g.required[r] = m
	}
	g.computeFollow()
	return g, nil
}

// nullable reports, for each rule, whether it matches the empty string.
func (g *Grammar) nullable() []bool {
	null := make([]bool, len(g.rules))
	var marks stateMarks
	for changed := true; changed; {
		changed = false
		for r := range g.rules {
			if !null[r] && g.reachesAccept(int32(r), 0, null, marks.start(len(g.rules[r].states))) {
				null[r] = true
				changed = true
			}
		}
	}
	return null
}

// stateMarks marks the states of one rule visited by a walk, reused
// across walks (a new generation each) rather than a map per walk.
type stateMarks struct {
	gen  uint32
	mark []uint32
}

// start begins a walk over a rule of n states.
func (m *stateMarks) start(n int) *stateMarks {
	if len(m.mark) < n || m.gen == ^uint32(0) {
		m.mark = make([]uint32, max(n, len(m.mark)))
		m.gen = 0
	}
	m.gen++
	return m
}

// visit reports whether s is new to this walk, marking it.
func (m *stateMarks) visit(s int32) bool {
	if m.mark[s] == m.gen {
		return false
	}
	m.mark[s] = m.gen
	return true
}

// reachesAccept: can state s of rule r reach an accepting state through
// references to nullable rules only?
func (g *Grammar) reachesAccept(r, s int32, null []bool, seen *stateMarks) bool {
	if !seen.visit(s) {
		return false
	}
	st := &g.rules[r].states[s]
	if st.accept {
		return true
	}
	for _, e := range st.refs {
		if null[e.rule] && g.reachesAccept(r, e.to, null, seen) {
			return true
		}
	}
	return false
}

// checkLeftRecursion refuses rules that can reference themselves without
// consuming a byte first: the matcher would push frames forever.
func (g *Grammar) checkLeftRecursion() error {
	null := g.null
	// starts[r]: rules that r can push before consuming anything.
	starts := make([][]int32, len(g.rules))
	for r := range g.rules {
		seen := map[int32]bool{}
		var walk func(s int32)
		walk = func(s int32) {
			if seen[s] {
				return
			}
			seen[s] = true
			for _, e := range g.rules[r].states[s].refs {
				starts[r] = append(starts[r], e.rule)
				if null[e.rule] {
					walk(e.to)
				}
			}
		}
		walk(0)
	}
	const (
		unvisited = iota
		active
		done
	)
	color := make([]uint8, len(g.rules))
	var visit func(r int32, path []string) error
	visit = func(r int32, path []string) error {
		color[r] = active
		for _, q := range starts[r] {
			switch color[q] {
			case active:
				return fmt.Errorf("rule %q is left-recursive (%s -> %s): rewrite it so each recursion consumes input first",
					g.rules[q].name, strings.Join(path, " -> "), g.rules[q].name)
			case unvisited:
				if err := visit(q, append(path, g.rules[q].name)); err != nil {
					return err
				}
			}
		}
		color[r] = done
		return nil
	}
	for r := range g.rules {
		if color[r] == unvisited {
			if err := visit(int32(r), []string{g.rules[r].name}); err != nil {
				return err
			}
		}
	}
	return nil
}

// computeFollow fills g.follow with a fixed point of
// FOLLOW(q) ⊇ FIRST(after a reference to q) and, when what follows the
// reference can be empty, FOLLOW(the referencing rule).
func (g *Grammar) computeFollow() {
	null := g.null
	n := len(g.rules)
	var marks stateMarks
	first := make([][4]uint64, n)
	// first[r]: bytes r can start with.
	for changed := true; changed; {
		changed = false
		for r := range g.rules {
			set := g.firstOfState(int32(r), 0, first, null, &marks)
			if set != first[r] {
				first[r] = set
				changed = true
			}
		}
	}
	g.first = first
	// Each reference gives the rule it pushes the bytes after it, once;
	// where what follows it can be empty (tail), the pushing rule's own
	// follow flows on, which is all the fixed point iterates.
	type link struct {
		from, to int32
		tail     bool
	}
	var links []link
	g.follow = make([][4]uint64, n)
	for r := range g.rules {
		for _, st := range g.rules[r].states {
			for _, e := range st.refs {
				g.follow[e.rule] = or4(g.follow[e.rule], g.firstOfState(int32(r), e.to, first, null, &marks))
				if g.reachesAccept(int32(r), e.to, null, marks.start(len(g.rules[r].states))) {
					links = append(links, link{int32(r), e.rule, true})
				}
			}
		}
	}
	for changed := true; changed; {
		changed = false
		for _, l := range links {
			if merged := or4(g.follow[l.to], g.follow[l.from]); merged != g.follow[l.to] {
				g.follow[l.to] = merged
				changed = true
			}
		}
	}
}

func or4(a, b [4]uint64) [4]uint64 {
	return [4]uint64{a[0] | b[0], a[1] | b[1], a[2] | b[2], a[3] | b[3]}
}

// firstOfState: bytes that can be consumed first from state s of rule r.
func (g *Grammar) firstOfState(r, s int32, first [][4]uint64, null []bool, marks *stateMarks) [4]uint64 {
	var set [4]uint64
	marks.start(len(g.rules[r].states))
	var walk func(s int32)
	walk = func(s int32) {
		if !marks.visit(s) {
			return
		}
		st := &g.rules[r].states[s]
		for _, e := range st.edges {
			for b := int(e.lo); b <= int(e.hi); b++ {
				set[b>>6] |= 1 << (b & 63)
			}
		}
		for _, e := range st.refs {
			set = or4(set, first[e.rule])
			if null[e.rule] {
				walk(e.to)
			}
		}
	}
	walk(s)
	return set
}

// NumStates is the total number of automaton states, for diagnostics.
func (g *Grammar) NumStates() int {
	n := 0
	for _, r := range g.rules {
		n += len(r.states)
	}
	return n
}
