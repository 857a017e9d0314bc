package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gosling-ai/gosling/server"
)

// longGeneration asks for nearly the whole (test) context, greedy and past
// EOS: seconds of work, so a test has time to cut it short.
func longGeneration(stream bool, rid string) map[string]any {
	body := map[string]any{
		"text": "Once upon a time", "stream": stream,
		"sampling_params": map[string]any{"max_new_tokens": 2000, "temperature": 0, "ignore_eos": true},
	}
	if rid != "" {
		body["rid"] = rid
	}
	return body
}

// startStream posts body and returns the response once its first event has
// arrived (the generation is then running).
func startStream(t *testing.T, ctx context.Context, url string, body any) (*http.Response, *bufio.Reader) {
	t.Helper()
	data, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(data))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	rd := bufio.NewReader(resp.Body)
	if line, err := rd.ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: {") {
		t.Fatalf("first event: %q, %v", line, err)
	}
	return resp, rd
}

// metric reads one sample (the first series of name) from /metrics.
func metric(t *testing.T, baseURL, name string) float64 {
	t.Helper()
	status, raw := callRaw(t, "GET", baseURL+"/metrics", nil)
	if status != http.StatusOK {
		t.Fatalf("/metrics: %d", status)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, name); ok && (strings.HasPrefix(rest, "{") || strings.HasPrefix(rest, " ")) {
			v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return v
		}
	}
	t.Fatalf("/metrics has no %s:\n%s", name, raw)
	return 0
}

func TestClientDisconnectFreesPages(t *testing.T) {
	ts, eng := newServer(t)
	for _, tc := range []struct {
		name, path string
		body       any
	}{
		{"chat stream", "/v1/chat/completions", map[string]any{
			"messages":   []any{map[string]any{"role": "user", "content": "Once upon a time"}},
			"max_tokens": 2000, "temperature": 0, "ignore_eos": true, "stream": true}},
		{"generate stream", "/generate", longGeneration(true, "")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			waitIdle(t, eng)
			aborted := metric(t, ts.URL, "gosling:aborted_requests_total")
			generated := eng.Stats().GeneratedTokens
			ctx, cancel := context.WithCancel(context.Background())
			resp, _ := startStream(t, ctx, ts.URL+tc.path, tc.body)
			// The scheduler publishes its stats after each step: give it one.
			for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(time.Millisecond) {
				st := eng.Stats()
				if st.Running == 1 && st.KVPagesFree < st.KVPagesTotal {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("while streaming: %+v, want one running request holding pages", st)
				}
			}
			cancel() // the client goes away mid-stream
			resp.Body.Close()
			waitIdle(t, eng)
			if n := eng.Stats().GeneratedTokens - generated; n >= 1500 {
				t.Errorf("%d tokens generated: the request was not stopped", n)
			}
			if got := metric(t, ts.URL, "gosling:aborted_requests_total"); got != aborted+1 {
				t.Errorf("aborted_requests_total %v, want %v", got, aborted+1)
			}
		})
	}
	t.Run("non-streamed", func(t *testing.T) {
		waitIdle(t, eng)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		data, _ := json.Marshal(longGeneration(false, ""))
		req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/generate", bytes.NewReader(data))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			t.Fatalf("the 2000-token request answered within 300ms (%d); the test needs a slower one", resp.StatusCode)
		}
		waitIdle(t, eng)
	})
}

func TestAbortRequest(t *testing.T) {
	ts, eng := newServer(t)
	waitIdle(t, eng)
	done := callAsync(t, "POST", ts.URL+"/generate", longGeneration(false, "abort-me"))
	// Retry until the request is registered.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		_, out := call(t, "POST", ts.URL+"/abort_request", map[string]any{"rid": "abort-me"})
		if num(out["aborted"]) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the request never became abortable")
		}
	}
	a := <-done
	if a.status != http.StatusOK {
		t.Fatalf("aborted request: %d %v", a.status, a.out)
	}
	fr := get(a.out, "meta_info", "finish_reason").(map[string]any)
	if fr["type"] != "abort" || !strings.Contains(fmt.Sprint(fr["message"]), "abort_request") {
		t.Errorf("finish_reason %v", fr)
	}
	if n := num(get(a.out, "meta_info", "completion_tokens")); n >= 2000 {
		t.Errorf("%d tokens: not aborted", n)
	}
	waitIdle(t, eng)
	// Unknown ids are not an error: the request may just have finished.
	if status, out := call(t, "POST", ts.URL+"/abort_request", map[string]any{"rid": "gone"}); status != http.StatusOK || num(out["aborted"]) != 0 {
		t.Errorf("unknown rid: %d %v", status, out)
	}
}

