package grammar

import (
	"encoding/json"
	"math/big"
	"strings"
	"unicode/utf8"
)

// Proving two schemas apart: no JSON value validates against both. A oneOf
// whose branches are pairwise apart is exactly their anyOf. The proof reads
// the normalised schemas (sch), which say no more than the schemas do, so
// a reading that leaves keywords out only weakens the proof: false is "not
// shown", never "they meet". Per type the values of both may have:
//
//   - listed values (enum, const) of one that the other rejects outright
//     (its types, values, string automaton, numeric bounds, multipleOf);
//   - strings: the automata of their patterns, formats and lengths do not
//     meet;
//   - numbers: their bounds leave no number between them;
//   - objects: one requires a property whose values under the two are
//     apart (a property the other forbids has no values under it);
//   - a schema with choices (anyOf, oneOf, dependencies) is apart from
//     another when each of its alternatives is.

// maxApartSteps bounds the schemas one oneOf's proofs compare, and
// maxApartTotal those of a whole schema: alternatives distributed over
// alternatives multiply.
const (
	maxApartSteps = 256
	maxApartTotal = 20_000
	maxApartDepth = 8
)

// apart reports that no value validates against both a and b.
func (c *schemaCompiler) apart(a, b *sch, steps *int, depth int) bool {
	if a.types == 0 || b.types == 0 {
		return true
	}
	if *steps <= 0 || c.apartTotal >= maxApartTotal || depth > maxApartDepth {
		return false
	}
	*steps--
	c.apartTotal++
	if c.apartFlat(a, b, steps, depth) {
		return true
	}
	for _, x := range []*sch{a, b} {
		if len(x.anyOfs) == 0 {
			continue
		}
		y := b
		if x == b {
			y = a
		}
		rest := x.clone()
		rest.anyOfs = rest.anyOfs[1:]
		all := true
		for _, m := range x.anyOfs[0] {
			xm := rest.clone()
			if c.mergeSchema(xm, m, x.path) != nil || !c.apart(xm, y, steps, depth+1) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

// apartFlat proves a and b apart from their keywords, their choices left
// unread.
func (c *schemaCompiler) apartFlat(a, b *sch, steps *int, depth int) bool {
	shared := a.acceptedTypes() & b.acceptedTypes()
	for _, t := range []typeSet{tNull, tBool, tObject, tArray, tString, tNumber | tInteger} {
		if shared&t == 0 {
			continue
		}
		switch {
		case a.hasEnum:
			if !c.listedRejected(a, b, t) {
				return false
			}
		case b.hasEnum:
			if !c.listedRejected(b, a, t) {
				return false
			}
		case t == tString:
			if !c.stringsApart(a, b) {
				return false
			}
		case t == tNumber|tInteger:
			if !numbersApart(a, b) {
				return false
			}
		case t == tObject:
			if !c.objectsApartDeep(a, b, steps, depth) {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// listedRejected: every value of type t that a lists, b rejects.
func (c *schemaCompiler) listedRejected(a, b *sch, t typeSet) bool {
	for _, v := range a.enum {
		if valueTypes(v)&t != 0 && !c.rejects(b, v) {
			return false
		}
	}
	return true
}

// valueTypes is the type set a value belongs to (numbers to both number
// types, as widen counts them).
func valueTypes(v any) typeSet {
	switch v.(type) {
	case nil:
		return tNull
	case bool:
		return tBool
	case string:
		return tString
	case []any:
		return tArray
	case *object:
		return tObject
	}
	return tNumber | tInteger
}

// rejects reports that v certainly fails s.
func (c *schemaCompiler) rejects(s *sch, v any) bool {
	if s.types == 0 {
		return true
	}
	if s.hasEnum {
		found := false
		for _, x := range s.enum {
			found = found || jsonEqual(x, v)
		}
		if !found {
			return true
		}
	}
	for _, x := range s.notValues {
		if jsonEqual(x, v) {
			return true
		}
	}
	switch x := v.(type) {
	case nil:
		return s.types&tNull == 0
	case bool:
		return s.types&tBool == 0
	case []any:
		return s.types&tArray == 0
	case *object:
		return s.types&tObject == 0
	case string:
		if s.types&tString == 0 {
			return true
		}
		n := utf8.RuneCountInString(x)
		if n < s.minLen || s.maxLen >= 0 && n > s.maxLen {
			return true
		}
		a := c.stringConstraint(s)
		if a == nil {
			return false
		}
		lit, err := newAutomaton(literalBody(x))
		return err == nil && !meets(a, lit)
	case json.Number:
		r, ok := new(big.Rat).SetString(x.String())
		if !ok {
			return false
		}
		if s.types&tNumber == 0 && (s.types&tInteger == 0 || !r.IsInt()) {
			return true
		}
		return !s.numberAllowed(r)
	}
	return false
}

// stringConstraint is an automaton of bodies holding every string s
// admits by its patterns and formats (lengths are compared as numbers),
// nil where s has none.
func (c *schemaCompiler) stringConstraint(s *sch) *automaton {
	pats := append([]string(nil), s.patterns...)
	for _, f := range s.formats {
		pats = append(pats, formatPatterns[f])
	}
	if len(pats) == 0 {
		return nil
	}
	key := strings.Join(pats, "\x00")
	if a, ok := c.constraints[key]; ok {
		return a
	}
	a, err := c.stringBody(pats, 0, -1, s.path)
	if err != nil {
		a = nil
	}
	if c.constraints == nil {
		c.constraints = map[string]*automaton{}
	}
	c.constraints[key] = a
	return a
}

// stringsApart: the strings of a and b do not meet.
func (c *schemaCompiler) stringsApart(a, b *sch) bool {
	if a.minLen > 0 && b.maxLen >= 0 && b.maxLen < a.minLen || b.minLen > 0 && a.maxLen >= 0 && a.maxLen < b.minLen {
		return true
	}
	x, y := c.stringConstraint(a), c.stringConstraint(b)
	return x != nil && y != nil && !meets(x, y)
}

// meets reports that a and b accept a common text: a search of the pairs
// of their states reachable together, which stops at the first pair that
// accepts (intersect would build and minimize the whole product).
func meets(a, b *automaton) bool {
	if a.empty() || b.empty() {
		return false
	}
	type pair struct{ x, y int32 }
	seen := map[pair]bool{{0, 0}: true}
	queue := []pair{{0, 0}}
	for len(queue) > 0 {
		p := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		sa, sb := &a.states[p.x], &b.states[p.y]
		if sa.accept && sb.accept {
			return true
		}
		i, j := 0, 0
		for i < len(sa.edges) && j < len(sb.edges) {
			ea, eb := sa.edges[i], sb.edges[j]
			switch {
			case ea.hi < eb.lo:
				i++
			case eb.hi < ea.lo:
				j++
			default:
				if q := (pair{ea.to, eb.to}); !seen[q] {
					seen[q] = true
					queue = append(queue, q)
				}
				if ea.hi < eb.hi {
					i++
				} else {
					j++
				}
			}
		}
	}
	return false
}

// numbersApart: one's upper bound lies below the other's lower bound.
func numbersApart(a, b *sch) bool {
	below := func(u, l *bound) bool {
		if u == nil || l == nil {
			return false
		}
		cmp := u.v.Cmp(l.v)
		return cmp < 0 || cmp == 0 && (u.exclusive || l.exclusive)
	}
	return below(a.upper, b.lower) || below(b.upper, a.lower)
}

// objectsApartDeep: one requires a property whose values under the two
// are apart.
func (c *schemaCompiler) objectsApartDeep(a, b *sch, steps *int, depth int) bool {
	for _, x := range []*sch{a, b} {
		y := b
		if x == b {
			y = a
		}
		for _, p := range x.required {
			px, py := c.propertySch(x, p), c.propertySch(y, p)
			if px != nil && py != nil && c.apart(px, py, steps, depth+1) {
				return true
			}
		}
	}
	return false
}

// analysisMerge is base (its choices dropped, which only widens it) with
// v merged in, or nil where v does not merge. The compiler's counters
// that merging advances are restored: a proof compiles nothing.
func (c *schemaCompiler) analysisMerge(base *sch, v any, path string) *sch {
	notRefs := c.notRefs
	defer func() { c.notRefs = notRefs }()
	s := base.clone()
	s.anyOfs = nil
	if c.mergeSchema(s, v, path) != nil {
		return nil
	}
	return s
}
