package server_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/server"
)

// TestBadInput checks every refusal: its status and OpenAI's error object,
// with the offending field named.
func TestBadInput(t *testing.T) {
	ts, _ := newServer(t)
	chatWith := func(extra string) string {
		return `{"model": "stories260K.gguf", "messages": [{"role": "user", "content": "Once"}]` + extra + `}`
	}
	longPrompt, _ := json.Marshal(map[string]any{"prompt": make([]int, 2049)})
	tests := []struct {
		name, path, body string
		status           int
		param, code      string
		message          string // a substring of error.message
	}{
		{"malformed JSON", "/v1/chat/completions", `{"messages": [`, 400, "", "invalid_json", "malformed JSON"},
		{"syntax error", "/v1/chat/completions", `{"messages": nope}`, 400, "", "invalid_json", "malformed JSON at byte"},
		{"empty body", "/v1/completions", ``, 400, "", "invalid_json", "empty"},
		{"not an object", "/v1/completions", `[1, 2]`, 400, "", "invalid_type", "must be a JSON object"},
		{"two values", "/v1/completions", `{"prompt": "a"} {}`, 400, "", "invalid_json", "more than one JSON value"},
		{"wrong type", "/v1/chat/completions", chatWith(`, "max_tokens": "ten"`), 400, "max_tokens", "invalid_type", "max_tokens must be an integer, got string"},
		{"wrong type of a sampling field", "/v1/chat/completions", chatWith(`, "temperature": "hot"`), 400, "temperature", "invalid_type", "temperature must be a number"},
		{"wrong type nested", "/v1/chat/completions", chatWith(`, "stream": true, "stream_options": {"include_usage": "yes"}`), 400, "stream_options.include_usage", "invalid_type", "must be a boolean"},
		{"fractional integer", "/v1/completions", `{"prompt": "a", "n": 1.5}`, 400, "n", "invalid_type", "n must be an integer"},
		{"stop of the wrong type", "/v1/completions", `{"prompt": "a", "stop": 5}`, 400, "stop", "invalid_type", "stop must be a string or a list of strings"},
		{"unknown model", "/v1/chat/completions", `{"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}`, 404, "model", "model_not_found", `"gpt-4o" does not exist`},
		{"unknown model, completions", "/v1/completions", `{"model": "llama", "prompt": "hi"}`, 404, "model", "model_not_found", "does not exist"},
		{"prompt longer than the context", "/v1/completions", string(longPrompt), 400, "", "context_length_exceeded", "2049 tokens"},
		{"prompt + max_tokens over the context", "/v1/completions", `{"prompt": "Once upon a time", "max_tokens": 2044}`, 400, "max_tokens", "context_length_exceeded", "context length is 2048 tokens"},
		{"invalid value on a stream", "/v1/chat/completions", chatWith(`, "stream": true, "top_p": 0`), 400, "top_p", "invalid_value", "top_p"},
		{"negative max_tokens", "/v1/chat/completions", chatWith(`, "max_tokens": -1`), 400, "max_tokens", "invalid_value", "max_tokens must be >= 0"},
		{"negative max_completion_tokens", "/v1/chat/completions", chatWith(`, "max_completion_tokens": -5`), 400, "max_completion_tokens", "invalid_value", ">= 0"},
		{"invalid top_p", "/v1/chat/completions", chatWith(`, "top_p": 1.5`), 400, "top_p", "invalid_value", "top_p must be in (0, 1]"},
		{"invalid penalty", "/v1/completions", `{"prompt": "a", "frequency_penalty": 3}`, 400, "frequency_penalty", "invalid_value", "frequency_penalty must be in [-2, 2]"},
		{"two invalid values", "/v1/completions", `{"prompt": "a", "temperature": -1, "min_p": 2}`, 400, "", "invalid_value", "min_p must be in [0, 1]"},
		{"empty messages", "/v1/chat/completions", `{"messages": []}`, 400, "messages", "invalid_value", "non-empty"},
		{"missing messages", "/v1/chat/completions", `{"model": "stories260K.gguf"}`, 400, "messages", "invalid_value", "non-empty"},
		{"messages not a list", "/v1/chat/completions", `{"messages": {"role": "user"}}`, 400, "messages", "invalid_type", "messages must be an array"},
		{"unknown role", "/v1/chat/completions", `{"messages": [{"role": "wizard", "content": "hi"}]}`, 400, "messages[0].role", "invalid_value", "wizard"},
		{"missing content", "/v1/chat/completions", `{"messages": [{"role": "user"}]}`, 400, "messages[0].content", "missing_required_parameter", "required"},
		{"image content part", "/v1/chat/completions", `{"messages": [{"role": "user", "content": [{"type": "text", "text": "see"}, {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]}`, 400, "messages[0].content[1].type", "unsupported_parameter", "does not accept images"},
		{"video content part", "/v1/chat/completions", `{"messages": [{"role": "user", "content": [{"type": "text", "text": "see"}, {"type": "video_url", "video_url": {"url": "data:video/mp4;base64,AAAA"}}]}]}`, 400, "messages[0].content[1].type", "unsupported_parameter", `content part type "video_url" is not supported`},
		{"content of the wrong type", "/v1/chat/completions", `{"messages": [{"role": "user", "content": 42}]}`, 400, "messages[0].content", "invalid_type", "got number"},
		{"n of zero", "/v1/chat/completions", chatWith(`, "n": 0`), 400, "n", "invalid_value", "n must be between 1 and 128"},
		{"top_logprobs without logprobs", "/v1/chat/completions", chatWith(`, "top_logprobs": 3`), 400, "top_logprobs", "invalid_value", "needs \"logprobs\": true"},
		{"too many top_logprobs", "/v1/chat/completions", chatWith(`, "logprobs": true, "top_logprobs": 21`), 400, "top_logprobs", "invalid_value", "between 0 and 20"},
		{"unsupported schema keyword", "/v1/chat/completions", chatWith(`, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "array", "uniqueItems": true}}}`), 400, "response_format.json_schema.schema", "unsupported_parameter", "unsupported uniqueItems"},
		{"schema without values", "/v1/chat/completions", chatWith(`, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "not": {}}}}`), 400, "response_format.json_schema.schema", "invalid_value", "admits no value"},
		{"invalid schema", "/v1/chat/completions", chatWith(`, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "objet"}}}`), 400, "response_format.json_schema.schema", "invalid_value", "unknown type"},
		{"unknown response_format type", "/v1/chat/completions", chatWith(`, "response_format": {"type": "xml"}`), 400, "response_format.type", "invalid_value", "json_schema"},
		{"two constraints", "/v1/completions", `{"prompt": "a", "regex": "a+", "response_format": {"type": "json_object"}}`, 400, "response_format", "invalid_value", "only one"},
		{"v1 regex that does not compile", "/v1/completions", `{"prompt": "a", "regex": "a(b"}`, 400, "regex", "invalid_value", "missing closing )"},
		{"v1 regex lookahead", "/v1/completions", `{"prompt": "a", "regex": "(?=a)b"}`, 400, "regex", "unsupported_parameter", "regex"},
		{"tools of the wrong type", "/v1/chat/completions", chatWith(`, "tools": "x"`), 400, "tools", "invalid_type", "tools"},
		{"tool of the wrong type", "/v1/chat/completions", chatWith(`, "tools": [{"type": "retrieval"}]`), 400, "tools[0].type", "invalid_value", "function"},
		{"tool_choice naming an absent function", "/v1/chat/completions", chatWith(`, "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": {"type": "function", "function": {"name": "g"}}`), 400, "tool_choice", "invalid_value", "not in tools"},
		{"tool_choice without tools", "/v1/chat/completions", chatWith(`, "tool_choice": "required"`), 400, "tool_choice", "invalid_value", "only allowed when tools"},
		{"unknown tool_choice", "/v1/chat/completions", chatWith(`, "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "always"`), 400, "tool_choice", "invalid_value", "always"},
		{"required without a tool-call syntax", "/v1/chat/completions", chatWith(`, "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "required"`), 400, "tool_choice", "unsupported_parameter", "--tool-call-parser"},
		{"structural_tag", "/v1/completions", `{"prompt": "a", "structural_tag": {}}`, 400, "structural_tag", "unsupported_parameter", "structural_tag"},
		{"logit_bias", "/v1/completions", `{"prompt": "a", "logit_bias": {"5": 10}}`, 400, "logit_bias", "unsupported_parameter", "not supported"},
		{"stream_options without stream", "/v1/completions", `{"prompt": "a", "stream_options": {"include_usage": true}}`, 400, "stream_options", "invalid_value", "only allowed"},
		{"suffix", "/v1/completions", `{"prompt": "a", "suffix": "b"}`, 400, "suffix", "unsupported_parameter", "suffix"},
		{"best_of", "/v1/completions", `{"prompt": "a", "best_of": 3}`, 400, "best_of", "unsupported_parameter", "best_of"},
		{"min_tokens", "/v1/completions", `{"prompt": "a", "min_tokens": 5}`, 400, "min_tokens", "unsupported_parameter", "min_tokens"},
		{"chat min_tokens", "/v1/chat/completions", chatWith(`, "min_tokens": 2`), 400, "min_tokens", "unsupported_parameter", "min_tokens"},
		{"lora_path", "/v1/completions", `{"prompt": "a", "lora_path": "adapter"}`, 400, "lora_path", "unsupported_parameter", "LoRA"},
		{"generate: min_new_tokens", "/generate", `{"text": "a", "sampling_params": {"min_new_tokens": 4}}`, 400, "sampling_params.min_new_tokens", "unsupported_parameter", "min_new_tokens"},
		{"generate: lora_path", "/generate", `{"text": "a", "lora_path": "adapter"}`, 400, "lora_path", "unsupported_parameter", "LoRA"},
		{"missing prompt", "/v1/completions", `{"max_tokens": 3}`, 400, "prompt", "missing_required_parameter", "prompt is required"},
		{"empty prompt list", "/v1/completions", `{"prompt": []}`, 400, "prompt", "invalid_value", "empty list"},
		{"prompt of the wrong type", "/v1/completions", `{"prompt": {"text": "a"}}`, 400, "prompt", "invalid_type", "got object"},
		{"token id outside the vocabulary", "/v1/completions", `{"prompt": [1, 9999]}`, 400, "prompt", "invalid_value", "outside the vocabulary [0, 512)"},
		{"too many legacy logprobs", "/v1/completions", `{"prompt": "a", "logprobs": 50}`, 400, "logprobs", "invalid_value", "between 0 and 20"},

		{"generate: no prompt", "/generate", `{"sampling_params": {}}`, 400, "text", "missing_required_parameter", "text or input_ids"},
		{"generate: text and ids", "/generate", `{"text": "a", "input_ids": [1]}`, 400, "input_ids", "invalid_value", "not both"},
		{"generate: sampling field type", "/generate", `{"text": "a", "sampling_params": {"temperature": "hot"}}`, 400, "sampling_params.temperature", "invalid_type", "must be a number"},
		{"generate: sampling value", "/generate", `{"text": "a", "sampling_params": {"top_k": 5, "repetition_penalty": 0}}`, 400, "sampling_params.repetition_penalty", "invalid_value", "repetition_penalty must be"},
		{"generate: negative max_new_tokens", "/generate", `{"text": "a", "sampling_params": {"max_new_tokens": -2}}`, 400, "sampling_params.max_new_tokens", "invalid_value", ">= 0"},
		{"generate: regex of the wrong type", "/generate", `{"text": "a", "sampling_params": {"regex": 5}}`, 400, "sampling_params.regex", "invalid_type", "string"},
		{"generate: left-recursive ebnf", "/generate", `{"text": "a", "sampling_params": {"ebnf": "root ::= root \"a\" | \"b\""}}`, 400, "sampling_params.ebnf", "invalid_value", "left-recursive"},
		{"generate: empty input_ids", "/generate", `{"input_ids": []}`, 400, "input_ids", "invalid_value", "empty"},
		{"generate: bad id", "/generate", `{"input_ids": [[1, 2], [1, -3]]}`, 400, "input_ids[1]", "invalid_value", "outside the vocabulary"},
		{"generate: sampling list length", "/generate", `{"text": ["a", "b"], "sampling_params": [{}]}`, 400, "sampling_params", "invalid_value", "1 entries for a batch of 2"},
		{"generate: shared rid in a batch", "/generate", `{"text": ["a", "b"], "rid": "x"}`, 400, "rid", "invalid_value", "unique"},
		{"generate: logprob_start_len past the prompt", "/generate", `{"input_ids": [1, 2], "return_logprob": true, "logprob_start_len": 2}`, 400, "logprob_start_len", "invalid_value", "below the prompt length"},
		{"tokenize: nothing", "/tokenize", `{}`, 400, "prompt", "missing_required_parameter", "prompt"},
		{"detokenize: bad id", "/detokenize", `{"tokens": [1, 100000]}`, 400, "tokens", "invalid_value", "outside the vocabulary"},
		{"abort: no rid", "/abort_request", `{}`, 400, "rid", "missing_required_parameter", "rid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, out := call(t, "POST", ts.URL+tt.path, tt.body)
			checkError(t, status, out, tt.status, tt.param, tt.code, tt.message)
		})
	}
	t.Run("wrong method", func(t *testing.T) {
		if status, _ := callRaw(t, "GET", ts.URL+"/v1/chat/completions", nil); status != http.StatusMethodNotAllowed {
			t.Errorf("GET /v1/chat/completions: %d, want 405", status)
		}
	})
}

