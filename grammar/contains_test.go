package grammar

import (
	"errors"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// arraysOver lists every array of at most n elements drawn from elems.
func arraysOver(elems []string, n int) []string {
	out := []string{"[]"}
	level := [][]string{{}}
	for range n {
		var next [][]string
		for _, a := range level {
			for _, e := range elems {
				b := append(append([]string(nil), a...), e)
				next = append(next, b)
				out = append(out, "["+strings.Join(b, ",")+"]")
			}
		}
		level = next
	}
	return out
}

// objectsOver lists every object whose members are drawn from members
// (name, value texts), each name at most once, in the order given.
func objectsOver(names []string, values []string) []string {
	out := []string{"{}"}
	var walk func(i int, members []string)
	walk = func(i int, members []string) {
		if i == len(names) {
			if len(members) > 0 {
				out = append(out, "{"+strings.Join(members, ",")+"}")
			}
			return
		}
		walk(i+1, members)
		for _, v := range values {
			walk(i+1, append(append([]string(nil), members...), `"`+names[i]+`":`+v))
		}
	}
	walk(0, nil)
	return out
}

// TestContainsAndNegatedArrays: contains, and not of items, contains and
// oneOf, compiled exactly: over a universe of small instances the grammar
// accepts precisely what jsonschema/v6 validates.
func TestContainsAndNegatedArrays(t *testing.T) {
	scalars := []string{`1`, `"a"`, `null`, `2.5`, `true`, `""`, `"ab"`, `{}`}
	arrays := append(arraysOver([]string{`1`, `"a"`, `null`, `[]`, `{"k":1}`}, 3), scalars...)
	objects := append(objectsOver([]string{"kind", "x"}, []string{`"a"`, `"b"`, `1`}), `[]`, `"a"`, `1`)
	for _, tc := range []struct {
		schema   string
		universe []string
	}{
		{`{"type":"array","contains":{"type":"string"}}`, arrays},
		{`{"contains":{"type":"integer","minimum":1}}`, arrays},
		{`{"type":"array","items":{"type":["integer","string"]},"contains":{"type":"string"}}`, arrays},
		{`{"type":"array","minItems":1,"contains":{"const":null}}`, arrays},
		{`{"contains":{"type":"array"},"items":{"not":{"type":"object"}}}`, arrays},
		{`{"not":{"items":{"type":"string"}}}`, arrays},
		{`{"not":{"contains":{"type":"string"}}}`, arrays},
		{`{"type":"array","not":{"type":"array","items":{"type":["string","null"]}}}`, arrays},
		{`{"type":"array","not":{"items":{"type":"string","enum":["a","b"]}}}`, arrays},
		{`{"not":{"items":false}}`, arrays},
		// {} less the others: o39084's "from" in MaskBench.
		{`{"oneOf":[{},{"type":"string"},{"type":"array","items":{"type":"string"},"minItems":1}]}`, arrays},
		// "type": "object" beside required: non-objects pass "not".
		{`{"not":{"type":"object","required":["kind"]}}`, objects},
		// Not exactly one branch: none, or some two.
		{`{"not":{"oneOf":[{"type":"string"},{"maxLength":1}]}}`, scalars},
		{`{"type":"object","not":{"oneOf":[{"required":["kind"],"properties":{"kind":{"const":"a"}}},{"required":["kind"],"properties":{"kind":{"const":"b"}}},{"required":["x"]}]}}`, objects},
		{`{"not":{"oneOf":[{"type":"object","required":["kind"]},{"type":"object","required":["x"]},{"type":"array"}]}}`, append(objects, arrays[:20]...)},
	} {
		checkExact(t, tc.schema, tc.universe)
	}
	for _, tc := range []struct{ schema, keyword string }{
		{`{"type":"array","contains":{"type":"string"},"maxItems":3}`, "contains"},
		{`{"type":"array","allOf":[{"contains":{"type":"string"}},{"contains":{"type":"null"}}]}`, "contains"},
		{`{"type":"array","contains":{"type":"string"},"minContains":2}`, "minContains"},
		{`{"not":{"items":[{"type":"string"}]}}`, "not"},
		{`{"not":{"oneOf":[{"type":"string"},{},{},{},{},{},{}]}}`, "not"},
	} {
		_, err := JSONSchema([]byte(tc.schema), JSONOptions{})
		var ue *UnsupportedError
		if !errors.As(err, &ue) || ue.Keyword != tc.keyword {
			t.Errorf("%s: got %v, want an UnsupportedError naming %s", tc.schema, err, tc.keyword)
		}
	}
}

// checkExact: the grammar of schema accepts exactly the texts of universe
// that jsonschema/v6 validates, and the universe holds both kinds.
func checkExact(t *testing.T, schema string, universe []string) {
	t.Helper()
	v := testValidator(t, schema)
	valid := make([]bool, len(universe))
	nValid := 0
	for i, text := range universe {
		inst, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
		if err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		if valid[i] = v.Validate(inst) == nil; valid[i] {
			nValid++
		}
	}
	if nValid == 0 || nValid == len(universe) {
		t.Errorf("%s: the universe does not tell valid from invalid (%d of %d valid)", schema, nValid, len(universe))
	}
	g, err := JSONSchema([]byte(schema), JSONOptions{})
	if err != nil {
		t.Errorf("%s: %v", schema, err)
		return
	}
	c := Compile(g, nil)
	for i, text := range universe {
		m := c.NewMatcher()
		if accepted := m.AcceptBytes([]byte(text)) && m.CanEnd(); accepted != valid[i] {
			t.Errorf("%s: %s accepted %v, valid %v", schema, text, accepted, valid[i])
		}
	}
}
