// Package server is gosling's HTTP API over one engine.Engine:
//
//   - OpenAI-compatible: POST /v1/chat/completions, POST /v1/completions,
//     GET /v1/models (SSE streaming, usage, logprobs, n, seeds, stop);
//   - SGLang-native: POST /generate, GET /health, GET /health_generate,
//     GET /get_model_info, GET /get_server_info, POST /abort_request,
//     POST /flush_cache, POST /tokenize, POST /detokenize;
//   - GET /metrics for Prometheus, with SGLang's metric names under "gosling:".
//
// Every error, on every route, is OpenAI's error object. The server does not
// own the engine: the caller closes it after Serve returns.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/reasoning"
	"github.com/gosling-ai/gosling/tokenizer"
	"github.com/gosling-ai/gosling/toolcall"
)

// Options configure a Server. The zero value serves the model under the
// base name of its path, without authentication.
type Options struct {
	// ServedModelName is the model id of /v1/models and the only name
	// requests may ask for (default: the base name of the model path).
	ServedModelName string
	// APIKey, when set, is required as "Authorization: Bearer KEY" on every
	// route but /health, /health_generate and /metrics (as in SGLang).
	APIKey string
	// ChatTemplate overrides the tokenizer's chat template: a Jinja source,
	// or the path of a file holding one.
	ChatTemplate string
	// ToolCallParser names the model family's tool-call syntax (hermes,
	// qwen25, qwen3, mistral, llama3, deepseekv3); empty: detected in the chat template.
	ToolCallParser string
	// ReasoningParser (qwen3, deepseek-r1) splits <think> blocks into
	// reasoning_content; empty: none.
	ReasoningParser string
	// MaxRequestBytes caps request bodies (default 32 MiB); larger ones get 413.
	MaxRequestBytes int64
	// MaxRequestSequences caps the sequences one request may start, its
	// prompts × n (default 1024); MaxRequestTokens caps its prompt tokens
	// × n (default 1Mi, raised to the context length when that is longer).
	// Beyond either the request gets a 400 before its prompts are tokenized
	// further.
	MaxRequestSequences int
	MaxRequestTokens    int
	// AllowLocalImages lets requests name image files on the server by
	// path (off by default: a client could read any image the server can).
	AllowLocalImages bool
	// MaxImageBytes and MaxImagePixels bound one image (0: vision.DefaultLimits).
	MaxImageBytes  int
	MaxImagePixels int
	Logger         *slog.Logger
}

// Server serves one engine over HTTP. It implements http.Handler.
type Server struct {
	eng       *engine.Engine
	opts      Options
	log       *slog.Logger
	chat      *tokenizer.ChatTemplate // nil: the engine renders with the tokenizer's template
	texts     *tokenTexts
	metrics   *metrics
	requests  *inflight
	createdAt int64 // unix seconds, the "created" of /v1/models
	handler   http.Handler
	active    atomic.Int64 // handlers running, for the hard stop of Serve
	grammars  grammarCache // compiled structured-output constraints
	// toolFormat is the tool-call syntax replies are parsed in (nil: none
	// known); reasoning splits <think> blocks (nil: off).
	toolFormat *toolcall.Format
	reasoning  *reasoning.Parser
	bodies     *bodyGate
}

// New builds the server; it fails only on a bad chat-template override.
func New(eng *engine.Engine, opts Options) (*Server, error) {
	if opts.ServedModelName == "" {
		opts.ServedModelName = filepath.Base(strings.TrimRight(eng.Settings().ModelPath, string(filepath.Separator)))
	}
	if opts.MaxRequestBytes <= 0 {
		opts.MaxRequestBytes = 32 << 20
	}
	if opts.MaxRequestSequences <= 0 {
		opts.MaxRequestSequences = defaultMaxRequestSequences
	}
	if opts.MaxRequestTokens <= 0 {
		opts.MaxRequestTokens = max(defaultMaxRequestTokens, eng.Settings().ContextLength)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Server{eng: eng, opts: opts, log: opts.Logger, requests: newInflight(), createdAt: time.Now().Unix(),
		texts: newTokenTexts(eng.Tokenizer()), bodies: newBodyGate(opts.MaxRequestBytes)}
	if opts.ChatTemplate != "" {
		var err error
		if s.chat, err = engine.LoadChatTemplate(opts.ChatTemplate, eng.Tokenizer()); err != nil {
			return nil, err
		}
	}
	if err := s.resolveOutputParsers(); err != nil {
		return nil, err
	}
	s.metrics = newMetrics(eng, opts.ServedModelName)
	s.handler = s.routes()
	return s, nil
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	allowed := map[string][]string{} // path → methods, for 405 answers
	handle := func(method, path string, h http.HandlerFunc) {
		mux.HandleFunc(method+" "+path, h)
		allowed[path] = append(allowed[path], method)
	}
	handle("POST", "/v1/chat/completions", s.handleChat)
	handle("POST", "/v1/completions", s.handleCompletions)
	handle("GET", "/v1/models", s.handleModels)
	mux.HandleFunc("GET /v1/models/{model...}", s.handleModel)

	handle("POST", "/generate", s.handleGenerate)
	handle("GET", "/health", s.handleHealth)
	handle("GET", "/health_generate", s.handleHealthGenerate)
	handle("GET", "/get_model_info", s.handleModelInfo)
	handle("GET", "/get_server_info", s.handleServerInfo)
	handle("POST", "/abort_request", s.handleAbort)
	handle("POST", "/flush_cache", s.handleFlushCache)
	handle("GET", "/flush_cache", s.handleFlushCache)
	handle("POST", "/tokenize", s.handleTokenize)
	handle("POST", "/detokenize", s.handleDetokenize)
	handle("GET", "/metrics", s.metrics.handler().ServeHTTP)

	// Unknown routes and methods get OpenAI's error object too, not the
	// mux's plain text.
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if methods, ok := allowed[r.URL.Path]; ok {
			w.Header().Set("Allow", strings.Join(methods, ", "))
			writeError(w, &apiError{Status: http.StatusMethodNotAllowed, Type: "invalid_request_error", Code: "method_not_allowed",
				Message: fmt.Sprintf("%s does not accept %s; use %s", r.URL.Path, r.Method, strings.Join(methods, " or "))})
			return
		}
		writeError(w, &apiError{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "not_found",
			Message: fmt.Sprintf("no route %s %s", r.Method, r.URL.Path)})
	})
	return mux
}

