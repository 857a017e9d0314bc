package toolcall

import (
	"reflect"
	"strings"
	"testing"
)

// dsCall is one DeepSeek-V3 call as its chat template renders it.
func dsCall(name, args string) string {
	return dsCallBegin + "function" + dsSep + name + "\n```json\n" + args + "\n```" + dsCallEnd
}

func TestParse(t *testing.T) {
	hermes, _ := Lookup("qwen25")
	mistral, _ := Lookup("mistral")
	llama, _ := Lookup("llama3")
	deepseek, _ := Lookup("deepseekv3")
	for _, tc := range []struct {
		f       *Format
		text    string
		content string
		calls   []Call
		cut     bool // a call cut short: streamed, its pieces went out
	}{
		{hermes, "Let me check.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>",
			"Let me check.", []Call{{"a", `{"x": 1}`}, {"b", `{}`}}, false},
		{hermes, "no calls here", "no calls here", nil, false},
		{hermes, "<tool_call>\nnot json\n</tool_call>", "<tool_call>\nnot json\n</tool_call>", nil, false},
		// The arguments before the name, strings holding braces and quotes.
		{hermes, "<tool_call>\n{\"arguments\": {\"s\": \"}{\\\"\", \"n\": [1, {\"k\": null}]}, \"name\": \"a\"}\n</tool_call>",
			"", []Call{{"a", `{"s": "}{\"", "n": [1, {"k": null}]}`}}, false},
		// A call cut short is text.
		{hermes, "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": ", "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": ", nil, true},
		{mistral, `[TOOL_CALLS] [{"name": "a", "arguments": {"x": "y"}}, {"name": "b", "arguments": {}}]`, "", []Call{{"a", `{"x": "y"}`}, {"b", `{}`}}, false},
		{mistral, `[TOOL_CALLS] [{"name": "a", "arguments": {"x": "y"}}`, `[TOOL_CALLS] [{"name": "a", "arguments": {"x": "y"}}`, nil, true},
		{llama, `{"name": "a", "parameters": {"q": 2}}`, "", []Call{{"a", `{"q": 2}`}}, false},
		{llama, `<|python_tag|>{"name": "a", "parameters": {"q": 2}}; {"name": "b", "parameters": {"r": true}}`, "", []Call{{"a", `{"q": 2}`}, {"b", `{"r": true}`}}, false},
		{llama, "Hello there", "Hello there", nil, false},
		{deepseek, "Checking." + dsCallsBegin + dsCall("get_weather", `{"city": "Paris"}`) + "\n" + dsCall("get_time", `{"zone": "Europe/Rome"}`) + dsCallsEnd,
			"Checking.", []Call{{"get_weather", `{"city": "Paris"}`}, {"get_time", `{"zone": "Europe/Rome"}`}}, false},
		{deepseek, dsCallsBegin + dsCall("f", `{"a": [1, 2]}`) + dsCallsEnd, "", []Call{{"f", `{"a": [1, 2]}`}}, false},
		{deepseek, dsCallsBegin + dsCallBegin + "function" + dsSep + "f\nnot a code block", dsCallsBegin + dsCallBegin + "function" + dsSep + "f\nnot a code block", nil, false},
	} {
		content, calls := tc.f.Parse(tc.text)
		if content != tc.content || !reflect.DeepEqual(calls, tc.calls) {
			t.Errorf("%s %q: %q %v, want %q %v", tc.f.Name, tc.text, content, calls, tc.content, tc.calls)
		}
		// Streamed byte by byte: the pieces rebuild the same calls, each
		// call's name coming before its arguments and the arguments in
		// more than one piece when they are longer than a byte.
		s := tc.f.NewStreamer()
		var sc strings.Builder
		var rebuilt []Call
		pieces := map[int]int{}
		add := func(c string, ds []Delta) {
			sc.WriteString(c)
			for _, d := range ds {
				if d.Index == len(rebuilt) {
					if d.Name == "" {
						t.Fatalf("%s %q: call %d's first delta has no name", tc.f.Name, tc.text, d.Index)
					}
					rebuilt = append(rebuilt, Call{Name: d.Name})
				} else if d.Name != "" || d.Index > len(rebuilt) {
					t.Fatalf("%s %q: delta %+v out of order", tc.f.Name, tc.text, d)
				}
				rebuilt[d.Index].Arguments += d.Arguments
				pieces[d.Index]++
			}
		}
		for i := range len(tc.text) {
			add(s.Push(tc.text[i : i+1]))
		}
		add(s.Finish())
		if len(tc.calls) > 0 {
			if !reflect.DeepEqual(rebuilt, tc.calls) {
				t.Errorf("%s %q streamed: calls %v", tc.f.Name, tc.text, rebuilt)
			}
			// Arguments before the name arrive whole with it.
			if !strings.Contains(tc.text, `{"arguments"`) && pieces[0] < 2 {
				t.Errorf("%s %q streamed: call 0 in %d piece(s)", tc.f.Name, tc.text, pieces[0])
			}
			if s.Calls() != len(tc.calls) {
				t.Errorf("%s: Calls() %d", tc.f.Name, s.Calls())
			}
		}
		if len(tc.calls) == 0 && !tc.cut && sc.String() != tc.text {
			t.Errorf("%s %q streamed: content %q", tc.f.Name, tc.text, sc.String())
		}
	}
}

func TestDetect(t *testing.T) {
	for tmpl, want := range map[string]string{
		"{{- '<tool_call>\\n' }}": "hermes", "[TOOL_CALLS] {{ calls }}": "mistral", "<|python_tag|>": "llama3",
		"{{'<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + '```json' }}": "deepseekv3",
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

// TestCallID: Mistral's calls get ids of nine letters and digits (its
// templates refuse others when the call comes back), the others OpenAI's
// call_ form; ids do not repeat.
func TestCallID(t *testing.T) {
	seen := map[string]bool{}
	for _, name := range []string{"mistral", "hermes", "llama3", "deepseekv3"} {
		f, _ := Lookup(name)
		for range 100 {
			id := f.CallID()
			if seen[id] {
				t.Fatalf("%s: id %q repeated", name, id)
			}
			seen[id] = true
			if name == "mistral" {
				if len(id) != 9 || strings.Trim(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") != "" {
					t.Fatalf("mistral id %q", id)
				}
			} else if !strings.HasPrefix(id, "call_") || len(id) != len("call_")+32 {
				t.Fatalf("%s id %q", name, id)
			}
		}
	}
}
