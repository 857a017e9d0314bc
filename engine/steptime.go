package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/engine/runner"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/sample"
	"github.com/gosling-ai/gosling/spec"
	"github.com/gosling-ai/gosling/tensor"
)

// Step timing: what one verify step costs next to one plain decode step,
// the figure speculative decoding's speed rests on (a step that verifies
// n tokens per request must cost little more than one that decodes one).
// TimeSteps builds the steps itself, over synthetic sequences of random
// tokens, and runs them through the engine's own path (runner.Runner.Forward:
// plan, forward, a CUDA graph where the step has one) followed by the
// greedy draw a step ends with (every verified node argmaxed on the
// device, as the runner does for greedy trees), so that each
// timing ends with the token ids on the host.

// StepShape is the kind of step TimeSteps times.
type StepShape string

const (
	// ShapeDecode is a plain decode step: one token per request.
	ShapeDecode StepShape = "decode"
	// ShapeChain verifies a chain of DraftTokens tokens per request
	// (causal: no mask, as a top-1 drafter's trees).
	ShapeChain StepShape = "chain"
	// ShapeTree verifies a branching tree of DraftTokens tokens per
	// request (node i's parent is (i−1)/2), through the tree mask.
	ShapeTree StepShape = "tree"
)

// StepTimingOptions say which steps TimeSteps times.
type StepTimingOptions struct {
	Batches     []int // requests per step
	DraftTokens []int // tokens per request of a verify step, the root included (--speculative-num-draft-tokens)
	// Context is the tokens each request holds in the KV cache before
	// the step (prefilled once, per batch size).
	Context int
	// Repeat is the timed steps per shape, after two untimed ones: one
	// without a graph (what a new shape sets up lazily, such as a GEMM
	// plan, is set up outside any graph's dry run, as a serving engine's
	// first steps of a shape have it) and one that captures a graph
	// where there is one.
	Repeat int
	// Seed picks the random tokens.
	Seed uint64
}

// StepTiming is one shape's timings.
type StepTiming struct {
	Batch       int       `json:"batch"`
	Shape       StepShape `json:"shape"`
	DraftTokens int       `json:"draft_tokens"` // 1 for decode
	// Seconds are the timed steps' wall times, in order.
	Seconds []float64 `json:"seconds"`
	// Graphs is how many of the timed steps replayed a CUDA graph,
	// Captures how many captured one (a step the graph of the warm-up
	// did not match) and Eager how many ran without one although the
	// engine has graphs; EagerReason is why the last of those did.
	Graphs      int    `json:"graph_replays"`
	Captures    int    `json:"graph_captures"`
	Eager       int    `json:"graph_eager"`
	EagerReason string `json:"graph_eager_reason,omitempty"`
}

