package engine

import (
	"fmt"
	"slices"

	"github.com/gosling-ai/gosling/engine/sched"
	"github.com/gosling-ai/gosling/sample"
	"github.com/gosling-ai/gosling/spec"
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

// step runs one forward and returns the requests still running: the
// scheduler decides who runs (sched.Schedule), the runner's side prepares
// images and drafts, the scheduler sizes each request's share
// (sched.Fill), and the runner builds the batch, runs it and draws the
// tokens that accept then streams.
func (e *Engine) step(running []*request, waiting *[]*request) []*request {
	running = e.encodeImages(e.applyPlan(e.sched.Schedule(*waiting, running), waiting))
	if len(running) == 0 {
		return nil
	}
	var trees map[*request]*spec.Tree
	if e.spec != nil {
		trees = e.spec.draftTrees(e, running)
	}
	chunks := e.sched.Fill(running, func(r *request) int {
		if t := trees[r]; t != nil {
			return t.Len()
		}
		return 0
	})
	b, rows := e.rn.Build(chunks, trees, e.vision != nil)
	prompt := 0
	for _, c := range chunks {
		if c.Kind == sched.Prefill {
			prompt += c.N
		}
	}
	e.stats.prompt.Add(int64(prompt))
	logits, err := e.rn.Run(b)
	if err != nil {
		for _, r := range running {
			e.finish(r, FinishAbort, fmt.Errorf("forward: %w", err))
		}
		return nil
	}
	sl, draws, err := e.rn.Tokens(logits, chunks, rows)
	if err != nil {
		for _, r := range running {
			e.finish(r, FinishAbort, fmt.Errorf("sampling: %w", err))
		}
		return nil
	}
	var still []*request
	for i, c := range chunks {
		r := c.Req
		r.inBatch = true
		firstCompletion := !r.PromptDone
		if c.Kind == sched.Verify {
			finished, err := e.spec.acceptTree(e, r, trees[r], sl, rows[i].First, int(b.ExtendStarts[i]))
			switch {
			case err != nil && !finished:
				e.finish(r, FinishAbort, fmt.Errorf("speculative decoding: %w", err))
			case err != nil:
				e.log.Error("speculative decoding: moving a finished request's KV", "err", err)
			case !finished:
				still = append(still, r)
			}
			continue
		}
		if r.WantsPromptRows() {
			r.scorePrompt(sl.Host, sl.HostIndex(rows[i].First), c.N)
		}
		if e.spec != nil && e.spec.eagle != nil {
			e.spec.eagle.keep(r, r.Computed, rowRange(int(b.ExtendStarts[i]), c.N)...)
		}
		r.Computed += c.N
		if rows[i].Sample < 0 {
			still = append(still, r) // mid-prompt chunk
			continue
		}
		if firstCompletion {
			e.sched.PromptDone(r) // share the prompt with requests that follow
			if r.Sampling.MaxNewTokens == 0 {
				// It drew a token above that it does not keep.
				e.finish(r, FinishLength, nil)
				continue
			}
		}
		if !e.accept(r, draws[i]) {
			still = append(still, r)
		}
	}
	if e.spec != nil && e.spec.eagle != nil {
		if err := e.spec.eagle.flush(); err != nil {
			// The head catches up from the next step's features; until
			// then its requests decode without drafts.
			e.log.Warn("EAGLE features of this step lost", "err", err)
			for _, r := range still {
				e.spec.eagle.release(r)
			}
		}
	}
	// Requests that were admitted or continued nowhere this step (budget
	// spent) keep running.
	for _, r := range running {
		if !r.inBatch {
			still = append(still, r)
		}
		r.inBatch = false
	}
	return still
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
func (r *request) scorePrompt(logits tensor.T, first, n int) {
	if r.promptLogprobs == nil {
		r.promptLogprobs = make([]*float32, r.NumPrompt)
	}
	lp := make([]float32, logits.Cols())
	for k := range n {
		i := r.Computed + k // the token whose logits row this is
		if i+1 >= r.NumPrompt {
			break
		}
		sample.LogSoftmax(logits.Row(first+k), lp)
		v := lp[r.Tokens[i+1]]
		r.promptLogprobs[i+1] = &v
	}
}
