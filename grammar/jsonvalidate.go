package grammar

import (
	"encoding/json"
	"fmt"
	"math/big"
	"regexp"
	"unicode/utf8"
)

// A JSON Schema validator for the values a schema lists (enum, const):
// where a schema's instances are a finite list, the grammar is the list's
// values that validate against the whole schema, whatever other keywords
// (not, if/then/else, multipleOf, ...) say. Keywords it cannot decide are
// an UnsupportedError, never a guess.

// maxValidateDepth bounds $ref chains that do not descend into the value
// (a schema referring to itself at one level).
const maxValidateDepth = 64

// validates reports whether value v is valid against schema s; $refs
// resolve in the compiler's document.
func (c *schemaCompiler) validates(v, s any, depth int) (bool, error) {
	if depth > maxValidateDepth {
		return false, &UnsupportedError{Keyword: "$ref", Reason: "references that loop without descending into the value"}
	}
	switch t := s.(type) {
	case bool:
		return t, nil
	case *object:
		return c.validatesObject(v, t, depth)
	}
	return false, fmt.Errorf("a schema must be an object or a boolean, got %s", marshalCompact(s))
}

func (c *schemaCompiler) validatesObject(v any, o *object, depth int) (bool, error) {
	for _, k := range []string{"unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "$recursiveRef"} {
		if _, ok := o.get(k); ok {
			return false, &UnsupportedError{Keyword: k, Reason: "in a schema whose values are listed"}
		}
	}
	sub := func(x, s any) (bool, error) { return c.validates(x, s, depth+1) }
	if r, ok := o.get("$ref"); ok {
		target, ok := r.(string)
		if !ok {
			return false, fmt.Errorf("$ref must be a string")
		}
		t, err := c.resolve(target)
		if err != nil {
			return false, err
		}
		if ok, err := sub(v, t); !ok || err != nil {
			return false, err
		}
	}
	if t, ok := o.get("type"); ok {
		match := false
		names, isList := t.([]any)
		if !isList {
			names = []any{t}
		}
		for _, n := range names {
			name, _ := n.(string)
			if typeNames[name] == 0 {
				return false, fmt.Errorf("unknown type %s", marshalCompact(n))
			}
			match = match || valueHasType(v, name)
		}
		if !match {
			return false, nil
		}
	}
	if e, ok := o.get("enum"); ok {
		list, ok := e.([]any)
		if !ok {
			return false, fmt.Errorf("enum must be a list")
		}
		found := false
		for _, x := range list {
			found = found || jsonEqual(v, x)
		}
		if !found {
			return false, nil
		}
	}
	if x, ok := o.get("const"); ok && !jsonEqual(v, x) {
		return false, nil
	}
	if n, ok := o.get("not"); ok {
		ok, err := sub(v, n)
		if err != nil || ok {
			return false, err
		}
	}
	for _, kw := range []string{"allOf", "anyOf", "oneOf"} {
		l, ok := o.get(kw)
		if !ok {
			continue
		}
		list, ok := l.([]any)
		if !ok {
			return false, fmt.Errorf("%s must be a list", kw)
		}
		matched, err := countValid(sub, []any{v}, list)
		if err != nil {
			return false, err
		}
		if kw == "allOf" && matched < len(list) || kw == "anyOf" && matched == 0 || kw == "oneOf" && matched != 1 {
			return false, nil
		}
	}
	if cond, ok := o.get("if"); ok {
		holds, err := sub(v, cond)
		if err != nil {
			return false, err
		}
		branch := "else"
		if holds {
			branch = "then"
		}
		if s, ok := o.get(branch); ok {
			if ok, err := sub(v, s); !ok || err != nil {
				return false, err
			}
		}
	}
	var ok bool
	var err error
	switch x := v.(type) {
	case json.Number:
		ok, err = validatesNumber(x, o)
	case string:
		ok, err = validatesString(x, o)
	case []any:
		ok, err = c.validatesArray(x, o, sub)
	case *object:
		ok, err = c.validatesMembers(x, o, sub)
	default:
		ok = true
	}
	return ok, err
}

func valueHasType(v any, name string) bool {
	switch x := v.(type) {
	case nil:
		return name == "null"
	case bool:
		return name == "boolean"
	case string:
		return name == "string"
	case []any:
		return name == "array"
	case *object:
		return name == "object"
	case json.Number:
		if name == "number" {
			return true
		}
		r, ok := new(big.Rat).SetString(x.String())
		return name == "integer" && ok && r.IsInt()
	}
	return false
}

