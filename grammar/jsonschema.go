package grammar

import (
	"encoding/json"
	"fmt"
	"math/big"
	"slices"
	"strings"
)

// JSON Schema to grammar. The grammar's language is a subset of the
// schema's: every text it accepts validates. Where the subset is strict it
// is by design and documented here:
//
//   - an object's members come in any order, each named one at most once
//     (guarded rule references, anyOrderObject), except with more than
//     maxGuardedMembers named properties or with minProperties or
//     maxProperties: then the named ones come in the order "properties"
//     lists them (up to maxAnyOrderMembers in any order) and the others
//     after them;
//   - a named property's key is spelled one way (escaping only what JSON
//     requires); other keys, like strings with a pattern, spell characters
//     directly or with the escapes JSON requires or allows for them ('\/',
//     control characters), not with \u escapes of other characters;
//   - integers are written without a fraction or exponent; numbers with
//     bounds, steps (multipleOf), excluded values or "not an integer"
//     without an exponent;
//   - strings constrained by pattern, format or "not" spell characters
//     directly, escaping only what JSON requires; a maxLength beside a
//     pattern counts at most maxPatternedChars characters;
//   - enum and const values keep their keys' order;
//   - a oneOf branch without "type" but with keywords of one type
//     (properties, items, ...) produces that type only;
//   - a oneOf branch whose exclusion of another branch has no small exact
//     form excludes it by a property that tells their objects apart: one
//     the other forbids or constrains to values apart is made present,
//     one the other requires is made absent (an object of the branch that
//     misses the other some other way is refused);
//   - minProperties/maxProperties keep named members in schema order
//     unless the required members already make minProperties, or the
//     named members alone (no others allowed) cannot exceed maxProperties.
//
// Keywords that need more than a context-free grammar are compiled where
// an exact form exists: a listed set of values (enum, const) is filtered by
// a validator against the whole schema, whatever else it says; "not" of
// types, of values, of string constraints (an automaton's complement), of
// required properties, and of several keywords as the union of their
// negations (jsonschema_not.go), of the object keywords as a member the
// object must have (jsonschema_member.go); patternProperties and
// propertyNames split keys by automata; dependencies become a choice;
// minProperties/maxProperties count members; oneOf is anyOf over branches
// each less the values of the others (none to remove where the branches,
// with the keywords beside oneOf, are proved apart: jsonschema_apart.go);
// over strings, oneOf and if/then/else are automata; uniqueItems over listed item values
// writes each value at most once (jsonschema_unique.go); contains (one
// schema, no item counts beside it) marks the element that matches it.
//
// Whitespace is free wherever JSON allows it, so compact and indented
// texts are both accepted. Validation keywords that cannot be compiled
// soundly are refused with an UnsupportedError naming them; annotations
// (title, description, examples, unknown keywords) are ignored, as JSON
// Schema says.

// refusedKeywords are validation keywords the compiler does not implement.
var refusedKeywords = []string{
	"unevaluatedProperties", "unevaluatedItems", "minContains", "maxContains",
	"$dynamicRef", "$recursiveRef",
}

// annotationKeywords may sit beside $ref without making it more than a
// reference.
var annotationKeywords = map[string]bool{
	"title": true, "description": true, "default": true, "examples": true, "$comment": true,
	"$schema": true, "$id": true, "id": true, "readOnly": true, "writeOnly": true, "deprecated": true,
	"definitions": true, "$defs": true, "example": true,
}

// JSONOptions tune the JSON grammars.
type JSONOptions struct {
	// StrictProperties treats a missing additionalProperties as false
	// (OpenAI's strict mode); otherwise JSON Schema's default, true, holds.
	StrictProperties bool
	// MaxWhitespace, when set, limits whitespace between tokens to one
	// line break between runs of at most this many blanks (0: any
	// whitespace, as JSON allows). Generation wants a bound: a sampled
	// model can otherwise emit newlines until it runs out of tokens.
	MaxWhitespace int
}

