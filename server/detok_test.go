package server_test

import (
	"strings"
	"testing"
)

// TestFirstTokenKeepsItsSpace: with a SentencePiece tokenizer the output is
// decoded after the prompt, so a first token "▁little" reads " little", in
// full answers and streams alike, and prompt + output is the decoded whole.
func TestFirstTokenKeepsItsSpace(t *testing.T) {
	ts, eng := newServer(t)
	tok := eng.Tokenizer()
	prompt := "a"
	status, out := call(t, "POST", ts.URL+"/generate", map[string]any{"text": prompt,
		"sampling_params": map[string]any{"max_new_tokens": 8, "temperature": 0}})
	if status != 200 {
		t.Fatalf("/generate: %d %v", status, out)
	}
	var ids []int
	for _, v := range get(out, "output_ids").([]any) {
		ids = append(ids, num(v))
	}
	if first := tok.TokenString(ids[0]); !strings.HasPrefix(first, "▁") {
		t.Fatalf("the first generated token %q has no leading ▁; this test needs one", first)
	}
	want := tok.Decode(append(tok.Encode(prompt, true), ids...), true)[len(prompt):]
	if !strings.HasPrefix(want, " ") {
		t.Fatalf("decoding prompt + output gives %q after the prompt: no leading space", want)
	}
	if got := get(out, "text"); got != want {
		t.Errorf("/generate text %q, want %q", got, want)
	}

	body := map[string]any{"prompt": prompt, "max_tokens": 8, "temperature": 0}
	if _, out := call(t, "POST", ts.URL+"/v1/completions", body); get(out, "choices", 0, "text") != want {
		t.Errorf("/v1/completions text %q, want %q", get(out, "choices", 0, "text"), want)
	}
	body["echo"], body["logprobs"] = true, 0
	_, out = call(t, "POST", ts.URL+"/v1/completions", body)
	if got := get(out, "choices", 0, "text"); got != prompt+want {
		t.Errorf("echoed completion %q, want %q", got, prompt+want)
	}
	var joined string
	for _, piece := range get(out, "choices", 0, "logprobs", "tokens").([]any)[len(tok.Encode(prompt, true)):] {
		joined += piece.(string)
	}
	if joined != want {
		t.Errorf("the output's logprob tokens join to %q, want %q", joined, want)
	}
	delete(body, "echo")
	delete(body, "logprobs")
	body["stream"] = true
	streamed := ""
	for _, ev := range postStream(t, ts.URL+"/v1/completions", body) {
		if s, ok := get(ev, "choices", 0, "text").(string); ok {
			streamed += s
		}
	}
	if streamed != want {
		t.Errorf("streamed completion %q, want %q", streamed, want)
	}
}
