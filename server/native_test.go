package server_test

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/server"
)

func greedyParams(maxNew int) map[string]any {
	return map[string]any{"max_new_tokens": maxNew, "temperature": 0}
}

func TestGenerateText(t *testing.T) {
	ts, _ := newServer(t)
	status, out := call(t, "POST", ts.URL+"/generate", map[string]any{
		"text": "Once upon a time", "sampling_params": greedyParams(16), "rid": "my-request",
	})
	if status != http.StatusOK {
		t.Fatalf("status %d: %v", status, out)
	}
	meta := out["meta_info"].(map[string]any)
	ids := out["output_ids"].([]any)
	if len(ids) != 16 || out["text"] == "" {
		t.Errorf("%d output ids, text %q", len(ids), out["text"])
	}
	if meta["id"] != "my-request" || num(meta["prompt_tokens"]) != 5 || num(meta["completion_tokens"]) != 16 {
		t.Errorf("meta_info %v", meta)
	}
	if fr := meta["finish_reason"].(map[string]any); fr["type"] != "length" || num(fr["length"]) != 16 {
		t.Errorf("finish_reason %v", fr)
	}
	if _, ok := meta["e2e_latency"].(float64); !ok {
		t.Errorf("no e2e_latency in %v", meta)
	}
	if _, ok := meta["cached_tokens"].(float64); !ok {
		t.Errorf("no cached_tokens in %v", meta)
	}

	// The same prompt as ids gives the same greedy output.
	_, tok := call(t, "POST", ts.URL+"/tokenize", map[string]any{"text": "Once upon a time"})
	status, byIDs := call(t, "POST", ts.URL+"/generate", map[string]any{
		"input_ids": tok["tokens"], "sampling_params": greedyParams(16),
	})
	if status != http.StatusOK || !reflect.DeepEqual(byIDs["output_ids"], out["output_ids"]) || byIDs["text"] != out["text"] {
		t.Errorf("input_ids: status %d, output %v %q; text gave %v %q", status, byIDs["output_ids"], byIDs["text"], out["output_ids"], out["text"])
	}
}

func TestGenerateStops(t *testing.T) {
	ts, _ := newServer(t)
	_, free := call(t, "POST", ts.URL+"/generate", map[string]any{"text": "Once upon a time", "sampling_params": greedyParams(20)})
	freeIDs := free["output_ids"].([]any)
	// A stop token (stories260K's greedy stories never reach EOS) ends the
	// output with that token, which the text leaves out.
	stopID := num(freeIDs[6])
	status, out := call(t, "POST", ts.URL+"/generate", map[string]any{
		"text": "Once upon a time", "sampling_params": map[string]any{"max_new_tokens": 20, "temperature": 0, "stop_token_ids": []int{stopID}},
	})
	if status != http.StatusOK {
		t.Fatalf("status %d: %v", status, out)
	}
	fr := get(out, "meta_info", "finish_reason").(map[string]any)
	ids := out["output_ids"].([]any)
	if fr["type"] != "stop" || num(fr["matched"]) != stopID || num(ids[len(ids)-1]) != stopID || len(ids) > 7 {
		t.Errorf("finish_reason %v after %v", fr, ids)
	}
	if !strings.HasPrefix(free["text"].(string), out["text"].(string)) {
		t.Errorf("stopped text %q is not a prefix of %q", out["text"], free["text"])
	}
	// A stop string ends it early, and is not part of the text.
	status, out = call(t, "POST", ts.URL+"/generate", map[string]any{
		"text": "Once upon a time", "sampling_params": map[string]any{"max_new_tokens": 100, "temperature": 0, "stop": "Lily"},
	})
	fr = get(out, "meta_info", "finish_reason").(map[string]any)
	if status != http.StatusOK || fr["type"] != "stop" || fr["matched"] != "Lily" || strings.Contains(out["text"].(string), "Lily") {
		t.Errorf("stop string: status %d, finish %v, text %q", status, fr, out["text"])
	}
}

