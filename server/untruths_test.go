package server_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestServerInfoKVBytes: kv_cache_bytes is the memory the KV cache takes,
// not the cap its default size was chosen under.
func TestServerInfoKVBytes(t *testing.T) {
	ts, eng := newServer(t)
	_, info := call(t, "GET", ts.URL+"/get_server_info", nil)
	got := int64(get(info, "kv_cache_bytes").(float64))
	set := eng.Settings()
	least := int64(eng.KVBytesPerToken()) * int64(set.KVCacheTokens)
	if got < least || got > least+int64(eng.KVBytesPerToken()*2*set.PageSize) {
		t.Errorf("kv_cache_bytes %d for %d tokens of %d bytes (%d)", got, set.KVCacheTokens, eng.KVBytesPerToken(), least)
	}
}

// TestCompressedBodyRefused: a gzip body is refused as such, not reported
// as malformed JSON.
func TestCompressedBodyRefused(t *testing.T) {
	ts, _ := newServer(t)
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write([]byte(`{"prompt": "Once", "max_tokens": 2}`))
	zw.Close()
	req, _ := http.NewRequest("POST", ts.URL+"/v1/completions", &buf)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Content-Encoding", "gzip")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	if resp.StatusCode != http.StatusUnsupportedMediaType || !strings.Contains(get(out, "error", "message").(string), `Content-Encoding "gzip" is not supported`) {
		t.Errorf("gzip body: %d %v", resp.StatusCode, out)
	}
}

// TestAbortedCompletionIsAnError: OpenAI has no "abort" finish reason; an
// OpenAI request aborted through /abort_request fails with a 503 that says
// so, rather than returning a cut-off answer as if it were whole.
func TestAbortedCompletionIsAnError(t *testing.T) {
	ts, eng := newServer(t)
	waitIdle(t, eng)
	done := callAsync(t, "POST", ts.URL+"/v1/completions", map[string]any{"prompt": "Once", "max_tokens": 2000, "ignore_eos": true, "temperature": 0})
	for deadline := time.Now().Add(5 * time.Second); eng.Stats().Running == 0; time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the completion never started")
		}
	}
	call(t, "POST", ts.URL+"/abort_request", map[string]any{"abort_all": true})
	a := <-done
	if a.status != http.StatusServiceUnavailable || get(a.out, "error", "code") != "request_aborted" ||
		!strings.Contains(get(a.out, "error", "message").(string), "/abort_request") {
		t.Errorf("aborted completion: %d %v", a.status, a.out)
	}
	waitIdle(t, eng)
}
