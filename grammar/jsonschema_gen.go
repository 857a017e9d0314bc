package grammar

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// maxCountedChars caps maxLength: a longer bound compiles as this one
// (every string it allows is valid; longer valid strings are refused).
// Counted characters are a chain of automaton states, one per character.
const maxCountedChars = 1024

// maxDistributed bounds the branches one schema's anyOf distributions
// make in all.
const maxDistributed = 2048

func truncatePath(p string) string {
	if len(p) > 120 {
		return p[:120] + "…"
	}
	return p
}

// maxAnyOfBranches bounds the distribution of anyOf over sibling keywords
// (a product when several combine).
const maxAnyOfBranches = 256

// generate turns a normalised schema into a node.
func (c *schemaCompiler) generate(s *sch, path string) (*node, error) {
	if len(s.anyOfs) > 0 {
		list := s.anyOfs[0]
		rest := s.clone()
		rest.anyOfs = rest.anyOfs[1:]
		if len(list) > maxAnyOfBranches {
			return nil, &UnsupportedError{Keyword: "anyOf", Reason: fmt.Sprintf("more than %d branches at %s", maxAnyOfBranches, path)}
		}
		// Choices combined multiply (anyOf, oneOf, dependencies, if):
		// one schema may distribute at most maxDistributed branches.
		if c.distributed += len(list); c.distributed > maxDistributed {
			return nil, &UnsupportedError{Keyword: "anyOf", Reason: fmt.Sprintf("combining the choices at %s needs more than %d alternatives", truncatePath(path), maxDistributed)}
		}
		var branches []*node
		for i, b := range list {
			bpath := fmt.Sprintf("%s/anyOf/%d", path, i)
			n, err := c.branch(rest, b, bpath)
			if err != nil {
				var ue *UnsupportedError
				if c.oneOfLists[&list[0]] && errors.As(err, &ue) && ue.Keyword == "not" {
					err = &UnsupportedError{Keyword: "oneOf", Reason: fmt.Sprintf("branch %d at %s cannot be kept apart from the others (%v)", i, path, err)}
				}
				return nil, err
			}
			branches = append(branches, n)
		}
		return alt(branches...), nil
	}
	return c.generateTyped(s, path)
}

// branch is one alternative of an anyOf distributed over rest.
func (c *schemaCompiler) branch(rest *sch, b any, bpath string) (*node, error) {
	if rest.trivial() && len(rest.anyOfs) == 0 {
		// Nothing to combine with: the branch compiles on its own, and a
		// $ref stays a rule reference (recursion).
		return c.schema(b, bpath)
	}
	merged := rest.clone()
	if err := c.mergeSchema(merged, b, bpath); err != nil {
		return nil, err
	}
	return c.generate(merged, bpath)
}

// generateTyped is a schema without choices left: a branch per type.
func (c *schemaCompiler) generateTyped(s *sch, path string) (*node, error) {
	types := s.types
	if s.hasEnum {
		var branches []*node
		for _, v := range s.enum {
			excluded, err := c.excluded(s, v)
			if err != nil {
				return nil, err
			}
			if !excluded && s.satisfiesScalar(v) {
				branches = append(branches, c.valueNode(v))
			}
		}
		return alt(branches...), nil
	}
	noBool := map[bool]bool{}
	for _, v := range s.notValues {
		switch x := v.(type) {
		case nil:
			types &^= tNull
		case bool:
			noBool[x] = true
		case json.Number:
			// Taken out of the numbers (number).
		default:
			return nil, &UnsupportedError{Keyword: "not", Reason: fmt.Sprintf("excluding the value %s at %s", marshalCompact(v), path)}
		}
	}
	var branches []*node
	if types&tNull != 0 {
		branches = append(branches, lit("null"))
	}
	if types&tBool != 0 {
		for _, b := range []bool{true, false} {
			if !noBool[b] {
				branches = append(branches, lit(strconv.FormatBool(b)))
			}
		}
	}
	if types&(tNumber|tInteger) != 0 {
		n, err := c.number(s, types&tNumber == 0, path)
		if err != nil {
			return nil, err
		}
		branches = append(branches, n)
	}
	if types&tString != 0 {
		n, err := c.str(s, path)
		if err != nil {
			return nil, err
		}
		branches = append(branches, n)
	}
	if types&tArray != 0 {
		n, err := c.array(s, path)
		if err != nil {
			return nil, err
		}
		branches = append(branches, n)
	}
	if types&tObject != 0 {
		n, err := c.objectNode(s, path)
		if err != nil {
			return nil, err
		}
		branches = append(branches, n)
	}
	return alt(branches...), nil
}

// excluded reports that a "not" beside the enum rules v out.
func (c *schemaCompiler) excluded(s *sch, v any) (bool, error) {
	for _, x := range s.notValues {
		if jsonEqual(v, x) {
			return true, nil
		}
	}
	if _, isStr := v.(string); !isStr {
		return false, nil
	}
	for _, ns := range s.notStrings {
		ok, err := c.validates(v, ns, 0)
		if err != nil || ok {
			return ok, err
		}
	}
	return false, nil
}

