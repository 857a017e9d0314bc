package grammar

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
)

// maxNotRefs bounds the references "not" resolves in one schema: the
// negation of a recursive schema unfolds once per level of the value and
// would otherwise never end.
const maxNotRefs = 64

// maxNegatedOneOf bounds the branches of a negated oneOf: its negation
// has an alternative per pair of them.
const maxNegatedOneOf = 6

// mergeNotKeywords adds "not o" as the disjunction of its keywords'
// negations (not (A and B) is (not A) or (not B)), each negation exact:
//
//   - type, enum/const, required, multipleOf and the string keywords by
//     the forms mergeNot has for them alone;
//
//   - minimum and maximum (either exclusive form) by the opposite bound,
//     minItems/maxItems and minProperties/maxProperties by the opposite
//     count, each on its own type;
//
//   - properties, patternProperties, additionalProperties and
//     propertyNames together by "property p present with a value not its
//     schema" or "a member under a key they say of with a value not
//     their schema" (objectNegations, jsonschema_member.go);
//     additionalProperties: false alone by "some member";
//
//   - allOf by the disjunction of its members' negations, anyOf by their
//     conjunction, oneOf (of a few branches) by their conjunction or that
//     of some two, not by its schema, $ref by its target's negation;
//
//   - items (one schema for every element) by an array containing an
//     element not its schema, contains by an array of elements not its
//     schema.
//
// Anything else (tuple items, oneOf of many branches, if, dependencies)
// is refused.
func (c *schemaCompiler) mergeNotKeywords(s *sch, o *object, keys []string, path string) error {
	ds, err := c.notDisjuncts(o, keys, path)
	if err != nil {
		return err
	}
	switch len(ds) {
	case 0:
		s.types = 0 // every keyword holds of every value
		return nil
	case 1:
		return c.mergeSchema(s, ds[0], path)
	}
	s.anyOfs = append(s.anyOfs, ds)
	return nil
}

// notSchema is {"not": v}.
func notSchema(v any) *object {
	return &object{keys: []string{"not"}, vals: map[string]any{"not": v}}
}

// obj builds a schema object from key, value pairs.
func obj(kv ...any) *object {
	o := &object{vals: map[string]any{}}
	for i := 0; i+1 < len(kv); i += 2 {
		k := kv[i].(string)
		o.keys = append(o.keys, k)
		o.vals[k] = kv[i+1]
	}
	return o
}

