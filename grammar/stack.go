package grammar

// A stack is a path of rule frames: the top (rule, state) is where the next
// byte is read, parent the frames waiting below it, each at the state it
// returns to. Parents are interned per stepper, so two stacks are the same
// exactly when their fields are equal: sets of stacks dedupe by comparing
// a few words.
//
// seen is the key bits the top frame has written (refEdge.guard); a frame
// keeps its own in the parent chain. cond is used by the vocabulary split
// only (stepper.split): the guard the path took on the bottom frame, whose
// keys the split does not know (0 none, k+1 bit k clear, guardRequired, or
// condComplex: more than one, left to the check at each step).
type stack struct {
	rule, state int32
	cond        int32
	parent      *frame // nil: the bottom; popping it completes (or escapes)
	seen        uint64
}

// condComplex: a path through more than one guard of the bottom frame.
const condComplex = -2

type frame struct {
	rule, state int32
	parent      *frame
	seen        uint64
}

type frameKey struct {
	rule, state int32
	parent      *frame
	seen        uint64
}

// stepper advances sets of stacks over a grammar. It is single-threaded;
// each Matcher and each cache computation has its own.
type stepper struct {
	g      *Grammar
	frames map[frameKey]*frame
	// visited is the scratch of one expansion: stacks already expanded.
	visited []stack
	// split: guards of the bottom frame (parent nil) pass, recorded in
	// the stack's cond, instead of being checked against its keys.
	split bool
}

func newStepper(g *Grammar) *stepper {
	return &stepper{g: g, frames: map[frameKey]*frame{}}
}

func (s *stepper) intern(rule, state int32, parent *frame, seen uint64) *frame {
	k := frameKey{rule, state, parent, seen}
	if f, ok := s.frames[k]; ok {
		return f
	}
	f := &frame{rule: rule, state: state, parent: parent, seen: seen}
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
				out = addStack(out, stack{st.rule, to, st.cond, st.parent, st.seen})
			}
		}
	}
	for _, e := range state.refs {
		if b >= 0 && s.g.first[e.rule][b>>6]&(1<<(b&63)) == 0 && !s.g.null[e.rule] {
			// The pushed rule cannot take b and cannot end before it.
			continue
		}
		seen, cond := st.seen, st.cond
		if e.guard != 0 {
			var ok bool
			if seen, cond, ok = s.guard(st, e.guard); !ok {
				continue
			}
		}
		parent := s.intern(st.rule, e.to, st.parent, seen)
		out, ended, live = s.expand(stack{e.rule, 0, cond, parent, 0}, b, out, ended, live)
	}
	if state.accept {
		if st.parent == nil {
			ended = true
		} else {
			p := st.parent
			out, ended, live = s.expand(stack{p.rule, p.state, st.cond, p.parent, p.seen}, b, out, ended, live)
		}
	}
	return out, ended, live
}

// guard decides a guarded push from st: ok, and the keys of the frame
// it returns to and the path's cond.
func (s *stepper) guard(st stack, g int32) (seen uint64, cond int32, ok bool) {
	seen, cond = st.seen, st.cond
	if g > 0 {
		bit := uint64(1) << (g - 1)
		if seen&bit != 0 {
			return 0, 0, false
		}
		seen |= bit
	}
	if s.split && st.parent == nil {
		// The bottom frame's keys before the split are unknown.
		if cond == 0 && st.seen == 0 {
			cond = g
		} else {
			cond = condComplex
		}
		return seen, cond, true
	}
	if g == guardRequired && s.g.required[st.rule]&^seen != 0 {
		return 0, 0, false
	}
	return seen, cond, true
}

func addStack(set []stack, st stack) []stack {
	for _, x := range set {
		if x == st {
			return set
		}
	}
	return append(set, st)
}
