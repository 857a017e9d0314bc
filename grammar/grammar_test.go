package grammar

import (
	"errors"
	"sync"
	"testing"

	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/tokenizer"
)

func TestRegexWholeMatch(t *testing.T) {
	for _, tc := range []struct {
		re     string
		accept []string
		reject []string
	}{
		{`[a-c]+x`, []string{"ax", "abcx"}, []string{"x", "ab", "axx", "dx"}},
		{`\d{3}-\d{4}`, []string{"555-1234"}, []string{"55-1234", "5555-1234", "555-12345"}},
		{`^(yes|no)$`, []string{"yes", "no"}, []string{"yesno", "", "maybe"}},
		{`(?i)abc`, []string{"abc", "AbC"}, []string{"abd"}},
		{`é+`, []string{"é", "éé"}, []string{"e", "\xc3"}},
		{`[^a]`, []string{"b", "€"}, []string{"a", "bb"}},
	} {
		g, err := Regex(tc.re)
		if err != nil {
			t.Fatalf("%s: %v", tc.re, err)
		}
		c := Compile(g, nil)
		for _, s := range tc.accept {
			if m := c.NewMatcher(); !m.AcceptBytes([]byte(s)) || !m.CanEnd() {
				t.Errorf("%s should match %q", tc.re, s)
			}
		}
		for _, s := range tc.reject {
			if m := c.NewMatcher(); m.AcceptBytes([]byte(s)) && m.CanEnd() {
				t.Errorf("%s should not match %q", tc.re, s)
			}
		}
	}
}

func TestUnsupported(t *testing.T) {
	for _, tc := range []struct{ schema, keyword string }{
		{`{"type":"object","not":{"dependencies":{"a":["b"]}}}`, "not"},
		{`{"type":"array","uniqueItems":true}`, "uniqueItems"},
		{`{"type":"string","pattern":"(?=a)"}`, "pattern"},
		{`{"type":"string","format":"regex"}`, "format"},
		{`{"oneOf":[{"type":"object","minProperties":1},{"type":"object","dependencies":{"a":["b"]}}]}`, "oneOf"},
		{`{"$ref":"http://example.com/s.json"}`, "$ref"},
	} {
		_, err := JSONSchema([]byte(tc.schema), JSONOptions{})
		var ue *UnsupportedError
		if !errors.As(err, &ue) || ue.Keyword != tc.keyword {
			t.Errorf("%s: got %v, want an UnsupportedError naming %s", tc.schema, err, tc.keyword)
		}
	}
	if _, err := Regex(`a(b`); err == nil {
		t.Error("a regex that does not compile was accepted")
	}
}

func TestLeftRecursionRefused(t *testing.T) {
	b := newBuilder()
	a := b.declare("a")
	b.define(a, alt(seq(ref(a), lit("x")), lit("y")))
	if _, err := b.build(a); err == nil {
		t.Fatal("left-recursive rule accepted")
	}
}

var vocabs sync.Map // tokenizer dir → *Vocab

func loadVocab(t testing.TB, name string) (*tokenizer.Tokenizer, *Vocab) {
	dir := shared.Path(t, "tokenizers/"+name)
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := vocabs.Load(name); ok {
		return tok, v.(*Vocab)
	}
	v := TokenizerVocab(tok, tok.VocabSize())
	vocabs.Store(name, v)
	return tok, v
}

// feedTokens checks the token-level masks on text: every token of its
// encoding must be allowed by the mask before it, and the end allowed
// after the last one. It returns the index of the first refused token, or
// -1 when the text is accepted and complete.
func feedTokens(c *Compiled, ids []int, mask []uint64) int {
	m := c.NewMatcher()
	for i, id := range ids {
		m.FillMask(mask)
		if !MaskAllows(mask, id) {
			return i
		}
		if !m.AcceptToken(id) {
			panic("mask allowed a token the matcher refuses")
		}
	}
	if !m.CanEnd() {
		return len(ids)
	}
	return -1
}

