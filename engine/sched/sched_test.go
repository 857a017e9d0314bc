package sched_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/engine/sched"
	"github.com/gosling-ai/gosling/kvcache"
)

// The scheduler's tests run it against the real KV cache (page allocator,
// request table, radix prefix cache) at toy sizes: no model, no device.

type req struct {
	name string
	sched.Req
}

func (r *req) Sched() *sched.Req { return &r.Req }

// prompt is a waiting request with n prompt tokens starting at first.
func prompt(name string, first, n int) *req {
	toks := make([]int, n)
	for i := range toks {
		toks[i] = first + i
	}
	return &req{name: name, Req: sched.Req{Tokens: toks, NumPrompt: n}}
}

func names(rs []*req) []string {
	out := []string{}
	for _, r := range rs {
		out = append(out, r.name)
	}
	return out
}

// newCache is a one-layer cache of pages of pageSize tokens holding
// tokens tokens, rows table rows and contexts of 64 tokens.
func newCache(t *testing.T, pageSize, tokens, rows int) *kvcache.Cache {
	t.Helper()
	kv, err := kvcache.NewCache(kvcache.Spec{NumLayers: 1, NumKVHeads: 1, HeadDim: 2, HeadDimV: 2}, pageSize, tokens, rows, 64)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// prefill runs r's whole prompt as the engine would after a forward: all
// of it computed, the prompt shared, one token drawn.
func prefill(s *sched.Scheduler[*req], r *req, next int) {
	r.Computed = len(r.Tokens)
	s.PromptDone(r)
	r.Append(next)
}

func TestScheduleAdmission(t *testing.T) {
	for _, tc := range []struct {
		name        string
		cfg         sched.Config
		rows        int // table rows in the cache
		tokens      int // cache capacity
		running     []*req
		waiting     []*req
		admitted    []string
		stillWaits  []string
		ended       []string
		endedReason string
	}{
		{name: "running limit", cfg: sched.Config{MaxRunning: 2, MaxPrefillTokens: 100}, rows: 4, tokens: 64,
			waiting: []*req{prompt("a", 1, 4), prompt("b", 1, 4), prompt("c", 1, 4)}, admitted: []string{"a", "b"}, stillWaits: []string{"c"}},
		{name: "token budget stops admission", cfg: sched.Config{MaxRunning: 8, MaxPrefillTokens: 10}, rows: 4, tokens: 64,
			waiting: []*req{prompt("a", 1, 8), prompt("b", 1, 8), prompt("c", 1, 2)}, admitted: []string{"a"}, stillWaits: []string{"b", "c"}},
		{name: "the first request may exceed the budget", cfg: sched.Config{MaxRunning: 8, MaxPrefillTokens: 4}, rows: 4, tokens: 64,
			waiting: []*req{prompt("a", 1, 12), prompt("b", 1, 1)}, admitted: []string{"a"}, stillWaits: []string{"b"}},
		{name: "table rows", cfg: sched.Config{MaxRunning: 8, MaxPrefillTokens: 100}, rows: 1, tokens: 64,
			waiting: []*req{prompt("a", 1, 4), prompt("b", 1, 4)}, admitted: []string{"a"}, stillWaits: []string{"b"}},
		{name: "a request larger than the cache ends", cfg: sched.Config{MaxRunning: 8, MaxPrefillTokens: 100, KVCacheTokens: 8}, rows: 4, tokens: 8,
			waiting: []*req{prompt("big", 1, 12), prompt("b", 1, 4)}, admitted: []string{"b"}, stillWaits: []string{},
			ended: []string{"big"}, endedReason: "needs 12 tokens of KV cache, more than the 8"},
		{name: "pages short: wait for running requests", cfg: sched.Config{MaxRunning: 8, MaxPrefillTokens: 100}, rows: 4, tokens: 8,
			running: []*req{prompt("r", 100, 6)}, waiting: []*req{prompt("a", 1, 4)}, admitted: []string{}, stillWaits: []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kv := newCache(t, 1, tc.tokens, tc.rows)
			s := sched.New[*req](tc.cfg, kv, nil)
			// Requests already running are admitted by an earlier step.
			if len(tc.running) > 0 {
				if p := s.Schedule(tc.running, nil); len(p.Admitted) != len(tc.running) {
					t.Fatalf("setup: admitted %v", names(p.Admitted))
				}
			}
			p := s.Schedule(tc.waiting, tc.running)
			if got := names(p.Admitted); !slices.Equal(got, tc.admitted) {
				t.Errorf("admitted %v, want %v", got, tc.admitted)
			}
			if got := names(p.Waiting); !slices.Equal(got, tc.stillWaits) {
				t.Errorf("waiting %v, want %v", got, tc.stillWaits)
			}
			var ended []string
			for _, e := range p.Ended {
				ended = append(ended, e.Req.name)
				if !e.BadRequest || !strings.Contains(e.Err.Error(), tc.endedReason) {
					t.Errorf("%s ended with %v (bad request %v), want %q", e.Req.name, e.Err, e.BadRequest, tc.endedReason)
				}
				if e.Req.Seq != nil {
					t.Errorf("%s ended holding its sequence", e.Req.name)
				}
			}
			if !slices.Equal(ended, tc.ended) {
				t.Errorf("ended %v, want %v", ended, tc.ended)
			}
			for _, r := range p.Admitted {
				if r.Seq == nil || r.Seq.Len != len(r.Tokens) {
					t.Errorf("%s admitted without slots for its prompt: %+v", r.name, r.Seq)
				}
			}
			if want := append(slices.Clone(tc.running), p.Admitted...); !slices.Equal(p.Running, want) {
				t.Errorf("running %v, want %v", names(p.Running), names(want))
			}
		})
	}
}