// conjunction compiles the allOf of schemas (true when empty).
func (c *schemaCompiler) conjunction(list []any, path string) (*node, error) {
	var real []any
	for _, x := range list {
		if b, ok := x.(bool); ok {
			if !b {
				return none(), nil
			}
			continue
		}
		real = append(real, x)
	}
	switch len(real) {
	case 0:
		return c.anyValue(), nil
	case 1:
		if o, ok := real[0].(*object); !ok || c.onlyRef(o) {
			return c.schema(real[0], path)
		}
	}
	// One rule per conjunction of the same schemas: a recursive schema
	// combined with others comes back to the conjunction it is in, which
	// then is a reference, not an endless expansion.
	var key strings.Builder
	for _, x := range real {
		fmt.Fprintf(&key, "%p,", x)
	}
	if id, ok := c.conjRules[key.String()]; ok {
		return ref(id), nil
	}
	if c.conjRules == nil {
		c.conjRules = map[string]int32{}
	}
	id := c.b.declare("allOf " + path)
	c.conjRules[key.String()] = id
	s := newSch(path)
	for _, x := range real {
		if err := c.mergeSchema(s, x, path); err != nil {
			return nil, err
		}
	}
	n, err := c.generate(s, path)
	if err != nil {
		return nil, err
	}
	c.b.define(id, n)
	if n.kind == nNone {
		return n, nil // callers drop what cannot match
	}
	return ref(id), nil
}

// asRule wraps a large node in a rule so that copies of it (repetition,
// object member orders) are references, not copies.
func (c *schemaCompiler) asRule(n *node, name string) *node {
	if n.kind == nRef || n.size() < 24 {
		return n
	}
	return ref(c.b.rule(name, n))
}

func (c *schemaCompiler) str(s *sch, path string) (*node, error) {
	pats := append([]string(nil), s.patterns...)
	for _, f := range s.formats {
		pats = append(pats, formatPatterns[f])
	}
	if len(pats) > 0 || len(s.notStrings) > 0 {
		// Constraints on the characters: their intersection, less what
		// "not" excludes, one rule per distinct set of them.
		var key strings.Builder
		fmt.Fprintf(&key, "string %d %d", s.minLen, s.maxLen)
		for _, p := range pats {
			fmt.Fprintf(&key, "\x00%s", p)
		}
		for _, ns := range s.notStrings {
			fmt.Fprintf(&key, "\x00not %p", ns)
		}
		if id, ok := c.shared[key.String()]; ok {
			return ref(id), nil
		}
		if len(s.notStrings) == 0 {
			if states, ok := cachedStringStates(key.String()); ok {
				id := c.b.declare("string " + path)
				c.shared[key.String()] = id
				c.b.defineStates(id, states)
				return ref(id), nil
			}
		}
		a, err := c.stringBody(pats, s.minLen, s.maxLen, path)
		if err != nil {
			return nil, err
		}
		for _, ns := range s.notStrings {
			na, err := c.stringSchema(ns, path+"/not", 0)
			if err != nil {
				return nil, err
			}
			if a, err = subtract(a, na); err != nil {
				return nil, err
			}
		}
		if a.empty() {
			return none(), nil
		}
		// The DFA is the rule as it stands: no subset construction.
		id := c.b.declare("string " + path)
		c.shared[key.String()] = id
		states := quotedStates(a)
		if len(s.notStrings) == 0 {
			cacheStringStates(key.String(), states)
		}
		c.b.defineStates(id, states)
		return ref(id), nil
	}
	if s.minLen == 0 && s.maxLen < 0 {
		return c.plainString(), nil
	}
	if s.minLen > maxCountedChars {
		return nil, &UnsupportedError{Keyword: "minLength", Reason: fmt.Sprintf("lengths above %d at %s", maxCountedChars, path)}
	}
	maxLen := s.maxLen
	if maxLen > maxCountedChars {
		maxLen = maxCountedChars // stricter, so still sound: see maxCountedChars
	}
	// The characters are inline, not a shared rule: a rule's end would be
	// a return to every one of the chain's states, and tokens spanning
	// characters would all be checked against each. Inline, the chain's
	// states share their vocabulary splits through their signatures. The
	// whole string is one rule per length range, laid out as a chain of
	// one character's automaton (no subset construction over the copies).
	name := fmt.Sprintf("string{%d,%d}", s.minLen, maxLen)
	if id, ok := c.shared[name]; ok {
		return ref(id), nil
	}
	id := c.b.declare(name)
	c.shared[name] = id
	states, ok := cachedStringStates(name)
	if !ok {
		sharedAutomata()
		a := repeatAutomaton(jsonCharAuto, s.minLen, maxLen)
		if a == nil {
			return nil, fmt.Errorf("grammar: a JSON character's automaton is not one character")
		}
		states = quotedStates(a)
		cacheStringStates(name, states)
	}
	c.b.defineStates(id, states)
	return ref(id), nil
}

// stringStates keeps the DFA states of the string rules schemas used
// lately (a length range, patterns and formats with lengths), up to
// maxCachedStrings of them: they recur across requests, and building them
// (a chain of character automata, products with patterns) was a large
// part of a schema's compile time. Grammars share the states read-only.
var stringStates struct {
	sync.Mutex
	m map[string][]state
}

const maxCachedStrings = 512

func cachedStringStates(key string) ([]state, bool) {
	stringStates.Lock()
	defer stringStates.Unlock()
	st, ok := stringStates.m[key]
	return st, ok
}

func cacheStringStates(key string, states []state) {
	stringStates.Lock()
	defer stringStates.Unlock()
	if stringStates.m == nil || len(stringStates.m) >= maxCachedStrings {
		stringStates.m = map[string][]state{}
	}
	stringStates.m[key] = states
}

