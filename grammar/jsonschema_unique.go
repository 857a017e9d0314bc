package grammar

import "fmt"

// uniqueArray compiles uniqueItems where the items' values are listed
// (enum, const, booleans, null): each value is a member written at most
// once, in any order, by the guards objects use for their keys
// (anyOrderObject), so the array never repeats a value. Items of other
// schemas, tuples, and counts the guards cannot keep (minItems above 1,
// maxItems below the number of values) are refused.
func (c *schemaCompiler) uniqueArray(s *sch, path string) (*node, error) {
	refuse := func(why string) error {
		return &UnsupportedError{Keyword: "uniqueItems", Reason: fmt.Sprintf("%s at %s", why, path)}
	}
	if len(s.prefix) > 0 {
		return nil, refuse("with prefixItems")
	}
	vals, err := c.itemValues(s.items, path)
	if err != nil {
		return nil, err
	}
	if vals == nil {
		return nil, refuse("items whose values are not listed")
	}
	if len(vals) > maxGuardedMembers {
		return nil, refuse(fmt.Sprintf("more than %d listed values", maxGuardedMembers))
	}
	if s.minItems > len(vals) {
		return none(), nil
	}
	if s.minItems > 1 || s.maxItems >= 0 && s.maxItems < len(vals) {
		return nil, refuse("minItems above 1 or maxItems below the number of values")
	}
	if len(vals) == 0 {
		if s.minItems > 0 {
			return none(), nil
		}
		return seq(lit("["), c.ws(), lit("]")), nil
	}
	sep := seq(c.ws(), lit(","), c.ws())
	id := c.b.declare("unique array " + path)
	var first, next []*node
	for i, v := range vals {
		m := c.b.rule(fmt.Sprintf("unique item %d %s", i, path), c.valueNode(v))
		after := c.b.rule(fmt.Sprintf("next unique item %d %s", i, path), seq(sep, ref(m)))
		first = append(first, guardedRef(m, int32(i+1)))
		next = append(next, guardedRef(after, int32(i+1)))
	}
	body := seq(alt(first...), star(alt(next...)))
	if s.minItems == 0 {
		body = opt(body)
	}
	c.b.define(id, seq(lit("["), c.ws(), body, c.ws(), lit("]")))
	return ref(id), nil
}

// itemValues lists the distinct values items (a conjunction of schemas)
// admits, or nil when they are not listed.
func (c *schemaCompiler) itemValues(items []any, path string) ([]any, error) {
	t := newSch(path)
	for _, it := range items {
		if err := c.mergeSchema(t, it, path); err != nil {
			return nil, err
		}
	}
	var cands []any
	switch {
	case len(t.anyOfs) > 0:
		return nil, nil
	case t.hasEnum:
		cands = t.enum
	case t.types&^(tNull|tBool) == 0:
		if t.types&tNull != 0 {
			cands = append(cands, nil)
		}
		if t.types&tBool != 0 {
			cands = append(cands, true, false)
		}
	default:
		return nil, nil
	}
	out := []any{}
	for _, v := range cands {
		ok := !containsValue(out, v)
		for _, it := range items {
			if !ok {
				break
			}
			var err error
			if ok, err = c.validates(v, it, 0); err != nil {
				return nil, err
			}
		}
		if ok {
			out = append(out, v)
		}
	}
	return out, nil
}

func containsValue(list []any, v any) bool {
	for _, x := range list {
		if jsonEqual(x, v) {
			return true
		}
	}
	return false
}

// distinctValues: no two elements of list are equal.
func distinctValues(list []any) bool {
	for i, v := range list {
		if containsValue(list[:i], v) {
			return false
		}
	}
	return true
}
