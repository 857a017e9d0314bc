package grammar

import (
	"encoding/json"
	"fmt"
	"math/big"
	"regexp"
	"slices"
	"strings"
)

type typeSet uint8

const (
	tNull typeSet = 1 << iota
	tBool
	tObject
	tArray
	tString
	tNumber
	tInteger
	tAll = tNull | tBool | tObject | tArray | tString | tNumber | tInteger
)

var typeNames = map[string]typeSet{
	"null": tNull, "boolean": tBool, "object": tObject, "array": tArray,
	"string": tString, "number": tNumber, "integer": tInteger,
}

// bound is a numeric bound; exclusive: the bound itself is not allowed.
type bound struct {
	v         *big.Rat
	exclusive bool
}

// objPart is one conjunct's view of an object: its properties and what it
// says of the others (nil: nothing, i.e. allowed).
type objPart struct {
	props   []string
	schemas map[string]any
	addl    any
}

// sch is a schema normalised for generation: the conjunction of a schema's
// keywords and of its allOf members. anyOfs are disjunctions still to be
// distributed.
type sch struct {
	path     string
	types    typeSet
	enum     []any
	hasEnum  bool
	minLen   int
	maxLen   int // -1: none
	patterns []string
	formats  []string
	lower    *bound
	upper    *bound
	prefix   []any
	items    []any // conjuncts for items past the prefix
	minItems int
	maxItems int // -1: none
	objParts []objPart
	required []string
	anyOfs   [][]any
	// kw* record keywords of one type, for schemas without "type".
	kwObject, kwArray, kwString, kwNumber bool
}

func newSch(path string) *sch {
	return &sch{path: path, types: tAll, maxLen: -1, maxItems: -1}
}

// normalize reads o's keywords (and allOf members, merged in).
func (c *schemaCompiler) normalize(o *object, path string) (*sch, error) {
	s := newSch(path)
	if err := c.mergeInto(s, o, path); err != nil {
		return nil, err
	}
	return s, nil
}

func (c *schemaCompiler) mergeSchema(s *sch, v any, path string) error {
	switch t := v.(type) {
	case bool:
		if !t {
			s.types = 0
		}
		return nil
	case *object:
		return c.mergeInto(s, t, path)
	}
	return fmt.Errorf("%s: a schema must be an object or a boolean", path)
}

func (c *schemaCompiler) mergeInto(s *sch, o *object, path string) error {
	for _, k := range refusedKeywords {
		if _, ok := o.get(k); ok {
			return &UnsupportedError{Keyword: k, Reason: fmt.Sprintf("at %s", path)}
		}
	}
	if r, ok := o.get("$ref"); ok {
		target, ok := r.(string)
		if !ok {
			return fmt.Errorf("%s: $ref must be a string", path)
		}
		if c.inlining[target] > 2 {
			return &UnsupportedError{Keyword: "$ref", Reason: fmt.Sprintf("%q is recursive and combined with other keywords at %s", target, path)}
		}
		t, err := c.resolve(target)
		if err != nil {
			return err
		}
		c.inlining[target]++
		err = c.mergeSchema(s, t, target)
		c.inlining[target]--
		if err != nil {
			return err
		}
	}
	if v, ok := o.get("type"); ok {
		var ts typeSet
		switch t := v.(type) {
		case string:
			ts = typeNames[t]
			if ts == 0 {
				return fmt.Errorf("%s: unknown type %q", path, t)
			}
		case []any:
			for _, x := range t {
				name, _ := x.(string)
				if typeNames[name] == 0 {
					return fmt.Errorf("%s: unknown type %s", path, marshalCompact(x))
				}
				ts |= typeNames[name]
			}
		default:
			return fmt.Errorf("%s: type must be a string or a list", path)
		}
		if ts&tNumber != 0 {
			ts |= tInteger
		}
		s.types &= ts // integer ∩ number is integer: both sets hold tInteger
	}
	if v, ok := o.get("enum"); ok {
		list, ok := v.([]any)
		if !ok {
			return fmt.Errorf("%s: enum must be a list", path)
		}
		s.intersectEnum(list)
	}
	if v, ok := o.get("const"); ok {
		s.intersectEnum([]any{v})
	}
	if err := c.mergeString(s, o, path); err != nil {
		return err
	}
	if err := c.mergeNumber(s, o, path); err != nil {
		return err
	}
	if err := c.mergeArray(s, o, path); err != nil {
		return err
	}
	if err := c.mergeObject(s, o, path); err != nil {
		return err
	}
	if v, ok := o.get("allOf"); ok {
		list, ok := v.([]any)
		if !ok {
			return fmt.Errorf("%s: allOf must be a list", path)
		}
		for i, sub := range list {
			if err := c.mergeSchema(s, sub, fmt.Sprintf("%s/allOf/%d", path, i)); err != nil {
				return err
			}
		}
	}
	if v, ok := o.get("anyOf"); ok {
		list, ok := v.([]any)
		if !ok || len(list) == 0 {
			return fmt.Errorf("%s: anyOf must be a non-empty list", path)
		}
		s.anyOfs = append(s.anyOfs, list)
	}
	if v, ok := o.get("oneOf"); ok {
		list, ok := v.([]any)
		if !ok || len(list) == 0 {
			return fmt.Errorf("%s: oneOf must be a non-empty list", path)
		}
		if exclusive, ok := requiredOnlyBranches(list); ok {
			s.anyOfs = append(s.anyOfs, exclusive)
			return nil
		}
		if err := c.checkDisjoint(list, path); err != nil {
			return err
		}
		s.anyOfs = append(s.anyOfs, list)
	}
	return nil
}

