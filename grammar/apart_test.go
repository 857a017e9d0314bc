package grammar

import (
	"errors"
	"testing"
)

// TestOneOfProvedApart: oneOf branches shown apart (a discriminator the
// keywords beside oneOf require, choices inside a branch, string patterns,
// numeric ranges, listed values against a pattern, a property the other
// branch constrains if present) compile as anyOf, exactly: over a
// universe of small instances the grammar accepts precisely what
// jsonschema/v6 validates.
func TestOneOfProvedApart(t *testing.T) {
	kinds := objectsOver([]string{"kind", "x"}, []string{`"a"`, `"b"`, `1`})
	for _, tc := range []struct {
		schema   string
		universe []string
	}{
		// The discriminator is required beside oneOf, not in the branches.
		{`{"type":"object","required":["kind"],"oneOf":[{"properties":{"kind":{"const":"a"},"x":{"type":"integer"}}},{"properties":{"kind":{"const":"b"}}}]}`, kinds},
		// A branch that is itself a choice, each alternative apart.
		{`{"oneOf":[{"oneOf":[{"type":"string","maxLength":1},{"type":"integer"}]},{"type":"object","additionalProperties":{"const":false},"minProperties":1}]}`,
			append(objectsOver([]string{"a", "b"}, []string{`false`, `1`}), `"a"`, `"ab"`, `1`, `2.5`, `null`)},
		// "t" is required by one branch and, if present, false in the other.
		{`{"oneOf":[{"type":"object","required":["t"],"properties":{"t":{"type":"string"}}},{"type":"object","additionalProperties":{"const":false}}]}`,
			objectsOver([]string{"t", "x"}, []string{`"a"`, `false`, `1`})},
		// Patterns that do not meet tell the objects apart.
		{`{"type":"array","items":{"oneOf":[{"type":"object","required":["class"],"properties":{"class":{"type":"string","pattern":"^configure$"}},"additionalProperties":false},
			{"type":"object","properties":{"class":{"type":"string","pattern":"^deploy$"},"n":{"type":"integer"}},"additionalProperties":false,"required":["n"]}]}}`,
			wrapArrays(objectsOver([]string{"class", "n"}, []string{`"configure"`, `"deploy"`, `1`}))},
		// Numeric ranges that touch at an exclusive bound.
		{`{"oneOf":[{"type":"number","maximum":0},{"type":"number","exclusiveMinimum":0,"maximum":10},{"type":"string"}]}`,
			[]string{`-1`, `0`, `0.5`, `10`, `11`, `"a"`, `null`, `[]`}},
		// Listed values against a pattern.
		{`{"oneOf":[{"enum":["ab","cd",1]},{"type":"string","pattern":"^x"}]}`,
			[]string{`"ab"`, `"cd"`, `"xy"`, `"x"`, `"y"`, `1`, `2`, `null`}},
	} {
		checkExact(t, tc.schema, tc.universe)
	}
}

// wrapArrays puts each text in an array of its own.
func wrapArrays(texts []string) []string {
	out := []string{`[]`}
	for _, x := range texts {
		out = append(out, "["+x+"]")
	}
	return out
}

