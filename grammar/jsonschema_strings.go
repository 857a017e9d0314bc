package grammar

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
)

// Strings and keys as automata over the bytes between a JSON string's
// quotes, spelled as jsonEncoder spells characters: each character
// directly, or as one of the escapes JSON requires or allows for it ('\/',
// the short and \u escapes of control characters). Within that universe a
// pattern's complement is exact: a text outside it decodes to a string
// the pattern does not match, whatever escapes it uses. Other \u escapes
// of ordinary characters are not written (a stricter subset).

// maxPatternedChars caps maxLength where it is intersected with a
// pattern: a counted chain times a pattern's states must stay small.
// Lower caps only refuse longer strings, which keeps the grammar sound.
const maxPatternedChars = 256

// Automata every schema uses, built once (automata are immutable).
var (
	universeOnce sync.Once
	// bodyUniverse is every string body; bodyChar one character of it;
	// jsonCharAuto one character of plainString's (counted strings).
	bodyUniverse, bodyChar, jsonCharAuto *automaton
)

func sharedAutomata() {
	universeOnce.Do(func() {
		var err error
		if bodyUniverse, err = newAutomaton(star(jsonEncoder(anyRune))); err == nil {
			if bodyChar, err = newAutomaton(jsonEncoder(anyRune)); err == nil {
				jsonCharAuto, err = newAutomaton(jsonChar(false))
			}
		}
		if err != nil {
			panic("grammar: the JSON string automata do not compile: " + err.Error())
		}
	})
}

// universe is every string body.
func (c *schemaCompiler) universe() (*automaton, error) {
	sharedAutomata()
	return bodyUniverse, nil
}

// patternCache holds the automata of the patterns schemas used lately
// (formats and common patterns recur across requests), up to
// maxCachedPatterns of them.
var patternCache struct {
	sync.Mutex
	m map[string]*automaton
}

const maxCachedPatterns = 4096

// patternAutomaton is a pattern's bodies, compiled once.
func (c *schemaCompiler) patternAutomaton(p, keyword string) (*automaton, error) {
	key := keyword + "\x00" + p
	patternCache.Lock()
	a, ok := patternCache.m[key]
	patternCache.Unlock()
	if ok {
		return a, nil
	}
	n, err := regexNode(p, true, jsonEncoder, keyword)
	if err != nil {
		return nil, err
	}
	a, err = newAutomaton(n)
	if err != nil {
		var ue *UnsupportedError
		if errors.As(err, &ue) {
			return nil, err
		}
		return nil, &UnsupportedError{Keyword: keyword, Reason: fmt.Sprintf("%q: %v", p, err)}
	}
	// Minimized: products with it then stay small (a search pattern's
	// subset construction keeps states that behave alike).
	if len(a.states) <= maxMinimizeStates {
		a = minimize(a.states)
	}
	patternCache.Lock()
	if patternCache.m == nil || len(patternCache.m) >= maxCachedPatterns {
		patternCache.m = map[string]*automaton{}
	}
	patternCache.m[key] = a
	patternCache.Unlock()
	return a, nil
}

// literalBody is s's bodies: every spelling of its characters.
func literalBody(s string) *node {
	var parts []*node
	for _, r := range s {
		parts = append(parts, jsonEncoder([]runeRange{{r, r}}))
	}
	return seq(parts...)
}

// stringBody is the bodies of strings matching every pattern with
// minLen..maxLen characters (maxLen < 0: any).
func (c *schemaCompiler) stringBody(patterns []string, minLen, maxLen int, path string) (*automaton, error) {
	// A pattern's bodies are spelled as the universe's (jsonEncoder), so
	// they lie within it: the universe is the start only without one.
	var a *automaton
	for _, p := range patterns {
		pa, err := c.patternAutomaton(p, "pattern")
		if err != nil {
			return nil, err
		}
		if a == nil {
			a = pa
		} else if a, err = intersect(a, pa); err != nil {
			return nil, err
		}
	}
	if minLen > 0 || maxLen >= 0 {
		if minLen > maxPatternedChars {
			return nil, &UnsupportedError{Keyword: "minLength", Reason: fmt.Sprintf("above %d combined with a pattern, format or not at %s", maxPatternedChars, path)}
		}
		if maxLen > maxPatternedChars {
			maxLen = maxPatternedChars
		}
		sharedAutomata()
		la := repeatAutomaton(bodyChar, minLen, maxLen)
		if la == nil {
			return nil, fmt.Errorf("grammar: a character's automaton is not one character")
		}
		if a == nil {
			return la, nil
		}
		// Not minimized: the product with a counted chain keeps its
		// count in every state, so few states merge, and Moore's
		// refinement takes a round per character.
		var err error
		if a, err = product(a, la, func(x, y bool) bool { return x && y }, true, false); err != nil {
			return nil, err
		}
	}
	if a == nil {
		return c.universe()
	}
	return a, nil
}