func (c *schemaCompiler) array(s *sch, path string) (*node, error) {
	if len(s.contains) > 0 {
		return c.containsArray(s, path)
	}
	if s.unique && (s.maxItems < 0 || s.maxItems > 1) {
		return c.uniqueArray(s, path)
	}
	if s.maxItems == 0 {
		if s.minItems > 0 {
			return none(), nil
		}
		return seq(lit("["), c.ws(), lit("]")), nil
	}
	var elems []*node
	for i, p := range s.prefix {
		n, err := c.schema(p, fmt.Sprintf("%s/prefixItems/%d", path, i))
		if err != nil {
			return nil, err
		}
		elems = append(elems, c.asRule(n, fmt.Sprintf("%s/prefixItems/%d", path, i)))
	}
	rest, err := c.conjunction(s.items, path+"/items")
	if err != nil {
		return nil, err
	}
	rest = c.asRule(rest, path+"/items")
	sep := seq(c.ws(), lit(","), c.ws())
	if s.maxItems > 1000 || s.minItems > 1000 {
		return nil, &UnsupportedError{Keyword: "maxItems", Reason: fmt.Sprintf("counts above 1000 at %s", path)}
	}
	// tail(i): the elements after the first i, i >= 1.
	var tail func(i int) *node
	tail = func(i int) *node {
		if i < len(elems) {
			if s.maxItems >= 0 && i >= s.maxItems {
				return empty()
			}
			n := seq(sep, elems[i], tail(i+1))
			if i < s.minItems {
				return n
			}
			return opt(n)
		}
		maxRest := -1
		if s.maxItems >= 0 {
			maxRest = s.maxItems - i
		}
		return repeat(seq(sep, rest), max(s.minItems-i, 0), maxRest)
	}
	first := rest
	if len(elems) > 0 {
		first = elems[0]
	}
	body := seq(first, tail(1))
	if s.minItems == 0 {
		body = opt(body)
	}
	return seq(lit("["), c.ws(), body, c.ws(), lit("]")), nil
}

// containsArray is an array one of whose elements, the marked one, also
// matches the contains schema: [ (R ,)* R∧C (, R)* ] with R the items
// schema. Every array with such an element has a parse with it marked, so
// the language is exact. Counts other than minItems <= 1 (which contains
// implies), a prefix, uniqueItems or two contains are refused.
func (c *schemaCompiler) containsArray(s *sch, path string) (*node, error) {
	refuse := func(why string) error {
		return &UnsupportedError{Keyword: "contains", Reason: fmt.Sprintf("%s at %s", why, path)}
	}
	switch {
	case len(s.contains) > 1:
		return nil, refuse("two contains schemas")
	case len(s.prefix) > 0:
		return nil, refuse("beside prefixItems")
	case s.unique:
		return nil, refuse("beside uniqueItems")
	case s.minItems > 1 || s.maxItems >= 0:
		return nil, refuse("beside minItems or maxItems")
	}
	rest, err := c.conjunction(s.items, path+"/items")
	if err != nil {
		return nil, err
	}
	rest = c.asRule(rest, path+"/items")
	marked, err := c.conjunction(append(slices.Clone(s.items), s.contains[0]), path+"/contains")
	if err != nil {
		return nil, err
	}
	marked = c.asRule(marked, path+"/contains")
	sep := seq(c.ws(), lit(","), c.ws())
	body := seq(repeat(seq(rest, sep), 0, -1), marked, repeat(seq(sep, rest), 0, -1))
	return seq(lit("["), c.ws(), body, c.ws(), lit("]")), nil
}

// objectNode is an object's members: in any order (anyOrderObject), or,
// with more than maxGuardedMembers or with member counts, the named ones
// in order, optional ones skippable, then the additional ones.
func (c *schemaCompiler) objectNode(s *sch, path string) (*node, error) {
	if len(s.members) > 0 {
		return c.memberObject(s, nil, path)
	}
	return c.objectMembers(s, nil, path)
}

// objectNames is the union of the parts' properties and the required
// ones, in order.
func objectNames(s *sch) []string {
	var names []string
	seen := map[string]bool{}
	for _, p := range s.objParts {
		for _, k := range p.props {
			if !seen[k] {
				seen[k] = true
				names = append(names, k)
			}
		}
	}
	for _, k := range s.required {
		if !seen[k] {
			seen[k] = true
			names = append(names, k)
		}
	}
	return names
}

