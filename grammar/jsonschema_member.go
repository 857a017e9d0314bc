package grammar

import (
	"fmt"
	"slices"
)

// Required members: "the object has a member whose key is valid against
// keys and whose value is valid against value", the negation of what
// properties, patternProperties, additionalProperties and propertyNames
// say of every member. Like contains for arrays, one member is marked: a
// key the object names becomes a choice of that named member with the
// value also valid against value; any other key is one more member of the
// any-order object (anyOrderObject), guarded to appear once and required,
// beside the ordinary extra members. Every object with such a member has a
// parse that marks it, so the language is exact. (A text that repeats a
// key may be read by a validator by its last value only; JSON leaves
// repeated keys undefined and the grammar does not track them.)

// memberKeyword marks a schema object built here: its value is a
// *memberReq, which no parsed document holds, so a document's own
// keyword of that name stays an annotation.
const memberKeyword = "$member"

type memberReq struct {
	keys, value any // schemas of the key (a string) and of the value
	keyword     string
}

// memberSchema is an object with a member as m asks.
func memberSchema(m *memberReq) *object {
	return obj("type", "object", memberKeyword, m)
}

// maxRequiredMembers bounds the members one object must have: each is a
// choice of the named keys or a marked member, and the marked ones may be
// one member or several (the partitions of a set).
const maxRequiredMembers = 3

// memberObject is the objects of s with the members s.members asks for:
// each under a named key, or marked (marks) among the others; marked ones
// are distinct members or one member that is all of them.
func (c *schemaCompiler) memberObject(s *sch, marks []memberReq, path string) (*node, error) {
	if len(s.members)+len(marks) > maxRequiredMembers {
		return nil, &UnsupportedError{Keyword: s.members[0].keyword, Reason: fmt.Sprintf("more than %d members required by negated object keywords at %s", maxRequiredMembers, path)}
	}
	if len(s.members) == 0 {
		var alts []*node
		for _, groups := range partitions(len(marks)) {
			var merged []memberReq
			for _, g := range groups {
				m := marks[g[0]]
				for _, i := range g[1:] {
					m = memberReq{keys: obj("allOf", []any{m.keys, marks[i].keys}), value: obj("allOf", []any{m.value, marks[i].value}), keyword: m.keyword}
				}
				merged = append(merged, m)
			}
			n, err := c.objectMembers(s, merged, path)
			if err != nil {
				return nil, err
			}
			alts = append(alts, n)
		}
		return alt(alts...), nil
	}
	m := s.members[0]
	rest := s.clone()
	rest.members = rest.members[1:]
	var alts []*node
	for _, k := range objectNames(rest) {
		ok, err := c.validates(k, m.keys, 0)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		named := rest.clone()
		if !slices.Contains(named.required, k) {
			named.required = append(named.required, k)
		}
		named.objParts = append(named.objParts, objPart{props: []string{k}, schemas: map[string]any{k: m.value}})
		n, err := c.memberObject(named, marks, fmt.Sprintf("%s/%s/%s", path, m.keyword, k))
		if err != nil {
			return nil, err
		}
		alts = append(alts, n)
	}
	n, err := c.memberObject(rest, append(slices.Clone(marks), m), path)
	if err != nil {
		return nil, err
	}
	return alt(append(alts, n)...), nil
}

// partitions lists the partitions of {0..n-1}, each a list of groups.
func partitions(n int) [][][]int {
	if n == 0 {
		return [][][]int{nil}
	}
	var out [][][]int
	for _, p := range partitions(n - 1) {
		for g := range p {
			q := make([][]int, len(p))
			for i := range p {
				q[i] = slices.Clone(p[i])
			}
			q[g] = append(q[g], n-1)
			out = append(out, q)
		}
		out = append(out, append(slices.Clone(p), []int{n - 1}))
	}
	return out
}

// objectNegations are schemas whose union is exactly the objects that
// fail o's properties, patternProperties, additionalProperties and
// propertyNames together: a named property present with a value not its
// schema, a member whose key matches a pattern with a value not the
// pattern's schema, a member under any other key with a value not
// additionalProperties, a member whose key is not valid against
// propertyNames.
func (c *schemaCompiler) objectNegations(o *object, path string) ([]any, error) {
	var ds []any
	var names, patterns []any
	if v, ok := o.get("properties"); ok {
		props, ok := v.(*object)
		if !ok {
			return nil, fmt.Errorf("%s: properties must be an object", path)
		}
		for _, p := range props.keys {
			names = append(names, p)
			switch ps := props.vals[p].(type) {
			case bool:
				if !ps {
					ds = append(ds, obj("type", "object", "required", []any{p}))
				}
			default:
				ds = append(ds, obj("type", "object", "required", []any{p}, "properties", obj(p, notSchema(ps))))
			}
		}
	}
	if v, ok := o.get("patternProperties"); ok {
		pp, ok := v.(*object)
		if !ok {
			return nil, fmt.Errorf("%s: patternProperties must be an object", path)
		}
		for _, r := range pp.keys {
			patterns = append(patterns, obj("pattern", r))
			if ps := pp.vals[r]; ps != true {
				ds = append(ds, memberSchema(&memberReq{keys: obj("pattern", r), value: negated(ps), keyword: "patternProperties"}))
			}
		}
	}
	if v, ok := o.get("additionalProperties"); ok && v != true {
		var keys any = true
		switch {
		case len(names) > 0 && len(patterns) > 0:
			keys = notSchema(obj("anyOf", append([]any{obj("enum", names)}, patterns...)))
		case len(names) > 0:
			keys = notSchema(obj("enum", names))
		case len(patterns) > 0:
			keys = notSchema(obj("anyOf", patterns))
		}
		if keys == true && v == false {
			ds = append(ds, obj("type", "object", "minProperties", jsonIntValue(1)))
		} else {
			ds = append(ds, memberSchema(&memberReq{keys: keys, value: negated(v), keyword: "additionalProperties"}))
		}
	}
	if v, ok := o.get("propertyNames"); ok && v != true {
		ds = append(ds, memberSchema(&memberReq{keys: negated(v), value: true, keyword: "propertyNames"}))
	}
	return ds, nil
}

// negated is "not v", true for false.
func negated(v any) any {
	if v == false {
		return true
	}
	return notSchema(v)
}
