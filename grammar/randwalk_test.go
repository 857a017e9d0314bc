package grammar

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestRandomWalks samples generations through objects of optional,
// required and extra members (the any-order guards): at every step the
// mask allows some token unless the text is complete, and, on the first
// walks, exactly the tokens the matcher accepts.
func TestRandomWalks(t *testing.T) {
	_, v := loadVocab(t, "llama3")
	for i, schemaText := range []string{`{"type":"object","properties":{
		"name":{"type":"string","maxLength":12},
		"age":{"type":"integer","minimum":0,"maximum":99},
		"pet":{"enum":["cat","dog"]},
		"tags":{"type":"array","items":{"type":"string","pattern":"^[a-z]{1,5}$"},"maxItems":2}},
		"required":["name","age","pet"],"additionalProperties":false}`,
		`{"type":"object","properties":{"a":{"type":"boolean"},"b":{"enum":[1,2]},"c":{"type":"null"}},"additionalProperties":false}`,
		`{"type":"object","properties":{"a":{"type":"boolean"},"b":{"type":"object","properties":{"x":{"type":"null"},"y":{"type":"null"}},
			"required":["y"],"additionalProperties":false}},"required":["b"],"additionalProperties":{"enum":[0]}}`,
	} {
		g, err := JSONSchema([]byte(schemaText), JSONOptions{MaxWhitespace: 4})
		if err != nil {
			t.Fatal(err)
		}
		randomWalks(t, g, v, i == 0)
	}
}

func randomWalks(t *testing.T, g *Grammar, v *Vocab, exact bool) {
	c := Compile(g, v)
	mask := make([]uint64, v.MaskWords())
	for seed := range uint64(12) {
		exact := exact && seed == 0
		r := rand.New(rand.NewPCG(seed, 1))
		m := c.NewMatcher()
		probe := &Matcher{c: c, s: newStepper(g)}
		var text []byte
		for step := 0; step < 60 && !m.Done(); step++ {
			m.FillMask(mask)
			var allowed []int
			for id := range v.Size() {
				b := v.Token(id)
				got := MaskAllows(mask, id)
				want := got
				if exact && len(b) > 0 {
					probe.stacks = slices.Clone(m.stacks)
					want = probe.AcceptBytes(b)
				}
				if got != want {
					t.Fatalf("seed %d after %q: token %d %q: mask %v matcher %v", seed, text, id, b, got, want)
				}
				if got {
					allowed = append(allowed, id)
				}
			}
			if len(allowed) == 0 {
				if m.CanEnd() {
					break
				}
				t.Fatalf("seed %d: no token after %q", seed, text)
			}
			id := allowed[r.IntN(len(allowed))]
			m.AcceptToken(id)
			text = append(text, v.Token(id)...)
		}
		t.Logf("seed %d: %q", seed, text)
	}
}