// objectMembers is objectNode of s; each of marks is one more of the
// members other than the named ones, the member it asks for.
func (c *schemaCompiler) objectMembers(s *sch, marks []memberReq, path string) (*node, error) {
	// The union of the parts' properties, each with the conjunction of what
	// every part says of it.
	names := objectNames(s)
	required := map[string]bool{}
	for _, k := range s.required {
		required[k] = true
	}
	type member struct {
		node     *node
		key      string
		val      *node
		required bool
	}
	var present []member
	for _, k := range names {
		var conj []any
		for _, p := range s.objParts {
			if p.propertyNames != nil {
				ok, err := c.validates(k, p.propertyNames, 0)
				if err != nil {
					return nil, err
				}
				if !ok {
					conj = append(conj, false) // a name propertyNames refuses
				}
			}
			if v, ok := p.schemas[k]; ok && containsString(p.props, k) {
				conj = append(conj, v)
			}
			byPattern, matched, err := namedByPatterns(p, k)
			if err != nil {
				return nil, err
			}
			conj = append(conj, byPattern...)
			if _, named := p.schemas[k]; !named && !matched && p.addl != nil {
				conj = append(conj, p.addl)
			}
		}
		val, err := c.conjunction(conj, path+"/properties/"+k)
		if err != nil {
			return nil, err
		}
		if val.kind == nNone {
			if required[k] {
				return none(), nil
			}
			continue
		}
		val = c.asRule(val, path+"/properties/"+k)
		present = append(present, member{node: seq(lit(quoteJSON(k)), c.ws(), lit(":"), c.ws(), val), key: quoteJSON(k), val: val, required: required[k]})
	}
	// Additional properties: keys other than the names (as an automaton,
	// so any spelling JSON allows), split by patternProperties if any.
	extra, err := c.patternExtra(s, names, nil, path)
	if err != nil {
		return nil, err
	}
	var kids, vals []*node
	var keyTexts []string
	var isRequired []bool
	for _, m := range present {
		kids = append(kids, m.node)
		keyTexts = append(keyTexts, m.key)
		vals = append(vals, m.val)
		isRequired = append(isRequired, m.required)
	}
	for i := range marks {
		// A marked member: one more guarded member, required, whose node
		// is the whole member (no key text, no value rule).
		marked, err := c.patternExtra(s, names, &marks[i], path)
		if err != nil {
			return nil, err
		}
		if marked == nil {
			return none(), nil
		}
		kids = append(kids, marked)
		keyTexts = append(keyTexts, "")
		vals = append(vals, nil)
		isRequired = append(isRequired, true)
	}

	// Counts the members cannot miss: as many required members as
	// minProperties asks, no more members possible than maxProperties.
	minProps, maxProps := s.minProps, s.maxProps
	if nReq := countTrue(isRequired); minProps <= nReq {
		minProps = 0
	}
	if extra == nil && maxProps >= len(kids) {
		maxProps = -1
	}
	if len(present) > 200 {
		return nil, &UnsupportedError{Keyword: "properties", Reason: fmt.Sprintf("more than 200 properties at %s", path)}
	}
	if minProps > 8 || maxProps > 8 {
		kw := "maxProperties"
		if minProps > 8 {
			kw = "minProperties"
		}
		return nil, &UnsupportedError{Keyword: kw, Reason: fmt.Sprintf("counts above 8 at %s", path)}
	}
	sep := seq(c.ws(), lit(","), c.ws())
	if len(marks) > 0 && (minProps != 0 || maxProps >= 0 || len(kids) > maxGuardedMembers) {
		return nil, &UnsupportedError{Keyword: marks[0].keyword, Reason: fmt.Sprintf("a member it requires beside minProperties, maxProperties or more than %d properties at %s", maxGuardedMembers-len(marks), path)}
	}
	if len(marks) > 0 || minProps == 0 && maxProps < 0 && len(kids) <= maxGuardedMembers && (len(kids) > 1 || len(kids) == 1 && extra != nil) {
		return c.anyOrderObject(kids, keyTexts, vals, isRequired, sep, extra, path), nil
	}
	body := members(kids, isRequired, sep, extra, minProps, maxProps)
	return seq(lit("{"), c.ws(), body, c.ws(), lit("}")), nil
}

// placeholderRule stands for the rule a template's reference takes.
const placeholderRule = -1

// templateStates are the DFA states of prefix (a literal, one state per
// byte) followed by the body tmpl caches (compiled once per schema, its
// reference to placeholderRule made one to rule). Object members all have
// this shape: compiling each through subset construction was most of a
// large schema's compile time.
func (c *schemaCompiler) templateStates(tmpl *[]state, body func() *node, prefix string, rule int32) []state {
	if *tmpl == nil {
		states, err := compileRule(body())
		if err != nil {
			panic("grammar: a member template does not compile: " + err.Error())
		}
		*tmpl = states
	}
	n := int32(len(prefix))
	out := make([]state, int(n)+len(*tmpl))
	for i := range n {
		out[i].edges = []edge{{lo: prefix[i], hi: prefix[i], to: i + 1}}
	}
	placeStates(out[n:], *tmpl, n, rule)
	return out
}

// placeStates copies src into dst with every target moved by off and
// references to placeholderRule made ones to rule.
func placeStates(dst, src []state, off, rule int32) {
	for i, st := range src {
		o := &dst[i]
		o.accept = st.accept
		o.edges = make([]edge, len(st.edges))
		for k, e := range st.edges {
			o.edges[k] = edge{lo: e.lo, hi: e.hi, to: e.to + off}
		}
		o.refs = make([]refEdge, len(st.refs))
		for k, r := range st.refs {
			if r.rule == placeholderRule {
				r.rule = rule
			}
			o.refs[k] = refEdge{rule: r.rule, to: r.to + off, guard: r.guard}
		}
	}
}

// memberStates are the states of the member "key": value, value a
// reference to rule.
func (c *schemaCompiler) memberStates(key string, rule int32) []state {
	return c.templateStates(&c.memberTmpl, func() *node {
		return seq(c.ws(), lit(":"), c.ws(), ref(placeholderRule))
	}, key, rule)
}

// maxGuardedMembers: the key bits of a frame (stack.seen) are one word.
const maxGuardedMembers = 64

