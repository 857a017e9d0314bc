package server

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gosling-ai/gosling/sample"
)

func TestRecoverAnswers500(t *testing.T) {
	s := &Server{
		opts:    Options{MaxRequestBytes: 1 << 20},
		log:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }),
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest("GET", "/anything", nil))
	var body errorBody
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("body %q: %v", rec.Body, err)
	}
	if rec.Code != http.StatusInternalServerError || body.Error.Type != "server_error" {
		t.Errorf("status %d, error %+v", rec.Code, body.Error)
	}
}

func TestSnakeCase(t *testing.T) {
	for in, want := range map[string]string{
		"ModelPath": "model_path", "KVCacheTokens": "kv_cache_tokens", "KVCacheDType": "kv_cache_dtype",
		"PageSizeSet": "page_size_set", "MaxRunningRequests": "max_running_requests", "Device": "device",
		"SpeculativeAttentionMode": "speculative_attention_mode", "DisableRadixCache": "disable_radix_cache",
	} {
		if got := snakeCase(in); got != want {
			t.Errorf("snakeCase(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestValidateParamsNamesTheField(t *testing.T) {
	p := sample.DefaultParams()
	p.TopP = 2
	if err := validateParams(p, "sampling_params."); err == nil || err.Param != "sampling_params.top_p" {
		t.Errorf("one problem: %+v", err)
	}
	p.Temperature = -1
	if err := validateParams(p, ""); err == nil || err.Param != "" {
		t.Errorf("two problems name no single field: %+v", err)
	}
	p = sample.DefaultParams()
	p.Stop = []string{"a", ""}
	if err := validateParams(p, ""); err == nil || err.Param != "stop" {
		t.Errorf("empty stop string: %+v", err)
	}
}

func TestFieldPath(t *testing.T) {
	for in, want := range map[string]string{
		"openaiCommon.samplingFields.temperature":   "temperature",
		"openaiCommon.stream_options.include_usage": "stream_options.include_usage",
		"messages.role": "messages.role",
	} {
		if got := fieldPath(in); got != want {
			t.Errorf("fieldPath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRecoverTo(t *testing.T) {
	s := &Server{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	var err error
	func() {
		defer s.recoverTo(&err)
		panic("boom")
	}()
	if ae := asAPIError(err); err == nil || ae.Status != http.StatusInternalServerError {
		t.Errorf("recoverTo: %v", err)
	}
}
