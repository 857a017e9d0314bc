package toolcall

import (
	"reflect"
	"testing"
)

func TestParse(t *testing.T) {
	hermes, _ := Lookup("qwen25")
	mistral, _ := Lookup("mistral")
	llama, _ := Lookup("llama3")
	for _, tc := range []struct {
		f       *Format
		text    string
		content string
		calls   []Call
	}{
		{hermes, "Let me check.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>",
			"Let me check.", []Call{{"a", `{"x": 1}`}, {"b", `{}`}}},
		{hermes, "no calls here", "no calls here", nil},
		{hermes, "<tool_call>\nnot json\n</tool_call>", "<tool_call>\nnot json\n</tool_call>", nil},
		{mistral, `[TOOL_CALLS] [{"name": "a", "arguments": {"x": "y"}}, {"name": "b", "arguments": {}}]`, "", []Call{{"a", `{"x": "y"}`}, {"b", `{}`}}},
		{llama, `{"name": "a", "parameters": {"q": 2}}`, "", []Call{{"a", `{"q": 2}`}}},
		{llama, "Hello there", "Hello there", nil},
	} {
		content, calls := tc.f.Parse(tc.text)
		if content != tc.content || !reflect.DeepEqual(calls, tc.calls) {
			t.Errorf("%s %q: %q %v, want %q %v", tc.f.Name, tc.text, content, calls, tc.content, tc.calls)
		}
		// Streamed byte by byte: the same content and calls.
		s := tc.f.NewStreamer()
		var sc string
		var scalls []Call
		for i := range len(tc.text) {
			c, cs := s.Push(tc.text[i : i+1])
			sc += c
			scalls = append(scalls, cs...)
		}
		c, cs := s.Finish()
		sc += c
		scalls = append(scalls, cs...)
		if len(tc.calls) > 0 && (!reflect.DeepEqual(scalls, tc.calls)) {
			t.Errorf("%s %q streamed: calls %v", tc.f.Name, tc.text, scalls)
		}
		if len(tc.calls) == 0 && sc != tc.text {
			t.Errorf("%s %q streamed: content %q", tc.f.Name, tc.text, sc)
		}
	}
}

func TestDetect(t *testing.T) {
	for tmpl, want := range map[string]string{
		"{{- '<tool_call>\\n' }}": "hermes", "[TOOL_CALLS] {{ calls }}": "mistral", "<|python_tag|>": "llama3",
	} {
		if f := Detect(tmpl); f == nil || f.Name != want {
			t.Errorf("%q: %v, want %s", tmpl, f, want)
		}
	}
	if Detect("{{ messages }}") != nil {
		t.Error("a template without tools detected a format")
	}
	if _, err := Lookup("nope"); err == nil {
		t.Error("unknown format accepted")
	}
}