// anyOrderObject is an object whose named members come in any order, each
// at most once, among any number of extra members: a rule looping over
// its members, member i a rule pushed under guard i+1 (refEdge.guard), the
// closing brace under the rule's required bits. It is linear in the
// members where a state per subset written is exponential.
//
// Every byte a guard depends on is read inside the guarded rule: the
// separator before member i is part of what guard i pushes, the blanks
// before the closing brace part of what the required bits push. So no
// path reads a comma or blanks and then finds every guard closed: the
// matcher never reaches a position where no token is allowed.
func (c *schemaCompiler) anyOrderObject(kids []*node, keys []string, vals []*node, required []bool, sep, extra *node, path string) *node {
	id := c.b.declare("object " + path)
	var first, next []*node
	var req uint64
	for i, k := range kids {
		var m int32
		if v := vals[i]; v != nil && v.kind == nRef && v.guard == 0 {
			m = c.b.declare(fmt.Sprintf("member %d %s", i, path))
			c.b.defineStates(m, c.memberStates(keys[i], v.rule))
		} else {
			m = c.b.rule(fmt.Sprintf("member %d %s", i, path), k)
		}
		after := c.b.declare(fmt.Sprintf("next member %d %s", i, path))
		c.b.defineStates(after, c.templateStates(&c.nextTmpl, func() *node { return seq(sep, ref(placeholderRule)) }, "", m))
		first = append(first, guardedRef(m, int32(i+1)))
		next = append(next, guardedRef(after, int32(i+1)))
		if required[i] {
			req |= 1 << i
		}
	}
	if extra != nil {
		first = append(first, extra)
		next = append(next, seq(sep, extra))
	}
	closing := seq(c.ws(), lit("}"))
	if req != 0 {
		closing = guardedRef(c.b.rule("close "+path, closing), guardRequired)
		c.b.requireKeys(id, req)
	}
	c.b.define(id, seq(lit("{"), c.ws(), opt(seq(alt(first...), star(alt(next...)))), closing))
	return ref(id)
}

// number compiles integer or number with bounds. Bounds must be integers
// (after exclusivity) for numbers; integers take any bound.
func (c *schemaCompiler) number(s *sch, integer bool, path string) (*node, error) {
	n, err := c.boundedNumber(s, integer, path)
	var excluded []*big.Rat
	for _, v := range s.notValues {
		if x, ok := v.(json.Number); ok {
			r, ok := new(big.Rat).SetString(x.String())
			if !ok {
				return nil, fmt.Errorf("%s: %s is not a number", path, x)
			}
			excluded = append(excluded, r)
		}
	}
	if err != nil || len(s.multipleOf) == 0 && len(s.notMultipleOf) == 0 && len(excluded) == 0 {
		return n, err
	}
	// multipleOf: the digits' remainder, tracked by an automaton, meets
	// the bounded shape (written without an exponent).
	a, err := newAutomaton(seq(n))
	if err != nil {
		return nil, err
	}
	plain, err := newAutomaton(seq(opt(lit("-")), uintNode(), opt(fractionNode())))
	if err != nil {
		return nil, err
	}
	if a, err = intersect(a, plain); err != nil {
		return nil, err
	}
	for i, list := range [][]*big.Rat{s.multipleOf, s.notMultipleOf} {
		for _, m := range list {
			ma, err := multipleAutomaton(m, path)
			if err != nil {
				return nil, err
			}
			if i == 0 {
				a, err = intersect(a, ma)
			} else {
				a, err = subtract(a, ma)
			}
			if err != nil {
				return nil, err
			}
		}
	}
	for _, r := range excluded {
		eq, err := equalNumber(r, path)
		if err != nil {
			return nil, err
		}
		if a, err = subtract(a, eq); err != nil {
			return nil, err
		}
	}
	return a.node(), nil
}

// equalNumber matches the texts without an exponent of the number r
// (trailing fraction zeros, and "-0" for 0).
func equalNumber(r *big.Rat, path string) (*automaton, error) {
	neg, ip, fp, ok := decimalParts(r)
	if !ok {
		return nil, &UnsupportedError{Keyword: "not", Reason: fmt.Sprintf("excluding a number beyond 15 integer or 40 fraction digits at %s", path)}
	}
	sign := empty()
	switch {
	case neg:
		sign = lit("-")
	case r.Sign() == 0:
		sign = opt(lit("-"))
	}
	frac := opt(seq(lit("."), plus(lit("0"))))
	if fp != "" {
		frac = seq(lit("."+fp), star(lit("0")))
	}
	return newAutomaton(seq(sign, lit(strconv.FormatInt(ip, 10)), frac))
}