// jsonEqual is JSON Schema's equality: numbers by value, objects
// regardless of key order.
func jsonEqual(a, b any) bool {
	switch x := a.(type) {
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		ra, oka := new(big.Rat).SetString(x.String())
		rb, okb := new(big.Rat).SetString(y.String())
		return oka && okb && ra.Cmp(rb) == 0
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !jsonEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	case *object:
		y, ok := b.(*object)
		if !ok || len(x.keys) != len(y.keys) {
			return false
		}
		for _, k := range x.keys {
			w, ok := y.vals[k]
			if !ok || !jsonEqual(x.vals[k], w) {
				return false
			}
		}
		return true
	}
	return a == b
}

func validatesNumber(x json.Number, o *object) (bool, error) {
	r, ok := new(big.Rat).SetString(x.String())
	if !ok {
		return false, fmt.Errorf("bad number %s", x)
	}
	num := func(k string) (*big.Rat, bool, error) {
		v, ok := o.get(k)
		if !ok {
			return nil, false, nil
		}
		n, isNum := v.(json.Number)
		if !isNum {
			return nil, false, nil // draft 4's boolean exclusive flags
		}
		b, ok := new(big.Rat).SetString(n.String())
		if !ok {
			return nil, false, fmt.Errorf("%s is not a number", k)
		}
		return b, true, nil
	}
	flag := func(k string) bool { v, _ := o.get(k); return v == true }
	checks := []struct {
		kw    string
		fails func(cmp int) bool
	}{
		{"minimum", func(cmp int) bool { return cmp < 0 || cmp == 0 && flag("exclusiveMinimum") }},
		{"maximum", func(cmp int) bool { return cmp > 0 || cmp == 0 && flag("exclusiveMaximum") }},
		{"exclusiveMinimum", func(cmp int) bool { return cmp <= 0 }},
		{"exclusiveMaximum", func(cmp int) bool { return cmp >= 0 }},
	}
	for _, ch := range checks {
		b, ok, err := num(ch.kw)
		if err != nil {
			return false, err
		}
		if ok && ch.fails(r.Cmp(b)) {
			return false, nil
		}
	}
	m, ok, err := num("multipleOf")
	if err != nil {
		return false, err
	}
	if ok {
		if m.Sign() <= 0 {
			return false, fmt.Errorf("multipleOf must be positive")
		}
		if !new(big.Rat).Quo(r, m).IsInt() {
			return false, nil
		}
	}
	return true, nil
}

func validatesString(x string, o *object) (bool, error) {
	if ok, err := countWithin(o, utf8.RuneCountInString(x), "minLength", "maxLength"); !ok || err != nil {
		return false, err
	}
	if p, ok := o.get("pattern"); ok {
		ps, _ := p.(string)
		re, err := regexp.Compile(ps)
		if err != nil {
			return false, &UnsupportedError{Keyword: "pattern", Reason: fmt.Sprintf("%q: %v", ps, err)}
		}
		if !re.MatchString(x) {
			return false, nil
		}
	}
	if f, ok := o.get("format"); ok {
		name, _ := f.(string)
		if assertedFormats[name] {
			return false, &UnsupportedError{Keyword: "format", Reason: fmt.Sprintf("format %q", name)}
		}
		if p, ok := formatPatterns[name]; ok && !regexp.MustCompile(p).MatchString(x) {
			return false, nil
		}
	}
	return true, nil
}

func (c *schemaCompiler) validatesArray(x []any, o *object, sub func(v, s any) (bool, error)) (bool, error) {
	if ok, err := countWithin(o, len(x), "minItems", "maxItems"); !ok || err != nil {
		return false, err
	}
	if u, _ := o.get("uniqueItems"); u == true {
		for i := range x {
			for j := range i {
				if jsonEqual(x[i], x[j]) {
					return false, nil
				}
			}
		}
	}
	// The schema of item i: a tuple's (prefixItems, or items as a list)
	// for the first ones, then items / additionalItems.
	var prefix []any
	var rest any
	if p, ok := o.get("prefixItems"); ok {
		prefix, _ = p.([]any)
		rest, _ = o.get("items")
	} else if it, ok := o.get("items"); ok {
		if list, isList := it.([]any); isList {
			prefix = list
			rest, _ = o.get("additionalItems")
		} else {
			rest = it
		}
	}
	for i, item := range x {
		s := rest
		if i < len(prefix) {
			s = prefix[i]
		}
		if s == nil {
			continue
		}
		if ok, err := sub(item, s); !ok || err != nil {
			return false, err
		}
	}
	if cs, ok := o.get("contains"); ok {
		matched, err := countValid(sub, x, []any{cs})
		if err != nil {
			return false, err
		}
		lo, hi := 1, -1
		if v, ok := o.get("minContains"); ok {
			if lo, _ = jsonInt(v, "minContains", ""); lo < 0 {
				lo = 0
			}
		}
		if v, ok := o.get("maxContains"); ok {
			hi, _ = jsonInt(v, "maxContains", "")
		}
		if matched < lo || hi >= 0 && matched > hi {
			return false, nil
		}
	}
	return true, nil
}

