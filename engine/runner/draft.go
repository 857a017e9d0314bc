package runner

import (
	"fmt"
	"log/slog"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/tensor"
	"github.com/gosling-ai/gosling/vision"
)

// Draft is the runner of a model that drafts for the target (a
// STANDALONE draft model, an EAGLE head): its device (the target's), its
// own attention backend and KV cache, and its CUDA graphs. It has the
// target runner's forward seam without the scheduler's: the drafter
// builds its batches (forward.DraftExtend, or Decode for a chain), and
// Forward runs them and brings back what the drafter reads, before the
// next forward recycles that memory.
//
// Draft steps replay CUDA graphs under the target's padding rules, each
// kind (DraftStep) under keys of its own (DraftGraphKey): a Decode batch
// (a draft model's chain level) is padded to the next captured batch
// size as the target's decode steps are; a DraftExtend whose requests
// all extend by the same n tokens, with a logits row at each (a tree
// level: n is the top-k width) or at each request's last (a catch-up on
// n accepted tokens: at batch 1 always, in a batch when every request
// accepted as many), is padded as a verify step is. Other batches
// (catch-ups of different lengths, or of more tokens than a verify step
// accepts: a new prompt's) run eagerly.
type Draft struct {
	rt     device.Runtime
	attn   attention.Backend
	kv     *kvcache.Cache
	graphs *Graphs // nil: eager
	// maxCatchUp is the most tokens per request of a catch-up that
	// replays a graph.
	maxCatchUp int
	counts     pathCounter
	log        *slog.Logger
}

// NewDraft is the runner of a drafter on rt with its attention backend
// and KV cache.
func NewDraft(rt device.Runtime, attn attention.Backend, kv *kvcache.Cache, log *slog.Logger) *Draft {
	if log == nil {
		log = slog.Default()
	}
	return &Draft{rt: rt, attn: attn, kv: kv, log: log}
}

// KV is the drafter's KV cache.
func (d *Draft) KV() *kvcache.Cache { return d.kv }

// Attention is the drafter's attention backend.
func (d *Draft) Attention() attention.Backend { return d.attn }

// SetGraphs turns draft-step graphs on with g, or off with nil, for
// catch-ups of up to maxCatchUp tokens per request (what one verify step
// can accept: --speculative-num-steps + 1); set before the first step.
func (d *Draft) SetGraphs(g *Graphs, maxCatchUp int) { d.graphs, d.maxCatchUp = g, maxCatchUp }

// Graphs is the drafter's graph state, nil when its steps run eagerly.
func (d *Draft) Graphs() *Graphs { return d.graphs }

// DraftOut is what a drafter's model returns for a batch: logits [rows ×
// vocab] and, for an EAGLE head, the output states [rows × hidden]
// (zero: none).
type DraftOut struct{ Logits, Hidden tensor.T }

// DraftStep is a kind of drafter batch that a graph holds.
type DraftStep int

const (
	DraftChain   DraftStep = iota // Decode: one token per request
	DraftLevel                    // DraftExtend with a logits row per token: a tree level
	DraftCatchUp                  // DraftExtend with a logits row per request, at its last token
)

// DraftGraphKey is the key a draft step's graph is kept under: above
// every key of the target's (GraphKey), by kind, padded batch size and
// tokens per request.
func DraftGraphKey(step DraftStep, size, n int) int {
	return 1<<40 | int(step)<<32 | n<<20 | size
}

// Forward runs b on the drafter's device: pads it for a graph when one
// fits, plans attention, runs model (the drafter's model over b, which
// it reads after the padding, with d's attention) through a CUDA graph or
// eagerly, then brings back b's logits rows (the argmax of each on the
// device when topK is 1 and the device samples: DraftLogits) and its
// output states, on the host. Rows past b's own (padding) never come
// back.
func (d *Draft) Forward(b *forward.Batch, topK int, model func(attention.Backend) (DraftOut, error)) (logits DraftLogits, hidden tensor.Host, err error) {
	rows := len(b.LogitRows)
	err = d.rt.Run(func() error {
		out, err := d.run(b, model)
		if err != nil {
			return err
		}
		if len(out.Hidden.Shape) > 0 {
			if hidden, err = ToHost(d.rt, out.Hidden); err != nil {
				return err
			}
		}
		logits, err = DraftLogitsOf(d.rt, out.Logits, topK, rows)
		return err
	})
	return logits, hidden, err
}