func checkError(t *testing.T, status int, out map[string]any, wantStatus int, param, code, message string) {
	t.Helper()
	if status != wantStatus {
		t.Errorf("status %d, want %d: %v", status, wantStatus, out)
	}
	e, ok := out["error"].(map[string]any)
	if !ok {
		t.Fatalf("no error object: %v", out)
	}
	wantType := "invalid_request_error"
	if wantStatus >= 500 {
		wantType = "server_error"
	}
	var wantParam any
	if param != "" {
		wantParam = param
	}
	if e["type"] != wantType || e["param"] != wantParam || e["code"] != code {
		t.Errorf("type %v param %v code %v, want %s %v %s", e["type"], e["param"], e["code"], wantType, wantParam, code)
	}
	if msg, _ := e["message"].(string); !strings.Contains(msg, message) {
		t.Errorf("message %q does not say %q", msg, message)
	}
	for _, key := range []string{"message", "type", "param", "code"} {
		if _, ok := e[key]; !ok {
			t.Errorf("the error object lacks %q", key)
		}
	}
}

func TestBodyTooLarge(t *testing.T) {
	ts, _ := newServer(t, func(o *server.Options) { o.MaxRequestBytes = 1024 })
	body := `{"prompt": "` + strings.Repeat("a", 4096) + `"}`
	status, out := call(t, "POST", ts.URL+"/v1/completions", body)
	checkError(t, status, out, http.StatusRequestEntityTooLarge, "", "request_too_large", "1024 bytes")
}
