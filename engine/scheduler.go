package engine

import (
	"fmt"
	"slices"

	"github.com/gosling-ai/gosling/engine/runner"
	"github.com/gosling-ai/gosling/engine/sched"
	"github.com/gosling-ai/gosling/sample"
	"github.com/gosling-ai/gosling/tensor"
)

// loop is the scheduler. Each step forms one batch: a decode token for
// every running request that is past its prompt, plus prefill chunks
// (newly admitted requests and the continuation of chunked ones) within
// the prefill token budget — a mixed batch when both are present, so long
// prompts never stall the decoders. It alone touches the model and cache.
//
// Under the overlap schedule (overlap.go) a step is launched before the
// previous one lands; control work and the synchronous path land it first.
func (e *Engine) loop() {
	defer close(e.done)
	if e.ov.queue != nil {
		defer close(e.ov.queue)
	}
	var waiting, running []*request
	for {
		e.publish(len(running)+len(e.ov.held), len(waiting))
		if len(waiting) == 0 && len(running) == 0 && e.ov.fl == nil {
			select {
			case r := <-e.submit:
				waiting = append(waiting, r)
			case fn := <-e.control:
				fn()
			case <-e.stop:
				return
			}
		}
	drain:
		for {
			select {
			case r := <-e.submit:
				waiting = append(waiting, r)
			case fn := <-e.control:
				running = e.landFlight(running, &waiting)
				fn()
			case <-e.stop:
				running = e.landFlight(running, &waiting)
				for _, r := range slices.Concat(running, waiting) {
					e.finish(r, FinishAbort, ErrClosed)
				}
				return
			default:
				break drain
			}
		}
		waiting = e.dropCancelled(waiting)
		running = e.dropCancelled(running)
		if e.canOverlap(running, waiting) {
			running = e.stepOverlap(running, &waiting)
		} else {
			running = e.landFlight(running, &waiting)
			running = e.step(running, &waiting)
		}
		if err := e.failed(); err != nil {
			running = e.landFlight(running, &waiting)
			e.log.Error("engine stopped", "err", err)
			for _, r := range slices.Concat(running, waiting) {
				e.finish(r, FinishAbort, err)
			}
			return
		}
	}
}

func (e *Engine) dropCancelled(reqs []*request) []*request {
	return slices.DeleteFunc(reqs, func(r *request) bool {
		if r.cancelled.Load() {
			e.finish(r, FinishAbort, nil)
			return true
		}
		return false
	})
}

// step runs one forward and returns the requests still running. Its
// kinds of work, in order:
//
//   - schedule: who runs (sched.Schedule: admission, retraction);
//   - encode: the vision tower over images about to prefill
//     (runner.Runner.EncodeImage);
//   - draft: a drafter proposes a tree per decoding request
//     (speculator.draftTrees: n-gram, draft model, EAGLE head);
//   - fill: each request's share (sched.Fill): a prefill chunk (Extend),
//     one decode token (Decode) or its tree (Verify);
//   - forward: the runner builds one batch of them all, runs it and draws
//     the tokens (runner.Runner.Build, Run, Tokens);
//   - land: per chunk by kind, the drawn token is accepted
//     (landChunk), or the verified tree is walked (speculator.landVerify).
//
// It launches its chunks as the overlap schedule does (launched) and
// lands them through the same landChunk; it only lands at once.
func (e *Engine) step(running []*request, waiting *[]*request) []*request {
	running = e.encodeImages(e.applyPlan(e.sched.Schedule(*waiting, running), waiting))
	if len(running) == 0 {
		return nil
	}
	trees := e.spec.draftTrees(e, running)
	chunks := e.sched.Fill(running, func(r *request) int {
		if t := trees[r]; t != nil {
			return t.Len()
		}
		return 0
	})
	b, rows := e.rn.Build(chunks, trees, e.vision != nil)
	e.launched(chunks, rows)
	// A constrained request's next mask depends only on the tokens it
	// has accepted: it is computed while the forward runs.
	for _, c := range chunks {
		if c.Kind != sched.Verify && c.Req.constraint != nil {
			c.Req.constraint.Prefetch()
		}
	}
	logits, err := e.rn.Run(b)
	if err != nil {
		return e.abort(chunks, rows, running, fmt.Errorf("forward: %w", err))
	}
	sl, draws, err := e.rn.Tokens(logits, chunks, rows)
	if err != nil {
		return e.abort(chunks, rows, running, fmt.Errorf("sampling: %w", err))
	}
	var still []*request
	for i, c := range chunks {
		var done bool
		switch c.Kind {
		case sched.Verify:
			done = e.spec.landVerify(e, c.Req, trees[c.Req], sl, rows[i])
		default: // sched.Prefill, sched.Decode
			done = e.landChunk(c, sl, rows[i], draws[i])
		}
		if !done {
			still = append(still, c.Req)
		}
	}
	e.spec.flush(e, still)
	// Requests that were admitted or continued nowhere this step (budget
	// spent) keep running.
	for _, r := range running {
		if !slices.ContainsFunc(chunks, func(c sched.Chunk[*request]) bool { return c.Req == r }) {
			still = append(still, r)
		}
	}
	return still
}

