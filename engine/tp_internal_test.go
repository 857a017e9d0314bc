package engine

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/sample"
)

// TestTPRankLeaves: when one rank leaves its group (its communicator
// closes, as a rank whose process died would), the next forward fails on
// every rank instead of hanging, the request gets the error, and the
// engine stops (Done, Err) and refuses further requests with the reason.
func TestTPRankLeaves(t *testing.T) {
	e, err := New(Config{ModelPath: shared.Path(t, "models/stories260K/stories260K.gguf"), Device: "cpu", TPSize: 2,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	p := sample.DefaultParams()
	p.Temperature, p.MaxNewTokens = 0, 8
	if _, err := e.Generate(context.Background(), Request{InputIDs: []int{1}, Sampling: p}); err != nil {
		t.Fatalf("before the rank leaves: %v", err)
	}
	e.tp.comms[1].Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = e.Generate(ctx, Request{InputIDs: []int{1}, Sampling: p})
	var rankErr *RankError
	if !errors.As(err, &rankErr) || !strings.Contains(err.Error(), "rank 1 left the group") {
		t.Fatalf("after rank 1 left: err %v, want a RankError naming rank 1", err)
	}
	select {
	case <-e.Done():
	case <-ctx.Done():
		t.Fatal("the engine did not stop after a rank failed")
	}
	if !errors.As(e.Err(), &rankErr) {
		t.Fatalf("Err() = %v, want the RankError", e.Err())
	}
	if _, err := e.Generate(ctx, Request{InputIDs: []int{1}, Sampling: p}); !errors.As(err, &rankErr) {
		t.Fatalf("a request after the engine stopped: err %v, want the RankError", err)
	}
}
