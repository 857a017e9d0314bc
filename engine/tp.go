package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/engine/runner"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/model"
	modelregistry "github.com/gosling-ai/gosling/model/registry"
	"github.com/gosling-ai/gosling/parallel"
	"github.com/gosling-ai/gosling/tensor"
)

// Tensor parallelism in one process (Config.TPSize > 1).
//
// Rank r is a goroutine with a device of its own (GPU r on CUDA, the host
// on the CPU), a model built from its shard of the weights (parallel.Plan
// through parallel.Source) over device ops that insert the collectives
// (parallel.NewOps: NCCL on CUDA, the in-process communicator on the
// CPU), a KV pool of its own KV heads, its own attention backend and its
// own CUDA graphs. Rank 0 is the engine itself: the scheduler, the radix
// cache and the request table run once, on rank 0, and every peer's cache
// mirrors rank 0's pages (kvcache.Cache.Peer), so a batch's slots mean
// the same on every rank. Each step rank 0 hands every peer a copy of the
// batch, all ranks run the forward, meeting in its collectives, and rank
// 0 samples from the logits (every rank ends with the whole vocabulary's
// logits, gathered by the ops).
//
// One scheduler broadcasting batches, rather than a deterministic
// scheduler on every rank, because the scheduler's inputs (arrival
// times, cancellations, sampled tokens) exist on rank 0 alone; in one
// process handing over a batch is a pointer.
//
// A rank that fails (an error, a panic) aborts every communicator, so
// the others' collectives fail instead of waiting for it; the step then
// fails, and the engine stops (Done, Err): the communicators are gone.

// tpGroup is this process's view of the ranks: on node 0 rank 0's, the
// one that runs the scheduler.
type tpGroup struct {
	log   *slog.Logger
	plan  *parallel.Plan
	first int                     // the rank the engine's own runner is
	comms []parallel.Communicator // this process's ranks, in order; nil until joined
	peers []*peer                 // this process's other ranks
	links []*parallel.Link        // node 0: the other nodes (tpnodes.go)
	up    *parallel.Link          // other nodes: node 0
	abort sync.Once
	err   error // set when a step failed: the group can run no more
	// fp8 is this process's first rank's --quantization fp8 quantiser
	// (rankWeights), nil without.
	fp8 *model.FP8Quantizer
	// ballot is where this process's ranks agree on each decode step's
	// graph path; nil without graphs.
	ballot *ballot
}

// peer is rank r >= 1: its device, model, attention and cache, its
// runner and the goroutine that runs it.
type peer struct {
	rt    device.Runtime
	model model.Runnable
	attn  attention.Backend
	kv    *kvcache.Cache
	log   *slog.Logger
	rn    *runner.Runner[*request]
	rank  int
	work  chan *forward.Batch
	done  chan error
}

// customAllReduceDefault: whether ranks all in this process on CUDA run
// the custom all-reduce (cuda.P2PRank) when neither
// --enable-custom-all-reduce nor --disable-custom-all-reduce is given.
// Off: replayed from CUDA graphs on two NVLinked H100s, NCCL's all-reduce
// of 4-256 KiB took 6.4-8.8 us and the one-shot kernel 8.1-9.4 us, and
// TP=2 decode ran no faster with it (README, 2026-11-27).
const customAllReduceDefault = false

// customAllReduce reports whether this process's ranks (rts, all of the
// group) wrap their communicators with the device's custom all-reduce.
func (e *Engine) customAllReduce(rts []device.Runtime) bool {
	switch {
	case e.cfg.EnableCustomAllReduce:
		return true
	case e.cfg.DisableCustomAllReduce || !customAllReduceDefault:
		return false
	}
	return rts[0].Name() == "cuda"
}