// TestNegatedObjectKeywords: not of additionalProperties, patternProperties
// and propertyNames (a member the object must have), numbers that are not
// integers, and oneOf over strings, compiled exactly.
func TestNegatedObjectKeywords(t *testing.T) {
	ab := objectsOver([]string{"a", "b"}, []string{`1`, `"x"`})
	for _, tc := range []struct {
		schema   string
		universe []string
	}{
		{`{"type":"object","not":{"additionalProperties":{"type":"integer"}}}`, ab},
		{`{"not":{"properties":{"a":{"type":"string"}},"additionalProperties":false}}`, append(ab, `1`, `"x"`)},
		{`{"not":{"properties":{"a":{"type":"integer"}},"patternProperties":{"^b":{"type":"string"}},"additionalProperties":{"const":1}}}`,
			objectsOver([]string{"a", "bb", "c"}, []string{`1`, `"x"`})},
		{`{"not":{"patternProperties":{"^x":{"type":"integer"}}}}`, objectsOver([]string{"xa", "b"}, []string{`1`, `"s"`})},
		{`{"type":"object","not":{"propertyNames":{"maxLength":1}}}`, objectsOver([]string{"a", "bb"}, []string{`1`})},
		// A named property may be the member asked for.
		{`{"type":"object","properties":{"ab":{"type":["integer","string"]}},"not":{"additionalProperties":{"type":"string"}}}`,
			objectsOver([]string{"ab", "c"}, []string{`1`, `"s"`, `null`})},
		// Two members asked for: two keys, or one key that is both.
		{`{"type":"object","allOf":[{"not":{"propertyNames":{"not":{"pattern":"a"}}}},{"not":{"propertyNames":{"not":{"pattern":"b"}}}}]}`,
			objectsOver([]string{"a", "b", "ab", "c"}, []string{`1`})},
		// A closed branch excluded from an open one.
		{`{"oneOf":[{"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":false},{"type":"object","properties":{"b":{"type":"string"}}}]}`,
			objectsOver([]string{"a", "b", "c"}, []string{`1`, `"s"`})},
		// Numbers that are not integers (written without an exponent).
		{`{"not":{"type":"integer"}}`, []string{`1`, `1.0`, `2.5`, `-0.5`, `0`, `"a"`, `null`, `[]`}},
		{`{"not":{"items":{"type":"integer"}}}`, arraysOver([]string{`1`, `2.5`, `"a"`}, 2)},
		{`{"oneOf":[{"type":"integer"},{"type":"number"}]}`, []string{`1`, `1.0`, `2.5`, `-0.5`, `"a"`}},
		{`{"type":"object","oneOf":[{"properties":{"min":{"type":"integer"},"max":{"type":"integer"}}},{"properties":{"exact":{"type":"integer"}}}]}`,
			objectsOver([]string{"min", "exact"}, []string{`1`, `2.5`, `"a"`})},
		// Numbers other than listed ones (written without an exponent).
		{`{"type":"number","not":{"const":2}}`, []string{`1`, `2`, `2.0`, `2.5`, `-2`, `20`, `"a"`}},
		{`{"not":{"const":0}}`, []string{`0`, `-0`, `0.0`, `1`, `"a"`, `null`}},
		{`{"type":"integer","not":{"enum":[1,3,"a"]}}`, []string{`1`, `2`, `3`, `-1`, `30`, `"a"`}},
		// oneOf and if over strings (keys here).
		{`{"type":"object","propertyNames":{"oneOf":[{"pattern":"^a"},{"pattern":"b$"}]}}`, objectsOver([]string{"a", "ab", "cb", "c"}, []string{`1`})},
		{`{"type":"object","propertyNames":{"if":{"pattern":"^a"},"then":{"maxLength":2},"else":{"minLength":2}}}`,
			objectsOver([]string{"a", "abc", "b", "bc"}, []string{`1`})},
	} {
		checkExact(t, tc.schema, tc.universe)
	}
	for _, tc := range []struct{ schema, keyword string }{
		// Four members asked for: more than maxRequiredMembers.
		{`{"type":"object","allOf":[{"not":{"propertyNames":{"not":{"pattern":"a"}}}},{"not":{"propertyNames":{"not":{"pattern":"b"}}}},
			{"not":{"propertyNames":{"not":{"pattern":"c"}}}},{"not":{"propertyNames":{"not":{"pattern":"d"}}}}]}`, "propertyNames"},
		// A member asked for beside a member count.
		{`{"type":"object","minProperties":2,"not":{"propertyNames":{"maxLength":1}}}`, "propertyNames"},
	} {
		_, err := JSONSchema([]byte(tc.schema), JSONOptions{})
		var ue *UnsupportedError
		if !errors.As(err, &ue) || ue.Keyword != tc.keyword {
			t.Errorf("%s: got %v, want an UnsupportedError naming %s", tc.schema, err, tc.keyword)
		}
	}
}