// notDisjuncts are schemas whose union is exactly the values o rejects.
func (c *schemaCompiler) notDisjuncts(o *object, keys []string, path string) ([]any, error) {
	refuse := func(k string) error {
		return &UnsupportedError{Keyword: "not", Reason: fmt.Sprintf("not with %q at %s", k, path)}
	}
	var ds []any
	var stringy *object
	objectDone := false // the object keywords are negated together
	has := func(k string) bool { return slices.Contains(keys, k) }
	for _, k := range keys {
		v := o.vals[k]
		switch {
		case k == "type" || k == "multipleOf":
			ds = append(ds, notSchema(obj(k, v)))
		case k == "enum" || k == "const":
			ds = append(ds, notSchema(obj(k, v)))
		case k == "required":
			if list, ok := v.([]any); ok && len(list) == 0 {
				continue
			}
			ds = append(ds, notSchema(obj(k, v)))
		case stringKeywords[k]:
			if stringy == nil {
				stringy = obj()
				ds = append(ds, notSchema(stringy))
			}
			stringy.keys = append(stringy.keys, k)
			stringy.vals[k] = v
		case k == "minimum" || k == "exclusiveMinimum" || k == "maximum" || k == "exclusiveMaximum":
			d, err := negatedBound(o, k, path)
			if err != nil {
				return nil, err
			}
			if d != nil {
				ds = append(ds, d)
			}
		case k == "minItems" || k == "maxItems" || k == "minProperties" || k == "maxProperties":
			n, err := jsonInt(v, k, path)
			if err != nil {
				return nil, err
			}
			typ, opposite := "array", "maxItems"
			if k == "minProperties" || k == "maxProperties" {
				typ = "object"
			}
			switch {
			case k == "minItems" || k == "minProperties":
				if n == 0 {
					continue
				}
				if typ == "object" {
					opposite = "maxProperties"
				}
				ds = append(ds, obj("type", typ, opposite, jsonIntValue(n-1)))
			default:
				opposite = "minItems"
				if typ == "object" {
					opposite = "minProperties"
				}
				ds = append(ds, obj("type", typ, opposite, jsonIntValue(n+1)))
			}
		case k == "properties" || k == "patternProperties" || k == "additionalProperties" || k == "propertyNames":
			if objectDone {
				continue
			}
			objectDone = true
			d, err := c.objectNegations(o, path)
			if err != nil {
				return nil, err
			}
			ds = append(ds, d...)
		case k == "items" && v == true, k == "uniqueItems" && v == false:
		case k == "items":
			// Items of one schema for every element (no tuple form): an
			// array with an element that misses it.
			if _, isList := v.([]any); isList || has("prefixItems") || has("additionalItems") {
				return nil, refuse(k)
			}
			ds = append(ds, obj("type", "array", "contains", notSchema(v)))
		case k == "contains":
			if has("minContains") || has("maxContains") {
				return nil, refuse(k)
			}
			ds = append(ds, obj("type", "array", "items", notSchema(v)))
		case k == "allOf":
			list, ok := v.([]any)
			if !ok {
				return nil, fmt.Errorf("%s: allOf must be a list", path)
			}
			for _, m := range list {
				ds = append(ds, notSchema(m))
			}
		case k == "anyOf":
			list, ok := v.([]any)
			if !ok {
				return nil, fmt.Errorf("%s: anyOf must be a list", path)
			}
			var all []any
			for _, m := range list {
				all = append(all, notSchema(m))
			}
			ds = append(ds, obj("allOf", all))
		case k == "oneOf":
			// Not exactly one branch: none, or some two.
			list, ok := v.([]any)
			if !ok || len(list) == 0 {
				return nil, fmt.Errorf("%s: oneOf must be a non-empty list", path)
			}
			if len(list) > maxNegatedOneOf {
				return nil, refuse(k)
			}
			var none []any
			for _, m := range list {
				none = append(none, notSchema(m))
			}
			ds = append(ds, obj("allOf", none))
			for i := range list {
				for j := range i {
					if !c.branchesApart(list[j], list[i], path) {
						ds = append(ds, obj("allOf", []any{list[j], list[i]}))
					}
				}
			}
		case k == "not":
			ds = append(ds, v)
		case k == "$ref":
			ds = append(ds, notSchema(obj(k, v)))
		default:
			return nil, refuse(k)
		}
	}
	return ds, nil
}

// negatedBound is the numbers a bound keyword of o rejects (nil: none, as
// for a draft 4 flag, read with its bound).
func negatedBound(o *object, k, path string) (any, error) {
	v := o.vals[k]
	if _, isFlag := v.(bool); isFlag {
		return nil, nil
	}
	if _, err := jsonNumber(v, k, path); err != nil {
		return nil, err
	}
	flag := func(name string) bool { f, _ := o.get(name); return f == true }
	var opposite string
	switch k {
	case "minimum":
		opposite = "exclusiveMaximum"
		if flag("exclusiveMinimum") {
			opposite = "maximum"
		}
	case "exclusiveMinimum":
		opposite = "maximum"
	case "maximum":
		opposite = "exclusiveMinimum"
		if flag("exclusiveMaximum") {
			opposite = "minimum"
		}
	case "exclusiveMaximum":
		opposite = "minimum"
	}
	return obj("type", "number", opposite, v), nil
}

func jsonIntValue(n int) json.Number { return json.Number(strconv.Itoa(n)) }

// branchesApart reports that no value validates against both schemas:
// their types or enums do not meet, or they are objects a required
// property tells apart (forbidden by the other, or required by both with
// values apart). What the reading leaves out (anyOfs, other keywords)
// only narrows a schema, so the answer stays sound; false is "not known".
func (c *schemaCompiler) branchesApart(x, y any, path string) bool {
	read := func(v any) *sch {
		s := newSch(path)
		if c.mergeSchema(s, v, path) != nil {
			return nil
		}
		return s
	}
	a, b := read(x), read(y)
	switch {
	case a == nil || b == nil:
		return false
	case a.types == 0 || b.types == 0 || c.valuesApart(a, b):
		return true
	case a.acceptedTypes()&b.acceptedTypes()&^tObject != 0:
		return false
	}
	for _, p := range a.required {
		if b.forbids(p) {
			return true
		}
		if slices.Contains(b.required, p) {
			va, vb := c.propertySch(a, p), c.propertySch(b, p)
			if va != nil && vb != nil && c.valuesApart(va, vb) {
				return true
			}
		}
	}
	for _, p := range b.required {
		if a.forbids(p) {
			return true
		}
	}
	return false
}