// stringSchema is the bodies of the strings valid against schema s (its
// other types are not asked about). Keywords of other types do not apply
// to strings and are passed over; what it cannot decide is refused.
func (c *schemaCompiler) stringSchema(s any, path string, depth int) (*automaton, error) {
	if depth > maxValidateDepth {
		return nil, &UnsupportedError{Keyword: "$ref", Reason: "references that loop at " + path}
	}
	u, err := c.universe()
	if err != nil {
		return nil, err
	}
	o, ok := s.(*object)
	if !ok {
		if b, isBool := s.(bool); isBool {
			if b {
				return u, nil
			}
			return &automaton{}, nil
		}
		return nil, fmt.Errorf("%s: a schema must be an object or a boolean", path)
	}
	for _, k := range []string{"$dynamicRef", "$recursiveRef"} {
		if _, has := o.get(k); has {
			return nil, &UnsupportedError{Keyword: k, Reason: "in a schema of strings at " + path}
		}
	}
	if t, has := o.get("type"); has {
		names, isList := t.([]any)
		if !isList {
			names = []any{t}
		}
		if !slices.Contains(names, any("string")) {
			return &automaton{}, nil
		}
	}
	var patterns []string
	if p, has := o.get("pattern"); has {
		ps, isStr := p.(string)
		if !isStr {
			return nil, fmt.Errorf("%s: pattern must be a string", path)
		}
		patterns = append(patterns, ps)
	}
	if f, has := o.get("format"); has {
		name, _ := f.(string)
		if assertedFormats[name] {
			return nil, &UnsupportedError{Keyword: "format", Reason: fmt.Sprintf("format %q at %s", name, path)}
		}
		if p, known := formatPatterns[name]; known {
			patterns = append(patterns, p)
		}
	}
	minLen, maxLen := 0, -1
	if v, has := o.get("minLength"); has {
		if minLen, err = jsonInt(v, "minLength", path); err != nil {
			return nil, err
		}
	}
	if v, has := o.get("maxLength"); has {
		if maxLen, err = jsonInt(v, "maxLength", path); err != nil {
			return nil, err
		}
	}
	a := u
	if len(patterns) > 0 || minLen > 0 || maxLen >= 0 {
		if a, err = c.stringBody(patterns, minLen, maxLen, path); err != nil {
			return nil, err
		}
	}
	if vals, has := listedValues(o); has {
		var lits []*node
		for _, v := range vals {
			if str, isStr := v.(string); isStr {
				lits = append(lits, literalBody(str))
			}
		}
		la, err := newAutomaton(alt(lits...))
		if err != nil {
			return nil, err
		}
		if a, err = intersect(a, la); err != nil {
			return nil, err
		}
	}
	if r, has := o.get("$ref"); has {
		target, _ := r.(string)
		t, err := c.resolve(target)
		if err != nil {
			return nil, err
		}
		ra, err := c.stringSchema(t, target, depth+1)
		if err != nil {
			return nil, err
		}
		if a, err = intersect(a, ra); err != nil {
			return nil, err
		}
	}
	if l, has := o.get("allOf"); has {
		list, _ := l.([]any)
		for i, m := range list {
			ma, err := c.stringSchema(m, fmt.Sprintf("%s/allOf/%d", path, i), depth+1)
			if err != nil {
				return nil, err
			}
			if a, err = intersect(a, ma); err != nil {
				return nil, err
			}
		}
	}
	if l, has := o.get("anyOf"); has {
		list, _ := l.([]any)
		var branches []*node
		for i, m := range list {
			ma, err := c.stringSchema(m, fmt.Sprintf("%s/anyOf/%d", path, i), depth+1)
			if err != nil {
				return nil, err
			}
			branches = append(branches, ma.node())
		}
		ua, err := newAutomaton(alt(branches...))
		if err != nil {
			return nil, err
		}
		if a, err = intersect(a, ua); err != nil {
			return nil, err
		}
	}
	if l, has := o.get("oneOf"); has {
		list, _ := l.([]any)
		if a, err = c.stringOneOf(a, list, path, depth); err != nil {
			return nil, err
		}
	}
	if cond, has := o.get("if"); has {
		if a, err = c.stringIf(a, o, cond, path, depth); err != nil {
			return nil, err
		}
	}
	if n, has := o.get("not"); has {
		na, err := c.stringSchema(n, path+"/not", depth+1)
		if err != nil {
			return nil, err
		}
		if a, err = subtract(a, na); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// maxStringOneOf bounds the branches of a oneOf over strings: each is
// taken less the union of the others.
const maxStringOneOf = 8

// stringOneOf is a ∩ oneOf list over strings: the strings of exactly one
// branch, the union over i of branch i less the others.
func (c *schemaCompiler) stringOneOf(a *automaton, list []any, path string, depth int) (*automaton, error) {
	if len(list) == 0 {
		return nil, fmt.Errorf("%s: oneOf must be a non-empty list", path)
	}
	if len(list) > maxStringOneOf {
		return nil, &UnsupportedError{Keyword: "oneOf", Reason: fmt.Sprintf("more than %d branches in a schema of strings at %s", maxStringOneOf, path)}
	}
	branches := make([]*automaton, len(list))
	for i, m := range list {
		ma, err := c.stringSchema(m, fmt.Sprintf("%s/oneOf/%d", path, i), depth+1)
		if err != nil {
			return nil, err
		}
		branches[i] = ma
	}
	var only []*node
	for i, bi := range branches {
		var others []*node
		for j, bj := range branches {
			if j != i && !bj.empty() {
				others = append(others, bj.node())
			}
		}
		x := bi
		if len(others) > 0 {
			oa, err := newAutomaton(alt(others...))
			if err != nil {
				return nil, err
			}
			if x, err = subtract(bi, oa); err != nil {
				return nil, err
			}
		}
		if !x.empty() {
			only = append(only, x.node())
		}
	}
	ua, err := newAutomaton(alt(only...))
	if err != nil {
		return nil, err
	}
	return intersect(a, ua)
}

// stringIf is a ∩ (if cond then T else E) over strings: (cond ∩ T) ∪
// (E less cond).
func (c *schemaCompiler) stringIf(a *automaton, o *object, cond any, path string, depth int) (*automaton, error) {
	ia, err := c.stringSchema(cond, path+"/if", depth+1)
	if err != nil {
		return nil, err
	}
	branch := func(k string) (*automaton, error) {
		v, has := o.get(k)
		if !has {
			return c.universe()
		}
		return c.stringSchema(v, path+"/"+k, depth+1)
	}
	ta, err := branch("then")
	if err != nil {
		return nil, err
	}
	ea, err := branch("else")
	if err != nil {
		return nil, err
	}
	if ta, err = intersect(ia, ta); err != nil {
		return nil, err
	}
	if ea, err = subtract(ea, ia); err != nil {
		return nil, err
	}
	either, err := newAutomaton(alt(ta.node(), ea.node()))
	if err != nil {
		return nil, err
	}
	return intersect(a, either)
}

// quoted is a string with the given bodies.
func quoted(a *automaton) *node {
	if a.empty() {
		return none()
	}
	return seq(lit(`"`), a.node(), lit(`"`))
}

// patternExtra is the members an object allows beyond its named
// properties: keys other than the names (and, with propertyNames, valid
// against it) are split by which patterns of patternProperties they match
// (each subset of patterns its own key automaton); a key matching patterns
// takes the conjunction of their schemas, one matching none
// additionalProperties. With mark, only the members mark asks for: keys
// also valid against mark.keys, values also against mark.value. nil: none
// allowed.
func (c *schemaCompiler) patternExtra(s *sch, names []string, mark *memberReq, path string) (*node, error) {
	var owner *objPart
	var others []any // what the other parts say of every extra key
	for i := range s.objParts {
		if p := &s.objParts[i]; len(p.patterns) == 0 && p.addl == false {
			return nil, nil // before building any key automaton
		}
	}
	keys, err := c.otherKeys(names)
	if err != nil {
		return nil, err
	}
	if mark != nil {
		ka, err := c.stringSchema(mark.keys, path+"/"+mark.keyword, 0)
		if err != nil {
			return nil, err
		}
		if keys, err = intersect(keys, ka); err != nil {
			return nil, err
		}
		others = append(others, mark.value)
	}
	for i := range s.objParts {
		p := &s.objParts[i]
		if p.propertyNames != nil {
			na, err := c.stringSchema(p.propertyNames, path+"/propertyNames", 0)
			if err != nil {
				return nil, err
			}
			if keys, err = intersect(keys, na); err != nil {
				return nil, err
			}
		}
		if len(p.patterns) > 0 {
			if owner != nil {
				return nil, &UnsupportedError{Keyword: "patternProperties", Reason: "in two schemas combined at " + path}
			}
			owner = p
			continue
		}
		switch a := p.addl.(type) {
		case nil:
		case bool:
			if !a {
				return nil, nil
			}
		default:
			others = append(others, a)
		}
	}
	var pats []*automaton
	if owner != nil {
		if len(owner.patterns) > 4 {
			return nil, &UnsupportedError{Keyword: "patternProperties", Reason: "more than 4 patterns at " + path}
		}
		for _, p := range owner.patterns {
			pa, err := c.patternAutomaton(p, "patternProperties")
			if err != nil {
				return nil, err
			}
			pats = append(pats, pa)
		}
	}
	var branches []*node
	for set := 0; set < 1<<len(pats); set++ {
		k := keys
		conj := slices.Clone(others)
		for i, pa := range pats {
			if set&(1<<i) != 0 {
				k, err = intersect(k, pa)
				conj = append(conj, owner.patternSchemas[i])
			} else {
				k, err = subtract(k, pa)
			}
			if err != nil {
				return nil, err
			}
		}
		if set == 0 && owner != nil && owner.addl != nil {
			if b, isBool := owner.addl.(bool); isBool && !b {
				continue
			}
			conj = append(conj, owner.addl)
		}
		if k.empty() {
			continue
		}
		val, err := c.conjunction(conj, fmt.Sprintf("%s/patternProperties/%d", path, set))
		if err != nil {
			return nil, err
		}
		if val.kind == nNone {
			continue
		}
		name := path + "/additionalProperties"
		if mark != nil {
			name = path + "/" + mark.keyword
		}
		val = c.asRule(val, path+"/patternProperties")
		if val.kind != nRef || val.guard != 0 {
			val = ref(c.b.rule(name+" value", val))
		}
		id := c.b.declare(name)
		c.b.defineStates(id, c.keyedMemberStates(k, val.rule))
		branches = append(branches, ref(id))
	}
	if len(branches) == 0 {
		return nil, nil
	}
	return alt(branches...), nil
}

// keyedMemberStates are the states of a member whose key is a body of
// keys and whose value is a reference to rule: the key automaton's DFA
// quoted, then the member template, with no subset construction.
func (c *schemaCompiler) keyedMemberStates(keys *automaton, rule int32) []state {
	q := quotedStates(keys)
	final := int32(len(q) - 1) // the state after the closing quote
	tail := c.memberStates("", rule)
	out := make([]state, int(final)+len(tail))
	copy(out, q[:final])
	placeStates(out[final:], tail, final, rule)
	return out
}

// namedByPatterns is what the patterns of part p say of property k: the
// schemas of those k matches (matched false: none, and additionalProperties
// applies instead).
func namedByPatterns(p objPart, k string) (schemas []any, matched bool, err error) {
	for i, pat := range p.patterns {
		re, err := regexp.Compile(pat)
		if err != nil {
			return nil, false, &UnsupportedError{Keyword: "patternProperties", Reason: fmt.Sprintf("%q: %v", pat, err)}
		}
		if re.MatchString(k) {
			schemas = append(schemas, p.patternSchemas[i])
			matched = true
		}
	}
	return schemas, matched, nil
}

// otherKeys is the bodies of keys that are none of names, kept by names:
// an object's shape recurs (anyOf branches, references).
func (c *schemaCompiler) otherKeys(names []string) (*automaton, error) {
	k := strings.Join(names, "\x00")
	if a, ok := c.keySets[k]; ok {
		return a, nil
	}
	keySetCache.Lock()
	a, ok := keySetCache.m[k]
	keySetCache.Unlock()
	if ok {
		if c.keySets == nil {
			c.keySets = map[string]*automaton{}
		}
		c.keySets[k] = a
		return a, nil
	}
	u, err := c.universe()
	if err != nil {
		return nil, err
	}
	var lits []*node
	for _, n := range names {
		lits = append(lits, literalBody(n))
	}
	named, err := newAutomaton(alt(lits...))
	if err != nil {
		return nil, err
	}
	// Not minimized: the product of the universe and a trie of names is
	// all but minimal already, and minimizing it is most of its cost.
	keys, err := product(u, named, func(x, y bool) bool { return x && !y }, false, false)
	if err != nil {
		return nil, err
	}
	if c.keySets == nil {
		c.keySets = map[string]*automaton{}
	}
	c.keySets[k] = keys
	keySetCache.Lock()
	if keySetCache.m == nil || len(keySetCache.m) >= maxCachedKeySets {
		keySetCache.m = map[string]*automaton{}
	}
	keySetCache.m[k] = keys
	keySetCache.Unlock()
	return keys, nil
}

// keySetCache holds otherKeys' automata across schemas, up to
// maxCachedKeySets of them: the same objects recur across requests and
// across the schemas of one API (a Kubernetes object's metadata).
var keySetCache struct {
	sync.Mutex
	m map[string]*automaton
}

const maxCachedKeySets = 4096
