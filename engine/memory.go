package engine

import (
	"errors"
	"fmt"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/kvcache"
)

// Device memory: weights, the KV pool, and the activations of the forward
// in flight share one GPU. SGLang's reading of --mem-fraction-static is
// kept: the fraction holds the weights and the KV pool, and the rest of
// the card is the activations' headroom. What the headroom lacks is
// taken from the KV pool, so that no forward the scheduler can build runs
// out of memory: its size is bounded (forwardCaps, an invariant of
// sched.Fill), and the activations of a forward of that bound are
// measured before the pool is sized (measureActivations: a CUDA dry run
// allocates them for real and launches nothing, as vLLM's profile run
// measures its peak), plus what the dry run cannot see
// (decodeSplitBytes, activationMargin).

// activationMargin is kept on top of the measured peak for what no dry
// run allocates: device sampling's buffers, captured CUDA graphs, and
// the blocks of a MoE layer's experts, whose sizes (and size classes)
// depend on the routing a dry run does not know.
const activationMargin = 256 << 20

// minLogitRows is the least MaxLogitRows: a scored prompt prefills at
// least this many tokens per step however few requests run.
const minLogitRows = 256

// maxDecodeSplits is the most split-KV chunks a CUDA decode kernel cuts
// one request's keys into (attention/gpu's split policies).
const maxDecodeSplits = 64

// forwardCaps are the most tokens and logits rows of one step's forward
// (sched.Config.MaxForwardTokens and MaxLogitRows): a prefill budget's
// worth (the larger of --max-prefill-tokens and a chunk, or a whole
// context when chunking is off) and no less than every running request
// decoding or verifying a tree of treeTokens together. maxForward, when
// positive, is the user's cap instead (Config.MaxForwardTokens).
func forwardCaps(cfg *Config, treeTokens, maxForward int) (tokens, rows int, err error) {
	decodes := cfg.MaxRunningRequests * max(treeTokens, 1)
	prefill := cfg.MaxPrefillTokens
	if cfg.ChunkedPrefillSize > 0 {
		prefill = max(prefill, cfg.ChunkedPrefillSize)
	} else {
		prefill = max(prefill, cfg.ContextLength)
	}
	tokens = max(prefill, decodes)
	if maxForward > 0 {
		if maxForward <= decodes {
			return 0, 0, fmt.Errorf("MaxForwardTokens %d leaves no room for a prefill beside %d running requests' %d decode tokens; raise it or lower --max-running-requests",
				maxForward, cfg.MaxRunningRequests, decodes)
		}
		tokens = maxForward
	}
	return tokens, min(tokens, max(decodes, minLogitRows)), nil
}

// kvBudget is the KV pool's share of a device of total bytes with free
// bytes free after the weights: frac of the card less what is in use,
// less what the activations' reserve needs beyond the (1 − frac) of the
// card the fraction leaves them (shortfall).
func kvBudget(total, free int64, frac float64, reserve int64) (budget, shortfall int64) {
	headroom := total - int64(float64(total)*frac)
	shortfall = max(reserve-headroom, 0)
	return int64(float64(total)*frac) - (total - free) - shortfall, shortfall
}

// decodeSplitBytes bounds the split-KV partials a CUDA decode step of
// tokens query rows holds per layer (output and log-sum-exp per split,
// head and row): the dry run plans short contexts, which do not split.
func decodeSplitBytes(layers []attention.Layer, tokens int) int64 {
	var per int64
	for _, l := range layers {
		per = max(per, int64(l.NumHeads)*int64(l.HeadDimV+1)*4)
	}
	return maxDecodeSplits * int64(tokens) * per
}

// measureReserve is the device memory kept for one forward's
// activations on a device that can measure them (device.ForwardMemory),
// 0 on one that cannot (the host).
func (e *Engine) measureReserve(plan *attention.Resolution, spec kvcache.Spec, tokens, rows, decodeTokens int) (reserve, peak int64, err error) {
	fm, ok := e.rt.(device.ForwardMemory)
	if !ok || e.rt.KVMemory() == nil {
		return 0, 0, nil
	}
	if peak, err = e.measureActivations(fm, plan, spec, tokens, rows); err != nil {
		return 0, 0, fmt.Errorf("measuring the activations of a %d-token forward: %w", tokens, err)
	}
	return peak + decodeSplitBytes(e.model.AttentionLayers(), decodeTokens) + activationMargin, peak, nil
}

// measureActivations is the peak device memory of one forward of tokens
// prompt tokens with rows logits rows, the largest the scheduler builds:
// run as a dry run over a KV pool just large enough for it, which is
// freed after. One request's prefill of every token is the largest
// shape: a batch of several requests or of decodes has the same rows
// and smaller attention work.
func (e *Engine) measureActivations(fm device.ForwardMemory, plan *attention.Resolution, spec kvcache.Spec, tokens, rows int) (int64, error) {
	mem := e.rt.KVMemory()
	spec.SWATokens = 0
	kv, err := kvcache.NewCacheWithPool(spec, e.cfg.PageSize, tokens, 1, tokens,
		func(spec kvcache.Spec, slots, pageSize int) (*kvcache.Pool, error) {
			return kvcache.NewDevicePool(spec, slots, pageSize, mem)
		})
	if err != nil {
		return 0, err
	}
	defer kv.Pool.Free()
	attn, err := plan.Build(attention.Options{Device: e.cfg.Device, KV: kv, Layers: e.model.AttentionLayers(), Runtime: e.rt})
	if err != nil {
		return 0, err
	}
	if c, ok := attn.(interface{ Close() error }); ok {
		defer c.Close()
	}
	seq, ok := kv.NewSeq()
	if !ok {
		return 0, errors.New("no table row for the profile forward")
	}
	if ok, err := kv.Grow(seq, tokens); err != nil || !ok {
		return 0, fmt.Errorf("no KV slots for the profile forward (%v)", err)
	}
	b := profileBatch(kv, seq, tokens, rows, e.cfg.ContextLength)
	if err := b.Finalize(); err != nil {
		return 0, err
	}
	var peak int64
	err = e.rt.Run(func() error {
		if err := attn.Plan(b); err != nil {
			return err
		}
		peak, err = fm.ActivationPeak(func() error {
			_, err := e.model.Forward(b, attn)
			return err
		})
		return err
	})
	return peak, err
}

// profileBatch is one request's prefill of tokens tokens (token 0, at
// positions below context) on seq, its last rows rows with logits.
func profileBatch(kv *kvcache.Cache, seq *kvcache.Seq, tokens, rows, context int) *forward.Batch {
	b := &forward.Batch{KV: kv, Mode: forward.Extend,
		ReqRows: []int32{int32(seq.Row)}, PrefixLens: []int32{0}, ExtendLens: []int32{int32(tokens)}}
	slots := kv.Table.Row(seq.Row)
	for t := range tokens {
		b.InputIDs = append(b.InputIDs, 0)
		b.Positions = append(b.Positions, int32(t%max(context, 1)))
		b.OutSlots = append(b.OutSlots, slots[t])
	}
	for t := tokens - rows; t < tokens; t++ {
		b.LogitRows = append(b.LogitRows, int32(t))
	}
	return b
}

// ActivationReserveBytes is the device memory kept beside the KV cache
// for the activations of the largest forward (Settings().MaxForwardTokens
// tokens): measured at start-up on a GPU, 0 on the host.
func (e *Engine) ActivationReserveBytes() int64 { return e.activationReserve }