// launched records what launching a step does to its requests, under
// either schedule, before any of its tokens is drawn: a prefill or decode
// chunk's tokens count as computed (the forward writes their KV), and a
// chunk that draws appends an in-flight token for landChunk to resolve.
// A Verify chunk changes nothing until its tree is walked.
func (e *Engine) launched(chunks []sched.Chunk[*request], rows []runner.Rows) {
	prompt := 0
	for i, c := range chunks {
		if c.Kind == sched.Verify {
			continue
		}
		r := c.Req
		if c.Kind == sched.Prefill {
			prompt += c.N
		}
		r.Computed += c.N
		if rows[i].Sample >= 0 {
			r.AppendInFlight()
			r.drawChunk = i
		}
	}
	e.stats.prompt.Add(int64(prompt))
}

// landChunk lands a launched prefill chunk or decode token of r's, under
// either schedule: the prompt rows it scores, the EAGLE head's features,
// and the drawn token once the prompt is complete. It reports whether r
// is done.
func (e *Engine) landChunk(c sched.Chunk[*request], sl *runner.StepLogits, rows runner.Rows, draw runner.Draw) bool {
	r := c.Req
	if rows.Score > 0 {
		r.scorePrompt(sl.Host, sl.HostIndex(rows.First), rows.From, c.N)
	}
	if e.spec != nil && e.spec.eagle != nil {
		e.spec.eagle.keep(r, rows.From, rowRange(rows.Input, c.N)...)
	}
	if rows.Sample < 0 {
		return false // mid-prompt chunk
	}
	first := !r.PromptDone
	if first && r.Sampling.MaxNewTokens == 0 {
		e.sched.PromptDone(r)
		e.finish(r, FinishLength, nil) // it drew a token it does not keep
		return true
	}
	if draw.ID < 0 {
		return e.noToken(r)
	}
	// The token goes in place before the prompt is shared: under the
	// overlap schedule the next step may count it as computed already.
	n := r.Resolve(draw.ID) + 1
	if first {
		e.sched.PromptDone(r) // share the prompt with requests that follow
	}
	return e.take(r, draw, n)
}

// landFailed ends the requests of a launched step whose forward or
// sampling failed (those that have not ended already). What the step
// would have computed is not counted, so that releasing them caches
// only KV that was written.
func (e *Engine) landFailed(chunks []sched.Chunk[*request], rows []runner.Rows, err error) {
	for i, c := range chunks {
		if r := c.Req; !r.ended {
			r.Computed = rows[i].From
			e.finish(r, FinishAbort, err)
		}
	}
}

// abort ends a synchronous step that failed: its chunks' requests as
// landFailed does, and every other running request with them; none runs
// on.
func (e *Engine) abort(chunks []sched.Chunk[*request], rows []runner.Rows, running []*request, err error) []*request {
	e.landFailed(chunks, rows, err)
	for _, r := range running {
		if !r.ended {
			e.finish(r, FinishAbort, err)
		}
	}
	return nil
}

// applyPlan carries out what Schedule decided beyond the step itself
// (logs retractions, ends requests, counts cache hits) and returns the
// requests of the step; waiting becomes the plan's queue.
func (e *Engine) applyPlan(plan sched.Plan[*request], waiting *[]*request) []*request {
	*waiting = plan.Waiting
	for _, r := range plan.Retracted {
		e.stats.retractions.Add(1)
		e.log.Info("KV cache full: retracted a request", "output_tokens", r.NumOutput())
	}
	for _, x := range plan.Ended {
		switch {
		case x.Err == nil:
			e.finish(x.Req, FinishLength, nil)
		case x.BadRequest:
			e.finish(x.Req, FinishAbort, badRequest(x.Err))
		default:
			e.finish(x.Req, FinishAbort, x.Err)
		}
	}
	for _, r := range plan.Admitted {
		if !r.PromptDone {
			e.stats.cached.Add(int64(r.CachedTokens))
		}
	}
	return plan.Running
}

// scorePrompt records log p(prompt[i+1] | prompt[:i+1]) from the logits of
// a chunk's rows (rows first.. cover tokens from..).
func (r *request) scorePrompt(logits tensor.Host, first, from, n int) {
	if r.out.promptLogprobs == nil {
		r.out.promptLogprobs = make([]*float32, r.NumPrompt)
	}
	lp := make([]float32, logits.Cols())
	for k := range n {
		i := from + k // the token whose logits row this is
		if i+1 >= r.NumPrompt {
			break
		}
		sample.LogSoftmax(logits.Row(first+k), lp)
		v := lp[r.Tokens[i+1]]
		r.out.promptLogprobs[i+1] = &v
	}
}