func TestTokenMasksAgreeWithBytes(t *testing.T) {
	tok, v := loadVocab(t, "llama3")
	schema := `{"type":"object","properties":{"name":{"type":"string","maxLength":20},"age":{"type":"integer","minimum":0,"maximum":150},
		"tags":{"type":"array","items":{"enum":["a","b c","d\"e"]},"maxItems":3},"score":{"type":"number","minimum":0,"maximum":1}},
		"required":["name","age"],"additionalProperties":false}`
	g, err := JSONSchema([]byte(schema), JSONOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := Compile(g, v)
	mask := make([]uint64, v.MaskWords())
	for _, tc := range []struct {
		text string
		ok   bool
	}{
		{`{"name":"Ann","age":31}`, true},
		{`{"name": "Bob", "age": 7, "tags": ["a", "b c", "d\"e"], "score": 0.25}`, true},
		{"{\n  \"name\": \"Cy\",\n  \"age\": 150,\n  \"score\": 1.000\n}", true},
		{`{"name":"Ann","age":151}`, false},
		{`{"name":"Ann","age":-1}`, false},
		{`{"name":"Ann","age":1,"score":1.5}`, false},
		{`{"name":"Ann","age":1,"tags":["a","a","a","a"]}`, false},
		{`{"name":"Ann","age":1,"extra":1}`, false},
		{`{"age":1,"name":"Ann"}`, true}, // any order
		{`{"name":"Ann"}`, false},
		{`{"name":"aaaaaaaaaaaaaaaaaaaaa","age":1}`, false},
	} {
		ids := tok.Encode(tc.text, false)
		got := feedTokens(c, ids, mask)
		if (got < 0) != tc.ok {
			t.Errorf("%s: first refused token %d, want accepted=%v", tc.text, got, tc.ok)
		}
		bm := c.NewMatcher()
		if byBytes := bm.AcceptBytes([]byte(tc.text)) && bm.CanEnd(); byBytes != tc.ok {
			t.Errorf("%s: byte-level accepted=%v", tc.text, byBytes)
		}
	}
}

func TestEBNF(t *testing.T) {
	src := `# a greeting
root   ::= greet " " name ("!" | ".")?
greet  ::= "hello" | "hi"
name   ::= [A-Z] [a-z]{1,5}
         | "you"
list   ::= "[" (item ("," item)*)? "]"
item   ::= [0-9]+ | list
`
	g, err := EBNF(src + "\n")
	if err != nil {
		t.Fatal(err)
	}
	c := Compile(g, nil)
	for s, want := range map[string]bool{"hello Ann!": true, "hi you": true, "hi you.": true, "hello ann": false, "hey you": false, "hi Annabel": false} {
		m := c.NewMatcher()
		if got := m.AcceptBytes([]byte(s)) && m.CanEnd(); got != want {
			t.Errorf("%q: accepted %v, want %v", s, got, want)
		}
	}
	nested, err := EBNF("root ::= list\nlist ::= \"[\" (item (\",\" item)*)? \"]\"\nitem ::= [0-9]+ | list\n")
	if err != nil {
		t.Fatal(err)
	}
	for s, want := range map[string]bool{"[1,[2,[]],3]": true, "[1,": false, "[[]]]": false} {
		m := Compile(nested, nil).NewMatcher()
		if got := m.AcceptBytes([]byte(s)) && m.CanEnd(); got != want {
			t.Errorf("%q: accepted %v, want %v", s, got, want)
		}
	}
	for _, bad := range []string{"root ::= \"a", "start ::= \"a\"", "root ::= x", "root ::= root \"a\" | \"b\""} {
		if _, err := EBNF(bad); err == nil {
			t.Errorf("%q compiled", bad)
		}
	}
}

// TestSchemaSemantics: JSON Schema's meaning where a narrower grammar
// would refuse valid instances: a schema without "type" takes every type
// (its keywords apply to theirs), numbers compare by value, and a oneOf
// branch is narrowed only as far as keeping the branches apart needs.
func TestSchemaSemantics(t *testing.T) {
	for _, tc := range []struct {
		schema string
		accept []string
		reject []string
	}{
		{`{"properties":{"a":{"type":"integer"}},"required":["a"]}`,
			[]string{`{"a":1}`, `"text"`, `[1,{}]`, `3.5`, `null`}, []string{`{}`, `{"a":"x"}`}},
		{`{"type":"object","additionalProperties":{"items":{"type":"string"}}}`,
			[]string{`{"x":["s"],"y":{"k":1},"z":2}`}, []string{`{"x":[1]}`}},
		{`{"enum":[2.0, 1.5, 0, -3]}`,
			[]string{`2`, `2.0`, `2.000`, `1.5`, `1.50`, `0`, `-0`, `0.0`, `-3`, `-3.0`}, []string{`2.01`, `1`, `3`, `-1.5`}},
		{`{"const":{"a":1}}`, []string{`{"a":1.0}`}, []string{`{"a":2}`}},
		{`{"oneOf":[{"properties":{"a":{"const":1}},"required":["a"]},{"properties":{"a":{"const":2}},"required":["a"]}]}`,
			[]string{`{"a":1}`, `{"a":2.0}`}, []string{`"s"`, `[]`, `{"a":3}`}},
	} {
		g, err := JSONSchema([]byte(tc.schema), JSONOptions{})
		if err != nil {
			t.Fatalf("%s: %v", tc.schema, err)
		}
		c := Compile(g, nil)
		for _, s := range tc.accept {
			if m := c.NewMatcher(); !m.AcceptBytes([]byte(s)) || !m.CanEnd() {
				t.Errorf("%s should accept %s", tc.schema, s)
			}
		}
		for _, s := range tc.reject {
			if m := c.NewMatcher(); m.AcceptBytes([]byte(s)) && m.CanEnd() {
				t.Errorf("%s should reject %s", tc.schema, s)
			}
		}
	}
}

// WithSpecial spells a special token (no bytes in the vocabulary) as its
// text: a grammar over the result may emit the id where it writes the
// text, or spell the text with ordinary tokens; the result is memoized,
// its Base is the vocabulary, and ids with bytes are refused.
func TestVocabWithSpecial(t *testing.T) {
	tok, v := loadVocab(t, "llama3")
	// A reserved special token spelled as Llama 3.1's <|python_tag|>.
	id, ok := tok.TokenID("<|reserved_special_token_0|>")
	if !ok || len(v.Token(id)) != 0 {
		t.Fatalf("<|reserved_special_token_0|>: id %d (%v) with bytes %q", id, ok, v.Token(id))
	}
	w, err := v.WithSpecial(map[int]string{id: "<|python_tag|>"})
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := v.WithSpecial(map[int]string{id: "<|python_tag|>"}); again != w || w.Base() != v || v.Base() != v {
		t.Error("not memoized, or the wrong base")
	}
	g, err := Regex(`<\|python_tag\|>[a-z]+`)
	if err != nil {
		t.Fatal(err)
	}
	mask := make([]uint64, v.MaskWords())
	for _, ids := range [][]int{append([]int{id}, tok.Encode("abc", false)...), tok.Encode("<|python_tag|>abc", false)} {
		if got := feedTokens(Compile(g, w), ids, mask); got != -1 {
			t.Errorf("%v: refused at token %d", ids, got)
		}
	}
	if feedTokens(Compile(g, v), []int{id}, mask) != 0 {
		t.Error("the vocabulary itself allows the special token")
	}
	if _, err := v.WithSpecial(map[int]string{tok.Encode("abc", false)[0]: "x"}); err == nil {
		t.Error("a token with bytes was respelled")
	}
}