func (s *sch) intersectEnum(list []any) {
	if !s.hasEnum {
		s.hasEnum = true
		s.enum = slices.Clone(list)
		return
	}
	keep := map[string]bool{}
	for _, v := range list {
		keep[marshalCompact(v)] = true
	}
	s.enum = slices.DeleteFunc(s.enum, func(v any) bool { return !keep[marshalCompact(v)] })
}

func (c *schemaCompiler) mergeString(s *sch, o *object, path string) error {
	if v, ok := o.get("minLength"); ok {
		n, err := jsonInt(v, "minLength", path)
		if err != nil {
			return err
		}
		s.minLen = max(s.minLen, n)
		s.kwString = true
	}
	if v, ok := o.get("maxLength"); ok {
		n, err := jsonInt(v, "maxLength", path)
		if err != nil {
			return err
		}
		if s.maxLen < 0 || n < s.maxLen {
			s.maxLen = n
		}
		s.kwString = true
	}
	if v, ok := o.get("pattern"); ok {
		p, ok := v.(string)
		if !ok {
			return fmt.Errorf("%s: pattern must be a string", path)
		}
		if !slices.Contains(s.patterns, p) {
			s.patterns = append(s.patterns, p)
		}
		s.kwString = true
	}
	if v, ok := o.get("format"); ok {
		f, _ := v.(string)
		if assertedFormats[f] {
			return &UnsupportedError{Keyword: "format", Reason: fmt.Sprintf("format %q at %s", f, path)}
		}
		if _, known := formatPatterns[f]; known && !slices.Contains(s.formats, f) {
			s.formats = append(s.formats, f)
			s.kwString = true
		}
	}
	return nil
}

func (c *schemaCompiler) mergeNumber(s *sch, o *object, path string) error {
	tighten := func(name string, lower bool, exclusive bool) error {
		v, ok := o.get(name)
		if !ok {
			return nil
		}
		if b, isBool := v.(bool); isBool {
			// Draft 4: exclusiveMinimum/Maximum are flags on minimum/maximum.
			if b {
				if lower && s.lower != nil {
					s.lower.exclusive = true
				} else if !lower && s.upper != nil {
					s.upper.exclusive = true
				}
			}
			return nil
		}
		n, err := jsonNumber(v, name, path)
		if err != nil {
			return err
		}
		r, ok := new(big.Rat).SetString(n.String())
		if !ok {
			return fmt.Errorf("%s: %s is not a number", path, name)
		}
		s.kwNumber = true
		nb := &bound{v: r, exclusive: exclusive}
		cur := &s.upper
		if lower {
			cur = &s.lower
		}
		if *cur == nil {
			*cur = nb
			return nil
		}
		cmp := r.Cmp((*cur).v)
		if lower && (cmp > 0 || cmp == 0 && exclusive) || !lower && (cmp < 0 || cmp == 0 && exclusive) {
			*cur = nb
		}
		return nil
	}
	for _, k := range []struct {
		name             string
		lower, exclusive bool
	}{{"minimum", true, false}, {"maximum", false, false}, {"exclusiveMinimum", true, true}, {"exclusiveMaximum", false, true}} {
		if err := tighten(k.name, k.lower, k.exclusive); err != nil {
			return err
		}
	}
	return nil
}

