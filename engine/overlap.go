package engine

import (
	"fmt"
	"slices"

	"github.com/gosling-ai/gosling/engine/runner"
	"github.com/gosling-ai/gosling/engine/sched"
	"github.com/gosling-ai/gosling/forward"
)

// The overlap schedule (SGLang's): while the device runs step N, the
// scheduler goroutine schedules and builds step N+1 and then takes step
// N-1's tokens (streaming, stop checks, releases), so that no host work
// sits between two forwards.
//
// Step N+1 is built before step N's tokens are known. A request whose
// newest token step N is drawing carries it as an in-flight entry (-1) at
// the end of its tokens (sched.Req.InFlight); its decode input in step
// N+1 is filled in by the goroutine that runs N+1, from N's draws, just
// before the forward. Both schedules launch a step the same way
// (Engine.launched: a request is counted as computed through a step when
// that step is launched, not when it lands) and land it through the same
// Engine.landChunk; this one lands a step later.
//
// What the forward in flight reads must not change under it: the batch
// carries a copy of each request's KV slots (forward.Batch.Slots), since
// a finished request's table row may be handed to a new request, and a
// completed prompt's pages swapped for the prefix cache's, while it runs.
// Pages freed meanwhile are written only by later steps, which run after
// it. Sampling reads only what Build recorded in runner.Rows.
//
// A request whose in-flight token is its last by length (max_new_tokens
// or the context) sits out the next step; one that stops on EOS or a stop
// string is found a step late, and that step's token for it is dropped.
//
// Steps fall back to the synchronous path (Engine.step), the previous one
// landed first, whenever a request needs host state carried from one
// token to the next (grammar masks, penalties, logprobs, prompt
// scoring), and for speculative decoding, images, window regions and
// tensor parallelism.

// flight is one launched step.
type flight struct {
	prev   *flight // the step launched before it, nil: none in flight
	b      *forward.Batch
	chunks []sched.Chunk[*request]
	rows   []runner.Rows
	fills  []inputFill
	done   chan struct{} // closed when sl and draws (or err) are set
	sl     *runner.StepLogits
	draws  []runner.Draw
	err    error
}

// inputFill is a decode input drawn by the previous step:
// b.InputIDs[at] = previous flight's draws[chunk].id.
type inputFill struct{ at, chunk int }

// overlapState is the scheduler goroutine's part of the overlap schedule.
type overlapState struct {
	on   bool       // the engine may overlap (settings and model allow it)
	fl   *flight    // the step in flight, not landed yet; nil: none
	held []*request // sitting out: their in-flight token is their last
	// queue feeds the one goroutine that runs the steps in launch order
	// (flyLoop): the next step is waiting in it when the previous one
	// ends, so the device starts it with no goroutine hand-off.
	queue chan *flight
}

// setupOverlap decides once whether steps may overlap, logging why not.
func (e *Engine) setupOverlap() {
	why := ""
	switch {
	case e.cfg.DisableOverlapSchedule:
		why = "--disable-overlap-schedule"
	case e.spec != nil:
		why = "speculative decoding"
	case e.vision != nil:
		why = "vision model"
	case e.kv.SWA != nil:
		why = "sliding-window KV region"
	case e.tp != nil:
		// The ranks' forwards and the group's error are the scheduler
		// goroutine's in tp.go and tpnodes.go.
		why = "tensor parallelism"
	case e.rt.KVMemory() != nil:
		// A device with memory of its own (CUDA): the overlapped path
		// passes the GPU tests, and takes the host gap between decode
		// steps to ~3 µs, but measured slower prefill and TTFT on an
		// H100 (scripts/gpu-e2e.sh overlap; figures in the commit that
		// wrote this), so GPUs keep the synchronous path until that is
		// understood.
		why = "slower prefill on the GPU (measured)"
	}
	if why != "" {
		e.cfg.DisableOverlapSchedule = true
		e.log.Info("overlap schedule off", "reason", why)
		return
	}
	e.ov.on = true
	e.ov.queue = make(chan *flight, 2)
	go e.flyLoop()
}

// flyLoop runs the launched steps one after the other until the queue is
// closed (the scheduler loop ends).
func (e *Engine) flyLoop() {
	for fl := range e.ov.queue {
		e.fly(fl)
	}
}

// overlapSafe reports whether r's next draw needs nothing carried from
// its previous token on the host: no grammar mask, no penalty counts, no
// logprobs of the logits, no prompt rows.
func overlapSafe(r *request) bool {
	return r.constraint == nil && !r.Logprobs && r.TopLogprobs == 0 && !r.ScorePrompt &&
		!r.sampler.Settings().Penalties
}

