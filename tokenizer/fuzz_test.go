package tokenizer

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzTokenizers: any text encodes without a panic to ids inside the
// vocabulary; EncodeLimit agrees with Encode; streaming the ids gives
// Decode's text; and a byte-level tokenizer without a normalizer (llama3)
// decodes valid UTF-8 back to exactly the text (clean-up aside).
func FuzzTokenizers(f *testing.F) {
	for _, s := range []string{"", "Hello world", " leading space", "a\n\n\tb", "café 😀 日本語", "<|begin_of_text|><s>[INST]", "\xff\xfe", "  1234567 ,.;"} {
		f.Add(s)
	}
	lossless := map[string]bool{"llama3": true}
	// Loaded before fuzzing: a fuzz worker gives each input 10 s.
	toks := map[string]*Tokenizer{
		"llama3": hfTokenizer(f, "llama3"), "mistral": hfTokenizer(f, "mistral"), "qwen3": hfTokenizer(f, "qwen3"),
		"stories260K-hf": hfTokenizer(f, "stories260K"), "llama2c": llama2cTokenizer(f), "gguf": ggufStoriesTokenizer(f),
	}
	f.Fuzz(func(t *testing.T, text string) {
		for name, tok := range toks {
			ids := tok.Encode(text, true)
			for _, id := range ids {
				if id < 0 || id >= tok.VocabSize() {
					t.Fatalf("%s: Encode(%q) gives id %d outside [0, %d)", name, text, id, tok.VocabSize())
				}
			}
			if got, ok := tok.EncodeLimit(text, true, len(ids)); !ok || !equalIDs(got, ids) {
				t.Fatalf("%s: EncodeLimit(%q) = %v, %v; Encode %v", name, text, got, ok, ids)
			}
			for _, skip := range []bool{false, true} {
				want := tok.Decode(ids, skip)
				s := tok.NewDecodeStream(skip)
				var sb strings.Builder
				for _, id := range ids {
					sb.WriteString(s.Push(id))
				}
				if got := sb.String() + s.Flush(); got != want {
					t.Fatalf("%s: streaming %v gives %q, Decode %q", name, ids, got, want)
				}
			}
			if lossless[name] && utf8.ValidString(text) {
				raw := *tok
				raw.cleanUpSpaces = false // transformers' clean-up rewrites " ," on purpose
				if got := raw.Decode(raw.Encode(text, false), false); got != text {
					t.Fatalf("%s: Decode(Encode(%q)) = %q", name, text, got)
				}
			}
		}
	})
}

// FuzzChatTemplates renders client-controlled values (a message's role and
// content, chat_template_kwargs) through real chat templates: an error is
// fine (a template may raise), a panic is not. Template sources themselves
// come from the operator, so only their parsing is fuzzed.
func FuzzChatTemplates(f *testing.F) {
	f.Add("user", "Hello!", `{"enable_thinking": false}`, "{{ messages[0]['content'] }}")
	f.Add("assistant", "<think>x</think>y", `{"tools": [{"type": "function", "function": {"name": "f"}}]}`, "{% for m in messages %}{{ m.role }}{% endfor %}")
	f.Add("system", "", `{"x": [1, {"y": null}]}`, "{% if x %}{{ x|tojson }}{% endif %}")
	var templates []*ChatTemplate
	for _, name := range []string{"llama3", "qwen3", "deepseek_v3"} {
		tok := hfTokenizer(f, name)
		tmpl, err := NewChatTemplate(tok.ChatTemplateSource(), tok.SpecialTokenStrings())
		if err != nil {
			f.Fatalf("%s: %v", name, err)
		}
		templates = append(templates, tmpl)
	}
	f.Fuzz(func(t *testing.T, role, content, kwargs, source string) {
		for _, tmpl := range templates {
			extra := map[string]any{}
			var raw map[string]json.RawMessage
			if json.Unmarshal([]byte(kwargs), &raw) == nil {
				for k, v := range raw {
					extra[k] = v
				}
			}
			msgs := []ChatMessage{{"role": "system", "content": "Be brief."}, {"role": role, "content": content}}
			tmpl.Render(msgs, true, extra)
		}
		if tmpl, err := NewChatTemplate(source, nil); err == nil && len(source) < 64 && !strings.Contains(source, "range") {
			// Short sources without loops over range() render quickly.
			tmpl.Render([]ChatMessage{{"role": role, "content": content}}, true, nil)
		}
	})
}