func TestGenerateBatch(t *testing.T) {
	ts, _ := newServer(t)
	prompts := []string{"Once upon a time", "The cat", "Tom and Sue went"}
	status, raw := callRaw(t, "POST", ts.URL+"/generate", map[string]any{
		"text": prompts, "sampling_params": greedyParams(8), "rid": []string{"a", "b", "c"},
	})
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, raw)
	}
	var outs []map[string]any
	mustUnmarshal(t, raw, &outs)
	if len(outs) != 3 {
		t.Fatalf("%d outputs for 3 prompts", len(outs))
	}
	for i, p := range prompts {
		_, single := call(t, "POST", ts.URL+"/generate", map[string]any{"text": p, "sampling_params": greedyParams(8)})
		if outs[i]["text"] != single["text"] || get(outs[i], "meta_info", "id") != []string{"a", "b", "c"}[i] {
			t.Errorf("batch item %d: %q (id %v); alone: %q", i, outs[i]["text"], get(outs[i], "meta_info", "id"), single["text"])
		}
	}
	// Batches of ids, with per-item sampling parameters.
	status, raw = callRaw(t, "POST", ts.URL+"/generate", map[string]any{
		"input_ids":       [][]int{{1, 403, 407}, {1, 403}},
		"sampling_params": []any{greedyParams(3), greedyParams(5)},
	})
	mustUnmarshal(t, raw, &outs)
	if status != http.StatusOK || len(outs) != 2 || len(outs[0]["output_ids"].([]any)) != 3 || len(outs[1]["output_ids"].([]any)) != 5 {
		t.Errorf("id batch: status %d: %s", status, raw)
	}
}

func TestGenerateStream(t *testing.T) {
	ts, _ := newServer(t)
	_, whole := call(t, "POST", ts.URL+"/generate", map[string]any{"text": "Once upon a time", "sampling_params": greedyParams(30)})
	events := postStream(t, ts.URL+"/generate", map[string]any{
		"text": "Once upon a time", "sampling_params": greedyParams(30), "stream": true,
	})
	if len(events) < 5 {
		t.Fatalf("%d events: not streamed", len(events))
	}
	prev := ""
	for i, ev := range events {
		text := ev["text"].(string)
		// SGLang streams the text so far, not increments.
		if !strings.HasPrefix(text, prev) {
			t.Fatalf("event %d text %q does not extend %q", i, text, prev)
		}
		prev = text
		last := i == len(events)-1
		if fr := get(ev, "meta_info", "finish_reason"); (fr == nil) == last {
			t.Errorf("event %d (last: %v): finish_reason %v", i, last, fr)
		}
	}
	final := events[len(events)-1]
	if final["text"] != whole["text"] || !reflect.DeepEqual(final["output_ids"], whole["output_ids"]) {
		t.Errorf("streamed %q, non-streamed %q", final["text"], whole["text"])
	}

	// A streamed batch tags every chunk with its item's index.
	events = postStream(t, ts.URL+"/generate", map[string]any{
		"text": []string{"Once upon a time", "The dog"}, "sampling_params": greedyParams(6), "stream": true,
	})
	finished := map[int]bool{}
	for _, ev := range events {
		idx, ok := ev["index"].(float64)
		if !ok {
			t.Fatalf("batch chunk without index: %v", ev)
		}
		if get(ev, "meta_info", "finish_reason") != nil {
			finished[int(idx)] = true
		}
	}
	if !finished[0] || !finished[1] {
		t.Errorf("finished items %v, want 0 and 1", finished)
	}
}

func TestGenerateLogprobs(t *testing.T) {
	ts, _ := newServer(t)
	status, out := call(t, "POST", ts.URL+"/generate", map[string]any{
		"text": "Once upon a time", "sampling_params": greedyParams(6),
		"return_logprob": true, "logprob_start_len": 0, "top_logprobs_num": 2, "return_text_in_logprobs": true,
	})
	if status != http.StatusOK {
		t.Fatalf("status %d: %v", status, out)
	}
	meta := out["meta_info"].(map[string]any)
	prompt := num(meta["prompt_tokens"])
	input := meta["input_token_logprobs"].([]any)
	// As in SGLang: prompt_tokens - logprob_start_len entries, the first
	// token (nothing precedes it) with a null logprob: prompt-1 values.
	if len(input) != prompt {
		t.Fatalf("%d input_token_logprobs for %d prompt tokens", len(input), prompt)
	}
	for i, e := range input {
		entry := e.([]any)
		if len(entry) != 3 || (i == 0) != (entry[0] == nil) {
			t.Errorf("input entry %d: %v", i, entry)
		}
		if i > 0 && entry[0].(float64) > 0 {
			t.Errorf("input entry %d: logprob %v > 0", i, entry[0])
		}
	}
	if got := get(input, 1, 2); got != " Once" {
		t.Errorf("text of prompt token 1: %v, want \" Once\"", got)
	}
	output := meta["output_token_logprobs"].([]any)
	top := meta["output_top_logprobs"].([]any)
	ids := out["output_ids"].([]any)
	if len(output) != 6 || len(top) != 6 {
		t.Fatalf("%d output logprobs, %d top lists", len(output), len(top))
	}
	for i, e := range output {
		entry := e.([]any)
		alts := top[i].([]any)
		if entry[1] != ids[i] || len(alts) != 2 || get(alts, 0, 1) != ids[i] || get(alts, 0, 0) != entry[0] {
			t.Errorf("output %d: %v, alternatives %v", i, entry, alts)
		}
	}

	// logprob_start_len > 0 scores only the prompt's tail.
	_, out = call(t, "POST", ts.URL+"/generate", map[string]any{
		"text": "Once upon a time", "sampling_params": greedyParams(2), "return_logprob": true, "logprob_start_len": 3,
	})
	if n := len(get(out, "meta_info", "input_token_logprobs").([]any)); n != prompt-3 {
		t.Errorf("logprob_start_len 3: %d input logprobs, want %d", n, prompt-3)
	}
}