// Median is the median of Seconds.
func (t StepTiming) Median() float64 {
	s := slices.Clone(t.Seconds)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// TimeSteps times plain decode steps and verify steps of each size, at
// each batch size, on this engine. The engine must be speculative (its
// attention resolved for verification) and idle: the steps take KV
// sequences of their own for as long as they run, on the scheduler's
// goroutine, and give them back.
func (e *Engine) TimeSteps(ctx context.Context, o StepTimingOptions) ([]StepTiming, error) {
	switch {
	case e.spec == nil:
		return nil, errors.New("timing verify steps needs a speculative engine (--speculative-algorithm)")
	case e.tp != nil:
		return nil, errors.New("step timing runs one rank: drop --tp-size/--nnodes")
	case len(o.Batches) == 0 || len(o.DraftTokens) == 0 || o.Repeat < 1 || o.Context < 1:
		return nil, fmt.Errorf("step timing needs batch sizes, draft-token counts, a context and a repeat count, got %+v", o)
	}
	for _, b := range o.Batches {
		if b < 1 || b > e.cfg.MaxRunningRequests {
			return nil, fmt.Errorf("batch %d: step timing takes 1 to --max-running-requests %d requests", b, e.cfg.MaxRunningRequests)
		}
	}
	for _, n := range o.DraftTokens {
		if n < 2 {
			return nil, fmt.Errorf("a verify step checks at least 2 tokens per request (the newest and a draft), got %d", n)
		}
		if o.Context+n > e.cfg.ContextLength {
			return nil, fmt.Errorf("context %d plus %d verified tokens is over --context-length %d", o.Context, n, e.cfg.ContextLength)
		}
	}
	var out []StepTiming
	var err error
	done := make(chan struct{})
	fn := func() {
		defer close(done)
		out, err = e.timeSteps(o)
	}
	select {
	case e.control <- fn:
	case <-e.stop:
		return nil, ErrClosed
	case <-e.done:
		return nil, e.Err()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	<-done
	return out, err
}

// timeSteps runs on the scheduler goroutine.
func (e *Engine) timeSteps(o StepTimingOptions) ([]StepTiming, error) {
	rng := rand.New(rand.NewPCG(o.Seed, 0x5eed))
	vocab := e.model.Config().VocabSize
	maxN := slices.Max(o.DraftTokens)
	var out []StepTiming
	for _, batch := range o.Batches {
		seqs, err := e.stepSeqs(batch, o.Context+maxN)
		if err != nil {
			return out, err
		}
		release := func() {
			for _, s := range seqs {
				e.kv.Release(s)
			}
		}
		if err := e.prefillSeqs(seqs, o.Context, vocab, rng); err != nil {
			release()
			return out, err
		}
		shapes := []struct {
			shape StepShape
			n     int
		}{{ShapeDecode, 1}}
		for _, n := range o.DraftTokens {
			shapes = append(shapes, struct {
				shape StepShape
				n     int
			}{ShapeChain, n}, struct {
				shape StepShape
				n     int
			}{ShapeTree, n})
		}
		for _, sh := range shapes {
			t := StepTiming{Batch: batch, Shape: sh.shape, DraftTokens: sh.n}
			for i := -1; i <= o.Repeat; i++ {
				b := e.stepBatch(seqs, o.Context, sh.shape, sh.n, vocab, rng)
				before := e.rn.Counts()
				start := time.Now()
				// Warm-ups: i −1 without a graph, i 0 capturing one.
				if _, err := e.timedStep(b, i < 0); err != nil {
					release()
					return out, fmt.Errorf("%s step, batch %d, %d tokens: %w", sh.shape, batch, sh.n, err)
				}
				if i < 1 {
					continue
				}
				t.Seconds = append(t.Seconds, time.Since(start).Seconds())
				after := e.rn.Counts()
				switch {
				case graphPaths(after).replays > graphPaths(before).replays:
					t.Graphs++
				case graphPaths(after).captures > graphPaths(before).captures:
					t.Captures++
				case graphPaths(after).eager > graphPaths(before).eager && sh.shape == ShapeDecode:
					t.Eager++
					t.EagerReason = after.GraphEagerReason
				case graphPaths(after).eager > graphPaths(before).eager:
					t.Eager++
					t.EagerReason = after.VerifyEagerReason
				case sh.shape != ShapeDecode && e.rn.Graphs() != nil && e.rn.Graphs().VerifyOff():
					t.Eager++
					t.EagerReason = "verify graphs were turned off after steps that could not be captured: " + after.VerifyEagerReason
				}
			}
			out = append(out, t)
		}
		release()
	}
	return out, nil
}

// stepSeqs takes n sequences of tokens slots each.
func (e *Engine) stepSeqs(n, tokens int) ([]*kvcache.Seq, error) {
	var seqs []*kvcache.Seq
	for range n {
		s, ok := e.kv.NewSeq()
		if ok {
			if ok, err := e.kv.Grow(s, tokens); err != nil || !ok {
				e.kv.Release(s)
				s = nil
			}
		}
		if s == nil {
			for _, s := range seqs {
				e.kv.Release(s)
			}
			return nil, fmt.Errorf("the KV cache has no room for %d sequences of %d tokens; raise --kv-cache-tokens or lower the context", n, tokens)
		}
		seqs = append(seqs, s)
	}
	return seqs, nil
}

// prefillSeqs fills the first context tokens of each sequence with the
// KV of random tokens, one request per forward.
func (e *Engine) prefillSeqs(seqs []*kvcache.Seq, context, vocab int, rng *rand.Rand) error {
	for _, s := range seqs {
		b := &forward.Batch{Mode: forward.Extend, KV: e.kv, ReqRows: []int32{int32(s.Row)}, PrefixLens: []int32{0},
			ExtendLens: []int32{int32(context)}, LogitRows: []int32{int32(context - 1)}}
		slots := e.kv.Table.Row(s.Row)
		for t := range context {
			b.InputIDs = append(b.InputIDs, int32(rng.IntN(vocab)))
			b.Positions = append(b.Positions, int32(t))
			b.OutSlots = append(b.OutSlots, slots[t])
		}
		if _, err := e.timedStep(b, false); err != nil {
			return fmt.Errorf("prefill of the timed sequences: %w", err)
		}
	}
	return nil
}

// stepBatch is one step of shape over seqs, each holding context tokens:
// a decode token each, or a verified chain or tree of n tokens each.
func (e *Engine) stepBatch(seqs []*kvcache.Seq, context int, shape StepShape, n, vocab int, rng *rand.Rand) *forward.Batch {
	b := &forward.Batch{Mode: forward.Decode, KV: e.kv}
	var trees []*spec.Tree
	for _, s := range seqs {
		b.ReqRows = append(b.ReqRows, int32(s.Row))
		b.PrefixLens = append(b.PrefixLens, int32(context))
		slots := e.kv.Table.Row(s.Row)
		if shape == ShapeDecode {
			b.ExtendLens = append(b.ExtendLens, 1)
			b.LogitRows = append(b.LogitRows, int32(len(b.InputIDs)))
			b.InputIDs = append(b.InputIDs, int32(rng.IntN(vocab)))
			b.Positions = append(b.Positions, int32(context))
			b.OutSlots = append(b.OutSlots, slots[context])
			continue
		}
		t := spec.NewTree(rng.IntN(vocab))
		for i := 1; i < n; i++ {
			parent := i - 1
			if shape == ShapeTree {
				parent = (i - 1) / 2
			}
			t.Add(parent, rng.IntN(vocab))
		}
		trees = append(trees, &t)
		b.ExtendLens = append(b.ExtendLens, int32(n))
		runner.AppendTree(b, slots, context, &t)
	}
	if shape != ShapeDecode {
		b.Mode = forward.TargetVerify
		runner.AttachTreeMasks(b, trees)
	}
	return b
}

// timedStep runs b (without a graph when eager) and draws the argmax of
// every logits row of b's own, returning them once they are on the host.
func (e *Engine) timedStep(b *forward.Batch, eager bool) ([]int, error) {
	n := len(b.LogitRows) // padding for a graph appends rows that are not drawn
	forward := e.rn.Forward
	if eager {
		forward = e.rn.ForwardEager
	}
	logits, err := forward(b)
	if err != nil {
		return nil, err
	}
	return e.argmaxRows(logits, n)
}

// argmaxRows is the greedy draw of the first n rows of logits: on the
// device when the logits are there (only the ids cross), else on the
// host workers.
func (e *Engine) argmaxRows(logits tensor.T, n int) ([]int, error) {
	ids := make([]int, n)
	if h, err := logits.Host(); err == nil {
		e.workers.For(n, 1, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				ids[i] = sample.Argmax(h.Row(i))
			}
		})
		return ids, nil
	}
	dev, ok := e.rt.(device.Sampler)
	if !ok {
		return nil, fmt.Errorf("the model returned device logits, but the %s runtime cannot sample them", e.rt.Name())
	}
	rows := make([]device.SampleRow, n)
	for i := range rows {
		rows[i].Row = i
	}
	err := e.rt.Run(func() error {
		got, err := dev.Sample(logits, rows)
		for i, id := range got {
			ids[i] = int(id)
		}
		return err
	})
	return ids, err
}

// pathCounts are steps by graph path, decode and verify together.
type pathCounts struct{ replays, captures, eager int }

func graphPaths(c runner.Counts) pathCounts {
	return pathCounts{c.GraphReplays + c.VerifyReplays, c.GraphCaptures + c.VerifyCaptures, c.GraphEager + c.VerifyEager}
}