func TestGracefulShutdown(t *testing.T) {
	eng := testEngine(t)
	serve := func(grace time.Duration) (string, context.CancelFunc, chan error) {
		srv, err := server.New(eng, server.Options{Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, stop := context.WithCancel(context.Background())
		served := make(chan error, 1)
		go func() { served <- srv.Serve(ctx, ln, grace) }()
		return "http://" + ln.Addr().String(), stop, served
	}
	waitServed := func(t *testing.T, served chan error) {
		t.Helper()
		select {
		case err := <-served:
			if err != nil {
				t.Fatalf("Serve: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("Serve did not return after the shutdown")
		}
	}

	t.Run("in-flight requests finish", func(t *testing.T) {
		waitIdle(t, eng)
		url, stop, served := serve(30 * time.Second)
		resp, rd := startStream(t, context.Background(), url+"/generate", map[string]any{
			"text": "Once upon a time", "stream": true, "sampling_params": greedyParams(100)})
		defer resp.Body.Close()
		stop() // SIGTERM
		events, done := sseEvents(t, rd)
		if !done || len(events) == 0 || get(events[len(events)-1], "meta_info", "finish_reason", "type") != "length" {
			t.Fatalf("the request in flight did not finish: done %v, %d events", done, len(events))
		}
		waitServed(t, served)
		if _, err := http.Get(url + "/health"); err == nil {
			t.Error("the server still accepts connections after shutting down")
		}
	})
	t.Run("past the grace period, requests are aborted", func(t *testing.T) {
		waitIdle(t, eng)
		url, stop, served := serve(200 * time.Millisecond)
		resp, rd := startStream(t, context.Background(), url+"/generate", longGeneration(true, ""))
		defer resp.Body.Close()
		stop()
		events, _ := sseEvents(t, rd)
		if len(events) == 0 || get(events[len(events)-1], "meta_info", "finish_reason", "type") != "abort" {
			t.Errorf("the last event is not an abort: %v", events[len(events)-1])
		}
		waitServed(t, served)
		waitIdle(t, eng)
	})
}

func TestConcurrentRequests(t *testing.T) {
	ts, eng := newServer(t)
	waitIdle(t, eng)
	const n = 16
	prompts := make([]string, n)
	want := make([]string, n)
	for i := range prompts {
		prompts[i] = []string{"Once upon a time", "The little dog", "Tom and Sue", "One day, Lily"}[i%4] + strings.Repeat(" and", i/4)
		_, out := call(t, "POST", ts.URL+"/v1/completions", map[string]any{"prompt": prompts[i], "max_tokens": 32, "temperature": 0})
		want[i] = get(out, "choices", 0, "text").(string)
	}
	var wg sync.WaitGroup
	got := make([]string, n)
	statuses := make([]int, n)
	for i := range n {
		wg.Go(func() {
			status, out := call(t, "POST", ts.URL+"/v1/completions", map[string]any{"prompt": prompts[i], "max_tokens": 32, "temperature": 0})
			statuses[i] = status
			got[i], _ = get(out, "choices", 0, "text").(string)
		})
	}
	wg.Wait()
	for i := range n {
		if statuses[i] != http.StatusOK || got[i] != want[i] {
			t.Errorf("request %d: status %d\n got %q\nwant %q (alone)", i, statuses[i], got[i], want[i])
		}
	}
	waitIdle(t, eng)
}

func TestMetrics(t *testing.T) {
	ts, _ := newServer(t)
	status, out := call(t, "POST", ts.URL+"/v1/completions", map[string]any{"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0})
	if status != http.StatusOK {
		t.Fatalf("completion: %d %v", status, out)
	}
	status, raw := callRaw(t, "GET", ts.URL+"/metrics", nil)
	if status != http.StatusOK {
		t.Fatalf("/metrics: %d", status)
	}
	for _, name := range []string{
		"gosling:num_running_reqs", "gosling:num_queue_reqs", "gosling:token_usage", "gosling:cache_hit_rate",
		"gosling:gen_throughput", "gosling:time_to_first_token_seconds_bucket", "gosling:inter_token_latency_seconds_bucket",
		"gosling:e2e_request_latency_seconds_bucket", "gosling:prompt_tokens_total", "gosling:generation_tokens_total",
		"gosling:requests_total",
	} {
		if !bytes.Contains(raw, []byte("\n"+name)) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	if v := metric(t, ts.URL, "gosling:requests_total"); v != 1 {
		t.Errorf("requests_total %v after one request on a new server", v)
	}
	if v := metric(t, ts.URL, "gosling:generation_tokens_total"); v != 8 {
		t.Errorf("generation_tokens_total %v, want 8", v)
	}
	if v := metric(t, ts.URL, "gosling:time_to_first_token_seconds_count"); v != 1 {
		t.Errorf("time_to_first_token_seconds_count %v, want 1", v)
	}
	if v := metric(t, ts.URL, "gosling:inter_token_latency_seconds_count"); v != 7 {
		t.Errorf("inter_token_latency_seconds_count %v, want 7", v)
	}
}