// TestFill: the chunk each running request computes in a step.
func TestFill(t *testing.T) {
	type want struct {
		name string
		n    int
		kind sched.Kind
	}
	decoding := func(name string) *req { // prefilled, its first token drawn
		r := prompt(name, 50, 3)
		r.Computed, r.PromptDone = 3, true
		r.Append(7)
		return r
	}
	for _, tc := range []struct {
		name    string
		cfg     sched.Config
		running []*req
		trees   map[string]int
		want    []want
	}{
		{name: "chunked prefill", cfg: sched.Config{MaxPrefillTokens: 100, ChunkedPrefillSize: 4},
			running: []*req{prompt("a", 1, 10)}, want: []want{{"a", 4, sched.Prefill}}},
		{name: "no chunking: the whole prompt", cfg: sched.Config{MaxPrefillTokens: 100},
			running: []*req{prompt("a", 1, 10)}, want: []want{{"a", 10, sched.Prefill}}},
		{name: "the first prefill may exceed the budget, the next waits", cfg: sched.Config{MaxPrefillTokens: 6},
			running: []*req{prompt("a", 1, 10), prompt("b", 1, 10)}, want: []want{{"a", 10, sched.Prefill}}},
		{name: "the budget is shared by prefills", cfg: sched.Config{MaxPrefillTokens: 12},
			running: []*req{prompt("a", 1, 8), prompt("b", 1, 10)}, want: []want{{"a", 8, sched.Prefill}, {"b", 4, sched.Prefill}}},
		{name: "a decode before a prefill caps it", cfg: sched.Config{MaxPrefillTokens: 6},
			running: []*req{decoding("d"), prompt("a", 1, 10)}, want: []want{{"d", 1, sched.Decode}, {"a", 6, sched.Prefill}}},
		{name: "a verified tree", cfg: sched.Config{MaxPrefillTokens: 6}, trees: map[string]int{"d": 4},
			running: []*req{decoding("d"), decoding("e")}, want: []want{{"d", 4, sched.Verify}, {"e", 1, sched.Decode}}},
		{name: "the forward cap cuts the prefill to what decodes leave", cfg: sched.Config{MaxPrefillTokens: 100, MaxForwardTokens: 8},
			running: []*req{prompt("a", 1, 20), decoding("d"), decoding("e")}, want: []want{{"a", 6, sched.Prefill}, {"d", 1, sched.Decode}, {"e", 1, sched.Decode}}},
		{name: "the forward cap counts verified trees", cfg: sched.Config{MaxPrefillTokens: 100, MaxForwardTokens: 8}, trees: map[string]int{"d": 4},
			running: []*req{decoding("d"), prompt("a", 1, 20), prompt("b", 1, 20)}, want: []want{{"d", 4, sched.Verify}, {"a", 4, sched.Prefill}}},
		{name: "the forward cap binds the first prefill too", cfg: sched.Config{MaxPrefillTokens: 4, MaxForwardTokens: 6},
			running: []*req{prompt("a", 1, 20)}, want: []want{{"a", 6, sched.Prefill}}},
		{name: "a scored prompt prefills the logits rows the others leave", cfg: sched.Config{MaxPrefillTokens: 100, MaxLogitRows: 5},
			running: []*req{decoding("d"), func() *req { r := prompt("s", 1, 20); r.ScorePrompt = true; return r }()},
			want:    []want{{"d", 1, sched.Decode}, {"s", 4, sched.Prefill}}},
		{name: "a span past the cap waits while another prefill runs", cfg: sched.Config{MaxPrefillTokens: 100, MaxForwardTokens: 10},
			running: []*req{prompt("a", 1, 6), func() *req { r := prompt("img", 1, 12); r.Spans = [][2]int{{2, 9}}; return r }()},
			want:    []want{{"a", 6, sched.Prefill}}},
		{name: "a chunk never ends inside a bidirectional span", cfg: sched.Config{MaxPrefillTokens: 100, ChunkedPrefillSize: 4},
			running: []*req{func() *req { r := prompt("img", 1, 12); r.Spans = [][2]int{{2, 9}}; return r }()},
			want:    []want{{"img", 9, sched.Prefill}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kv := newCache(t, 1, 64, 4)
			for _, r := range tc.running {
				seq, _ := kv.NewSeq()
				r.Seq = seq
				if ok, err := kv.Grow(seq, len(r.Tokens)); !ok || err != nil {
					t.Fatal(ok, err)
				}
			}
			s := sched.New[*req](tc.cfg, kv, nil)
			chunks := s.Fill(tc.running, func(r *req) int { return tc.trees[r.name] })
			var got []want
			for _, c := range chunks {
				got = append(got, want{c.Req.name, c.N, c.Kind})
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("chunks %v, want %v", got, tc.want)
			}
		})
	}
}