// ServeHTTP runs the middleware (recover, API key, body limit) around the routes.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.active.Add(1)
	defer s.active.Add(-1)
	rw := &responseWriter{ResponseWriter: w}
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.log.Error("panic in handler", "method", r.Method, "path", r.URL.Path, "panic", v, "stack", string(debug.Stack()))
			if !rw.wroteHeader {
				writeError(rw, serverError(http.StatusInternalServerError, codeInternal, "%v", errInternal))
			}
		}
	}()
	if s.opts.APIKey != "" && !s.publicPath(r.URL.Path) && !s.authorized(r) {
		writeError(rw, &apiError{Status: http.StatusUnauthorized, Type: "invalid_request_error", Code: codeInvalidAPIKey,
			Message: "missing or incorrect API key: send the header \"Authorization: Bearer <key>\""})
		return
	}
	if enc := r.Header.Get("Content-Encoding"); enc != "" && !strings.EqualFold(enc, "identity") {
		// Decompressing would let a small body expand past every limit
		// above; SGLang and vLLM do not decompress either.
		writeError(rw, &apiError{Status: http.StatusUnsupportedMediaType, Type: "invalid_request_error", Code: codeEncoding,
			Message: fmt.Sprintf("Content-Encoding %q is not supported: send the body uncompressed", enc)})
		return
	}
	r.Body = http.MaxBytesReader(rw, r.Body, s.opts.MaxRequestBytes)
	ctx, done, err := s.admitBody(r)
	if err != nil {
		return // the client left while waiting
	}
	defer done()
	s.handler.ServeHTTP(rw, r.WithContext(ctx))
}

func (s *Server) publicPath(path string) bool {
	return path == "/health" || path == "/health_generate" || path == "/metrics"
}

func (s *Server) authorized(r *http.Request) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && constantTimeEqual(got, s.opts.APIKey)
}

func constantTimeEqual(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	var diff byte
	for i := range len(a) {
		diff |= a[i] ^ b[i]
	}
	return diff == 0
}

// responseWriter remembers whether the header went out, so the recover
// middleware knows if it can still answer 500. Unwrap lets
// http.ResponseController reach Flush.
type responseWriter struct {
	http.ResponseWriter
	wroteHeader bool
}

func (w *responseWriter) WriteHeader(code int) {
	w.wroteHeader = true
	w.ResponseWriter.WriteHeader(code)
}

func (w *responseWriter) Write(b []byte) (int, error) {
	w.wroteHeader = true
	return w.ResponseWriter.Write(b)
}

func (w *responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Serve answers requests on ln until ctx is done, then shuts down
// gracefully: it stops accepting connections, lets requests in flight finish
// for up to grace, then aborts the rest (the engine frees their KV pages) and
// returns. It returns nil after a shutdown, or the listener's error.
func (s *Server) Serve(ctx context.Context, ln net.Listener, grace time.Duration) error {
	// Request contexts derive from hardStop, so cancelling it aborts every
	// generation in flight once the grace period is over.
	hardStop, abortAll := context.WithCancel(context.Background())
	defer abortAll()
	hs := &http.Server{
		Handler:           s,
		BaseContext:       func(net.Listener) context.Context { return hardStop },
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       2 * time.Minute, // idle keep-alive connections; streams are not idle
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	s.log.Info("shutting down: no new connections; waiting for requests in flight", "grace", grace)
	graceCtx, cancel := context.WithTimeout(context.Background(), grace)
	err := hs.Shutdown(graceCtx)
	cancel()
	if err != nil {
		s.log.Warn("grace period over: aborting the requests still running")
		abortAll()
		// Aborted generations end at the engine's next step; the wait is a
		// safety net against a handler stuck elsewhere.
		for deadline := time.Now().Add(10 * time.Second); s.active.Load() > 0; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				s.log.Error("handlers still running 10s after the abort; closing their connections")
				break
			}
		}
		hs.Close()
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
