package server_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/server"
)

// storiesModel is the model most tests serve, inside ../shared.
const storiesModel = "models/stories260K/stories260K.gguf"

// modelPath returns storiesModel's path, skipping the test without it.
func modelPath(t testing.TB) string {
	t.Helper()
	return shared.Path(t, storiesModel)
}

// storiesTemplate turns a conversation into a story prompt: stories260K has
// no chat template, and a story opening is what it can continue.
const storiesTemplate = "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}"

// One engine serves every test: loading is cheap, but sharing it keeps the
// package fast on two cores. Tests run one after another (none calls
// t.Parallel), so each finds the engine idle.
var sharedEngine struct {
	once sync.Once
	eng  *engine.Engine
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedEngine.eng != nil {
		sharedEngine.eng.Close()
	}
	os.Exit(code)
}

func testEngine(t testing.TB) *engine.Engine {
	t.Helper()
	path := modelPath(t)
	sharedEngine.once.Do(func() {
		sharedEngine.eng, sharedEngine.err = engine.New(engine.Config{
			ModelPath: path,
			// Past the trained 512 so that long generations give the
			// disconnect and shutdown tests time to act.
			ContextLength:      2048,
			AllowLongerContext: true,
			KVCacheTokens:      32768,
			MaxRunningRequests: 32,
			Logger:             quietLogger(),
		})
	})
	if sharedEngine.err != nil {
		t.Fatalf("engine.New: %v", sharedEngine.err)
	}
	return sharedEngine.eng
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// newServer starts an httptest server over the shared engine with the
// stories chat template; opts may adjust the options.
func newServer(t testing.TB, adjust ...func(*server.Options)) (*httptest.Server, *engine.Engine) {
	t.Helper()
	eng := testEngine(t)
	opts := server.Options{ChatTemplate: storiesTemplate, Logger: quietLogger()}
	for _, f := range adjust {
		f(&opts)
	}
	srv, err := server.New(eng, opts)
	if err != nil {
		t.Fatalf("server.New: %v", err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return ts, eng
}

// call sends a JSON body (a string is sent as is) and decodes the JSON answer.
func call(t testing.TB, method, url string, body any) (int, map[string]any) {
	t.Helper()
	status, raw := callRaw(t, method, url, body)
	var out map[string]any
	if len(bytes.TrimSpace(raw)) > 0 {
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("%s %s: answer is not a JSON object: %v\n%s", method, url, err, raw)
		}
	}
	return status, out
}

func callRaw(t testing.TB, method, url string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, raw
}

// sseEvents reads "data: ..." events until [DONE] and decodes each JSON one.
func sseEvents(t testing.TB, r io.Reader) (events []map[string]any, sawDone bool) {
	t.Helper()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("not an SSE data line: %q", line)
		}
		if data == "[DONE]" {
			return events, true
		}
		var ev map[string]any
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("SSE event is not JSON: %v: %s", err, data)
		}
		events = append(events, ev)
	}
	return events, false
}

func postStream(t testing.TB, url string, body any) []map[string]any {
	t.Helper()
	data, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST %s: status %d: %s", url, resp.StatusCode, raw)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("Content-Type %q, want text/event-stream", ct)
	}
	events, done := sseEvents(t, resp.Body)
	if !done {
		t.Fatalf("the stream ended without data: [DONE]")
	}
	return events
}

// waitIdle waits until no request runs and every KV page is free or held
// only by the prefix cache, then flushes the cache and checks that every
// page is free: nothing leaked.
func waitIdle(t testing.TB, eng *engine.Engine) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := eng.Stats()
		if st.Running == 0 && st.Waiting == 0 && st.KVPagesFree+st.KVPagesCached == st.KVPagesTotal {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the engine did not become idle: %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := eng.FlushCache(); err != nil {
		t.Fatalf("FlushCache: %v", err)
	}
	if st := eng.Stats(); st.KVPagesFree != st.KVPagesTotal {
		t.Fatalf("KV pages leaked: %d of %d free after a flush", st.KVPagesFree, st.KVPagesTotal)
	}
}

// get walks a decoded JSON value: get(v, "choices", 0, "text").
func get(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func num(v any) int {
	f, _ := v.(float64)
	return int(f)
}

type answer struct {
	status int
	out    map[string]any
}

// callAsync is call in a goroutine: the answer arrives on the channel.
func callAsync(t testing.TB, method, url string, body any) <-chan answer {
	done := make(chan answer, 1)
	go func() {
		status, out := call(t, method, url, body)
		done <- answer{status, out}
	}()
	return done
}