// TestRetraction: when a decoding request's next token finds no page, the
// newest running request goes back to the front of the queue, its KV
// cached as a prefix for when it returns; a request at the context limit
// ends.
func TestRetraction(t *testing.T) {
	kv := newCache(t, 4, 8, 4) // two pages of four tokens
	radix := kv.NewRadixCache()
	s := sched.New[*req](sched.Config{MaxRunning: 4, MaxPrefillTokens: 100, KVCacheTokens: 8}, kv, radix)
	a, b := prompt("a", 1, 4), prompt("b", 10, 4)
	p := s.Schedule([]*req{a, b}, nil)
	if !slices.Equal(names(p.Admitted), []string{"a", "b"}) {
		t.Fatalf("admitted %v", names(p.Admitted))
	}
	prefill(s, a, 5)
	prefill(s, b, 14)
	queued := prompt("q", 30, 2)
	// a's fifth token needs a second page: none is free, and b's prompt
	// page is its own until it is released.
	p = s.Schedule([]*req{queued}, p.Running)
	if got := names(p.Retracted); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("retracted %v, want [b]", got)
	}
	if got := names(p.Running); !slices.Equal(got, []string{"a"}) {
		t.Errorf("running %v, want [a]", got)
	}
	if got := names(p.Waiting); !slices.Equal(got, []string{"b", "q"}) {
		t.Errorf("waiting %v, want [b q]: the retracted request first", got)
	}
	if b.Seq != nil || b.Computed != 0 || len(b.Tokens) != 5 {
		t.Errorf("b after retraction: seq %v, computed %d, tokens %v", b.Seq, b.Computed, b.Tokens)
	}
	if a.Seq.Len != 5 {
		t.Errorf("a has slots for %d tokens, want 5", a.Seq.Len)
	}
	// b's prompt page went to the prefix cache, then was evicted for a.
	if radix.CachedPages() != 1 { // a's prompt page
		t.Errorf("%d cached pages, want 1", radix.CachedPages())
	}

	// The newest request retracts itself when it is the one short of a
	// page, and waits while the request before it still holds pages.
	kv = newCache(t, 4, 8, 4)
	s = sched.New[*req](sched.Config{MaxRunning: 4, MaxPrefillTokens: 100, KVCacheTokens: 8}, kv, nil)
	c, d := prompt("c", 1, 4), prompt("d", 10, 4)
	p = s.Schedule([]*req{c, d}, nil)
	prefill(s, d, 14) // c is still prefilling: its chunk waited
	p = s.Schedule(nil, p.Running)
	if !slices.Equal(names(p.Running), []string{"c"}) || !slices.Equal(names(p.Retracted), []string{"d"}) ||
		!slices.Equal(names(p.Waiting), []string{"d"}) || len(p.Ended) != 0 {
		t.Errorf("running %v, retracted %v, waiting %v, ended %v; want d retracted and waiting", names(p.Running), names(p.Retracted), names(p.Waiting), p.Ended)
	}

	// At the context limit the request ends (finish reason length).
	kv, err := kvcache.NewCache(kvcache.Spec{NumLayers: 1, NumKVHeads: 1, HeadDim: 2, HeadDimV: 2}, 1, 64, 4, 6)
	if err != nil {
		t.Fatal(err)
	}
	s = sched.New[*req](sched.Config{MaxRunning: 4, MaxPrefillTokens: 100}, kv, nil)
	e := prompt("e", 1, 6)
	p = s.Schedule([]*req{e}, nil)
	prefill(s, e, 7)
	p = s.Schedule(nil, p.Running)
	if len(p.Ended) != 1 || p.Ended[0].Req != e || p.Ended[0].Err != nil || e.Seq != nil {
		t.Errorf("ended %+v; want e, with no error, released", p.Ended)
	}
}

