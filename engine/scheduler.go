package engine

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/sample"
	"github.com/gosling-ai/gosling/spec"
	"github.com/gosling-ai/gosling/tensor"
)

// loop is the scheduler. Each step forms one batch: a decode token for
// every running request that is past its prompt, plus prefill chunks
// (newly admitted requests and the continuation of chunked ones) within
// the prefill token budget — a mixed batch when both are present, so long
// prompts never stall the decoders. It alone touches the model and cache.
func (e *Engine) loop() {
	defer close(e.done)
	var waiting, running []*request
	for {
		e.publish(len(running), len(waiting))
		if len(waiting) == 0 && len(running) == 0 {
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
				fn()
			case <-e.stop:
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
		running = e.step(running, &waiting)
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

// step runs one forward and returns the requests still running.
func (e *Engine) step(running []*request, waiting *[]*request) []*request {
	running = e.growDecoders(running, waiting)
	running = append(running, e.admit(waiting, len(running))...)
	running = e.encodeImages(running)
	if len(running) == 0 {
		return nil
	}
	b := &forward.Batch{KV: e.kv}
	budget := e.cfg.MaxPrefillTokens
	var decodes, prefills, verifies int
	var trees map[*request]*spec.Tree
	if e.spec != nil {
		trees = e.spec.draftTrees(e, running)
	}
	type plan struct {
		r        *request
		n        int        // new tokens this step
		logitRow int        // row of the sampling logits, -1 if no sampling
		firstRow int        // row of the first logits row of this request
		tree     *spec.Tree // the draft tree verified this step, or nil
	}
	plans := make([]plan, 0, len(running))
	for _, r := range running {
		all := r.allTokens()
		p := plan{r: r, logitRow: -1}
		if r.prefilling() {
			p.n = len(all) - r.computed
			if e.cfg.ChunkedPrefillSize > 0 {
				p.n = min(p.n, e.cfg.ChunkedPrefillSize)
			}
			if prefills > 0 || decodes > 0 {
				p.n = min(p.n, budget) // the first prefill may exceed the budget, or nothing moves
			}
			p.n = r.spanEnd(r.computed+p.n) - r.computed // a chunk never splits a bidirectional span
			if p.n <= 0 || !e.prepareWindow(r, r.computed+p.n) {
				continue // waits for budget or window pages
			}
			budget -= p.n
			prefills++
		} else if p.tree = trees[r]; p.tree != nil {
			p.n = p.tree.Len()
			verifies++
		} else {
			p.n = 1
			decodes++
		}
		start := len(b.InputIDs)
		b.ReqRows = append(b.ReqRows, int32(r.seq.Row))
		b.PrefixLens = append(b.PrefixLens, int32(r.computed))
		b.ExtendLens = append(b.ExtendLens, int32(p.n))
		slots := e.kv.Table.Row(r.seq.Row)
		if p.tree != nil {
			p.firstRow = len(b.LogitRows)
			appendTree(b, slots, r.computed, p.tree)
			plans = append(plans, p)
			continue
		}
		for i := r.computed; i < r.computed+p.n; i++ {
			b.InputIDs = append(b.InputIDs, int32(all[i]))
			b.Positions = append(b.Positions, int32(i))
			b.OutSlots = append(b.OutSlots, slots[i])
		}
		if r.images != nil {
			addImageInputs(b, r, len(plans), start, r.computed, p.n)
		}
		p.firstRow = len(b.LogitRows)
		if r.wantsPromptLogprobs() {
			for i := range p.n {
				b.LogitRows = append(b.LogitRows, int32(start+i))
			}
		} else if r.computed+p.n == len(all) {
			b.LogitRows = append(b.LogitRows, int32(start+p.n-1))
		}
		if r.computed+p.n == len(all) {
			p.logitRow = len(b.LogitRows) - 1
		}
		plans = append(plans, p)
	}
	if e.vision != nil {
		reqs, froms, counts := make([]*request, len(plans)), make([]int, len(plans)), make([]int, len(plans))
		for i, p := range plans {
			reqs[i], froms[i], counts[i] = p.r, p.r.computed, p.n
		}
		fillMRope(b, reqs, froms, counts)
	}
	switch {
	case verifies > 0:
		b.Mode = forward.TargetVerify // prefill chunks in it stay causal
		planTrees := make([]*spec.Tree, len(plans))
		for i, p := range plans {
			planTrees[i] = p.tree
		}
		attachTreeMasks(b, planTrees)
	case prefills == 0:
		b.Mode = forward.Decode
	case decodes == 0:
		b.Mode = forward.Extend
	default:
		b.Mode = forward.Mixed
	}
	verifyTokens := 0
	for _, p := range plans {
		if p.tree != nil {
			verifyTokens += p.n
		}
	}
	e.stats.prompt.Add(int64(len(b.InputIDs) - decodes - verifyTokens))
	var logits tensor.T
	err := e.forward(func() (err error) {
		logits, err = e.runForward(b)
		return err
	})
	if err != nil {
		for _, r := range running {
			e.finish(r, FinishAbort, fmt.Errorf("forward: %w", err))
		}
		return nil
	}
	// Logits on the device: draw what can be drawn there, copy the rest.
	uses := make([]logitUse, len(plans))
	for i, p := range plans {
		uses[i] = logitUse{r: p.r, sampleRow: p.logitRow, scoreRow: p.firstRow}
		if p.r.wantsPromptLogprobs() || p.tree != nil {
			uses[i].scoreN = p.n // the host walks a tree over all its rows
		}
	}
	sl, err := e.placeLogits(logits, uses)
	if err != nil {
		for _, r := range running {
			e.finish(r, FinishAbort, fmt.Errorf("sampling: %w", err))
		}
		return nil
	}
	// Every request's next token is drawn before any is accepted, the
	// requests split over the workers (each sampler is its request's own):
	// reading a batch-32 step's logits (32 rows of 32,000) on one core was
	// about 2% of the step. A request that finishes below without its
	// token (max_tokens 0) draws one unused.
	draws := make([]drawn, len(plans))
	e.workers.For(len(plans), 4, func(lo, hi int) {
		for i, p := range plans[lo:hi] {
			if p.logitRow >= 0 {
				draws[lo+i] = sl.next(p.r, p.logitRow)
			}
		}
	})
	var still []*request
	for i, p := range plans {
		r := p.r
		r.inBatch = true
		firstCompletion := !r.promptDone
		if p.tree != nil {
			if !e.spec.acceptTree(e, r, p.tree, sl, p.firstRow) {
				still = append(still, r)
			}
			continue
		}
		if r.wantsPromptLogprobs() {
			r.scorePrompt(sl.host, sl.hostIndex(p.firstRow), p.n)
		}
		r.computed += p.n
		if p.logitRow < 0 {
			still = append(still, r) // mid-prompt chunk
			continue
		}
		if firstCompletion {
			r.promptDone = true
			e.cacheOnPrefillDone(r) // share the prompt with requests that follow
			if r.Sampling.MaxNewTokens == 0 {
				e.finish(r, FinishLength, nil)
				continue
			}
		}
		if !e.accept(r, draws[i]) {
			still = append(still, r)
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

// growDecoders gives every decoding request a slot for its next token.
// When pages run out it evicts cached prefixes, then retracts the newest
// running request (its computed tokens go to the prefix cache) and
// re-queues it at the front; no request is dropped.
func (e *Engine) growDecoders(running []*request, waiting *[]*request) []*request {
	for i := 0; i < len(running); i++ {
		r := running[i]
		if r.prefilling() {
			continue
		}
		for {
			ok, err := e.reserve(r.seq, r.computed+1)
			if err != nil { // the context limit, which accept checks first
				e.finish(r, FinishLength, nil)
				running = slices.Delete(running, i, i+1)
				i--
				break
			}
			if ok && e.prepareWindow(r, r.computed+1) {
				break
			}
			victim := running[len(running)-1]
			e.releaseSeq(victim)
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
	return running
}

// admit takes waiting requests in policy order while table rows, the
// running limit and pages for their whole prefill allow. A request that
// cannot fit even into an empty cache fails; otherwise it waits.
func (e *Engine) admit(waiting *[]*request, numRunning int) []*request {
	if len(*waiting) == 0 {
		return nil
	}
	if e.cfg.SchedulePolicy == "lpm" && e.radix != nil {
		// Longest prefix match first: requests that reuse the most cached
		// tokens go first, while their prefix is still cached.
		slices.SortStableFunc(*waiting, func(a, b *request) int {
			return cmp.Compare(e.cachedPrefixLen(b), e.cachedPrefixLen(a))
		})
	}
	var admitted []*request
	budget := e.cfg.MaxPrefillTokens
	for len(*waiting) > 0 && numRunning+len(admitted) < e.cfg.MaxRunningRequests {
		r := (*waiting)[0]
		tokens := r.cacheKeys()
		if len(admitted) > 0 && len(tokens) > budget {
			break // this step's prefill budget is spent
		}
		seq, ok := e.kv.NewSeq()
		if !ok {
			break
		}
		r.seq = seq
		e.matchPrefix(r, tokens)
		ok, err := e.reserve(seq, len(tokens))
		if err != nil || !ok {
			e.releaseSeq(r)
			if err == nil && numRunning+len(admitted) > 0 {
				break // wait for running requests to free pages
			}
			if err == nil {
				err = badRequest(fmt.Errorf("the request needs %d tokens of KV cache, more than the %d the cache holds; raise --kv-cache-tokens", len(tokens), e.cfg.KVCacheTokens))
			}
			*waiting = (*waiting)[1:]
			e.finish(r, FinishAbort, err)
			continue
		}
		if !r.promptDone {
			r.cachedTokens = r.computed
			e.stats.cached.Add(int64(r.computed))
		}
		budget -= len(tokens) - r.computed
		admitted = append(admitted, r)
		*waiting = (*waiting)[1:]
	}
	return admitted
}

func (e *Engine) cachedPrefixLen(r *request) int {
	tokens := r.cacheKeys()
	pages, _ := e.radix.Match(tokens[:len(tokens)-1])
	return len(pages)
}

// scorePrompt records log p(prompt[i+1] | prompt[:i+1]) from the logits of
// this chunk's rows (rows first.. cover tokens r.computed..).
func (r *request) scorePrompt(logits tensor.T, first, n int) {
	if r.promptLogprobs == nil {
		r.promptLogprobs = make([]*float32, len(r.promptIDs))
	}
	lp := make([]float32, logits.Cols())
	for k := range n {
		i := r.computed + k // the token whose logits row this is
		if i+1 >= len(r.promptIDs) {
			break
		}
		sample.LogSoftmax(logits.Row(first+k), lp)
		v := lp[r.promptIDs[i+1]]
		r.promptLogprobs[i+1] = &v
	}
}
