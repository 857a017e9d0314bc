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
	// patterns (patternProperties) with their schemas, in order.
	patterns       []string
	patternSchemas []any
	propertyNames  any // nil: none
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
	// contains: schemas some element must match (containsArray says which
	// arrays compile).
	contains []any
	minItems int
	maxItems int // -1: none
	objParts []objPart
	required []string
	// multipleOf and, from not, notMultipleOf: steps numbers must and
	// must not be multiples of.
	multipleOf, notMultipleOf []*big.Rat
	// minProps, maxProps bound the number of members (maxProps < 0: none).
	minProps, maxProps int
	anyOfs             [][]any
	// notStrings are schemas whose strings are excluded (from not);
	// notValues are other values excluded.
	notStrings []any
	notValues  []any
	// unique: uniqueItems (arrays.go says which arrays compile).
	unique bool
	// members: members the object must have (from negated object
	// keywords, jsonschema_member.go).
	members []memberReq
	// kw* record keywords of one type, for schemas without "type".
	kwObject, kwArray, kwString, kwNumber bool
}

func newSch(path string) *sch {
	return &sch{path: path, types: tAll, maxLen: -1, maxItems: -1, maxProps: -1}
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
	if m, ok := o.vals[memberKeyword].(*memberReq); ok {
		s.types &= tObject
		s.members = append(s.members, *m)
		s.kwObject = true
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
	if v, ok := o.get("not"); ok {
		if err := c.mergeNot(s, v, path+"/not", 0); err != nil {
			return err
		}
	}
	if err := c.mergeDependencies(s, o, path); err != nil {
		return err
	}
	if err := c.mergeIf(s, o, path); err != nil {
		return err
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
		narrowed, err := c.checkDisjoint(s, list, path)
		if err != nil {
			return err
		}
		if c.oneOfLists == nil {
			c.oneOfLists = map[*any]bool{}
		}
		c.oneOfLists[&narrowed[0]] = true
		s.anyOfs = append(s.anyOfs, narrowed)
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
	if v, ok := o.get("multipleOf"); ok {
		n, err := jsonNumber(v, "multipleOf", path)
		if err != nil {
			return err
		}
		r, ok := new(big.Rat).SetString(n.String())
		if !ok || r.Sign() <= 0 {
			return fmt.Errorf("%s: multipleOf must be a positive number", path)
		}
		s.multipleOf = append(s.multipleOf, r)
		s.kwNumber = true
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
		s.unique = true
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
	if v, ok := o.get("contains"); ok {
		s.contains = append(s.contains, v)
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
	if v, ok := o.get("patternProperties"); ok {
		pp, ok := v.(*object)
		if !ok {
			return fmt.Errorf("%s: patternProperties must be an object", path)
		}
		for _, k := range pp.keys {
			part.patterns = append(part.patterns, k)
			part.patternSchemas = append(part.patternSchemas, pp.vals[k])
		}
		has = len(pp.keys) > 0 || has
	}
	if v, ok := o.get("propertyNames"); ok {
		part.propertyNames = v
		has = true
	}
	if v, ok := o.get("additionalProperties"); ok {
		part.addl = v
		has = true
	} else if c.opts.StrictProperties && has {
		part.addl = false
	}
	if v, ok := o.get("minProperties"); ok {
		n, err := jsonInt(v, "minProperties", path)
		if err != nil {
			return err
		}
		s.minProps = max(s.minProps, n)
		s.kwObject = true
	}
	if v, ok := o.get("maxProperties"); ok {
		n, err := jsonInt(v, "maxProperties", path)
		if err != nil {
			return err
		}
		if s.maxProps < 0 || n < s.maxProps {
			s.maxProps = n
		}
		s.kwObject = true
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

// checkDisjoint accepts oneOf only where no value the grammar writes for
// one branch can validate against another, so that treating it as anyOf is
// exact: what a branch generates (its types, narrowed by its keywords) and
// what another accepts (its declared types, or its enum's) do not meet, or
// their enum/const values differ, or they are objects a required property
// tells apart (absent from the other, or with disjoint values), or, with
// what ctx (the keywords beside oneOf) says of every value, apart proves
// them apart. Branches not shown apart get exclusions. It returns the
// branches to distribute, each untyped one narrowed to the types its
// keywords speak of (the generated types the check relied on).
func (c *schemaCompiler) checkDisjoint(ctx *sch, list []any, path string) ([]any, error) {
	var schs []*sch
	for i, b := range list {
		o, ok := b.(*object)
		if !ok {
			return nil, &UnsupportedError{Keyword: "oneOf", Reason: fmt.Sprintf("branch %d at %s is not an object schema", i, path)}
		}
		s := newSch(path)
		if err := c.mergeInto(s, o, fmt.Sprintf("%s/oneOf/%d", path, i)); err != nil {
			return nil, err
		}
		schs = append(schs, s)
	}
	// views[i]: ctx and branch i as validated (0) and as generated (1),
	// read when the cheap check fails.
	views := make([][2]*sch, len(list))
	view := func(i, generated int) *sch {
		if views[i][0] == nil {
			sem := c.analysisMerge(ctx, list[i], fmt.Sprintf("%s/oneOf/%d", path, i))
			if sem == nil {
				return nil
			}
			gen := sem.clone()
			gen.types &= schs[i].effectiveTypes()
			views[i] = [2]*sch{sem, gen}
		}
		return views[i][generated]
	}
	provedApart := func(gen, sem int) bool {
		notRefs := c.notRefs
		defer func() { c.notRefs = notRefs }()
		g, s := view(gen, 1), view(sem, 0)
		steps := maxApartSteps
		return g != nil && s != nil && c.apart(g, s, &steps, 0)
	}
	excl := make([][]any, len(list))
	for i := range schs {
		for j := range i {
			if c.disjoint(schs[i], schs[j], 0) {
				continue
			}
			for _, p := range [][2]int{{i, j}, {j, i}} {
				if provedApart(p[0], p[1]) {
					continue
				}
				x, err := c.exclusion(schs[p[0]], schs[p[1]], list[p[1]], fmt.Sprintf("%s/oneOf/%d", path, p[1]))
				if err != nil {
					return nil, &UnsupportedError{Keyword: "oneOf", Reason: fmt.Sprintf("branches %d and %d at %s may both match one value, and branch %d cannot be excluded from branch %d (%v)", j, i, path, p[1], p[0], err)}
				}
				excl[p[0]] = append(excl[p[0]], x)
			}
		}
	}
	out := slices.Clone(list)
	for i, s := range schs {
		all := []any{list[i]}
		if ts := s.effectiveTypes(); ts != s.types {
			all = append(all, typeSchema(ts))
		}
		all = append(all, excl[i]...)
		if len(all) > 1 {
			out[i] = &object{keys: []string{"allOf"}, vals: map[string]any{"allOf": all}}
		}
	}
	return out, nil
}

// maxExclusionDisjuncts bounds the alternatives one exclusion adds to a
// oneOf branch (each multiplies the branch's alternatives).
const maxExclusionDisjuncts = 6

// maxExactNegation bounds the alternatives "not b" may add when no
// property tells the branches apart. "not b" is exact, so a larger bound
// only costs grammar size: each alternative is one copy of branch a.
const maxExactNegation = 16

// exclusion is a schema no value of branch a that it admits validates
// against branch b (bv, normalised as b): "not b" where its negation is
// small, else the members that tell objects apart: a property b forbids,
// or one both constrain with values apart, made present; a property b
// requires (and a does not) made absent. The second form is stricter than oneOf (a value
// of a that misses b some other way is refused) but never admits a value
// of both.
func (c *schemaCompiler) exclusion(a, b *sch, bv any, path string) (any, error) {
	if a.hasEnum {
		// a's values are listed: keep those b rejects.
		keep := []any{}
		var err error
		for _, v := range a.enum {
			var ok bool
			if ok, err = c.validates(v, bv, 0); err != nil {
				break
			}
			if !ok {
				keep = append(keep, v)
			}
		}
		if err == nil {
			return obj("enum", keep), nil
		}
	}
	exact := notSchema(bv)
	size, err := c.negationSize(bv, a.types, path)
	if err == nil && size <= 2 {
		return exact, nil
	}
	var ds []any
	if a.generatedTypes()&b.acceptedTypes()&^tObject == 0 {
		for _, p := range a.namedProperties() {
			if slices.Contains(a.required, p) {
				continue
			}
			if b.forbids(p) {
				ds = append(ds, obj("type", "object", "required", []any{p}))
				continue
			}
			if !slices.Contains(b.namedProperties(), p) {
				continue
			}
			va, vb := c.propertySch(a, p), c.propertySch(b, p)
			if va != nil && vb != nil && c.valuesApart(va, vb) {
				ds = append(ds, obj("type", "object", "required", []any{p}))
			}
		}
		for _, p := range b.required {
			if !slices.Contains(a.required, p) && !a.forbids(p) {
				ds = append(ds, obj("type", "object", "properties", obj(p, false)))
			}
		}
	}
	switch {
	case len(ds) > 0:
		return obj("anyOf", ds[:min(len(ds), maxExclusionDisjuncts)]), nil
	case err != nil:
		return nil, err
	case size > maxExactNegation:
		return nil, fmt.Errorf("its negation has %d alternatives", size)
	}
	return exact, nil
}

// negationSize is the number of alternatives "not v" adds, or why it
// cannot be compiled.
func (c *schemaCompiler) negationSize(v any, types typeSet, path string) (int, error) {
	s := newSch(path)
	s.types = types
	if err := c.mergeNot(s, v, path, 0); err != nil {
		return 0, err
	}
	if err := c.probe(s, path, 0); err != nil {
		return 0, err
	}
	if len(s.anyOfs) == 0 {
		return 1, nil
	}
	// Alternatives of no value of types (not {"type": "object", ...}
	// beside an object branch) cost nothing.
	n := 1
	for _, list := range s.anyOfs {
		live := 0
		for _, m := range list {
			t := newSch(path)
			t.types = types
			if c.mergeSchema(t, m, path) != nil || t.types != 0 {
				live++
			}
		}
		n *= live
	}
	return n, nil
}

// probe merges the alternatives of s's anyOfs (a few levels deep), so that
// what they cannot compile is known before they are distributed.
func (c *schemaCompiler) probe(s *sch, path string, depth int) error {
	if depth > 3 {
		return nil
	}
	for _, v := range s.notValues {
		if _, ok := v.(bool); !ok && v != nil && !s.hasEnum {
			return &UnsupportedError{Keyword: "not", Reason: fmt.Sprintf("excluding the value %s at %s", marshalCompact(v), path)}
		}
	}
	for _, list := range s.anyOfs {
		for _, m := range list {
			t := newSch(path)
			t.types = s.types
			if err := c.mergeSchema(t, m, path); err != nil {
				return err
			}
			if err := c.probe(t, path, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// namedProperties are the properties s names.
func (s *sch) namedProperties() []string {
	var out []string
	for _, part := range s.objParts {
		for _, p := range part.props {
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	return out
}

// typeSchema is {"type": [...]} of ts.
func typeSchema(ts typeSet) *object {
	var names []any
	for _, n := range []string{"null", "boolean", "object", "array", "string", "number", "integer"} {
		if t := typeNames[n]; ts&t != 0 && !(n == "integer" && ts&tNumber != 0) {
			names = append(names, n)
		}
	}
	return &object{keys: []string{"type"}, vals: map[string]any{"type": names}}
}

// widen: 1 and 1.0 are one number, so integer and number meet.
func widen(ts typeSet) typeSet {
	if ts&(tInteger|tNumber) != 0 {
		ts |= tInteger | tNumber
	}
	return ts
}

// acceptedTypes are the types of the values s validates: its declared
// types, or its enum's values' types.
func (s *sch) acceptedTypes() typeSet {
	if !s.hasEnum {
		return widen(s.types)
	}
	var ts typeSet
	for _, v := range s.enum {
		ts |= valueTypes(v)
	}
	return ts & widen(s.types)
}

// generatedTypes are the types of the values the grammar writes for s.
func (s *sch) generatedTypes() typeSet {
	if s.hasEnum {
		return s.acceptedTypes()
	}
	return widen(s.effectiveTypes())
}

// disjoint reports that no value generated for one of a, b validates
// against the other.
func (c *schemaCompiler) disjoint(a, b *sch, depth int) bool {
	if len(a.anyOfs) > 0 || len(b.anyOfs) > 0 {
		return false // what the branches allow is not read here
	}
	if a.hasEnum && b.hasEnum {
		overlap := false
		for _, x := range a.enum {
			for _, y := range b.enum {
				overlap = overlap || jsonEqual(x, y)
			}
		}
		if !overlap {
			return true
		}
	}
	shared := a.generatedTypes()&b.acceptedTypes() | b.generatedTypes()&a.acceptedTypes()
	if shared == 0 {
		return true
	}
	if shared != tObject || depth > 2 {
		return false
	}
	return c.objectsApart(a, b, depth) || c.objectsApart(b, a, depth)
}

// objectsApart: a requires a property that b forbids, or that b requires
// too with values no value validates against both.
func (c *schemaCompiler) objectsApart(a, b *sch, depth int) bool {
	for _, p := range a.required {
		if b.forbids(p) {
			return true
		}
		if !slices.Contains(b.required, p) {
			continue
		}
		va, vb := c.propertySch(a, p), c.propertySch(b, p)
		if va != nil && vb != nil && c.valuesApart(va, vb) {
			return true
		}
	}
	return false
}

// valuesApart: no value validates against both (by types or enums).
func (c *schemaCompiler) valuesApart(a, b *sch) bool {
	if a.hasEnum && b.hasEnum {
		for _, x := range a.enum {
			for _, y := range b.enum {
				if jsonEqual(x, y) {
					return false
				}
			}
		}
		return true
	}
	return a.acceptedTypes()&b.acceptedTypes() == 0
}

// forbids: an object valid against s cannot have property p.
func (s *sch) forbids(p string) bool {
	for _, part := range s.objParts {
		if len(part.patterns) > 0 {
			continue
		}
		v, named := part.schemas[p]
		if named && v == false || !named && part.addl == false {
			return true
		}
	}
	return false
}

// propertySch is what s says of property p's value (nil: not read).
func (c *schemaCompiler) propertySch(s *sch, p string) *sch {
	v := newSch(s.path + "/properties/" + p)
	for _, part := range s.objParts {
		x, named := part.schemas[p]
		if !named {
			if len(part.patterns) > 0 {
				return nil
			}
			x = part.addl
		}
		if x == nil {
			continue
		}
		if c.mergeSchema(v, x, v.path) != nil {
			return nil
		}
	}
	return v
}

// effectiveTypes narrows a schema without "type" to the types its keywords
// speak of: what oneOf's branches generate (checkDisjoint). Elsewhere such
// a schema accepts every type, as JSON Schema says.
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
	t.contains = slices.Clone(s.contains)
	t.objParts = slices.Clone(s.objParts)
	t.required = slices.Clone(s.required)
	t.anyOfs = slices.Clone(s.anyOfs)
	t.notStrings = slices.Clone(s.notStrings)
	t.notValues = slices.Clone(s.notValues)
	t.members = slices.Clone(s.members)
	t.multipleOf = slices.Clone(s.multipleOf)
	t.notMultipleOf = slices.Clone(s.notMultipleOf)
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
		len(s.contains) == 0 && s.minItems == 0 && s.maxItems < 0 && len(s.objParts) == 0 && len(s.required) == 0 &&
		s.minProps == 0 && s.maxProps < 0 && len(s.multipleOf) == 0 && len(s.notMultipleOf) == 0 && !s.unique &&
		len(s.notStrings) == 0 && len(s.notValues) == 0 && len(s.members) == 0
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
		return s.numberAllowed(r)
	case []any:
		return ts&tArray != 0 && len(s.prefix) == 0 && len(s.items) == 0 && len(s.contains) == 0 && len(t) >= s.minItems && (s.maxItems < 0 || len(t) <= s.maxItems) &&
			(!s.unique || distinctValues(t))
	case *object:
		return ts&tObject != 0 && len(s.objParts) == 0 && len(s.required) == 0 && s.minProps == 0 && s.maxProps < 0 && len(s.members) == 0
	}
	return false
}

// numberAllowed: r is within s's bounds and steps.
func (s *sch) numberAllowed(r *big.Rat) bool {
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
	for _, m := range s.multipleOf {
		if !new(big.Rat).Quo(r, m).IsInt() {
			return false
		}
	}
	for _, m := range s.notMultipleOf {
		if new(big.Rat).Quo(r, m).IsInt() {
			return false
		}
	}
	return true
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
		// Typed: a value other than an object would match every branch.
		out = append(out, &object{keys: []string{"type", "required", "properties"}, vals: map[string]any{"type": "object", "required": required, "properties": props}})
	}
	return out, len(out) > 0
}

// stringKeywords are the keywords that apply to strings only.
var stringKeywords = map[string]bool{"pattern": true, "minLength": true, "maxLength": true, "format": true}

// mergeNot adds "not n" to s where it has an exact form: nothing (not
// {}), types taken away, values or strings excluded, properties that must
// not all be present. Anything else is refused.
func (c *schemaCompiler) mergeNot(s *sch, n any, path string, depth int) error {
	refuse := func(why string) error {
		return &UnsupportedError{Keyword: "not", Reason: fmt.Sprintf("%s at %s", why, path)}
	}
	o, ok := n.(*object)
	if !ok {
		if b, isBool := n.(bool); isBool {
			if b {
				s.types = 0
			}
			return nil
		}
		return fmt.Errorf("%s: a schema must be an object or a boolean", path)
	}
	if _, isMember := o.vals[memberKeyword].(*memberReq); isMember {
		return refuse("a required member negated")
	}
	var keys []string
	for _, k := range o.keys {
		if !annotationKeywords[k] && !isUnknownKeyword(k) {
			keys = append(keys, k)
		}
	}
	only := func(allowed ...string) bool {
		for _, k := range keys {
			if !slices.Contains(allowed, k) {
				return false
			}
		}
		return true
	}
	switch {
	case len(keys) == 0:
		s.types = 0 // not {}: no value
		return nil
	case only("$ref"):
		if depth > 8 {
			return refuse("a chain of references")
		}
		if c.notRefs++; c.notRefs > maxNotRefs {
			return refuse("more than 64 references negated (a recursive schema)")
		}
		target, _ := o.vals["$ref"].(string)
		t, err := c.resolve(target)
		if err != nil {
			return err
		}
		return c.mergeNot(s, t, target, depth+1)
	case only("type"):
		sub := newSch(path)
		if err := c.mergeInto(sub, o, path); err != nil {
			return err
		}
		gone := tAll &^ sub.types // the types "not" leaves
		if sub.types&tInteger != 0 && sub.types&tNumber == 0 && s.types&tNumber != 0 {
			// Numbers that are not integers: not multiples of 1.
			s.notMultipleOf = append(s.notMultipleOf, big.NewRat(1, 1))
		}
		s.types &= gone
		if gone&tNumber == 0 {
			s.types &^= tInteger
		}
		return nil
	case only("multipleOf"):
		sub := newSch(path)
		if err := c.mergeNumber(sub, o, path); err != nil {
			return err
		}
		s.notMultipleOf = append(s.notMultipleOf, sub.multipleOf...)
		s.types &= tNumber | tInteger // multipleOf holds of every non-number
		return nil
	case only("required", "allOf", "anyOf", "type"):
		// With "type": "object" beside them, non-objects also pass "not":
		// the sets alone say it only where s admits objects alone.
		_, typed := o.get("type")
		if required, ok := c.requiredSets(o); ok && (!typed || s.types&^tObject == 0) {
			return c.mergeNotRequired(s, required)
		}
	}
	typed := false
	if t, has := o.get("type"); has {
		if t != "string" {
			return c.mergeNotKeywords(s, o, keys, path)
		}
		typed = true
	}
	vals, listed := listedValues(o)
	stringy := false
	for _, k := range keys {
		switch {
		case stringKeywords[k]:
			stringy = true
		case k == "type" || k == "enum" || k == "const":
		default:
			return c.mergeNotKeywords(s, o, keys, path)
		}
	}
	s.notStrings = append(s.notStrings, o)
	switch {
	case listed && !typed:
		for _, v := range vals {
			if _, isStr := v.(string); !isStr {
				s.notValues = append(s.notValues, v)
			}
		}
	case stringy && !typed && !listed:
		s.types &= tString // the pattern holds of every non-string
	}
	return nil
}

// requiredSets reads {required: [...]}, an allOf of them (one set, their
// union) or an anyOf of them (several sets): "not" of it asks each set to
// miss a property.
func (c *schemaCompiler) requiredSets(o *object) ([][]string, bool) {
	names := func(v any) ([]string, bool) {
		list, ok := v.([]any)
		if !ok || len(list) == 0 {
			return nil, false
		}
		var out []string
		for _, x := range list {
			n, ok := x.(string)
			if !ok {
				return nil, false
			}
			out = append(out, n)
		}
		return out, true
	}
	members := func(v any) ([][]string, bool) {
		list, ok := v.([]any)
		if !ok {
			return nil, false
		}
		var out [][]string
		for _, m := range list {
			mo, ok := m.(*object)
			if !ok || len(mo.keys) != 1 {
				return nil, false
			}
			r, ok := names(mo.vals["required"])
			if !ok {
				return nil, false
			}
			out = append(out, r)
		}
		return out, true
	}
	if t, has := o.get("type"); has && t != "object" {
		return nil, false
	}
	var sets [][]string
	var all []string
	if r, has := o.get("required"); has {
		n, ok := names(r)
		if !ok {
			return nil, false
		}
		all = append(all, n...)
	}
	if a, has := o.get("allOf"); has {
		ms, ok := members(a)
		if !ok {
			return nil, false
		}
		for _, m := range ms {
			all = append(all, m...)
		}
	}
	if a, has := o.get("anyOf"); has {
		if len(all) > 0 {
			return nil, false
		}
		ms, ok := members(a)
		if !ok {
			return nil, false
		}
		return ms, true
	}
	if len(all) == 0 {
		return nil, false
	}
	return append(sets, all), true
}

// mergeNotRequired: an object where each set misses a property (one
// absent property: forbidden outright; else a choice of which).
func (c *schemaCompiler) mergeNotRequired(s *sch, sets [][]string) error {
	s.types &= tObject
	absent := func(name string) *object {
		return &object{keys: []string{"properties"}, vals: map[string]any{"properties": &object{keys: []string{name}, vals: map[string]any{name: false}}}}
	}
	for _, set := range sets {
		if len(set) == 1 {
			s.objParts = append(s.objParts, objPart{props: []string{set[0]}, schemas: map[string]any{set[0]: false}})
			s.kwObject = true
			continue
		}
		var choice []any
		for _, n := range set {
			choice = append(choice, absent(n))
		}
		s.anyOfs = append(s.anyOfs, choice)
	}
	return nil
}

// maxDependencies bounds the dependencies of one schema: each doubles the
// object's alternatives.
const maxDependencies = 4

// mergeDependencies turns "if property k is present, then D" into the
// choice "k absent, or k present and D" (D: the properties a list names
// present, or a schema), which is exact.
func (c *schemaCompiler) mergeDependencies(s *sch, o *object, path string) error {
	n := 0
	for _, kw := range []string{"dependencies", "dependentRequired", "dependentSchemas"} {
		v, ok := o.get(kw)
		if !ok {
			continue
		}
		deps, ok := v.(*object)
		if !ok {
			return fmt.Errorf("%s: %s must be an object", path, kw)
		}
		for _, k := range deps.keys {
			var present *object
			switch d := deps.vals[k].(type) {
			case []any:
				if len(d) == 0 {
					continue
				}
				present = &object{keys: []string{"required"}, vals: map[string]any{"required": append([]any{k}, d...)}}
			case bool:
				if d {
					continue
				}
				present = &object{keys: []string{"not"}, vals: map[string]any{"not": true}}
			case *object:
				present = &object{keys: []string{"required", "allOf"}, vals: map[string]any{"required": []any{k}, "allOf": []any{d}}}
			default:
				return fmt.Errorf("%s: %s/%s must be a list or a schema", path, kw, k)
			}
			if n++; n > maxDependencies {
				return &UnsupportedError{Keyword: kw, Reason: fmt.Sprintf("more than %d at %s", maxDependencies, path)}
			}
			absent := &object{keys: []string{"properties"}, vals: map[string]any{"properties": &object{keys: []string{k}, vals: map[string]any{k: false}}}}
			s.anyOfs = append(s.anyOfs, []any{absent, present})
			s.kwObject = true
		}
	}
	return nil
}

// mergeIf compiles if/then/else where "if" tests one property's value
// against listed values ({"properties": {"p": {"const": ...}}}, perhaps
// with "required": ["p"]), the common discriminator: the choice "the test
// holds and then" or "it fails and else", where failing is "p present with
// another value" or, when p is required by the test, "p absent".
func (c *schemaCompiler) mergeIf(s *sch, o *object, path string) error {
	cond, has := o.get("if")
	if !has {
		return nil // then and else without if say nothing
	}
	thenS, ok := o.get("then")
	if !ok {
		thenS = true
	}
	elseS, ok := o.get("else")
	if !ok {
		elseS = true
	}
	if b, isBool := cond.(bool); isBool {
		if b {
			return c.mergeSchema(s, thenS, path+"/then")
		}
		return c.mergeSchema(s, elseS, path+"/else")
	}
	refuse := &UnsupportedError{Keyword: "if", Reason: "only an if testing one property against listed values is supported at " + path}
	co, ok := cond.(*object)
	if !ok {
		return fmt.Errorf("%s: if must be a schema", path)
	}
	var prop string
	var value any
	required := false
	for _, k := range co.keys {
		switch {
		case k == "properties":
			props, ok := co.vals[k].(*object)
			if !ok || len(props.keys) != 1 {
				return refuse
			}
			prop, value = props.keys[0], props.vals[props.keys[0]]
		case k == "required":
			list, ok := co.vals[k].([]any)
			if !ok || len(list) > 1 {
				return refuse
			}
			required = len(list) == 1
		case annotationKeywords[k] || isUnknownKeyword(k):
		default:
			return refuse
		}
	}
	vo, ok := value.(*object)
	if prop == "" || !ok {
		return refuse
	}
	if _, listed := listedValues(vo); !listed {
		return refuse
	}
	if r, _ := co.vals["required"].([]any); required && r[0] != prop {
		return refuse
	}
	obj := func(keys []string, vals map[string]any) *object {
		vals["type"] = "object"
		return &object{keys: append([]string{"type"}, keys...), vals: vals}
	}
	other := obj([]string{"required", "properties"}, map[string]any{"required": []any{prop},
		"properties": &object{keys: []string{prop}, vals: map[string]any{prop: &object{keys: []string{"not"}, vals: map[string]any{"not": vo}}}}})
	branches := []any{
		&object{keys: []string{"allOf"}, vals: map[string]any{"allOf": []any{co, thenS}}},
		&object{keys: []string{"allOf"}, vals: map[string]any{"allOf": []any{other, elseS}}},
	}
	if required {
		absent := obj([]string{"properties"}, map[string]any{"properties": &object{keys: []string{prop}, vals: map[string]any{prop: false}}})
		branches = append(branches, &object{keys: []string{"allOf"}, vals: map[string]any{"allOf": []any{absent, elseS}}})
	}
	s.anyOfs = append(s.anyOfs, branches)
	return nil
}
