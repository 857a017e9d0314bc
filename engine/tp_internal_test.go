package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/parallel"
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

// TestBallot: ranks voting round after round each get the combination of
// every rank's vote of that round, however they interleave; an abort
// releases the ranks waiting for a vote that will not come, and fails
// every later vote.
func TestBallot(t *testing.T) {
	const ranks, rounds = 3, 500
	vote := func(round, rank int) device.GraphVote {
		h := uint64(round*7919+rank*104729) * 0x9e3779b97f4a7c15
		return device.GraphVote{Eager: h>>60 == 0, Hold: h>>58&15 == 1, Graph: uint64(round%4) + uint64(h>>62&1)}
	}
	b := newBallot(ranks)
	err := parallel.Each(ranks, func(rank int) error {
		for round := range rounds {
			want := vote(round, 0)
			for r := 1; r < ranks; r++ {
				want = device.CombineVotes(want, vote(round, r))
			}
			got, err := b.agree(vote(round, rank))
			if err != nil {
				return err
			}
			if got != want {
				return fmt.Errorf("rank %d, round %d: got %+v, want %+v", rank, round, got, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	b = newBallot(ranks)
	errs := make(chan error, ranks)
	for range ranks - 1 {
		go func() { _, err := b.agree(device.GraphVote{Graph: 1}); errs <- err }()
	}
	select {
	case err := <-errs:
		t.Fatalf("a vote returned (%v) before every rank voted", err)
	case <-time.After(50 * time.Millisecond):
	}
	b.abort()
	for range ranks - 1 {
		if err := <-errs; !errors.Is(err, errBallotAborted) {
			t.Fatalf("a waiting vote after the abort: %v", err)
		}
	}
	if _, err := b.agree(device.GraphVote{}); !errors.Is(err, errBallotAborted) {
		t.Fatalf("a vote after the abort: %v", err)
	}
}

// orderRuntime and orderComm log the teardown calls that must come in
// order: NCCL's communicator destroy waits for the CUDA graphs that
// captured its collectives.
type orderRuntime struct {
	device.Runtime
	name string
	log  *[]string
}

func (r orderRuntime) RunGraph(int, func() error) (device.GraphRun, error) {
	return device.GraphRun{}, nil
}
func (r orderRuntime) RunGroupGraph(int, func() error, device.GraphAgree) (device.GraphRun, error) {
	return device.GraphRun{}, nil
}
func (r orderRuntime) ReleaseGraphs() error { *r.log = append(*r.log, "graphs "+r.name); return nil }
func (r orderRuntime) Close() error         { *r.log = append(*r.log, "runtime "+r.name); return nil }

type orderComm struct {
	parallel.Communicator
	name string
	mu   *sync.Mutex
	log  *[]string
}

func (c orderComm) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	*c.log = append(*c.log, "comm "+c.name)
	return nil
}

// TestTPReleaseOrder: closing a tensor-parallel engine destroys every
// rank's graphs before any communicator, and the communicators before the
// runtimes.
func TestTPReleaseOrder(t *testing.T) {
	var log []string
	var mu sync.Mutex
	p := &peer{work: make(chan *forward.Batch)}
	p.rt = orderRuntime{name: "1", log: &log}
	e := &Engine{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	e.rt = orderRuntime{name: "0", log: &log}
	e.tp = &tpGroup{peers: []*peer{p}, comms: []parallel.Communicator{
		orderComm{name: "0", mu: &mu, log: &log}, orderComm{name: "1", mu: &mu, log: &log}}}
	e.release()
	pos := map[string]int{}
	for i, s := range log {
		pos[s] = i
	}
	if len(log) != 6 {
		t.Fatalf("teardown %v, want graphs, communicators and runtimes of 2 ranks", log)
	}
	for _, g := range []string{"graphs 0", "graphs 1"} {
		for _, c := range []string{"comm 0", "comm 1"} {
			if pos[g] > pos[c] {
				t.Errorf("teardown %v: %s after %s", log, g, c)
			}
		}
	}
	for _, c := range []string{"comm 0", "comm 1"} {
		for _, r := range []string{"runtime 0", "runtime 1"} {
			if pos[c] > pos[r] {
				t.Errorf("teardown %v: %s after %s", log, c, r)
			}
		}
	}
}
