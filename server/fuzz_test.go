package server_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/server"
)

// fuzzRoutes are the routes that read a request body.
var fuzzRoutes = []string{"/v1/chat/completions", "/v1/completions", "/generate", "/tokenize", "/detokenize", "/abort_request", "/flush_cache"}

var fuzzServer struct {
	once sync.Once
	srv  *server.Server
	err  error
}

// FuzzRequestDecoding sends arbitrary bodies to every route that reads
// one. Whatever the body, the answer is never a 500 (a panic or a server
// fault), an error is OpenAI's error object, and a 200 is well-formed. The
// server's engine has a short context and the request limits are small, so
// that any accepted body is cheap to run.
func FuzzRequestDecoding(f *testing.F) {
	seeds := []string{
		`{"messages": [{"role": "user", "content": "Once"}], "max_tokens": 4}`,
		`{"messages": [{"role": "user", "content": [{"type": "text", "text": "Lily"}]}], "n": 2, "stream": true, "logprobs": true, "top_logprobs": 2}`,
		`{"prompt": "Once upon", "max_tokens": 3, "echo": true, "logprobs": 2}`,
		`{"prompt": [[1, 2, 3], [4]], "max_tokens": 2, "stream": true, "stream_options": {"include_usage": true}}`,
		`{"text": ["Lily", "Tom"], "sampling_params": {"max_new_tokens": 3, "stop": "."}, "return_logprob": true, "logprob_start_len": 0}`,
		`{"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 2, "temperature": 0.5, "top_k": 3}, "stream": true}`,
		`{"prompt": "Hello", "add_special_tokens": false}`,
		`{"tokens": [1, 2, 3], "skip_special_tokens": false}`,
		`{"rid": ["a", "b"]}`,
		`{}`, `[]`, `null`, `{"prompt": "\u0000\ud800"}`, `{"n": 1e400}`,
	}
	for i, s := range seeds {
		f.Add(uint8(i), s)
	}
	f.Fuzz(func(t *testing.T, route uint8, body string) {
		srv := fuzzTarget(t)
		path := fuzzRoutes[int(route)%len(fuzzRoutes)]
		req := httptest.NewRequest("POST", path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		out := rec.Body.String()
		if rec.Code >= 500 {
			t.Fatalf("POST %s %q: %d %s", path, body, rec.Code, out)
		}
		ct := rec.Header().Get("Content-Type")
		switch {
		case rec.Code >= 400:
			var e struct {
				Error struct {
					Message string `json:"message"`
					Type    string `json:"type"`
				} `json:"error"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
				t.Fatalf("POST %s %q: %d without OpenAI's error object: %s", path, body, rec.Code, out)
			}
		case strings.HasPrefix(ct, "application/json") && !json.Valid(rec.Body.Bytes()):
			t.Fatalf("POST %s %q: invalid JSON answer %s", path, body, out)
		case strings.HasPrefix(ct, "text/event-stream"):
			for _, line := range strings.Split(strings.TrimSpace(out), "\n\n") {
				data, ok := strings.CutPrefix(line, "data: ")
				if !ok || data != "[DONE]" && !json.Valid([]byte(data)) {
					t.Fatalf("POST %s %q: bad SSE event %q", path, body, line)
				}
			}
		}
	})
}

func fuzzTarget(t *testing.T) http.Handler {
	t.Helper()
	path := modelPath(t)
	fuzzServer.once.Do(func() {
		var eng *engine.Engine
		eng, fuzzServer.err = engine.New(engine.Config{ModelPath: path, ContextLength: 96, KVCacheTokens: 4096, Logger: quietLogger()})
		if fuzzServer.err != nil {
			return
		}
		fuzzServer.srv, fuzzServer.err = server.New(eng, server.Options{ChatTemplate: storiesTemplate, Logger: quietLogger(),
			MaxRequestSequences: 4, MaxRequestTokens: 256, MaxRequestBytes: 1 << 20})
	})
	if fuzzServer.err != nil {
		t.Fatal(fuzzServer.err)
	}
	return fuzzServer.srv
}