// multipleAutomaton matches the numbers written as [-]digits[.digits]
// that are multiples of m = k·10^-d (k an integer): the value times 10^d is
// an integer (fraction digits past d are zeros) divisible by k. A state is
// the remainder mod k and the fraction digits read.
func multipleAutomaton(m *big.Rat, path string) (*automaton, error) {
	refuse := func(why string) error {
		return &UnsupportedError{Keyword: "multipleOf", Reason: fmt.Sprintf("%s at %s", why, path)}
	}
	if m.Sign() <= 0 {
		return nil, fmt.Errorf("%s: multipleOf must be positive", path)
	}
	d := 0
	scaled := new(big.Rat).Set(m)
	for !scaled.IsInt() {
		if d++; d > 6 {
			return nil, refuse("more than 6 decimal places")
		}
		scaled.Mul(scaled, big.NewRat(10, 1))
	}
	if !scaled.Num().IsInt64() || scaled.Num().Int64() > 1000 {
		return nil, refuse("a step above 1000 units of its last decimal place")
	}
	k := int(scaled.Num().Int64())
	// States: 0 start, 1 after "-", then (r) integer digits read, then
	// (r, f) after "." and f fraction digits (f = d+1: more than d, the
	// ones past d zeros).
	intState := func(r int) int32 { return int32(2 + r) }
	fracState := func(r, f int) int32 { return int32(2 + k + f*k + r) }
	states := make([]state, 2+k+(d+2)*k)
	digitEdges := func(next func(dig int) int32) []edge {
		var es []edge
		for dig := range 10 {
			if to := next(dig); to >= 0 {
				es = append(es, edge{lo: byte('0' + dig), hi: byte('0' + dig), to: to})
			}
		}
		return es
	}
	pow := func(f int) int { // 10^(d-f) mod k
		p := 1 % k
		for range d - f {
			p = p * 10 % k
		}
		return p
	}
	first := digitEdges(func(dig int) int32 { return intState(dig % k) })
	states[0].edges = append([]edge{{lo: '-', hi: '-', to: 1}}, first...)
	states[1].edges = first
	for r := range k {
		st := &states[intState(r)]
		st.edges = append([]edge{{lo: '.', hi: '.', to: fracState(r, 0)}}, digitEdges(func(dig int) int32 { return intState((r*10 + dig) % k) })...)
		st.accept = r*pow(0)%k == 0
		for f := range d + 2 {
			fs := &states[fracState(r, f)]
			fs.accept = f > 0 && r*pow(min(f, d))%k == 0
			if f < d {
				fs.edges = digitEdges(func(dig int) int32 { return fracState((r*10+dig)%k, f+1) })
			} else {
				fs.edges = []edge{{lo: '0', hi: '0', to: fracState(r, d+1)}}
			}
		}
	}
	return trimAutomaton(states, false), nil
}

func (c *schemaCompiler) boundedNumber(s *sch, integer bool, path string) (*node, error) {
	if s.lower == nil && s.upper == nil {
		if integer {
			return seq(opt(lit("-")), uintNode()), nil
		}
		return numberNode(), nil
	}
	lo, loExcl, hi, hiExcl, ok := intBounds(s.lower, s.upper, integer)
	if !ok && !integer {
		return decimalBoundsNode(s.lower, s.upper, path)
	}
	if !ok {
		kw := "minimum"
		if s.lower == nil || s.lower.v.IsInt() {
			kw = "maximum"
		}
		return nil, &UnsupportedError{Keyword: kw, Reason: fmt.Sprintf("non-integer or out-of-range bounds on a number at %s", path)}
	}
	if integer {
		return intRangeNode(lo, hi), nil
	}
	return decimalRangeNode(lo, loExcl, hi, hiExcl), nil
}

// intBounds converts bounds to int64s. For integers exclusivity is folded
// in (loExcl, hiExcl false); for numbers the bounds must be integers.
func intBounds(lower, upper *bound, integer bool) (lo *int64, loExcl bool, hi *int64, hiExcl bool, ok bool) {
	conv := func(b *bound, up bool) (*int64, bool, bool) {
		if b == nil {
			return nil, false, true
		}
		r := b.v
		if !integer && !r.IsInt() {
			return nil, false, false
		}
		q := new(big.Int)
		if up {
			q.Div(r.Num(), r.Denom()) // floor for positive denominators
		} else {
			q.Neg(r.Num())
			q.Div(q, r.Denom())
			q.Neg(q) // ceil
		}
		excl := b.exclusive
		if integer {
			if excl && r.IsInt() {
				if up {
					q.Sub(q, big.NewInt(1))
				} else {
					q.Add(q, big.NewInt(1))
				}
			}
			excl = false
		}
		if !q.IsInt64() || q.Int64() > 1e15 || q.Int64() < -1e15 {
			return nil, false, false
		}
		v := q.Int64()
		return &v, excl, true
	}
	var ok1, ok2 bool
	lo, loExcl, ok1 = conv(lower, false)
	hi, hiExcl, ok2 = conv(upper, true)
	return lo, loExcl, hi, hiExcl, ok1 && ok2
}

// intRangeNode matches the decimal integers in [lo, hi] (nil: unbounded),
// without leading zeros or "-0".
func intRangeNode(lo, hi *int64) *node {
	var branches []*node
	// Non-negative part: [max(lo,0), hi].
	if hi == nil || *hi >= 0 {
		a := int64(0)
		if lo != nil && *lo > 0 {
			a = *lo
		}
		branches = append(branches, uintRange(a, hi))
	}
	// Negative part: -y, y in [max(-hi,1), -lo].
	if lo == nil || *lo < 0 {
		a := int64(1)
		if hi != nil && -*hi > 1 {
			a = -*hi
		}
		var b *int64
		if lo != nil {
			v := -*lo
			b = &v
		}
		if b == nil || a <= *b {
			branches = append(branches, seq(lit("-"), uintRange(a, b)))
		}
	}
	return alt(branches...)
}

