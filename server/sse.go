package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
)

// errClientGone is the cancel cause when writing to the client fails.
var errClientGone = errors.New("client disconnected")

// sseWriter writes server-sent events ("data: {...}\n\n"). The status line
// and headers go out with the first event, so a request the engine refuses
// before producing anything still gets a plain JSON error with its status.
// It is safe for concurrent use (the n choices of one request stream from
// their own goroutines). A failed write cancels the request, so the engine
// stops generating for a client that is gone.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	cancel  context.CancelCauseFunc
	mu      sync.Mutex
	started bool
	failed  bool
}

func newSSEWriter(w http.ResponseWriter, cancel context.CancelCauseFunc) *sseWriter {
	return &sseWriter{w: w, rc: http.NewResponseController(w), cancel: cancel}
}

// send writes one event holding v as JSON.
func (s *sseWriter) send(v any) {
	data, err := json.Marshal(v)
	if err != nil {
		data, _ = json.Marshal(serverError(http.StatusInternalServerError, codeInternal, "encode event: %v", err).body())
	}
	s.write(data)
}

// done writes the terminating "data: [DONE]" event.
func (s *sseWriter) done() { s.write([]byte("[DONE]")) }

// fail ends the response with err: as a JSON error with its status when
// nothing was streamed yet, else as an error event.
func (s *sseWriter) fail(err error) {
	s.mu.Lock()
	started := s.started
	s.mu.Unlock()
	if !started {
		writeError(s.w, err)
		return
	}
	s.send(asAPIError(err).body())
	s.done()
}

func (s *sseWriter) write(data []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed {
		return
	}
	if !s.started {
		s.started = true
		h := s.w.Header()
		h.Set("Content-Type", "text/event-stream; charset=utf-8")
		h.Set("Cache-Control", "no-cache")
		h.Set("Connection", "keep-alive")
		h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
		s.w.WriteHeader(http.StatusOK)
	}
	buf := make([]byte, 0, len(data)+8)
	buf = append(buf, "data: "...)
	buf = append(buf, data...)
	buf = append(buf, "\n\n"...)
	if _, err := s.w.Write(buf); err == nil {
		err = s.rc.Flush()
		if err == nil {
			return
		}
	}
	s.failed = true
	s.cancel(errClientGone)
}
