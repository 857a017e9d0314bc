package engine

import (
	"errors"
	"slices"

	"github.com/gosling-ai/gosling/engine/runner"
	"github.com/gosling-ai/gosling/sample"
)

// accept takes tok as the next token of r, drawn on the host or on the
// device (runner.Runner.Tokens), streams it, and reports whether r has finished
// (in which case it has been released).
func (e *Engine) accept(r *request, tok runner.Draw) bool {
	if tok.ID < 0 {
		return e.noToken(r)
	}
	r.Append(tok.ID)
	return e.take(r, tok, len(r.Tokens))
}

// noToken ends r when the grammar allowed no token (constraint.Mask).
func (e *Engine) noToken(r *request) bool {
	e.flushText(r)
	e.finish(r, FinishAbort, errors.New("constrained decoding: the grammar allows no token here"))
	return true
}

// take streams tok, already in place as the n-th of r.Tokens (under the
// overlap schedule, tokens drawn by the step in flight may follow it),
// and reports whether r has finished.
func (e *Engine) take(r *request, tok runner.Draw, n int) bool {
	id, logits := tok.ID, tok.Logits
	r.sampler.Accept(id)
	e.stats.generated.Add(1)
	d := Delta{IDs: []int{id}}
	// Requests that want logprobs are drawn on the host (runner.Request.WantsLogprobs).
	if (r.Logprobs || r.TopLogprobs > 0) && logits != nil {
		lp := make([]float32, len(logits))
		sample.LogSoftmax(logits, lp)
		d.Logprobs = []float32{lp[id]}
		r.out.logprobs = append(r.out.logprobs, lp[id])
		if r.TopLogprobs > 0 {
			d.TopLogprobs = [][]sample.TokenLogprob{sample.TopN(lp, r.TopLogprobs)}
			r.out.topLogprobs = append(r.out.topLogprobs, d.TopLogprobs[0])
		}
	}

	stopToken := slices.Contains(r.Sampling.StopTokenIDs, id) ||
		(!r.Sampling.IgnoreEOS && slices.Contains(e.eosIDs, id))
	grammarDone := false
	if !stopToken {
		done, err := r.advanceConstraint(id)
		if err != nil {
			e.flushText(r)
			e.finish(r, FinishAbort, err)
			return true
		}
		grammarDone = done
	}
	stopped := false
	if r.stream != nil && !stopToken {
		var emit string
		emit, stopped = r.stops.Push(r.stream.Push(id))
		d.Text = emit
	}
	r.out.text = append(r.out.text, d.Text...)
	r.push(d)
	switch {
	case stopToken:
		// The stop token's own text is not output; what the detokenizer
		// or the stop-string checker still holds before it is.
		r.out.matchedStop = id
		e.flushText(r)
		e.finish(r, FinishStop, nil)
	case stopped:
		r.out.matchedStop = r.stops.Matched()
		e.finish(r, FinishStop, nil)
	case grammarDone:
		// Nothing can follow: the constrained output is complete.
		e.flushText(r)
		e.finish(r, FinishStop, nil)
	case n-r.NumPrompt >= r.Sampling.MaxNewTokens, n >= e.cfg.ContextLength:
		e.flushText(r)
		e.finish(r, FinishLength, nil)
	default:
		return false
	}
	return true
}

// flushText emits text held back by the detokenizer or the stop checker.
func (e *Engine) flushText(r *request) {
	if r.stream == nil {
		return
	}
	emit, _ := r.stops.Push(r.stream.Flush())
	emit += r.stops.Flush()
	if emit != "" {
		r.out.text = append(r.out.text, emit...)
		r.push(Delta{Text: emit})
	}
}

// finish releases r's KV cache, builds its result and wakes Generate.
func (e *Engine) finish(r *request, reason string, err error) {
	r.ended = true
	r.DropInFlight() // drawn for a step it no longer needs
	e.sched.Release(r)
	// Stats shows the released pages by the time the caller has its result
	// (else a check right after the last request read a count from before
	// it, an intermittent failure of the leak tests).
	e.publishKV()
	if reason == FinishAbort && err == nil {
		e.flushText(r)
	}
	res := &Result{
		PromptIDs:      r.PromptIDs(),
		OutputIDs:      r.outputIDs(),
		Text:           string(r.out.text),
		FinishReason:   reason,
		MatchedStop:    r.out.matchedStop,
		OutputLogprobs: r.out.logprobs,
		TopLogprobs:    r.out.topLogprobs,
		PromptLogprobs: r.out.promptLogprobs,
		CachedTokens:   r.CachedTokens,

		SpecVerifySteps:    r.spec.steps,
		SpecAcceptedTokens: r.spec.accepted,
	}
	r.result = res
	r.err = err
	close(r.finished)
}