// TestLongestPrefixMatch: with --schedule-policy lpm the waiting request
// that reuses the longest cached prefix is admitted first and starts past
// it; first come, first served keeps arrival order. A request that scores
// its prompt reuses nothing.
func TestLongestPrefixMatch(t *testing.T) {
	for _, tc := range []struct {
		name     string
		lpm      bool
		score    bool
		first    string
		computed int
	}{
		{name: "lpm", lpm: true, first: "shared", computed: 8},
		{name: "fcfs", first: "other", computed: 0},
		{name: "lpm, prompt scored", lpm: true, score: true, first: "shared", computed: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kv := newCache(t, 4, 64, 4)
			radix := kv.NewRadixCache()
			s := sched.New[*req](sched.Config{MaxRunning: 1, MaxPrefillTokens: 100, LPM: tc.lpm}, kv, radix)
			// A finished request leaves its twelve tokens in the cache.
			done := prompt("done", 1, 12)
			s.Schedule([]*req{done}, nil)
			prefill(s, done, 99)
			s.Release(done)

			other, shared := prompt("other", 500, 10), prompt("shared", 1, 10)
			shared.ScorePrompt = tc.score
			p := s.Schedule([]*req{other, shared}, nil)
			if got := names(p.Admitted); !slices.Equal(got, []string{tc.first}) {
				t.Fatalf("admitted %v, want [%s]", got, tc.first)
			}
			r := p.Admitted[0]
			// The last prompt token is always computed (its logits are
			// needed), so of ten tokens two whole pages are reused.
			if r.Computed != tc.computed || r.CachedTokens != tc.computed {
				t.Errorf("%s starts at %d (cached %d), want %d", r.name, r.Computed, r.CachedTokens, tc.computed)
			}
		})
	}
}

// BenchmarkDecodeStep is the scheduler's share of one decode step of 32
// running requests with 512-token contexts: Schedule (a slot each) and
// Fill, then one token appended to each, as the engine's step does.
func BenchmarkDecodeStep(b *testing.B) {
	kv, err := kvcache.NewCache(kvcache.Spec{NumLayers: 1, NumKVHeads: 1, HeadDim: 2, HeadDimV: 2}, 16, 32*(512+b.N+16), 32, 512+b.N+16)
	if err != nil {
		b.Fatal(err)
	}
	s := sched.New[*req](sched.Config{MaxRunning: 32, MaxPrefillTokens: 1 << 20}, kv, kv.NewRadixCache())
	var waiting []*req
	for i := range 32 {
		waiting = append(waiting, prompt("r", 1000*i, 512))
	}
	p := s.Schedule(waiting, nil)
	for _, r := range p.Running {
		prefill(s, r, 1)
	}
	running := p.Running
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		p := s.Schedule(nil, running)
		for _, c := range s.Fill(p.Running, nil) {
			c.Req.Computed += c.N
			c.Req.Append(2)
		}
		running = p.Running
	}
}

// TestInFlightTokens: a request whose newest token is still being drawn
// (the engine's overlap schedule) is not admitted until it is resolved,
// and the requests behind it wait in order; dropping in-flight tokens
// keeps Computed within the tokens left.
func TestInFlightTokens(t *testing.T) {
	kv := newCache(t, 4, 64, 4)
	s := sched.New[*req](sched.Config{MaxRunning: 4, MaxPrefillTokens: 100}, kv, nil)
	a, b := prompt("a", 1, 5), prompt("b", 10, 3)
	a.Append(7)
	a.AppendInFlight()
	if a.InFlight != 1 || a.Tokens[len(a.Tokens)-1] != -1 || a.NumOutput() != 2 {
		t.Fatalf("after AppendInFlight: %v, %d in flight", a.Tokens, a.InFlight)
	}
	p := s.Schedule([]*req{a, b}, nil)
	if len(p.Admitted) != 0 || !slices.Equal(names(p.Waiting), []string{"a", "b"}) {
		t.Fatalf("admitted %v, waiting %v; want none admitted while a's token is drawn", names(p.Admitted), names(p.Waiting))
	}
	if at := a.Resolve(42); at != 6 || a.Tokens[6] != 42 || a.InFlight != 0 {
		t.Fatalf("Resolve: index %d, tokens %v, %d in flight", at, a.Tokens, a.InFlight)
	}
	p = s.Schedule(p.Waiting, nil)
	if !slices.Equal(names(p.Admitted), []string{"a", "b"}) {
		t.Fatalf("admitted %v once resolved", names(p.Admitted))
	}
	b.Computed = 3
	b.AppendInFlight()
	b.AppendInFlight()
	b.Computed = 4 // the first in-flight token was the input of a step launched since
	b.DropInFlight()
	if len(b.Tokens) != 3 || b.InFlight != 0 || b.Computed != 3 {
		t.Errorf("DropInFlight: tokens %v, %d in flight, computed %d", b.Tokens, b.InFlight, b.Computed)
	}
}
