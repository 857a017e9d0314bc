package grammar

import "testing"

func TestOneOfRequiredBranches(t *testing.T) {
	g, err := JSONSchema([]byte(`{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},"c":{"type":"integer"}},
		"oneOf":[{"required":["a"]},{"required":["b"]}]}`), JSONOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := Compile(g, nil)
	for text, want := range map[string]bool{`{"a":1}`: true, `{"b":2,"c":3}`: true, `{"a":1,"b":2}`: false, `{"c":3}`: false, `{}`: false} {
		m := c.NewMatcher()
		if got := m.AcceptBytes([]byte(text)) && m.CanEnd(); got != want {
			t.Errorf("%s: accepted %v, want %v", text, got, want)
		}
	}
}
