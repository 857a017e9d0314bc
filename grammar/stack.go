package grammar

// A stack is a path of rule frames: the top (rule, state) is where the next
// byte is read, parent the frames waiting below it, each at the state it
// returns to. Parents are interned per stepper, so two stacks are the same
// exactly when their tops and parent pointers are equal: sets of stacks
// dedupe by comparing three words.
type stack struct {
	rule, state int32
	parent      *frame // nil: the bottom; popping it completes (or escapes)
}

type frame struct {
	rule, state int32
	parent      *frame
}

type frameKey struct {
	rule, state int32
	parent      *frame
}

// stepper advances sets of stacks over a grammar. It is single-threaded;
// each Matcher and each cache computation has its own.
type stepper struct {
	g      *Grammar
	frames map[frameKey]*frame
	// visited is the scratch of one expansion: stacks already expanded.
	visited []stack
}

func newStepper(g *Grammar) *stepper {
	return &stepper{g: g, frames: map[frameKey]*frame{}}
}

func (s *stepper) intern(rule, state int32, parent *frame) *frame {
	k := frameKey{rule, state, parent}
	if f, ok := s.frames[k]; ok {
		return f
	}
	f := &frame{rule: rule, state: state, parent: parent}
	s.frames[k] = f
	return f
}

// step moves every stack of in over byte b (b < 0: no byte, only the
// expansion), appending the results, deduplicated, to out. ended reports
// that some stack can pop its bottom frame before b: at the top level the
// grammar can end there; in a cache computation the token escapes the rule.
// live reports that some expanded stack has a byte edge at all.
func (s *stepper) step(in []stack, b int, out []stack) (res []stack, ended, live bool) {
	s.visited = s.visited[:0]
	res = out
	for _, st := range in {
		res, ended, live = s.expand(st, b, res, ended, live)
	}
	return res, ended, live
}

func (s *stepper) expand(st stack, b int, out []stack, ended, live bool) ([]stack, bool, bool) {
	for _, v := range s.visited {
		if v == st {
			return out, ended, live
		}
	}
	s.visited = append(s.visited, st)
	state := &s.g.rules[st.rule].states[st.state]
	if len(state.edges) > 0 {
		live = true
		if b >= 0 {
			if to := state.next(byte(b)); to >= 0 {
				out = addStack(out, stack{st.rule, to, st.parent})
			}
		}
	}
	for _, e := range state.refs {
		parent := s.intern(st.rule, e.to, st.parent)
		out, ended, live = s.expand(stack{e.rule, 0, parent}, b, out, ended, live)
	}
	if state.accept {
		if st.parent == nil {
			ended = true
		} else {
			p := st.parent
			out, ended, live = s.expand(stack{p.rule, p.state, p.parent}, b, out, ended, live)
		}
	}
	return out, ended, live
}

func addStack(set []stack, st stack) []stack {
	for _, x := range set {
		if x == st {
			return set
		}
	}
	return append(set, st)
}