func TestTokenizeRoundTrip(t *testing.T) {
	ts, _ := newServer(t)
	for _, text := range []string{"Once upon a time, there was a girl.", "héllo wörld ✓", ""} {
		status, tok := call(t, "POST", ts.URL+"/tokenize", map[string]any{"prompt": text})
		if status != http.StatusOK {
			t.Fatalf("tokenize %q: %d %v", text, status, tok)
		}
		ids := tok["tokens"].([]any)
		if num(tok["count"]) != len(ids) || num(ids[0]) != 1 {
			t.Errorf("tokenize %q: %v (want BOS first, count = len)", text, tok)
		}
		status, detok := call(t, "POST", ts.URL+"/detokenize", map[string]any{"tokens": ids})
		if status != http.StatusOK || detok["text"] != text {
			t.Errorf("detokenize(tokenize(%q)) = %d %q", text, status, detok["text"])
		}
	}
	_, tok := call(t, "POST", ts.URL+"/tokenize", map[string]any{"text": "Once", "add_special_tokens": false})
	if ids := tok["tokens"].([]any); len(ids) == 0 || num(ids[0]) == 1 {
		t.Errorf("add_special_tokens=false still adds BOS: %v", ids)
	}
	_, tok = call(t, "POST", ts.URL+"/tokenize", map[string]any{"prompt": []string{"a", "b c"}})
	if counts := tok["count"].([]any); len(counts) != 2 {
		t.Errorf("list tokenize: %v", tok)
	}
}

func TestInfoRoutes(t *testing.T) {
	ts, _ := newServer(t)
	for _, path := range []string{"/health", "/health_generate"} {
		if status, body := callRaw(t, "GET", ts.URL+path, nil); status != http.StatusOK {
			t.Errorf("GET %s: %d %s", path, status, body)
		}
	}
	status, info := call(t, "GET", ts.URL+"/get_model_info", nil)
	if status != http.StatusOK || info["model_path"] != modelPath(t) || info["tokenizer_path"] != modelPath(t) || info["is_generation"] != true {
		t.Errorf("get_model_info: %d %v", status, info)
	}
	status, info = call(t, "GET", ts.URL+"/get_server_info", nil)
	if status != http.StatusOK || num(info["context_length"]) != 2048 || num(info["kv_cache_tokens"]) != 32768 ||
		info["attention_backend"] == nil || info["served_model_name"] != "stories260K.gguf" {
		t.Errorf("get_server_info: %d %v", status, info)
	}
	if _, ok := info["logger"]; ok {
		t.Errorf("get_server_info lists the logger")
	}
	if status, body := callRaw(t, "POST", ts.URL+"/flush_cache", nil); status != http.StatusOK {
		t.Errorf("flush_cache: %d %s", status, body)
	}
	if status, body := callRaw(t, "GET", ts.URL+"/no/such/route", nil); status != http.StatusNotFound || !strings.Contains(string(body), `"error"`) {
		t.Errorf("unknown route: %d %s", status, body)
	}
}

func TestAPIKey(t *testing.T) {
	ts, _ := newServer(t, func(o *server.Options) { o.APIKey = "sekrit" })
	if status, _ := callRaw(t, "GET", ts.URL+"/health", nil); status != http.StatusOK {
		t.Errorf("/health needs no key, got %d", status)
	}
	status, out := call(t, "GET", ts.URL+"/v1/models", nil)
	if status != http.StatusUnauthorized || get(out, "error", "code") != "invalid_api_key" {
		t.Errorf("no key: %d %v", status, out)
	}
	req, _ := http.NewRequest("GET", ts.URL+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer sekrit")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("with the key: %d", resp.StatusCode)
	}
}

func mustUnmarshal(t testing.TB, raw []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("%v: %s", err, raw)
	}
}