// run pads b for a graph where one fits, plans it and runs model (on the
// device's thread).
func (d *Draft) run(b *forward.Batch, model func(attention.Backend) (DraftOut, error)) (DraftOut, error) {
	size, n, step, graph := d.graphSize(b)
	if graph && step == DraftChain {
		padDecode(b, size, d.kv.Table.PadRow())
	} else if graph {
		padExtend(b, size, n, d.kv.Table.PadRow(), step == DraftLevel)
	}
	if err := b.Finalize(); err != nil {
		return DraftOut{}, err
	}
	if err := d.attn.Plan(b); err != nil {
		return DraftOut{}, err
	}
	var out DraftOut
	forward := func() (err error) {
		out, err = model(d.attn)
		return err
	}
	if p, ok := d.rt.(device.Profiler); !graph || (ok && p.Profiling()) {
		return out, forward()
	}
	res, err := d.graphs.run.RunGraph(DraftGraphKey(step, size, n), forward)
	if giveUpGraphs(&d.counts, &d.graphs.eagerStreak, d.log, res, "CUDA graphs off for draft steps: they cannot be captured",
		"draft step", "kind", step, "batch_size", size, "tokens_per_request", n) {
		d.graphs = nil
	}
	return out, err
}

// graphSize is the captured size a draft batch is padded to, its tokens
// per request and its kind, or false when it runs eagerly.
func (d *Draft) graphSize(b *forward.Batch) (size, n int, step DraftStep, ok bool) {
	if d.graphs == nil {
		return 0, 0, 0, false
	}
	switch {
	case b.Mode == forward.Decode:
		n, step = 1, DraftChain
	case b.Mode == forward.DraftExtend && uniformExtend(b, true):
		n, step = int(b.ExtendLens[0]), DraftLevel
	case b.Mode == forward.DraftExtend && uniformExtend(b, false) && int(b.ExtendLens[0]) <= d.maxCatchUp:
		n, step = int(b.ExtendLens[0]), DraftCatchUp
	default:
		return 0, 0, 0, false
	}
	size, ok = device.PaddedBatchSize(b.NumReqs(), d.graphs.sizes)
	return size, n, step, ok
}

// DraftCounts are a drafter's steps by graph path: replayed, captured,
// or run eagerly although a graph was wanted (EagerReason: why the
// latest was). Steps that never wanted one (catch-ups of different
// lengths) are not counted.
type DraftCounts struct {
	Replays, Captures, Eager int
	EagerReason              string
}

// Counts reads the drafter's counts; safe from any goroutine.
func (d *Draft) Counts() DraftCounts {
	var c DraftCounts
	c.Replays, c.Captures, c.Eager, c.EagerReason = d.counts.load()
	return c
}

// DraftLogitsOf brings the first rows rows of logits l where
// DraftTree.Expand reads them (on the device's thread): greedy ids from
// the device sampler (the lowest id on ties, as on the host) when l is on
// a device and topK is 1, else the rows on the host.
func DraftLogitsOf(rt device.Runtime, l tensor.T, topK, rows int) (DraftLogits, error) {
	s, ok := rt.(device.Sampler)
	if _, err := l.Device(); !ok || err != nil || topK != 1 {
		h, err := ToHost(rt, l)
		return DraftLogits{Host: h}, err
	}
	draws := make([]device.SampleRow, rows) // temperature 0: argmax
	for i := range draws {
		draws[i].Row = i
	}
	got, err := s.Sample(l, draws)
	if err != nil {
		return DraftLogits{}, err
	}
	ids := make([]int, len(got))
	for i, id := range got {
		ids[i] = int(id)
	}
	return DraftLogits{IDs: ids}, nil
}

// ToHost is x on the host, in memory of its own (the next forward
// recycles x's): a host tensor copied, a device one through rt's
// device.Sampler.
func ToHost(rt device.Runtime, x tensor.T) (tensor.Host, error) {
	if h, err := x.Host(); err == nil {
		return tensor.Host{Shape: h.Shape, Data: append([]float32(nil), h.Data...)}, nil
	}
	s, ok := rt.(device.Sampler)
	if !ok {
		return tensor.Host{}, fmt.Errorf("the drafter's forward left its output on the device, but the %s runtime cannot copy it back", rt.Name())
	}
	return s.ToHost(x).Host()
}

// EncodeImage runs the model's vision tower over one preprocessed image
// (an Encode forward: bidirectional, no KV cache) on the runner's device
// with its attention backend, and returns the embeddings on the host,
// [model.VisionRunnable.ImageTokens(px) × hidden].
func (rn *Runner[R]) EncodeImage(px *vision.Pixels) ([]float32, error) {
	vm, ok := rn.model.(model.VisionRunnable)
	if !ok {
		return nil, fmt.Errorf("model %s has no vision tower", rn.model.Config().Architecture)
	}
	var out []float32
	err := rn.rt.Run(func() error {
		enc, err := vm.EncodeImage(px, rn.attn)
		if err != nil {
			return err
		}
		h, err := enc.Host()
		out = h.Data
		return err
	})
	return out, err
}