func (c *schemaCompiler) mergeArray(s *sch, o *object, path string) error {
	if v, ok := o.get("uniqueItems"); ok && v == true {
		return &UnsupportedError{Keyword: "uniqueItems", Reason: fmt.Sprintf("at %s", path)}
	}
	var prefix []any
	hasPrefix := false
	if v, ok := o.get("prefixItems"); ok {
		list, ok := v.([]any)
		if !ok {
			return fmt.Errorf("%s: prefixItems must be a list", path)
		}
		prefix, hasPrefix = list, true
	}
	var rest any
	if v, ok := o.get("items"); ok {
		if list, isList := v.([]any); isList {
			prefix, hasPrefix = list, true // draft 4-7 tuple form
			if a, ok := o.get("additionalItems"); ok {
				rest = a
			}
		} else {
			rest = v
		}
	}
	if hasPrefix {
		if len(s.prefix) > 0 {
			return &UnsupportedError{Keyword: "prefixItems", Reason: fmt.Sprintf("two tuple schemas combined at %s", path)}
		}
		s.prefix = prefix
		s.kwArray = true
	}
	if rest != nil {
		s.items = append(s.items, rest)
		s.kwArray = true
	}
	if v, ok := o.get("minItems"); ok {
		n, err := jsonInt(v, "minItems", path)
		if err != nil {
			return err
		}
		s.minItems = max(s.minItems, n)
		s.kwArray = true
	}
	if v, ok := o.get("maxItems"); ok {
		n, err := jsonInt(v, "maxItems", path)
		if err != nil {
			return err
		}
		if s.maxItems < 0 || n < s.maxItems {
			s.maxItems = n
		}
		s.kwArray = true
	}
	return nil
}

func (c *schemaCompiler) mergeObject(s *sch, o *object, path string) error {
	part := objPart{schemas: map[string]any{}}
	has := false
	if v, ok := o.get("properties"); ok {
		props, ok := v.(*object)
		if !ok {
			return fmt.Errorf("%s: properties must be an object", path)
		}
		part.props = props.keys
		part.schemas = props.vals
		has = true
	}
	if v, ok := o.get("additionalProperties"); ok {
		part.addl = v
		has = true
	} else if c.opts.StrictProperties && has {
		part.addl = false
	}
	if v, ok := o.get("required"); ok {
		list, ok := v.([]any)
		if !ok {
			return fmt.Errorf("%s: required must be a list", path)
		}
		for _, x := range list {
			name, ok := x.(string)
			if !ok {
				return fmt.Errorf("%s: required must list strings", path)
			}
			if !slices.Contains(s.required, name) {
				s.required = append(s.required, name)
			}
		}
		s.kwObject = true
	}
	if has {
		s.objParts = append(s.objParts, part)
		s.kwObject = true
	}
	return nil
}

// checkDisjoint accepts oneOf only where no instance can match two
// branches, so that treating it as anyOf is exact: branches of disjoint
// types, or with distinct const/enum values.
func (c *schemaCompiler) checkDisjoint(list []any, path string) error {
	type sig struct {
		types typeSet
		enum  map[string]bool // nil: any value of the types
	}
	var sigs []sig
	for i, b := range list {
		o, ok := b.(*object)
		if !ok {
			return &UnsupportedError{Keyword: "oneOf", Reason: fmt.Sprintf("branch %d at %s is not an object schema", i, path)}
		}
		s := newSch(path)
		if err := c.mergeInto(s, o, fmt.Sprintf("%s/oneOf/%d", path, i)); err != nil {
			return err
		}
		ts := s.effectiveTypes()
		if ts&tInteger != 0 {
			ts |= tNumber // 1 and 1.0 are one number
		}
		if ts&tNumber != 0 {
			ts |= tInteger
		}
		g := sig{types: ts}
		if s.hasEnum {
			g.enum = map[string]bool{}
			for _, v := range s.enum {
				g.enum[marshalCompact(v)] = true
			}
		}
		sigs = append(sigs, g)
	}
	for i := range sigs {
		for j := range i {
			a, b := sigs[i], sigs[j]
			if a.types&b.types == 0 {
				continue
			}
			if a.enum != nil && b.enum != nil {
				overlap := false
				for k := range a.enum {
					if b.enum[k] {
						overlap = true
					}
				}
				if !overlap {
					continue
				}
			}
			return &UnsupportedError{Keyword: "oneOf", Reason: fmt.Sprintf("branches %d and %d at %s may both match one value (only oneOf of distinct types or values is supported)", j, i, path)}
		}
	}
	return nil
}

// effectiveTypes narrows a schema without "type" to the types its keywords
// speak of.
func (s *sch) effectiveTypes() typeSet {
	ts := s.types
	if ts != tAll {
		return ts
	}
	var kw typeSet
	if s.kwObject {
		kw |= tObject
	}
	if s.kwArray {
		kw |= tArray
	}
	if s.kwString {
		kw |= tString
	}
	if s.kwNumber {
		kw |= tNumber | tInteger
	}
	if kw != 0 {
		return kw
	}
	return ts
}