type schemaCompiler struct {
	b        *builder
	doc      any
	opts     JSONOptions
	refRules map[string]int32
	shared   map[string]int32 // shared rules: "value", "string", ...
	inlining map[string]int   // $ref targets being inlined (recursion guard)
	// conjRules are the rules of conjunctions, by their schemas' identity.
	conjRules map[string]int32
	// distributed counts the branches anyOf distributions made.
	distributed int
	// keySets caches otherKeys by the names they leave out.
	keySets map[string]*automaton
	// memberTmpl, nextTmpl: templateStates' compiled bodies.
	memberTmpl, nextTmpl []state
	// notRefs counts the references "not" resolved (maxNotRefs).
	notRefs int
	// oneOfLists are the anyOf lists oneOf made (by their first
	// element's address): a negation they cannot compile is oneOf's.
	oneOfLists map[*any]bool
	// apartTotal counts the comparisons of apart (maxApartTotal).
	apartTotal int
	// constraints caches stringConstraint by the keywords it reads.
	constraints map[string]*automaton
}

// JSONSchema compiles a JSON Schema document.
func JSONSchema(schema []byte, opts JSONOptions) (*Grammar, error) {
	doc, err := parseOrdered(schema)
	if err != nil {
		return nil, fmt.Errorf("the schema is not valid JSON: %w", err)
	}
	c := &schemaCompiler{b: newBuilder(), doc: doc, opts: opts, refRules: map[string]int32{}, shared: map[string]int32{}, inlining: map[string]int{}}
	root := c.b.declare("root")
	n, err := c.schema(doc, "#")
	if err != nil {
		return nil, err
	}
	if n.kind == nNone {
		return nil, fmt.Errorf("the schema admits no value")
	}
	c.b.define(root, seq(c.ws(), n, c.trailingWS()))
	return c.b.build(root)
}

// JSONObject is any JSON object (OpenAI's response_format json_object).
func JSONObject(opts JSONOptions) *Grammar {
	c := &schemaCompiler{b: newBuilder(), shared: map[string]int32{}, opts: opts}
	root := c.b.declare("root")
	c.b.define(root, seq(c.ws(), c.anyObject(), c.trailingWS()))
	g, err := c.b.build(root)
	if err != nil {
		panic("grammar: the JSON object grammar does not compile: " + err.Error())
	}
	return g
}

// trailingWS is the whitespace after the value: none when generating
// (MaxWhitespace set), so that the output ends where the value does.
func (c *schemaCompiler) trailingWS() *node {
	if c.opts.MaxWhitespace > 0 {
		return empty()
	}
	return c.ws()
}

// ws is JSON's optional whitespace. With MaxWhitespace it is what
// indentation needs, one line break (CRLF or LF) between up to
// MaxWhitespace blanks, rather than any run: greedy decoding of a model
// unsure of JSON otherwise emits blank lines until its budget runs out.
func (c *schemaCompiler) ws() *node {
	if c.opts.MaxWhitespace <= 0 {
		return star(byteClass(byteRange{' ', ' '}, byteRange{'\t', '\t'}, byteRange{'\n', '\n'}, byteRange{'\r', '\r'}))
	}
	blanks := repeat(byteClass(byteRange{' ', ' '}, byteRange{'\t', '\t'}), 0, c.opts.MaxWhitespace)
	return seq(blanks, opt(seq(opt(lit("\r")), lit("\n"), blanks)))
}

// sharedRule returns the rule name, defining it with body() the first time.
func (c *schemaCompiler) sharedRule(name string, body func() *node) *node {
	if id, ok := c.shared[name]; ok {
		return ref(id)
	}
	id := c.b.declare(name)
	c.shared[name] = id
	c.b.define(id, body())
	return ref(id)
}

// anyValue is any JSON value.
func (c *schemaCompiler) anyValue() *node {
	return c.sharedRule("value", func() *node {
		return alt(c.anyObject(), c.anyArray(), c.plainString(), numberNode(), lit("true"), lit("false"), lit("null"))
	})
}

func (c *schemaCompiler) anyObject() *node {
	return c.sharedRule("object", func() *node {
		member := seq(c.plainString(), c.ws(), lit(":"), c.ws(), c.anyValue())
		return seq(lit("{"), c.ws(), opt(seq(member, star(seq(c.ws(), lit(","), c.ws(), member)))), c.ws(), lit("}"))
	})
}

func (c *schemaCompiler) anyArray() *node {
	return c.sharedRule("array", func() *node {
		return seq(lit("["), c.ws(), opt(seq(c.anyValue(), star(seq(c.ws(), lit(","), c.ws(), c.anyValue())))), c.ws(), lit("]"))
	})
}

