package parallel

import (
	"fmt"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/attention/native"
	"github.com/gosling-ai/gosling/device/cpu"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/model/registry"
	"github.com/gosling-ai/gosling/tensor"
)

// Group is a model split over Size in-process CPU ranks, one goroutine
// each, joined by the in-process communicator: a forward driver of its
// own over one sequence, so tensor parallelism's numerics are testable
// without the engine or a GPU. Each rank holds its own model (its shard
// of the weights) and its own KV cache of its KV heads; every rank runs
// the same batch, and all of them end with the whole vocabulary's logits.
type Group struct {
	Plan  *Plan
	ranks []*rankState
}

type rankState struct {
	comm  Communicator
	ops   *cpu.Ops
	model model.Runnable
	kv    *kvcache.Cache
	attn  attention.Backend
	seq   *kvcache.Seq
}

// NewCPUGroup builds ck's model over size ranks on the CPU, each with a
// KV cache of maxTokens tokens (page size 1) and the native attention
// backend; w is shared by the ranks (a second caller of a busy pool runs
// serially).
func NewCPUGroup(ck *model.Checkpoint, size, maxTokens int, w *cpu.Workers) (*Group, error) {
	plan, err := NewPlan(&ck.Config, size)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ck.Path, err)
	}
	arch, err := registry.Lookup(ck.Config.Architecture)
	if err != nil {
		return nil, err
	}
	comms, err := NewLocal(size)
	if err != nil {
		return nil, err
	}
	g := &Group{Plan: plan}
	cfg := plan.RankConfig()
	for r := range size {
		host := cpu.NewOps(w)
		ops, err := NewOps(host, plan, comms[r])
		if err != nil {
			return nil, err
		}
		m, err := arch.New(&cfg, &Source{WS: ck.Weights, Plan: plan, Rank: r}, ops)
		if err != nil {
			return nil, fmt.Errorf("%s: rank %d: %w", ck.Path, r, err)
		}
		kv, err := kvcache.NewCache(m.KVSpec(), 1, maxTokens, 1, maxTokens)
		if err != nil {
			return nil, err
		}
		attn, err := native.Entry.New(attention.Options{Device: "cpu", KV: kv, Runtime: cpu.NewRuntime(w), Layers: m.AttentionLayers()})
		if err != nil {
			return nil, err
		}
		seq, _ := kv.NewSeq()
		g.ranks = append(g.ranks, &rankState{comm: comms[r], ops: host, model: m, kv: kv, attn: attn, seq: seq})
	}
	return g, nil
}

// Len is the tokens of the sequence so far.
func (g *Group) Len() int { return g.ranks[0].seq.Len }

// Reset empties the sequence.
func (g *Group) Reset() {
	for _, r := range g.ranks {
		r.kv.Release(r.seq)
		r.seq, _ = r.kv.NewSeq()
	}
}

// Close leaves the group on every rank and frees the ranks' packed
// weights.
func (g *Group) Close() {
	for _, r := range g.ranks {
		r.comm.Close()
		_ = r.ops.Close()
	}
}

// Extend appends ids to the sequence and returns the logits [len(ids),
// vocab] of every new token when all is set, else of the last one.
func (g *Group) Extend(ids []int32, all bool) (tensor.T, error) {
	outs := make([]tensor.T, len(g.ranks))
	err := Each(len(g.ranks), func(i int) error {
		r := g.ranks[i]
		var err error
		if outs[i], err = r.extend(ids, all); err != nil {
			r.comm.Close() // the others' collectives fail instead of waiting
		}
		return err
	})
	if err != nil {
		return tensor.T{}, err
	}
	return outs[0], nil
}

func (r *rankState) extend(ids []int32, all bool) (logits tensor.T, err error) {
	defer func() {
		if p := recover(); p != nil {
			ce, ok := p.(*CollectiveError)
			if !ok {
				panic(p)
			}
			err = fmt.Errorf("rank %d: %w", r.comm.Rank(), ce)
		}
	}()
	start := r.seq.Len
	if ok, err := r.kv.Grow(r.seq, start+len(ids)); !ok || err != nil {
		return tensor.T{}, fmt.Errorf("KV cache full at %d tokens: %v", start+len(ids), err)
	}
	if !r.kv.PrepareSWA(r.seq, start+len(ids)) {
		return tensor.T{}, fmt.Errorf("sliding-window KV region full at %d tokens", start+len(ids))
	}
	mode := forward.Extend
	if start > 0 && len(ids) == 1 {
		mode = forward.Decode
	}
	b := &forward.Batch{Mode: mode, KV: r.kv, ReqRows: []int32{int32(r.seq.Row)},
		PrefixLens: []int32{int32(start)}, ExtendLens: []int32{int32(len(ids))}}
	slots := r.kv.Table.Row(r.seq.Row)
	for i, id := range ids {
		b.InputIDs = append(b.InputIDs, id)
		b.Positions = append(b.Positions, int32(start+i))
		b.OutSlots = append(b.OutSlots, slots[start+i])
		if all || i == len(ids)-1 {
			b.LogitRows = append(b.LogitRows, int32(i))
		}
	}
	if err := b.Finalize(); err != nil {
		return tensor.T{}, err
	}
	if err := r.attn.Plan(b); err != nil {
		return tensor.T{}, err
	}
	out, err := r.model.Forward(b, r.attn)
	if err != nil {
		return tensor.T{}, fmt.Errorf("rank %d: %w", r.comm.Rank(), err)
	}
	// The ops recycle their tensors at the next forward: keep a copy.
	return tensor.From(append([]float32(nil), out.HostData()...), out.Shape...), nil
}