// TestCompletionPromptForms covers OpenAI's four prompt shapes and the
// choice order of several prompts times n: index = prompt*n + sample.
func TestCompletionPromptForms(t *testing.T) {
	ts, _ := newServer(t)
	complete := func(prompt any, n int) map[string]any {
		t.Helper()
		status, out := call(t, "POST", ts.URL+"/v1/completions", map[string]any{"prompt": prompt, "n": n, "max_tokens": 4, "temperature": 0})
		if status != http.StatusOK {
			t.Fatalf("prompt %v: %d %v", prompt, status, out)
		}
		return out
	}
	single := complete("Once upon a time", 1)
	want := get(single, "choices", 0, "text")
	for _, prompt := range []any{[]string{"Once upon a time"}, []int{1, 403, 407, 261, 378}, [][]int{{1, 403, 407, 261, 378}}} {
		if out := complete(prompt, 1); get(out, "choices", 0, "text") != want || num(get(out, "usage", "prompt_tokens")) != 5 {
			t.Errorf("prompt %v: %v, want the text %q and 5 prompt tokens", prompt, out, want)
		}
	}
	out := complete([]string{"Once upon a time", "The dog"}, 2)
	choices := out["choices"].([]any)
	if len(choices) != 4 || num(get(out, "usage", "completion_tokens")) != 16 {
		t.Fatalf("%d choices, usage %v", len(choices), out["usage"])
	}
	for i, c := range choices {
		if num(get(c, "index")) != i || (i < 2) != (get(c, "text") == want) {
			t.Errorf("choice %d: %v", i, c)
		}
	}
}

func TestChatStreamN(t *testing.T) {
	ts, _ := newServer(t)
	events := postStream(t, ts.URL+"/v1/chat/completions", map[string]any{
		"messages":   []any{map[string]any{"role": "user", "content": "Once upon a time"}},
		"max_tokens": 6, "n": 2, "seed": 3, "stream": true, "logprobs": true,
	})
	text := map[int]string{}
	roles := map[int]int{}
	finish := map[int]string{}
	for _, ev := range events {
		if ev["object"] != "chat.completion.chunk" {
			t.Fatalf("event %v", ev)
		}
		for _, c := range ev["choices"].([]any) {
			i := num(get(c, "index"))
			if _, done := finish[i]; done {
				t.Errorf("choice %d: a chunk after its finish_reason: %v", i, c)
			}
			if get(c, "delta", "role") == "assistant" {
				roles[i]++
			} else if roles[i] == 0 {
				t.Errorf("choice %d: content before the role chunk: %v", i, c)
			}
			if s, ok := get(c, "delta", "content").(string); ok {
				text[i] += s
				if s != "" && len(get(c, "logprobs", "content").([]any)) == 0 {
					t.Errorf("choice %d: content %q without logprobs", i, s)
				}
			}
			if f, ok := get(c, "finish_reason").(string); ok {
				finish[i] = f
			}
		}
	}
	for i := range 2 {
		if roles[i] != 1 || finish[i] != "length" || text[i] == "" {
			t.Errorf("choice %d: %d role chunks, finish %q, text %q", i, roles[i], finish[i], text[i])
		}
	}
}

// TestCompletionStreamEcho: a streamed completion with echo sends each
// choice's prompt once, before its text and its finish chunk, also when no
// token was generated (max_tokens 0, the scoring idiom), where the echo can
// only ride on the finish.
func TestCompletionStreamEcho(t *testing.T) {
	ts, _ := newServer(t)
	const prompt = "Once upon a time"
	status, whole := call(t, "POST", ts.URL+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 5, "temperature": 0})
	if status != http.StatusOK {
		t.Fatalf("non-streamed: %d %v", status, whole)
	}
	for _, tc := range []struct {
		maxTokens int
		want      string
		finish    string
	}{{0, prompt, "length"}, {5, prompt + get(whole, "choices", 0, "text").(string), "length"}} {
		events := postStream(t, ts.URL+"/v1/completions", map[string]any{
			"prompt": prompt, "echo": true, "max_tokens": tc.maxTokens, "temperature": 0, "n": 2, "stream": true,
		})
		text, finish, chunks := map[int]string{}, map[int]string{}, map[int]int{}
		for _, ev := range events {
			for _, c := range ev["choices"].([]any) {
				i := num(get(c, "index"))
				if _, done := finish[i]; done {
					t.Errorf("max_tokens %d, choice %d: a chunk after its finish: %v", tc.maxTokens, i, c)
				}
				s, _ := get(c, "text").(string)
				if chunks[i] == 0 && s != prompt {
					t.Errorf("max_tokens %d, choice %d: first chunk %q, want the echoed prompt", tc.maxTokens, i, s)
				}
				chunks[i]++
				text[i] += s
				if f, ok := get(c, "finish_reason").(string); ok {
					finish[i] = f
				}
			}
		}
		for i := range 2 {
			if text[i] != tc.want || finish[i] != tc.finish {
				t.Errorf("max_tokens %d, choice %d: text %q finish %q, want %q and %q", tc.maxTokens, i, text[i], finish[i], tc.want, tc.finish)
			}
		}
	}
}