// clone copies s for distributing one anyOf.
func (s *sch) clone() *sch {
	t := *s
	t.enum = slices.Clone(s.enum)
	t.patterns = slices.Clone(s.patterns)
	t.formats = slices.Clone(s.formats)
	t.items = slices.Clone(s.items)
	t.objParts = slices.Clone(s.objParts)
	t.required = slices.Clone(s.required)
	t.anyOfs = slices.Clone(s.anyOfs)
	if s.lower != nil {
		b := *s.lower
		t.lower = &b
	}
	if s.upper != nil {
		b := *s.upper
		t.upper = &b
	}
	return &t
}

// trivial: s says nothing but its anyOfs.
func (s *sch) trivial() bool {
	return s.types == tAll && !s.hasEnum && s.minLen == 0 && s.maxLen < 0 && len(s.patterns) == 0 &&
		len(s.formats) == 0 && s.lower == nil && s.upper == nil && len(s.prefix) == 0 && len(s.items) == 0 &&
		s.minItems == 0 && s.maxItems < 0 && len(s.objParts) == 0 && len(s.required) == 0
}

// satisfiesScalar checks an enum value against the scalar keywords beside
// it (the grammar emits enum values verbatim).
func (s *sch) satisfiesScalar(v any) bool {
	ts := s.types
	switch t := v.(type) {
	case nil:
		return ts&tNull != 0
	case bool:
		return ts&tBool != 0
	case string:
		if ts&tString == 0 {
			return false
		}
		n := len([]rune(t))
		if n < s.minLen || s.maxLen >= 0 && n > s.maxLen {
			return false
		}
		for _, p := range s.patterns {
			re, err := regexp.Compile(p)
			if err != nil || !re.MatchString(t) {
				return false
			}
		}
		return len(s.formats) == 0
	case json.Number:
		r, ok := new(big.Rat).SetString(t.String())
		if !ok {
			return false
		}
		isInt := r.IsInt() && !strings.ContainsAny(t.String(), ".eE")
		if ts&tNumber == 0 && !(ts&tInteger != 0 && isInt) {
			return false
		}
		if s.lower != nil {
			if cmp := r.Cmp(s.lower.v); cmp < 0 || cmp == 0 && s.lower.exclusive {
				return false
			}
		}
		if s.upper != nil {
			if cmp := r.Cmp(s.upper.v); cmp > 0 || cmp == 0 && s.upper.exclusive {
				return false
			}
		}
		return true
	case []any:
		return ts&tArray != 0 && len(s.prefix) == 0 && len(s.items) == 0 && len(t) >= s.minItems && (s.maxItems < 0 || len(t) <= s.maxItems)
	case *object:
		return ts&tObject != 0 && len(s.objParts) == 0 && len(s.required) == 0
	}
	return false
}

// assertedFormats are formats that validators check but the compiler has
// no pattern for: ignoring them would let invalid strings through. Other
// unknown formats ("int32", "textarea") are annotations.
var assertedFormats = map[string]bool{
	"regex": true, "ipv6": true, "iri": true, "iri-reference": true, "uri-template": true,
	"json-pointer": true, "relative-json-pointer": true, "duration": true, "idn-email": true,
	"idn-hostname": true,
}

// requiredOnlyBranches handles oneOf [{"required": [...]}, ...], "exactly
// one of these property sets": branch i becomes "its properties present,
// and every property another branch requires (and it does not) absent".
// That is stricter than oneOf (one missing property would do) but never
// lets two branches match. A branch whose requirements contain another's
// can never match alone and is dropped.
func requiredOnlyBranches(list []any) ([]any, bool) {
	sets := make([][]string, len(list))
	for i, b := range list {
		o, ok := b.(*object)
		if !ok {
			return nil, false
		}
		for _, k := range o.keys {
			if k != "required" && !annotationKeywords[k] {
				return nil, false
			}
		}
		req, _ := o.get("required")
		names, ok := req.([]any)
		if !ok {
			return nil, false
		}
		for _, n := range names {
			name, ok := n.(string)
			if !ok {
				return nil, false
			}
			sets[i] = append(sets[i], name)
		}
	}
	var out []any
	for i, mine := range sets {
		props := &object{vals: map[string]any{}}
		dropped := false
		for j, theirs := range sets {
			if i == j {
				continue
			}
			extra := 0
			for _, n := range theirs {
				if !slices.Contains(mine, n) {
					extra++
					if _, dup := props.vals[n]; !dup {
						props.keys = append(props.keys, n)
						props.vals[n] = false
					}
				}
			}
			if extra == 0 {
				dropped = true // j matches whenever i does
			}
		}
		if dropped {
			continue
		}
		required := make([]any, len(mine))
		for k, n := range mine {
			required[k] = n
		}
		out = append(out, &object{keys: []string{"required", "properties"}, vals: map[string]any{"required": required, "properties": props}})
	}
	return out, len(out) > 0
}
