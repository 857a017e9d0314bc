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
	e.stats.prompt.Add(int64(promptTokens(chunks)))
	logits, err := e.rn.Run(b)
	if err != nil {
		return e.abort(running, fmt.Errorf("forward: %w", err))
	}
	sl, draws, err := e.rn.Tokens(logits, chunks, rows)
	if err != nil {
		return e.abort(running, fmt.Errorf("sampling: %w", err))
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

// landChunk lands a prefill chunk or a decode token of r's: the prompt
// rows it scores, the EAGLE head's features, the tokens now computed, and
// the drawn token once the prompt is complete. It reports whether r is
// done.
func (e *Engine) landChunk(c sched.Chunk[*request], sl *runner.StepLogits, rows runner.Rows, draw runner.Draw) bool {
	r := c.Req
	firstCompletion := !r.PromptDone
	if r.WantsPromptRows() {
		r.scorePrompt(sl.Host, sl.HostIndex(rows.First), c.N)
	}
	if e.spec != nil && e.spec.eagle != nil {
		e.spec.eagle.keep(r, r.Computed, rowRange(rows.Input, c.N)...)
	}
	r.Computed += c.N
	if rows.Sample < 0 {
		return false // mid-prompt chunk
	}
	if firstCompletion {
		e.sched.PromptDone(r) // share the prompt with requests that follow
		if r.Sampling.MaxNewTokens == 0 {
			// It drew a token above that it does not keep.
			e.finish(r, FinishLength, nil)
			return true
		}
	}
	return e.accept(r, draw)
}

// abort ends every request of a step that failed; none runs on.
func (e *Engine) abort(running []*request, err error) []*request {
	for _, r := range running {
		e.finish(r, FinishAbort, err)
	}
	return nil
}

// promptTokens counts the prompt tokens of a step's chunks.
func promptTokens(chunks []sched.Chunk[*request]) int {
	n := 0
	for _, c := range chunks {
		if c.Kind == sched.Prefill {
			n += c.N
		}
	}
	return n
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
// this chunk's rows (rows first.. cover tokens r.Computed..).
func (r *request) scorePrompt(logits tensor.Host, first, n int) {
	if r.out.promptLogprobs == nil {
		r.out.promptLogprobs = make([]*float32, r.NumPrompt)
	}
	lp := make([]float32, logits.Cols())
	for k := range n {
		i := r.Computed + k // the token whose logits row this is
		if i+1 >= r.NumPrompt {
			break
		}
		sample.LogSoftmax(logits.Row(first+k), lp)
		v := lp[r.Tokens[i+1]]
		r.out.promptLogprobs[i+1] = &v
	}
}
