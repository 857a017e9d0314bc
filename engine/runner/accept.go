package runner

import (
	"errors"
	"fmt"
	"slices"

	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/spec"
)

// Accepting a verified draft tree (speculative decoding).
//
// The contract, per request: before its verify step the cache holds
// Tokens[:Computed] and the newest token, the tree's root, is uncomputed;
// the step computed the K/V of every node of the tree, node n at sequence
// index Computed+n. After AcceptTree the root and the accepted drafts are
// computed at consecutive indices (the accepted nodes' K/V moved there),
// the rejected nodes' pages are given back, and the newest token, the one
// drawn from the target at the last accepted node, is uncomputed: the
// invariant of every other step.

// Verdict is what AcceptTree made of one verified tree.
type Verdict struct {
	// Accepted is how many drafted tokens were accepted (the depth of
	// the accepted path).
	Accepted int
	// Inputs are the batch rows (forward inputs) of the root and the
	// accepted nodes, root first: the rows whose hidden states an EAGLE
	// head keeps.
	Inputs []int
	// Finished reports that emit ended the request; its KV is then the
	// engine's to release, and no pages were given back here.
	Finished bool
	// DeviceNodes and HostNodes count the nodes the walk decided from
	// the device's results (an argmax, a device.SpecVerifier verdict) and
	// from host logits (sample.Sampler.Verify).
	DeviceNodes, HostNodes int
}

// AcceptTree walks request r's verified tree t from the root: at each
// node r's sampler either accepts one of the node's drafted children or
// draws the next token from what the target leaves
// (sample.Sampler.Verify); a greedy request argmaxed on the device
// (Tokens) takes the child with the device's id, and a sampled one
// verified on the device takes the node's verdict (StepLogits.
// DeviceVerdict: each node decided on its own with random numbers of its
// own, so following them draws what deciding node after node on the host
// draws). Every token, accepted
// draft or the final draw, goes to emit as a draw without speculation
// would; emit reports whether r finished (a stop, max_tokens), which ends
// the walk. r.Computed counts an accepted child from its acceptance on
// (emit may finish r mid-walk and cache its computed pages; it reads no
// KV). The accepted nodes' K/V moves after the walk, in its order, on
// every rank (MoveSlots) before anything else uses the cache. rows are
// the chunk's rows of its step. An error means the KV could not be
// moved: r's cache is then wrong, and r must end.
func (rn *Runner[R]) AcceptTree(r R, t *spec.Tree, sl *StepLogits, rows Rows, emit func(Draw) bool) (Verdict, error) {
	q := r.Sched()
	base := q.Computed // the root's sequence index
	slots := rn.kv.Table.Row(q.Seq.Row)
	q.Computed = base + 1
	v := Verdict{Inputs: []int{rows.Input}}
	node := 0
	var moves []kvcache.SlotMove
	for !v.Finished {
		children := t.Children(node)
		drafts := make([]int, len(children))
		for i, c := range children {
			drafts[i] = t.Tokens[c]
		}
		var ci, tok int
		var row []float32
		if id := sl.DeviceID(rows.First + node); id >= 0 {
			ci, tok = slices.Index(drafts, id), id
			v.DeviceNodes++
		} else if c, id, ok := sl.DeviceVerdict(rows.First + node); ok {
			if c >= len(drafts) || (c >= 0 && drafts[c] != id) {
				// The device got these drafts, in this order (appendVerifyRows).
				panic(fmt.Sprintf("runner: device verdict (%d, %d) for drafts %v", c, id, drafts))
			}
			ci, tok = c, id
			v.DeviceNodes++
		} else {
			row = sl.Host.Row(sl.HostIndex(rows.First + node))
			ci, tok = r.Sampler().Verify(row, drafts)
			v.HostNodes++
		}
		if ci >= 0 {
			node = children[ci]
			v.Accepted++
			// Node indices only grow along a path and depth <= index, so
			// the slot written here holds no node the walk still needs.
			moves = append(moves, kvcache.SlotMove{Dst: slots[base+v.Accepted], Src: slots[base+node]})
			q.Computed = base + 1 + v.Accepted
			v.Inputs = append(v.Inputs, rows.Input+node)
		}
		v.Finished = emit(Draw{ID: tok, Logits: row})
		if ci < 0 {
			break
		}
	}
	rn.counts.deviceVerified.Add(int64(v.DeviceNodes))
	rn.counts.hostVerified.Add(int64(v.HostNodes))
	if err := rn.MoveSlots(moves); err != nil {
		return v, err
	}
	if !v.Finished {
		// The rejected drafts' pages go back; the next step reserves again.
		rn.kv.Shrink(q.Seq, q.Computed)
	}
	return v, nil
}

// MoveSlots applies moves, in order, to this rank's KV pool and, through
// the group, to every other rank's; on a device the copies are queued on
// its work stream, ordered before the next forward.
func (rn *Runner[R]) MoveSlots(moves []kvcache.SlotMove) error {
	if len(moves) == 0 {
		return nil
	}
	dev, _ := rn.rt.(kvcache.DeviceCopier)
	err := rn.kv.Pool.MoveSlots(moves, dev)
	if rn.group != nil {
		err = errors.Join(err, rn.group.MoveSlots(moves))
	}
	return err
}
