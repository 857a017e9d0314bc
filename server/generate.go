package server

import (
	"context"
	"errors"
	"net/http"
	"runtime/debug"
	"sync"
	"time"

	"github.com/gosling-ai/gosling/engine"
)

var (
	// errAborted is the cancel cause of requests stopped through /abort_request.
	errAborted  = errors.New("aborted by /abort_request")
	errInternal = errors.New("internal error: the server failed on this request; see its log")
)

// recoverTo turns a panic in a goroutine a handler started (which the
// recover middleware cannot see) into a 500 in *errp. Use: defer s.recoverTo(&err).
func (s *Server) recoverTo(errp *error) {
	if v := recover(); v != nil {
		s.log.Error("panic in a request goroutine", "panic", v, "stack", string(debug.Stack()))
		*errp = serverError(http.StatusInternalServerError, codeInternal, "%v", errInternal)
	}
}

// generate runs one engine request and keeps the metrics. An aborted
// request (client gone, /abort_request, shutdown) is not an error: it
// returns its partial result with FinishReason "abort", never nil. Errors
// are apiErrors: 400 when the engine refused the request, 503 when it is shut
// down, 500 when the generation failed.
func (s *Server) generate(ctx context.Context, req engine.Request) (*engine.Result, error) {
	start := time.Now()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var last time.Time
	failed := false // OnDelta panicked; only this goroutine touches it
	onDelta := req.OnDelta
	req.OnDelta = func(d engine.Delta) {
		if failed {
			return
		}
		// A panic here would unwind through engine.Generate and leave the
		// request running in the scheduler: abort it instead.
		defer func() {
			if v := recover(); v != nil {
				failed = true
				s.log.Error("panic while streaming", "panic", v, "stack", string(debug.Stack()))
				cancel(errInternal)
			}
		}()
		if len(d.IDs) > 0 {
			now := time.Now()
			if last.IsZero() {
				s.metrics.ttft.Observe(now.Sub(start).Seconds())
			} else {
				s.metrics.itl.Observe(now.Sub(last).Seconds())
			}
			last = now
		}
		if onDelta != nil {
			onDelta(d)
		}
	}
	res, err := s.eng.Generate(ctx, req)
	switch {
	case failed:
		return nil, serverError(http.StatusInternalServerError, codeInternal, "%v", errInternal)
	case err == nil:
	case errors.Is(err, engine.ErrClosed):
		return nil, serverError(http.StatusServiceUnavailable, codeUnavailable, "the server is shutting down; retry on another replica")
	case ctx.Err() != nil:
		if res == nil { // cancelled before the scheduler took it
			res = &engine.Result{PromptIDs: req.InputIDs}
		}
		res.FinishReason = engine.FinishAbort
	case errors.As(err, new(*engine.RequestError)):
		return nil, badRequest("", codeInvalidValue, "%v", err)
	default:
		s.log.Error("generation failed", "error", err)
		return nil, serverError(http.StatusInternalServerError, codeInternal, "generation failed: %v", err)
	}
	s.metrics.observe(res, time.Since(start))
	return res, nil
}

// inflight maps request ids to their cancel functions, for /abort_request.
// The engine has no request ids of its own: cancelling a request's context
// is how it is aborted.
type inflight struct {
	mu    sync.Mutex
	byRID map[string]context.CancelCauseFunc
}

func newInflight() *inflight { return &inflight{byRID: map[string]context.CancelCauseFunc{}} }

// track registers rid and returns a context that /abort_request cancels, and
// the function that unregisters it (call it when the request is over).
func (s *Server) track(ctx context.Context, rid, param string) (context.Context, func(), *apiError) {
	ctx, cancel := context.WithCancelCause(ctx)
	f := s.requests
	f.mu.Lock()
	_, taken := f.byRID[rid]
	if !taken {
		f.byRID[rid] = cancel
	}
	f.mu.Unlock()
	if taken {
		cancel(nil)
		return nil, nil, badRequest(param, codeInvalidValue, "rid %q is already used by a running request; choose a unique one", rid)
	}
	return ctx, func() {
		f.mu.Lock()
		delete(f.byRID, rid)
		f.mu.Unlock()
		cancel(nil)
	}, nil
}

// abort cancels the requests with the given ids, or all when all is set,
// and returns how many it found.
func (f *inflight) abort(rids []string, all bool) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, cancel := range f.byRID {
		if all {
			cancel(errAborted)
			n++
		}
	}
	if all {
		return n
	}
	for _, rid := range rids {
		if cancel, ok := f.byRID[rid]; ok {
			cancel(errAborted)
			n++
		}
	}
	return n
}