// buildModel builds the model on the opened device: whole, or as this
// process's ranks of Config.TPSize (all of them, or one node's share of
// Config.NNodes), opening the other ranks' devices and joining them.
func (e *Engine) buildModel() (model.Runnable, error) {
	n := e.cfg.TPSize
	if n <= 1 {
		return modelregistry.Build(e.checkpoint, e.rt.Ops())
	}
	plan, err := parallel.NewPlan(&e.checkpoint.Config, n)
	if err != nil {
		return nil, fmt.Errorf("--tp-size %d: %w", n, err)
	}
	arch, err := modelregistry.Lookup(e.checkpoint.Config.Architecture)
	if err != nil {
		return nil, err
	}
	per := n / max(e.cfg.NNodes, 1)
	first := e.cfg.NodeRank * per
	e.tp = &tpGroup{log: e.log, plan: plan, first: first}
	rts := []device.Runtime{e.rt}
	for i := 1; i < per; i++ {
		rt, err := e.openRank(i)
		if err != nil {
			return nil, fmt.Errorf("--tp-size %d: rank %d: %w", n, first+i, err)
		}
		p := &peer{rank: first + i, work: make(chan *forward.Batch), done: make(chan error)}
		p.rt, p.log = rt, e.log.With("tp_rank", first+i)
		e.tp.peers = append(e.tp.peers, p)
		rts = append(rts, rt)
	}
	if e.cfg.NNodes > 1 {
		e.tp.comms, err = e.joinNodes(rts)
	} else if e.tp.comms, err = parallel.Join(rts); err == nil && e.customAllReduce(rts) {
		joined := e.tp.comms
		if custom, cerr := parallel.CustomAllReduce(rts, joined); cerr == nil {
			e.tp.comms = custom
			e.log.Info("custom all-reduce", "plan", fmt.Sprint(custom[0]))
		} else if e.cfg.EnableCustomAllReduce {
			parallel.CloseAll(joined)
			err = fmt.Errorf("--enable-custom-all-reduce: %w", cerr)
		} else {
			e.log.Warn("custom all-reduce unavailable: every all-reduce through NCCL", "err", cerr)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("--tp-size %d: %w", n, err)
	}
	rc := plan.RankConfig()
	var m0 model.Runnable
	for i, rt := range rts {
		ops, err := parallel.NewOps(rt.Ops(), plan, e.tp.comms[i])
		if err != nil {
			return nil, err
		}
		ws, err := e.rankWeights(plan, first+i)
		if err != nil {
			return nil, err
		}
		m, err := arch.New(&rc, ws, ops)
		if err != nil {
			return nil, fmt.Errorf("%s: rank %d of %d: %w", e.checkpoint.Path, first+i, n, err)
		}
		if i == 0 {
			m0 = m
		} else {
			e.tp.peers[i-1].model = m
		}
	}
	e.log.Info("tensor parallelism", "ranks", n, "nodes", max(e.cfg.NNodes, 1), "this_node_ranks", fmt.Sprintf("%d-%d", first, first+per-1),
		"device", e.rt.Name(), "heads_per_rank", rc.NumHeads, "kv_heads_per_rank", rc.NumKVHeads)
	return m0, nil
}

// openRank opens the device of this process's i-th rank: the host
// again, or this host's GPU i.
func (e *Engine) openRank(i int) (device.Runtime, error) {
	if e.rt.Name() == "cpu" {
		return e.cpuRuntime(), nil
	}
	return device.Open(e.rt.Name(), device.OpenOptions{WeightDType: e.gpuWeightDType(), Ordinal: i, Workers: e.workers, Log: e.log})
}

// rankWeights is what rank r loads: its shard of every tensor, converted
// after the cut (so a quantised block never straddles two ranks). Under
// --quantization fp8 the rank quantises its own slice (one scale per row
// of the slice), and rank 0's quantiser is the one checkFP8 asks.
func (e *Engine) rankWeights(plan *parallel.Plan, r int) (model.WeightSource, error) {
	ws := e.checkpoint.Weights
	conv, _ := ws.(*convertedWeights)
	if conv == nil {
		return &parallel.Source{WS: ws, Plan: plan, Rank: r}, nil
	}
	c := *conv
	if conv.fp8 == nil {
		c.WeightSource = &parallel.Source{WS: conv.WeightSource, Plan: plan, Rank: r}
		return &c, nil
	}
	q, err := model.QuantizeFP8(&parallel.Source{WS: conv.fp8.WeightSource, Plan: plan, Rank: r})
	if err != nil {
		return nil, err
	}
	c.fp8, c.WeightSource = q, q
	if r == e.tp.first {
		e.tp.fp8 = q
	}
	return &c, nil
}

// kvBytes is the KV cache budget on a device with memory of its own: what
// --mem-fraction-static leaves on rank 0's GPU, or on the fullest GPU when
// there are several (every rank keeps the same slots).
//
// Every rank runs the same shapes, so rank 0's activations' reserve is
// every rank's. A node other than 0 sends its budget before it knows
// node 0's settings (reserve 0), so node 0 takes the reserve's shortfall
// on its own card from it: nodes' cards are alike.
func (e *Engine) kvBytes(mi device.MemoryInfo, reserve int64) (int64, error) {
	budget, shortfall, err := e.deviceKVBytes(mi, reserve)
	if err != nil || e.tp == nil {
		return budget, err
	}
	for _, p := range e.tp.peers {
		pmi, ok := p.rt.(device.MemoryInfo)
		if !ok {
			continue
		}
		b, _, err := e.deviceKVBytes(pmi, reserve)
		if err != nil {
			return 0, fmt.Errorf("rank %d: %w", p.rank, err)
		}
		budget = min(budget, b)
	}
	for _, l := range e.tp.links {
		b, err := recvBudget(l)
		if err != nil {
			return 0, err
		}
		if b > 0 {
			if b -= shortfall; b <= 0 {
				return 0, fmt.Errorf("node %d: no GPU memory is left for the KV cache beside a forward's activations; raise --mem-fraction-static", l.Node)
			}
			budget = min(budget, b)
		}
	}
	return budget, nil
}

// initPeers gives every peer its KV pool (rank 0's slots, its own heads),
// attention backend and graphs, and starts it.
func (e *Engine) initPeers(plan *attention.Resolution) error {
	if e.tp == nil {
		return nil
	}
	spec, slots := e.kv.Pool.Spec, e.kv.Pool.NumSlots
	for _, p := range e.tp.peers {
		var pool *kvcache.Pool
		var err error
		if mem := p.rt.KVMemory(); mem != nil {
			pool, err = kvcache.NewDevicePool(spec, slots, e.cfg.PageSize, mem)
		} else {
			pool, err = kvcache.NewPool(spec, slots, e.cfg.PageSize)
		}
		if err != nil {
			return fmt.Errorf("rank %d: %w", p.rank, err)
		}
		if p.kv, err = e.kv.Peer(pool); err != nil {
			pool.Free()
			return err
		}
		copy(pool.KScale, e.kv.Pool.KScale)
		copy(pool.VScale, e.kv.Pool.VScale)
		opts := attention.Options{Device: e.cfg.Device, KV: p.kv, Layers: p.model.AttentionLayers(), Runtime: p.rt}
		if a, ok := p.rt.Ops().(device.Activations); ok {
			opts.Output = a.NewActivation
		}
		if p.attn, err = plan.Build(opts); err != nil {
			return fmt.Errorf("rank %d: %w", p.rank, err)
		}
		p.rn = runner.New[*request](runner.Config{Runtime: p.rt, Model: p.model, Attention: p.attn, KV: p.kv, Workers: e.workers, Log: p.log})
		if g := e.rn.Graphs(); g != nil {
			pg, err := g.ForRank(p.rt)
			if err != nil {
				return fmt.Errorf("rank %d: %w", p.rank, err)
			}
			p.rn.SetGraphs(pg)
		}
	}
	for _, p := range e.tp.peers {
		go p.loop(e.tp)
	}
	return e.setupNodes(plan)
}

// loop runs the batches rank 0 hands over until the group closes.
func (p *peer) loop(t *tpGroup) {
	// One OS thread per rank: ranks meet in every collective, so none
	// waits for the Go scheduler to find a thread for another.
	runtime.LockOSThread()
	for b := range p.work {
		_, err := t.forward(p.log, p.rank, p.rn.Forward, b)
		p.done <- err
	}
}

// Run is a forward over every rank (runner.Group): b goes to each peer (a
// copy over its own cache) and to every other node, this process's first
// rank runs it here with local, and its logits come back. An error from
// any rank fails the group for good.
func (t *tpGroup) Run(b *forward.Batch, local func(*forward.Batch) (tensor.T, error)) (tensor.T, error) {
	if t.err != nil {
		return tensor.T{}, t.err
	}
	for _, p := range t.peers {
		p.work <- peerBatch(b, p.kv) // before this rank pads or finalizes b
	}
	nodes := t.sendStep(b)
	logits, err := t.forward(t.log, t.first, local, b)
	var errs []error
	if err != nil {
		errs = append(errs, fmt.Errorf("rank %d: %w", t.first, err))
	}
	for _, p := range t.peers {
		if err := <-p.done; err != nil {
			errs = append(errs, fmt.Errorf("rank %d: %w", p.rank, err))
		}
	}
	for range t.links {
		if err := <-nodes; err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		t.err = &RankError{Err: errors.Join(errs...)}
		return tensor.T{}, t.err
	}
	return logits, nil
}

// forward runs one rank's share of a forward with its runner's Forward.
// A failure (an error, a collective that failed, a panic) aborts the
// communicators so that no other rank waits for this one.
func (t *tpGroup) forward(log *slog.Logger, rank int, run func(*forward.Batch) (tensor.T, error), b *forward.Batch) (logits tensor.T, err error) {
	defer func() {
		if p := recover(); p != nil {
			if ce, ok := p.(*parallel.CollectiveError); ok {
				err = ce
			} else {
				log.Error("tensor-parallel rank panicked", "rank", rank, "panic", p, "stack", string(debug.Stack()))
				err = fmt.Errorf("panic: %v", p)
			}
		}
		if err != nil {
			t.abortAll(log)
		}
	}()
	return run(b)
}

// abortAll makes every collective in flight or to come fail, here and on
// the other nodes (whose links close).
func (t *tpGroup) abortAll(log *slog.Logger) {
	t.abort.Do(func() {
		if t.ballot != nil {
			t.ballot.abort()
		}
		if err := parallel.Abort(t.comms); err != nil {
			log.Warn("aborting the communicators", "err", err)
		}
		for _, l := range t.links {
			l.Close()
		}
	})
}

// peerBatch is b over kv, with its own copies of the slices a rank's
// runner extends or rewrites (graph padding, Finalize).
func peerBatch(b *forward.Batch, kv *kvcache.Cache) *forward.Batch {
	c := *b
	c.KV = kv
	c.ReqRows, c.PrefixLens, c.ExtendLens = slices.Clone(b.ReqRows), slices.Clone(b.PrefixLens), slices.Clone(b.ExtendLens)
	c.ExtendStarts, c.LogitRows = slices.Clone(b.ExtendStarts), slices.Clone(b.LogitRows)
	c.InputIDs, c.Positions, c.OutSlots = slices.Clone(b.InputIDs), slices.Clone(b.Positions), slices.Clone(b.OutSlots)
	return &c
}

// RankError is a tensor-parallel forward that failed on one or more
// ranks: the communicators were aborted and the engine stops.
type RankError struct{ Err error }

func (e *RankError) Error() string {
	return "tensor parallelism: " + e.Err.Error() + " (the ranks' communicators were aborted; the engine stopped)"
}
func (e *RankError) Unwrap() error { return e.Err }

// failed reports why the engine must stop: a tensor-parallel group that
// can run no more.
func (e *Engine) failed() error {
	if e.tp == nil {
		return nil
	}
	return e.tp.err
}

// MoveSlots applies moves, in order, to every peer's pool (runner.Group;
// the runner moves its own rank's). Across nodes speculative decoding is
// refused (checkNodes), so only this process's ranks move.
func (t *tpGroup) MoveSlots(moves []kvcache.SlotMove) error {
	var err error
	for _, p := range t.peers {
		dev, _ := p.rt.(kvcache.DeviceCopier)
		err = errors.Join(err, p.kv.Pool.MoveSlots(moves, dev))
	}
	return err
}

// releaseGraphs destroys the CUDA graphs of every rank in this process
// (first is rank first's runtime, the engine's own). It runs after the
// scheduler stopped, before close.
func (t *tpGroup) releaseGraphs(first device.Runtime) error {
	rts := []device.Runtime{first}
	for _, p := range t.peers {
		rts = append(rts, p.rt)
	}
	var errs []error
	for _, rt := range rts {
		if g, ok := rt.(device.GroupGraphs); ok {
			errs = append(errs, g.ReleaseGraphs())
		}
	}
	return errors.Join(errs...)
}

// close stops the peers and releases their devices, then the
// communicators. It runs after the scheduler stopped.
func (t *tpGroup) close() error {
	var errs []error
	for _, p := range t.peers {
		close(p.work)
	}
	for _, l := range t.links {
		l.Send(parallel.MsgBye, nil) // the node's loop ends without an error
		l.Close()
	}
	errs = append(errs, parallel.CloseAll(t.comms))
	for _, p := range t.peers {
		if p.kv != nil {
			errs = append(errs, p.kv.Pool.Free())
		}
		if p.rt != nil {
			errs = append(errs, p.rt.Close())
		}
	}
	return errors.Join(errs...)
}

// rankWeightBytes is what rank 0 holds of a matrix of bytes under
// tensor parallelism (all of it without).
func (e *Engine) rankWeightBytes(name string, shape []int, bytes int64) int64 {
	if e.tp == nil {
		return bytes
	}
	spec, err := e.tp.plan.Spec(name, shape, 0)
	if err != nil {
		return bytes
	}
	switch spec.Kind {
	case parallel.Split:
		held := 0
		for _, s := range spec.Segments {
			held += s.Len
		}
		return bytes * int64(held) / int64(shape[spec.Dim])
	case parallel.Vocab:
		_, rows := e.tp.plan.VocabShard(0)
		return bytes * int64(min(rows, shape[0])) / int64(shape[0])
	}
	return bytes
}

// ballot gathers one vote from each of n ranks for every graph decision
// and hands each the combination (device.CombineVotes): the ranks' graph
// paths stay in lock-step. Rounds follow one another; a rank cannot vote
// in round k+1 before every rank has the answer of round k, since round
// k+1 needs its vote too.
type ballot struct {
	mu      sync.Mutex
	cond    sync.Cond
	n, got  int
	round   uint64
	acc     device.GraphVote // the votes of this round so far
	result  device.GraphVote // the last round's answer
	aborted bool
}

func newBallot(n int) *ballot {
	b := &ballot{n: n}
	b.cond.L = &b.mu
	return b
}

// errBallotAborted is the vote of a group that failed: the rank that
// failed reports why.
var errBallotAborted = errors.New("tensor parallelism: the group was aborted while its ranks agreed on a CUDA graph")

// agree is device.GraphAgree over this process's ranks.
func (b *ballot) agree(v device.GraphVote) (device.GraphVote, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.aborted {
		return device.GraphVote{}, errBallotAborted
	}
	if b.got == 0 {
		b.acc = v
	} else {
		b.acc = device.CombineVotes(b.acc, v)
	}
	if b.got++; b.got == b.n {
		b.result, b.got = b.acc, 0
		b.round++
		b.cond.Broadcast()
		return b.result, nil
	}
	round := b.round
	for round == b.round && !b.aborted {
		b.cond.Wait()
	}
	if round == b.round {
		return device.GraphVote{}, errBallotAborted
	}
	return b.result, nil
}

// abort fails the votes waiting and every later one.
func (b *ballot) abort() {
	b.mu.Lock()
	b.aborted = true
	b.mu.Unlock()
	b.cond.Broadcast()
}