// uintRange matches [a, b] (b nil: unbounded), a >= 0.
func uintRange(a int64, b *int64) *node {
	if b != nil && a > *b {
		return none()
	}
	as := strconv.FormatInt(a, 10)
	var branches []*node
	if b == nil {
		for l := len(as); l <= len(as); l++ {
			branches = append(branches, sameLenRange(as, strings.Repeat("9", l)))
		}
		// Every number with more digits.
		branches = append(branches, seq(byteClass(byteRange{'1', '9'}), repeat(digit, len(as), -1)))
		return alt(branches...)
	}
	bs := strconv.FormatInt(*b, 10)
	for l := len(as); l <= len(bs); l++ {
		lo := "1" + strings.Repeat("0", l-1)
		if l == 1 {
			lo = "0"
		}
		if l == len(as) {
			lo = as
		}
		hi := strings.Repeat("9", l)
		if l == len(bs) {
			hi = bs
		}
		branches = append(branches, sameLenRange(lo, hi))
	}
	return alt(branches...)
}

// sameLenRange matches digit strings of len(lo) between lo and hi.
func sameLenRange(lo, hi string) *node {
	if lo > hi {
		return none()
	}
	if lo == "" {
		return empty()
	}
	n := len(lo)
	if strings.Trim(lo[1:], "0") == "" && strings.Trim(hi[1:], "9") == "" {
		return seq(byteClass(byteRange{lo[0], hi[0]}), repeat(digit, n-1, n-1))
	}
	if lo[0] == hi[0] {
		return seq(lit(lo[:1]), sameLenRange(lo[1:], hi[1:]))
	}
	branches := []*node{seq(lit(lo[:1]), sameLenRange(lo[1:], strings.Repeat("9", n-1)))}
	if lo[0]+1 <= hi[0]-1 {
		branches = append(branches, seq(byteClass(byteRange{lo[0] + 1, hi[0] - 1}), repeat(digit, n-1, n-1)))
	}
	branches = append(branches, seq(lit(hi[:1]), sameLenRange(strings.Repeat("0", n-1), hi[1:])))
	return alt(branches...)
}

// decimalRangeNode matches numbers x with lo <(=) x <(=) hi for integer
// bounds, written as an integer part and an optional fraction (no
// exponent: it would move the value across the bounds).
func decimalRangeNode(lo *int64, loExcl bool, hi *int64, hiExcl bool) *node {
	var branches []*node
	if hi == nil || *hi >= 0 || (*hi == 0 && !hiExcl) {
		// x >= 0 part.
		var l int64
		lEx := false
		if lo != nil && *lo >= 0 {
			l, lEx = *lo, loExcl
		}
		branches = append(branches, nonnegDecimal(l, lEx, hi, hiExcl, false))
	}
	if lo == nil || *lo < 0 {
		// x < 0: x = -y with y in (0 or -hi, -lo].
		var yl int64
		yEx := true // y > 0: -0.0 belongs to the x >= 0 part
		if hi != nil && *hi < 0 {
			yl, yEx = -*hi, hiExcl
		}
		var yh *int64
		yhEx := false
		if lo != nil {
			v := -*lo
			yh, yhEx = &v, loExcl
		}
		branches = append(branches, seq(lit("-"), nonnegDecimal(yl, yEx, yh, yhEx, true)))
	}
	return alt(branches...)
}

// nonnegDecimal matches y >= 0 with l <(=) y <(=) h. positive excludes
// texts equal to zero (for "-" in front).
func nonnegDecimal(l int64, lEx bool, h *int64, hEx bool, positive bool) *node {
	anyF := opt(fractionNode())
	zeroF := opt(seq(lit("."), plus(lit("0"))))
	nonzeroF := seq(lit("."), star(digit), byteClass(byteRange{'1', '9'}), star(digit))
	var branches []*node
	// Integer parts whose every fraction fits.
	a := l
	if lEx {
		a = l + 1
	}
	var b *int64
	if h != nil {
		v := *h - 1
		b = &v
	}
	if positive && a == 0 {
		// 0.x with x nonzero is positive; 0 itself is not.
		if b == nil || *b >= 0 {
			branches = append(branches, seq(lit("0"), nonzeroF))
		}
		a = 1
	}
	if b == nil || a <= *b {
		branches = append(branches, seq(uintRange(a, b), anyF))
	}
	// l itself with a nonzero fraction, when exclusive.
	if lEx && (h == nil || l < *h) && !(positive && l == 0) {
		branches = append(branches, seq(uintRange(l, &l), nonzeroF))
	}
	// h itself, fraction zero, when inclusive.
	if h != nil && !hEx && (*h > l || *h == l && !lEx) && !(positive && *h == 0) {
		branches = append(branches, seq(uintRange(*h, h), zeroF))
	}
	return alt(branches...)
}

