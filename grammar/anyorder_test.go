package grammar

import (
	"github.com/gosling-ai/gosling/tokenizer"
	"slices"
	"testing"
)

// anyOrderSchema has more named members than buildMembersAnyOrder's
// subsets would take, required ones among them, and extra members.
const anyOrderSchema = `{"type":"object","properties":{"id":{"type":"integer"},"name":{"type":"string"},"nick":{"type":"string"},
	"tags":{"type":"array","items":{"type":"string"}},"size":{"enum":[1,2,3]},"next":{"$ref":"#"},"on":{"type":"boolean"}},
	"required":["id","name"],"additionalProperties":{"type":"number"}}`

func TestAnyOrderMembers(t *testing.T) {
	g, err := JSONSchema([]byte(anyOrderSchema), JSONOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := Compile(g, nil)
	for text, want := range map[string]bool{
		`{"id":1,"name":"a"}`: true,
		`{"on":true,"size":2,"name":"a","tags":[],"nick":"b","id":1}`:               true,
		`{"x":1.5,"name":"a","y":2,"id":1,"z":3}`:                                   true,
		`{"next":{"name":"b","id":2},"name":"a","id":1}`:                            true,
		`{"name":"a","next":{"id":2,"name":"b","next":{"name":"c","id":3}},"id":1}`: true,
		`{"name":"a","id":1,"name":"b"}`:                                            false, // a key twice
		`{"name":"a","next":{"name":"b"},"id":1}`:                                   false, // inner object lacks id
		`{"name":"a"}`:                 false,
		`{"id":1}`:                     false,
		`{}`:                           false,
		`{"id":1,"name":"a","x":"s"}`:  false, // extra member not a number
		`{"id":1,"name":"a","size":4}`: false,
		"{\n  \"size\": 3,\n  \"id\": 1,\n  \"name\": \"a\",\n  \"on\": false\n}":       true,
		`{"id":1,"name":"a","on":true,"on":false}`:                                      false,
		`{"nick":"n","tags":["t"],"size":1,"on":true,"next":{"id":5,"name":""},"id":1}`: false, // no name
	} {
		m := c.NewMatcher()
		if got := m.AcceptBytes([]byte(text)) && m.CanEnd(); got != want {
			t.Errorf("%s: accepted %v, want %v", text, got, want)
		}
	}
}

// TestMasksExact checks every token of the vocabulary at every step of
// texts through any-order objects: the mask allows exactly the tokens the
// matcher accepts (its guards, conditional and uncertain tokens alike).
func TestMasksExact(t *testing.T) {
	tok, v := loadVocab(t, "llama3")
	g, err := JSONSchema([]byte(anyOrderSchema), JSONOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkMasksExact(t, tok, Compile(g, v), []string{
		`{"on":true,"size":2,"name":"a","tags":[],"nick":"b","id":1}`,
		`{"name":"a","next":{"id":2,"name":"","next":{"name":"c","id":3}},"x":1,"id":1}`,
	})
}

// TestMasksExactSlices checks, the same way, the positions whose splits
// take plain tokens as a slice (strings, counted or not, extra keys) or
// share a reference state's split (a key spelling the start of a named
// one): every token at every step of texts, with a fresh Compiled per
// schema so that each split is computed along the way.
func TestMasksExactSlices(t *testing.T) {
	tok, v := loadVocab(t, "llama3")
	for _, tc := range []struct {
		schema string
		texts  []string
	}{
		{`{"type":"object","properties":{"key":{"type":"integer"},"keyboard":{"type":"string","maxLength":6},"name":{"type":"string","minLength":2}},
			"additionalProperties":{"type":"array","items":{"type":"string","maxLength":3}}}`, []string{
			`{"keyb":["ab","é中"],"key":1,"kez":[],"keyboard":"a b\"cd","k":["\\"],"name":"Zoë said \"hi\" 🎉 over there"}`,
			"{\n  \"keyboar\": [\"x\"],\n  \"name\": \"ok\"\n}",
		}},
		{`{"type":"object","properties":{"key":{"type":"integer"},"kind":{"type":"string"}},"additionalProperties":{"type":"string"}}`, []string{
			`{"ke":"","kin":"","key":1}`,
		}},
		{`{"type":"object","patternProperties":{"^x-":{"type":"boolean"}},"properties":{"id":{"type":"string","pattern":"^[a-z]+$"},
			"n":{"type":"number","minimum":0},"m":{"type":"array","items":{"type":"integer"}}},
			"additionalProperties":{"type":"string","minLength":1,"maxLength":40}}`, []string{
			`{"x-a":true,"id":"abc","n":1024.25,"m":[12345, 7],"idx":"The quick brown fox jumps over the lazy","i":"é"}`,
		}},
	} {
		g, err := JSONSchema([]byte(tc.schema), JSONOptions{})
		if err != nil {
			t.Fatal(err)
		}
		checkMasksExact(t, tok, Compile(g, v), tc.texts)
	}
}

// checkMasksExact feeds each text's tokens, comparing at each step the mask
// with the matcher's verdict on every token of the vocabulary.
func checkMasksExact(t *testing.T, tok *tokenizer.Tokenizer, c *Compiled, texts []string) {
	t.Helper()
	v, g := c.v, c.g
	mask := make([]uint64, v.MaskWords())
	for _, text := range texts {
		ids := tok.Encode(text, false)
		m := c.NewMatcher()
		probe := &Matcher{c: c, s: newStepper(g)}
		for step, id := range ids {
			m.FillMask(mask)
			for t2 := range v.Size() {
				b := v.Token(t2)
				want := false
				if len(b) > 0 {
					probe.stacks = slices.Clone(m.stacks)
					want = probe.AcceptBytes(b)
				}
				if got := MaskAllows(mask, t2); got != want {
					t.Fatalf("%s: step %d: token %d %q: mask %v, matcher %v", text, step, t2, b, got, want)
				}
			}
			if !m.AcceptToken(id) {
				t.Fatalf("%s: step %d: token %d refused", text, step, id)
			}
		}
		if !m.CanEnd() {
			t.Errorf("%s: not complete", text)
		}
	}
}