// plainString is any JSON string, every escape allowed.
func (c *schemaCompiler) plainString() *node {
	return c.sharedRule("string", func() *node {
		return seq(lit(`"`), star(jsonChar(true)), lit(`"`))
	})
}

// jsonChar is one character of a JSON string: an unescaped character or an
// escape. surrogates allows \u escapes of UTF-16 surrogates (a pair is one
// character written as two escapes): only where characters are not
// counted.
func jsonChar(surrogates bool) *node {
	hex := byteClass(byteRange{'0', '9'}, byteRange{'a', 'f'}, byteRange{'A', 'F'})
	var u *node
	if surrogates {
		u = seq(lit(`\u`), hex, hex, hex, hex)
	} else {
		notD := byteClass(byteRange{'0', '9'}, byteRange{'a', 'c'}, byteRange{'A', 'C'}, byteRange{'e', 'f'}, byteRange{'E', 'F'})
		u = seq(lit(`\u`), alt(seq(notD, hex, hex, hex), seq(byteClass(byteRange{'d', 'd'}, byteRange{'D', 'D'}), byteClass(byteRange{'0', '7'}), hex, hex)))
	}
	short := seq(lit(`\`), byteClass(byteRange{'"', '"'}, byteRange{'\\', '\\'}, byteRange{'/', '/'}, byteRange{'b', 'b'},
		byteRange{'f', 'f'}, byteRange{'n', 'n'}, byteRange{'r', 'r'}, byteRange{'t', 't'}))
	return alt(utf8Node([]runeRange{{0x20, '"' - 1}, {'"' + 1, '\\' - 1}, {'\\' + 1, 0x10FFFF}}), short, u)
}

// jsonEncoder spells a set of characters inside a JSON string: directly
// when JSON allows, else as the escapes of '"', '\\' and control
// characters ('/' may be written either way).
func jsonEncoder(ranges []runeRange) *node {
	var direct []runeRange
	var branches []*node
	for _, r := range ranges {
		lo, hi := r.lo, r.hi
		if lo == 0 && hi >= 0x1F {
			// Every control character: the escapes as classes, not as
			// 32 alternatives (patterns with "." are common).
			hex := byteClass(byteRange{'0', '9'}, byteRange{'a', 'f'}, byteRange{'A', 'F'})
			branches = append(branches, seq(lit(`\u00`), byteClass(byteRange{'0', '1'}), hex),
				seq(lit(`\`), byteClass(byteRange{'b', 'b'}, byteRange{'f', 'f'}, byteRange{'n', 'n'}, byteRange{'r', 'r'}, byteRange{'t', 't'})))
		} else {
			for c := lo; c <= min(hi, 0x1F); c++ {
				branches = append(branches, controlEscape(c))
			}
		}
		lo = max(lo, 0x20)
		for _, special := range []rune{'"', '\\'} {
			if lo <= special && special <= hi {
				branches = append(branches, lit(`\`+string(special)))
				if lo < special {
					direct = append(direct, runeRange{lo, special - 1})
				}
				lo = special + 1
			}
		}
		if lo <= '/' && '/' <= hi {
			branches = append(branches, lit(`\/`))
		}
		if lo <= hi {
			direct = append(direct, runeRange{lo, hi})
		}
	}
	if len(direct) > 0 {
		branches = append(branches, utf8Node(direct))
	}
	return alt(branches...)
}

func controlEscape(c rune) *node {
	hexes := fmt.Sprintf("%04x", c)
	forms := []*node{lit(`\u` + hexes), lit(`\u` + strings.ToUpper(hexes))}
	switch c {
	case '\b':
		forms = append(forms, lit(`\b`))
	case '\f':
		forms = append(forms, lit(`\f`))
	case '\n':
		forms = append(forms, lit(`\n`))
	case '\r':
		forms = append(forms, lit(`\r`))
	case '\t':
		forms = append(forms, lit(`\t`))
	}
	return alt(forms...)
}

// numberNode is any JSON number.
func numberNode() *node {
	return seq(opt(lit("-")), uintNode(), opt(fractionNode()), opt(exponentNode()))
}

var digit = byteClass(byteRange{'0', '9'})

func uintNode() *node {
	return alt(lit("0"), seq(byteClass(byteRange{'1', '9'}), star(digit)))
}
func fractionNode() *node { return seq(lit("."), plus(digit)) }
func exponentNode() *node {
	return seq(byteClass(byteRange{'e', 'e'}, byteRange{'E', 'E'}), opt(byteClass(byteRange{'+', '+'}, byteRange{'-', '-'})), plus(digit))
}

// schema compiles the schema at path (a JSON pointer into the document,
// for $ref and messages).
func (c *schemaCompiler) schema(s any, path string) (*node, error) {
	switch t := s.(type) {
	case bool:
		if t {
			return c.anyValue(), nil
		}
		return none(), nil
	case *object:
		if r, ok := t.get("$ref"); ok && c.onlyRef(t) {
			target, ok := r.(string)
			if !ok {
				return nil, fmt.Errorf("%s: $ref must be a string", path)
			}
			return c.refRule(target)
		}
		if vals, ok := listedValues(t); ok {
			if n, err := c.listed(t, vals); err == nil {
				return n, nil
			}
			// Values the validator cannot decide: the general path
			// compiles the schema or names what it cannot.
		}
		sc, err := c.normalize(t, path)
		if err != nil {
			return nil, err
		}
		return c.generate(sc, path)
	}
	return nil, fmt.Errorf("%s: a schema must be an object or a boolean, got %s", path, marshalCompact(s))
}

// listed is the grammar of a schema whose values are listed: the values
// that validate against all of it.
func (c *schemaCompiler) listed(o *object, vals []any) (*node, error) {
	var branches []*node
	seen := map[string]bool{}
	for _, v := range vals {
		text := marshalCompact(v)
		if seen[text] {
			continue
		}
		seen[text] = true
		ok, err := c.validates(v, o, 0)
		if err != nil {
			return nil, err
		}
		if ok {
			branches = append(branches, c.valueNode(v))
		}
	}
	return alt(branches...), nil
}

// valueNode is the JSON value v with whitespace wherever JSON allows it
// (compact and indented texts alike); keys come in v's order.
func (c *schemaCompiler) valueNode(v any) *node {
	sep := seq(c.ws(), lit(","), c.ws())
	switch t := v.(type) {
	case []any:
		if len(t) == 0 {
			return seq(lit("["), c.ws(), lit("]"))
		}
		parts := []*node{lit("["), c.ws()}
		for i, x := range t {
			if i > 0 {
				parts = append(parts, sep)
			}
			parts = append(parts, c.valueNode(x))
		}
		return seq(append(parts, c.ws(), lit("]"))...)
	case *object:
		if len(t.keys) == 0 {
			return seq(lit("{"), c.ws(), lit("}"))
		}
		parts := []*node{lit("{"), c.ws()}
		for i, k := range t.keys {
			if i > 0 {
				parts = append(parts, sep)
			}
			parts = append(parts, lit(quoteJSON(k)), c.ws(), lit(":"), c.ws(), c.valueNode(t.vals[k]))
		}
		return seq(append(parts, c.ws(), lit("}"))...)
	case json.Number:
		return numberSpellings(t)
	}
	return lit(marshalCompact(v))
}

// numberSpellings is the number n as written, and in its plain decimal
// form with any trailing fraction zeros (2, 2.0, 2.00; 1.5, 1.50; 0 and
// -0): JSON Schema compares numbers by value. Exponent forms other than
// n's own are not written.
func numberSpellings(n json.Number) *node {
	forms := []*node{lit(n.String())}
	r, ok := new(big.Rat).SetString(n.String())
	if !ok {
		return forms[0]
	}
	neg := r.Sign() < 0
	abs := new(big.Rat).Abs(r)
	digits := 0
	for d := new(big.Rat).Set(abs); !d.IsInt(); d.Mul(d, big.NewRat(10, 1)) {
		if digits++; digits > 40 {
			return forms[0]
		}
	}
	plain := abs.FloatString(digits)
	if len(plain) > 60 {
		return forms[0]
	}
	sign := empty()
	if neg {
		sign = lit("-")
	} else if r.Sign() == 0 {
		sign = opt(lit("-"))
	}
	if digits == 0 {
		forms = append(forms, seq(sign, lit(plain), opt(seq(lit("."), plus(lit("0"))))))
	} else {
		forms = append(forms, seq(sign, lit(plain), star(lit("0"))))
	}
	return alt(forms...)
}

// onlyRef: $ref with nothing but annotations beside it.
func (c *schemaCompiler) onlyRef(o *object) bool {
	for _, k := range o.keys {
		if k != "$ref" && !annotationKeywords[k] && !isUnknownKeyword(k) {
			return false
		}
	}
	return true
}

// refRule compiles a $ref target once, as a rule, so recursive schemas
// become recursive rules.
func (c *schemaCompiler) refRule(target string) (*node, error) {
	if id, ok := c.refRules[target]; ok {
		return ref(id), nil
	}
	s, err := c.resolve(target)
	if err != nil {
		return nil, err
	}
	id := c.b.declare("ref " + target)
	c.refRules[target] = id
	n, err := c.schema(s, target)
	if err != nil {
		return nil, err
	}
	c.b.define(id, n)
	return ref(id), nil
}

// resolve follows a local JSON pointer ("#", "#/definitions/x").
func (c *schemaCompiler) resolve(target string) (any, error) {
	if !strings.HasPrefix(target, "#") {
		return nil, &UnsupportedError{Keyword: "$ref", Reason: fmt.Sprintf("only references inside the schema (#/...) are supported, not %q", target)}
	}
	cur := c.doc
	ptr := strings.TrimPrefix(target, "#")
	if ptr == "" {
		return cur, nil
	}
	if !strings.HasPrefix(ptr, "/") {
		return nil, &UnsupportedError{Keyword: "$ref", Reason: fmt.Sprintf("anchors (%q) are not supported; use a JSON pointer", target)}
	}
	for _, part := range strings.Split(ptr[1:], "/") {
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		switch t := cur.(type) {
		case *object:
			v, ok := t.get(part)
			if !ok {
				return nil, fmt.Errorf("$ref %q: no %q in the schema", target, part)
			}
			cur = v
		case []any:
			var i int
			if _, err := fmt.Sscanf(part, "%d", &i); err != nil || i < 0 || i >= len(t) {
				return nil, fmt.Errorf("$ref %q: bad index %q", target, part)
			}
			cur = t[i]
		default:
			return nil, fmt.Errorf("$ref %q: cannot descend into %s", target, marshalCompact(cur))
		}
	}
	return cur, nil
}

// knownKeywords are the keywords the compiler reads or refuses; anything
// else is an annotation.
var knownKeywords = func() map[string]bool {
	m := map[string]bool{}
	for _, k := range []string{"type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "not",
		"patternProperties", "propertyNames", "minProperties", "maxProperties",
		"dependencies", "dependentRequired", "dependentSchemas", "multipleOf", "if", "then", "else",
		"properties", "required", "additionalProperties", "items", "prefixItems", "additionalItems",
		"minItems", "maxItems", "uniqueItems", "contains", "minLength", "maxLength", "pattern", "format",
		"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"} {
		m[k] = true
	}
	for _, k := range refusedKeywords {
		m[k] = true
	}
	return m
}()

func isUnknownKeyword(k string) bool { return !knownKeywords[k] && !annotationKeywords[k] }

// jsonNumber reads a JSON number keyword.
func jsonNumber(v any, name, path string) (json.Number, error) {
	n, ok := v.(json.Number)
	if !ok {
		return "", fmt.Errorf("%s: %s must be a number, got %s", path, name, marshalCompact(v))
	}
	return n, nil
}

func jsonInt(v any, name, path string) (int, error) {
	n, err := jsonNumber(v, name, path)
	if err != nil {
		return 0, err
	}
	i, err := n.Int64()
	if err != nil {
		f, ferr := n.Float64()
		if ferr != nil || f != float64(int64(f)) {
			return 0, fmt.Errorf("%s: %s must be an integer, got %s", path, name, n)
		}
		i = int64(f)
	}
	if i < 0 {
		return 0, fmt.Errorf("%s: %s must be >= 0, got %d", path, name, i)
	}
	return int(min(i, 1<<30)), nil
}

func containsString(list []string, s string) bool { return slices.Contains(list, s) }
