package server_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/gosling-ai/gosling/internal/rss"
	"github.com/gosling-ai/gosling/server"
)

// TestHostileRequestsStayBounded sends requests whose small bodies used to
// make the server hold gigabytes (prompts × n sequences, a 100k-prompt
// batch) and over-long prompts that were tokenized whole before the length
// check. Each must get a 400 naming the limit it hit, and the process's RSS
// must stay within 300 MB of its idle RSS.
func TestHostileRequestsStayBounded(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's shadow memory is not the server's")
	}
	ts, eng := newServer(t)
	manyPrompts := make([]string, 1000)
	for i := range manyPrompts {
		manyPrompts[i] = fmt.Sprintf("Hi %d", i)
	}
	hugeBatch := make([]string, 100_000)
	for i := range hugeBatch {
		hugeBatch[i] = "Hi"
	}
	// The 30 MB bodies are generated as they are sent: held in this
	// process, they would raise the heap's live size, and with it how much
	// garbage the collector lets accumulate.
	unit := "Once upon a time there was a little girl. "
	longPrompt := func(prefix, suffix string) func() (io.Reader, int64) {
		return func() (io.Reader, int64) {
			count := 30 << 20 / len(unit)
			return io.MultiReader(strings.NewReader(prefix), &repeatReader{unit: unit, count: count}, strings.NewReader(suffix)),
				int64(len(prefix) + count*len(unit) + len(suffix))
		}
	}
	mustJSON := func(v any) func() (io.Reader, int64) {
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return func() (io.Reader, int64) { return bytes.NewReader(data), int64(len(data)) }
	}
	type hostile struct {
		name, path   string
		body         func() (io.Reader, int64)
		copies       int
		param, limit string // error.param and a substring of error.message
	}
	cases := []hostile{
		{"1000 prompts × n 128", "/v1/completions", mustJSON(map[string]any{"prompt": manyPrompts, "max_tokens": 1, "n": 128}), 1,
			"n", "--max-request-sequences"},
		{"100k prompts to /generate", "/generate", mustJSON(map[string]any{"text": hugeBatch, "sampling_params": map[string]any{"max_new_tokens": 1}}), 1,
			"text", "--max-request-sequences"},
		{"four concurrent 30 MB prompts", "/v1/completions", longPrompt(`{"max_tokens": 1, "prompt": "`, `"}`), 4,
			"", "context length is 2048"},
		{"two concurrent 30 MB chat messages", "/v1/chat/completions", longPrompt(`{"messages": [{"role": "user", "content": "`, `"}]}`), 2,
			"", "context length is 2048"},
	}
	manyPrompts, hugeBatch = nil, nil
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var wg sync.WaitGroup
			errs := make([]string, c.copies)
			peak := rss.PeakAbove(t, -1, func() {
				for i := range c.copies {
					wg.Go(func() {
						rd, size := c.body()
						req, err := http.NewRequest("POST", ts.URL+c.path, rd)
						if err != nil {
							t.Error(err)
							return
						}
						req.ContentLength = size
						resp, err := http.DefaultClient.Do(req)
						if err != nil {
							errs[i] = err.Error()
							return
						}
						defer resp.Body.Close()
						var body struct {
							Error struct {
								Message string  `json:"message"`
								Param   *string `json:"param"`
								Code    string  `json:"code"`
							} `json:"error"`
						}
						json.NewDecoder(resp.Body).Decode(&body)
						param := ""
						if body.Error.Param != nil {
							param = *body.Error.Param
						}
						if resp.StatusCode != http.StatusBadRequest || param != c.param || !strings.Contains(body.Error.Message, c.limit) {
							errs[i] = fmt.Sprintf("status %d, param %q, code %q: %s; want 400 naming %q at param %q",
								resp.StatusCode, param, body.Error.Code, body.Error.Message, c.limit, c.param)
						}
					})
				}
				wg.Wait()
			})
			for _, e := range errs {
				if e != "" {
					t.Error(e)
				}
			}
			t.Logf("peak RSS %.0f MB above idle", float64(peak)/(1<<20))
			if peak > 300<<20 {
				t.Errorf("peak RSS %.0f MB above idle, want under 300 MB", float64(peak)/(1<<20))
			}
		})
	}
	waitIdle(t, eng)
}

// TestRequestLimitsAreConfigurable checks that the limits are the server's
// options, and that a request within them runs.
func TestRequestLimitsAreConfigurable(t *testing.T) {
	ts, _ := newServer(t, func(o *server.Options) { o.MaxRequestSequences = 4; o.MaxRequestTokens = 40 })
	prompts := []string{"Once", "Lily", "Tom"}
	status, out := call(t, "POST", ts.URL+"/v1/completions", map[string]any{"prompt": prompts, "max_tokens": 2, "n": 2})
	if status != 400 || get(out, "error", "param") != "n" || !strings.Contains(fmt.Sprint(get(out, "error", "message")), "6 sequences") {
		t.Errorf("3 prompts × n 2 with a limit of 4: %d %v", status, out)
	}
	status, out = call(t, "POST", ts.URL+"/v1/completions", map[string]any{"prompt": prompts[:2], "max_tokens": 2, "n": 2})
	if status != 200 || len(get(out, "choices").([]any)) != 4 {
		t.Errorf("2 prompts × n 2 with a limit of 4: %d %v", status, out)
	}
	status, out = call(t, "POST", ts.URL+"/v1/completions", map[string]any{"prompt": make([]int, 21), "max_tokens": 2, "n": 2})
	if status != 400 || get(out, "error", "code") != "request_limit_exceeded" || !strings.Contains(fmt.Sprint(get(out, "error", "message")), "--max-request-tokens") {
		t.Errorf("21 tokens × n 2 with a limit of 40: %d %v", status, out)
	}
	long := strings.Repeat("Lily and Tom ", 20)
	status, out = call(t, "POST", ts.URL+"/generate", map[string]any{"text": long, "sampling_params": map[string]any{"max_new_tokens": 1}})
	if status != 400 || get(out, "error", "param") != "text" || get(out, "error", "code") != "request_limit_exceeded" {
		t.Errorf("a long text with a limit of 40 tokens: %d %v", status, out)
	}
	// /tokenize counts past the context, within --max-request-tokens.
	status, out = call(t, "POST", ts.URL+"/tokenize", map[string]any{"prompt": []string{"Lily", long}})
	if status != 400 || get(out, "error", "param") != "prompt[1]" || get(out, "error", "code") != "request_limit_exceeded" {
		t.Errorf("/tokenize of a long text with a limit of 40 tokens: %d %v", status, out)
	}
}

// repeatReader reads unit count times.
type repeatReader struct {
	unit  string
	count int
	off   int // into unit
}

func (r *repeatReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) && r.count > 0 {
		c := copy(p[n:], r.unit[r.off:])
		n += c
		if r.off += c; r.off == len(r.unit) {
			r.off = 0
			r.count--
		}
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}
