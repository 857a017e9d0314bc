package engine

import (
	"fmt"
	"slices"

	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/sample"
	"github.com/gosling-ai/gosling/tensor"
)

// loop is the scheduler: each step either prefills newly admitted requests
// or decodes one token for every running request (continuous batching).
// It alone touches the model and the KV cache.
func (e *Engine) loop() {
	defer close(e.done)
	var waiting, running []*request
	for {
		e.publish(len(running), len(waiting))
		if len(waiting) == 0 && len(running) == 0 {
			select {
			case r := <-e.submit:
				waiting = append(waiting, r)
			case <-e.stop:
				return
			}
		}
	drain:
		for {
			select {
			case r := <-e.submit:
				waiting = append(waiting, r)
			case <-e.stop:
				for _, r := range slices.Concat(running, waiting) {
					e.finish(r, FinishAbort, nil)
				}
				return
			default:
				break drain
			}
		}
		waiting = e.dropCancelled(waiting)
		running = e.dropCancelled(running)

		admitted := e.admit(&waiting, len(running))
		if len(admitted) > 0 {
			running = append(running, e.prefill(admitted)...)
			continue
		}
		if len(running) > 0 {
			running = e.decode(running, &waiting)
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

// admit takes waiting requests, first come first served, while table rows
// and pages for their whole prefill are free. A request that cannot fit
// even in an empty cache fails; otherwise it waits for pages to free up.
func (e *Engine) admit(waiting *[]*request, numRunning int) []*request {
	var admitted []*request
	for len(*waiting) > 0 && numRunning+len(admitted) < e.cfg.MaxRunningRequests {
		r := (*waiting)[0]
		seq, ok := e.kv.NewSeq()
		if !ok {
			break
		}
		ok, err := e.kv.Grow(seq, len(r.prefillTokens()))
		if err != nil || !ok {
			e.kv.Release(seq)
			if err == nil && numRunning+len(admitted) > 0 {
				break // wait for running requests to free pages
			}
			if err == nil {
				err = fmt.Errorf("the request needs %d tokens of KV cache, more than the %d the cache holds; raise --kv-cache-tokens", len(r.prefillTokens()), e.cfg.KVCacheTokens)
			}
			*waiting = (*waiting)[1:]
			e.finish(r, FinishAbort, err)
			continue
		}
		r.seq = seq
		admitted = append(admitted, r)
		*waiting = (*waiting)[1:]
	}
	return admitted
}

// prefill runs one Extend forward over the admitted requests and returns
// those still running.
func (e *Engine) prefill(reqs []*request) []*request {
	b := &forward.Batch{Mode: forward.Extend, KV: e.kv}
	var lastRow []int // per request: its row in the returned logits
	for _, r := range reqs {
		toks := r.prefillTokens()
		start := int32(len(b.InputIDs))
		b.ReqRows = append(b.ReqRows, int32(r.seq.Row))
		b.PrefixLens = append(b.PrefixLens, 0)
		b.ExtendLens = append(b.ExtendLens, int32(len(toks)))
		slots := e.kv.Table.Row(r.seq.Row)[:len(toks)]
		for i, id := range toks {
			b.InputIDs = append(b.InputIDs, int32(id))
			b.Positions = append(b.Positions, int32(i))
		}
		b.OutSlots = append(b.OutSlots, slots...)
		if r.PromptLogprobs && r.promptLogprobs == nil {
			for i := range toks {
				b.LogitRows = append(b.LogitRows, start+int32(i))
			}
		} else {
			b.LogitRows = append(b.LogitRows, start+int32(len(toks))-1)
		}
		lastRow = append(lastRow, len(b.LogitRows)-1)
	}
	e.stats.prompt.Add(int64(len(b.InputIDs)))
	logits, err := e.model.Forward(b, e.attn)
	if err != nil {
		for _, r := range reqs {
			e.finish(r, FinishAbort, fmt.Errorf("prefill: %w", err))
		}
		return nil
	}
	var still []*request
	for i, r := range reqs {
		if r.PromptLogprobs && r.promptLogprobs == nil {
			n := len(r.promptIDs)
			first := lastRow[i] - (len(r.prefillTokens()) - 1)
			r.promptLogprobs = scorePrompt(logits, first, r.promptIDs[:n])
		}
		if r.Sampling.MaxNewTokens == 0 {
			e.finish(r, FinishLength, nil)
			continue
		}
		if !e.accept(r, logits.Row(lastRow[i])) {
			still = append(still, r)
		}
	}
	return still
}

// scorePrompt turns the logits of rows first.. into log p(ids[i] | ids[:i]).
func scorePrompt(logits tensor.T, first int, ids []int) []*float32 {
	out := make([]*float32, len(ids))
	lp := make([]float32, logits.Cols())
	for i := 1; i < len(ids); i++ {
		sample.LogSoftmax(logits.Row(first+i-1), lp)
		v := lp[ids[i]]
		out[i] = &v
	}
	return out
}

// decode grows every running request by one slot (retracting the newest
// requests when pages run out), runs one Decode forward, and returns the
// requests still running.
func (e *Engine) decode(running []*request, waiting *[]*request) []*request {
	for i := 0; i < len(running); i++ {
		r := running[i]
		for {
			ok, err := e.kv.Grow(r.seq, r.seq.Len+1)
			if err != nil { // context limit: cannot happen past the length check
				e.finish(r, FinishLength, nil)
				running = slices.Delete(running, i, i+1)
				i--
				break
			}
			if ok {
				break
			}
			// Out of pages: retract the newest request (maybe r itself) and
			// re-queue it at the front with its generated tokens.
			victim := running[len(running)-1]
			e.kv.Release(victim.seq)
			victim.seq = nil
			running = running[:len(running)-1]
			*waiting = append([]*request{victim}, *waiting...)
			e.stats.retractions.Add(1)
			e.log.Info("KV cache full: retracted a request", "output_tokens", len(victim.outputIDs))
			if victim == r {
				i--
				break
			}
		}
	}
	if len(running) == 0 {
		return nil
	}
	b := &forward.Batch{Mode: forward.Decode, KV: e.kv}
	for i, r := range running {
		pos := r.seq.Len - 1
		b.ReqRows = append(b.ReqRows, int32(r.seq.Row))
		b.PrefixLens = append(b.PrefixLens, int32(pos))
		b.ExtendLens = append(b.ExtendLens, 1)
		b.InputIDs = append(b.InputIDs, int32(r.outputIDs[len(r.outputIDs)-1]))
		b.Positions = append(b.Positions, int32(pos))
		b.OutSlots = append(b.OutSlots, e.kv.Table.Row(r.seq.Row)[pos])
		b.LogitRows = append(b.LogitRows, int32(i))
	}
	logits, err := e.model.Forward(b, e.attn)
	if err != nil {
		for _, r := range running {
			e.finish(r, FinishAbort, fmt.Errorf("decode: %w", err))
		}
		return nil
	}
	still := running[:0]
	for i, r := range running {
		if !e.accept(r, logits.Row(i)) {
			still = append(still, r)
		}
	}
	return still
}