// canOverlap reports whether the next step may be launched before the
// one in flight lands.
func (e *Engine) canOverlap(running, waiting []*request) bool {
	unsafe := func(r *request) bool { return !overlapSafe(r) }
	return e.ov.on && !slices.ContainsFunc(running, unsafe) && !slices.ContainsFunc(waiting, unsafe) &&
		!slices.ContainsFunc(e.ov.held, unsafe)
}

// stepOverlap schedules and launches the next step behind the one in
// flight, then lands that one while the new one runs. It returns the
// requests still running.
func (e *Engine) stepOverlap(running []*request, waiting *[]*request) []*request {
	running = slices.DeleteFunc(running, func(r *request) bool {
		n := len(r.Tokens) // in-flight tokens included
		last := r.InFlight > 0 && (n-r.NumPrompt >= r.Sampling.MaxNewTokens || n >= e.cfg.ContextLength)
		if last {
			e.ov.held = append(e.ov.held, r)
		}
		return last
	})
	var next *flight
	if len(running) == 0 && len(e.ov.held) > 0 {
		// Only requests about to end run: their pages come back when the
		// step lands, and admission must not judge the cache without them
		// (it would call a request that fits too large).
		return e.landFlight(running, waiting)
	}
	running = e.applyPlan(e.sched.Schedule(*waiting, running), waiting)
	if len(running) > 0 {
		if chunks := e.sched.Fill(running, nil); len(chunks) > 0 {
			next = e.launch(chunks, e.ov.fl)
		}
	}
	running = e.landFlight(running, waiting)
	e.ov.fl = next
	return running
}

// landFlight lands the step in flight, if any, and returns running
// without the requests that ended; waiting loses them too, and the
// requests that sat out rejoin running.
func (e *Engine) landFlight(running []*request, waiting *[]*request) []*request {
	if e.ov.fl == nil {
		return running
	}
	e.land(e.ov.fl)
	e.ov.fl = nil
	ended := func(r *request) bool { return r.ended }
	running = append(slices.DeleteFunc(running, ended), slices.DeleteFunc(e.ov.held, ended)...)
	e.ov.held = nil
	*waiting = slices.DeleteFunc(*waiting, ended)
	return running
}

// launch builds the step of chunks and queues it behind prev (nil: none
// in flight), with a copy of each request's slots and the decode inputs
// prev draws, then launches it (Engine.launched).
func (e *Engine) launch(chunks []sched.Chunk[*request], prev *flight) *flight {
	b, rows := e.rn.Build(chunks, nil, false)
	fl := &flight{prev: prev, b: b, chunks: chunks, rows: rows, done: make(chan struct{})}
	b.Slots = make([][]int32, len(chunks))
	at := 0
	for i, c := range chunks {
		r := c.Req
		b.Slots[i] = slices.Clone(e.kv.Table.Row(r.Seq.Row)[:r.Computed+c.N])
		if r.Computed >= len(r.Tokens)-r.InFlight { // its input is being drawn
			fl.fills = append(fl.fills, inputFill{at: at, chunk: r.drawChunk})
		}
		at += c.N
	}
	e.launched(chunks, rows)
	if prev != nil {
		e.stats.overlapSteps.Add(1)
	}
	e.ov.queue <- fl
	return fl
}

// fly runs fl once the step before it has drawn its tokens (it has: the
// steps run in order on flyLoop): the decode inputs from its draws, the
// forward, the draws. It touches no request state the scheduler
// goroutine writes.
func (e *Engine) fly(fl *flight) {
	defer close(fl.done)
	if prev := fl.prev; prev != nil {
		<-prev.done
		if prev.err != nil {
			fl.err = prev.err
			return
		}
		for _, f := range fl.fills {
			id := prev.draws[f.chunk].ID
			if id < 0 {
				fl.err = fmt.Errorf("overlap schedule: no token drawn for a decode input")
				return
			}
			fl.b.InputIDs[f.at] = int32(id)
		}
	} else if len(fl.fills) > 0 {
		fl.err = fmt.Errorf("overlap schedule: decode inputs with no step in flight to draw them")
		return
	}
	logits, err := e.rn.Run(fl.b)
	if err != nil {
		fl.err = fmt.Errorf("forward: %w", err)
		return
	}
	fl.sl, fl.draws, err = e.rn.Tokens(logits, fl.chunks, fl.rows)
	if err != nil {
		fl.err = fmt.Errorf("sampling: %w", err)
	}
}

// land waits for fl and lands its chunks as the synchronous step does
// (Engine.landChunk, or Engine.landFailed), skipping requests that ended
// meanwhile.
func (e *Engine) land(fl *flight) {
	<-fl.done
	if fl.err != nil {
		e.landFailed(fl.chunks, fl.rows, fl.err)
		return
	}
	for i, c := range fl.chunks {
		if !c.Req.ended {
			e.landChunk(c, fl.sl, fl.rows[i], fl.draws[i])
		}
	}
}