func (c *schemaCompiler) validatesMembers(x *object, o *object, sub func(v, s any) (bool, error)) (bool, error) {
	if ok, err := countWithin(o, len(x.keys), "minProperties", "maxProperties"); !ok || err != nil {
		return false, err
	}
	if r, ok := o.get("required"); ok {
		list, _ := r.([]any)
		for _, n := range list {
			name, _ := n.(string)
			if _, ok := x.vals[name]; !ok {
				return false, nil
			}
		}
	}
	props, _ := o.get("properties")
	pobj, _ := props.(*object)
	pp, _ := o.get("patternProperties")
	ppobj, _ := pp.(*object)
	addl, hasAddl := o.get("additionalProperties")
	names, hasNames := o.get("propertyNames")
	for _, k := range x.keys {
		v := x.vals[k]
		if hasNames {
			if ok, err := sub(k, names); !ok || err != nil {
				return false, err
			}
		}
		matched := false
		if s, ok := pobj.get(k); ok {
			matched = true
			if ok, err := sub(v, s); !ok || err != nil {
				return false, err
			}
		}
		if ppobj != nil {
			for _, p := range ppobj.keys {
				re, err := regexp.Compile(p)
				if err != nil {
					return false, &UnsupportedError{Keyword: "patternProperties", Reason: fmt.Sprintf("%q: %v", p, err)}
				}
				if re.MatchString(k) {
					matched = true
					if ok, err := sub(v, ppobj.vals[p]); !ok || err != nil {
						return false, err
					}
				}
			}
		}
		if !matched && hasAddl {
			if ok, err := sub(v, addl); !ok || err != nil {
				return false, err
			}
		}
	}
	if m, ok := o.vals[memberKeyword].(*memberReq); ok {
		found := false
		for _, k := range x.keys {
			okKey, err := sub(k, m.keys)
			if err != nil {
				return false, err
			}
			if okKey {
				if found, err = sub(x.vals[k], m.value); err != nil {
					return false, err
				}
				if found {
					break
				}
			}
		}
		if !found {
			return false, nil
		}
	}
	for _, kw := range []string{"dependencies", "dependentRequired", "dependentSchemas"} {
		d, ok := o.get(kw)
		if !ok {
			continue
		}
		deps, ok := d.(*object)
		if !ok {
			return false, fmt.Errorf("%s must be an object", kw)
		}
		for _, k := range deps.keys {
			if _, present := x.vals[k]; !present {
				continue
			}
			switch dep := deps.vals[k].(type) {
			case []any:
				for _, n := range dep {
					name, _ := n.(string)
					if _, ok := x.vals[name]; !ok {
						return false, nil
					}
				}
			default:
				if ok, err := sub(x, dep); !ok || err != nil {
					return false, err
				}
			}
		}
	}
	return true, nil
}

// listedValues returns the values a schema object is limited to by its
// own enum or const, or those of an allOf member; ok is false when it
// lists none.
func listedValues(o *object) (vals []any, ok bool) {
	if e, has := o.get("enum"); has {
		list, isList := e.([]any)
		return list, isList
	}
	if x, has := o.get("const"); has {
		return []any{x}, true
	}
	if a, has := o.get("allOf"); has {
		list, _ := a.([]any)
		for _, m := range list {
			if mo, isObj := m.(*object); isObj {
				if vals, ok := listedValues(mo); ok {
					return vals, true
				}
			}
		}
	}
	return nil, false
}

// countValid counts the (value, schema) pairs of values × schemas that
// validate.
func countValid(sub func(v, s any) (bool, error), values, schemas []any) (int, error) {
	n := 0
	for _, v := range values {
		for _, s := range schemas {
			ok, err := sub(v, s)
			if err != nil {
				return 0, err
			}
			if ok {
				n++
			}
		}
	}
	return n, nil
}

// countWithin checks n against o's lower and upper count keywords.
func countWithin(o *object, n int, lower, upper string) (bool, error) {
	for _, kw := range []string{lower, upper} {
		v, ok := o.get(kw)
		if !ok {
			continue
		}
		b, err := jsonInt(v, kw, "")
		if err != nil {
			return false, err
		}
		if kw == lower && n < b || kw == upper && n > b {
			return false, nil
		}
	}
	return true, nil
}
