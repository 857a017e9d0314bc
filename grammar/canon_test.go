package grammar

import "testing"

// TestCanonicalPositionsShared: the character position of an object's
// extra keys lies in a rule that also spells the named keys it excludes,
// so its rule differs from schema to schema; what the position does (a
// string's characters, then ':' and an integer) does not, and two schemas
// share its vocabulary split. The shared split still answers each schema
// as its own bytes do: an instance's tokens pass, and one-token
// continuations are allowed exactly when AcceptBytes takes them.
func TestCanonicalPositionsShared(t *testing.T) {
	tok, v := loadVocab(t, "llama3")
	var tops []*positionTokens
	for _, tc := range []struct{ schema, instance string }{
		{`{"type":"object","properties":{"alpha":{"type":"string"}},"additionalProperties":{"type":"integer"}}`, `{"zq": 4, "alpha": "x"}`},
		{`{"type":"object","properties":{"beta":{"type":"boolean"},"gamma":{"type":"string"}},"additionalProperties":{"type":"integer"}}`, `{"gamma": "x", "zq": 12}`},
	} {
		g, err := JSONSchema([]byte(tc.schema), JSONOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c := Compile(g, v)
		m := c.NewMatcher()
		if !m.AcceptBytes([]byte(`{"zq`)) || len(m.stacks) != 1 {
			t.Fatalf("%s: stacks %v", tc.schema, m.stacks)
		}
		st := m.stacks[0]
		tops = append(tops, c.position(st.rule, st.state))
		mask := make([]uint64, v.MaskWords())
		m.FillMask(mask)
		for _, text := range []string{`x`, `xyz`, `":`, `": 1`, `"`, ` `, `",`, `"}`} {
			ids := tok.Encode(text, false)
			if len(ids) != 1 {
				continue
			}
			after := c.NewMatcher()
			want := after.AcceptBytes([]byte(`{"zq` + text))
			if MaskAllows(mask, ids[0]) != want {
				t.Errorf("%s: after {\"zq, token %q allowed %v, AcceptBytes %v", tc.schema, text, !want, want)
			}
		}
		if got := feedTokens(c, tok.Encode(tc.instance, false), mask); got != -1 {
			t.Errorf("%s: %s refused at token %d", tc.schema, tc.instance, got)
		}
	}
	if tops[0] != tops[1] {
		t.Error("the extra keys' character position is split once per schema, not shared")
	}
}