// formatPatterns are the formats compiled (as anchored patterns); others
// are annotations. Dates leave out February 29 (leap years need more than
// a regular expression states cheaply).
var formatPatterns = map[string]string{
	"date":          `^[0-9]{4}-((0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])|(0[13-9]|1[0-2])-(29|30)|(0[13578]|1[02])-31)$`,
	"time":          `^([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$`,
	"date-time":     `^[0-9]{4}-((0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])|(0[13-9]|1[0-2])-(29|30)|(0[13578]|1[02])-31)T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$`,
	"uuid":          `^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`,
	"email":         `^[a-zA-Z0-9._%+-]+@[a-zA-Z0-9-]+(\.[a-zA-Z0-9-]+)*\.[a-zA-Z]{2,}$`,
	"ipv4":          `^((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])$`,
	"uri":           `^[a-zA-Z][a-zA-Z0-9+.-]*:([a-zA-Z0-9._~!$&'()*+,;=:@/?-]|%[0-9A-Fa-f]{2})*(#([a-zA-Z0-9._~!$&'()*+,;=:@/?-]|%[0-9A-Fa-f]{2})*)?$`,
	"uri-reference": `^([a-zA-Z][a-zA-Z0-9+.-]*://([a-zA-Z0-9._~!$&'()*+,;=:@/?-]|%[0-9A-Fa-f]{2})*|/?[a-zA-Z0-9._~-]+(/[a-zA-Z0-9._~-]+)*/?)$`,
	"hostname":      `^[a-zA-Z0-9]([a-zA-Z0-9-]{0,20}[a-zA-Z0-9])?(\.[a-zA-Z0-9]([a-zA-Z0-9-]{0,20}[a-zA-Z0-9])?)*$`,
}

// decimalBoundsNode matches the numbers between decimal bounds (nil: none),
// written without an exponent: each bound is a language of its own, and
// the two meet in an automaton.
func decimalBoundsNode(lower, upper *bound, path string) (*node, error) {
	all := seq(opt(lit("-")), uintNode(), opt(fractionNode()))
	a, err := newAutomaton(all)
	if err != nil {
		return nil, err
	}
	for _, b := range []struct {
		b     *bound
		above bool
	}{{lower, true}, {upper, false}} {
		if b.b == nil {
			continue
		}
		kw := map[bool]string{true: "minimum", false: "maximum"}[b.above]
		neg, ip, fp, ok := decimalParts(b.b.v)
		if !ok {
			return nil, &UnsupportedError{Keyword: kw, Reason: fmt.Sprintf("a bound beyond 15 integer or 40 fraction digits at %s", path)}
		}
		incl := !b.b.exclusive
		var n *node
		switch {
		case b.above && !neg: // x >= B >= 0
			n = nonnegBeyond(ip, fp, incl, true)
		case b.above && neg: // x >= -B: every x >= 0, and -y with y <= B
			n = alt(seq(uintNode(), opt(fractionNode())), seq(lit("-"), nonnegBeyond(ip, fp, incl, false)))
		case !b.above && !neg: // x <= B: every x < 0, and 0 <= x <= B
			n = alt(seq(lit("-"), uintNode(), opt(fractionNode())), nonnegBeyond(ip, fp, incl, false))
		default: // x <= -B: -y with y >= B
			n = seq(lit("-"), nonnegBeyond(ip, fp, incl, true))
		}
		ba, err := newAutomaton(n)
		if err != nil {
			return nil, err
		}
		if a, err = intersect(a, ba); err != nil {
			return nil, err
		}
	}
	return a.node(), nil
}

// decimalParts writes |r| as integer digits and fraction digits (no
// trailing zeros); ok is false beyond what the grammar spells.
func decimalParts(r *big.Rat) (neg bool, ip int64, fp string, ok bool) {
	neg = r.Sign() < 0
	abs := new(big.Rat).Abs(r)
	s := abs.FloatString(40)
	back, _ := new(big.Rat).SetString(s)
	if back.Cmp(abs) != 0 {
		return false, 0, "", false
	}
	i, f, _ := strings.Cut(s, ".")
	ip, err := strconv.ParseInt(i, 10, 64)
	if err != nil || ip > 1e15 {
		return false, 0, "", false
	}
	return neg, ip, strings.TrimRight(f, "0"), true
}

// nonnegBeyond matches y >= 0 written as digits and an optional fraction
// with y above (up) or below (!up) ip.fp, the bound itself when incl.
func nonnegBeyond(ip int64, fp string, incl, up bool) *node {
	anyF := opt(fractionNode())
	var wider *node // integer parts strictly beyond ip
	if up {
		wider = seq(uintRange(ip+1, nil), anyF)
	} else if ip > 0 {
		top := ip - 1
		wider = seq(uintRange(0, &top), anyF)
	} else {
		wider = none()
	}
	return alt(wider, seq(uintRange(ip, &ip), fractionBeyond(fp, incl, up)))
}

// fractionBeyond matches an optional fraction ("" or "." digits) whose
// value 0.f is above (up) or below 0.d, or equal when incl.
func fractionBeyond(d string, incl, up bool) *node {
	var strict func(d string) *node // non-empty digit strings beyond d
	strict = func(d string) *node {
		if d == "" {
			if up {
				return seq(star(digit), byteClass(byteRange{'1', '9'}), star(digit))
			}
			return none()
		}
		var first *node
		if up && d[0] < '9' {
			first = seq(byteClass(byteRange{d[0] + 1, '9'}), star(digit))
		} else if !up && d[0] > '0' {
			first = seq(byteClass(byteRange{'0', d[0] - 1}), star(digit))
		} else {
			first = none()
		}
		rest := strict(d[1:])
		if !up && len(d) > 1 {
			rest = alt(rest, empty()) // d[0] alone is below d when more follows
		}
		return alt(first, seq(lit(d[:1]), rest))
	}
	branches := []*node{seq(lit("."), strict(d))}
	if incl {
		branches = append(branches, seq(lit("."), lit(d), star(lit("0"))))
		if d == "" {
			branches = append(branches, empty())
		}
	}
	if !up && d != "" {
		branches = append(branches, empty()) // no fraction: 0 < 0.d
	}
	return alt(branches...)
}

func countTrue(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}
