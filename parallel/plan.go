package parallel

import (
	"fmt"
	"strings"

	"github.com/gosling-ai/gosling/model"
)

// Plan is Megatron-style tensor parallelism for one model over Size ranks:
//
//   - column-parallel (q, k, v, gate, up; MLA's q_b and kv_b; experts'
//     gate and up): each rank holds a contiguous share of the output rows,
//     whole heads for attention, so attention runs on each rank's heads
//     with no communication;
//   - row-parallel (o, down; experts' down): each rank holds the matching
//     share of the input columns, and the ranks' outputs are partial sums
//     that one all-reduce completes (a row-parallel bias is held by rank 0
//     only, so it is added once);
//   - KV heads split like q heads, or, with fewer KV heads than ranks,
//     each rank holds the one KV head its q heads read (replicated over
//     Size/KV ranks);
//   - the vocabulary (embedding and LM head) split by rows into Size equal
//     shares, the last padded with zero rows: the embedding is an
//     all-reduce of each rank's rows (zero for ids it does not hold), the
//     logits an all-gather;
//   - routers, norms and MLA's shared latent projections replicated; MoE
//     experts sharded like dense MLPs (every rank holds a slice of every
//     expert, so routing needs no all-to-all).
type Plan struct {
	Config model.Config // the whole model's
	Size   int

	qUnit  int // rows per q head in q_proj / q_b_proj
	kvUnit int // rows per head in kv_b_proj (MLA)
	oUnit  int // o_proj input columns per head
}

// NewPlan checks that cfg splits over size ranks and returns the plan, or
// an error saying which count does not divide.
func NewPlan(cfg *model.Config, size int) (*Plan, error) {
	if size < 1 {
		return nil, fmt.Errorf("tensor parallelism needs at least 1 rank, not %d", size)
	}
	if cfg.Vision != nil {
		return nil, fmt.Errorf("%s: tensor parallelism of vision towers is not planned yet; serve the model with one rank", cfg.Architecture)
	}
	p := &Plan{Config: *cfg, Size: size, qUnit: cfg.HeadDim, kvUnit: cfg.HeadDim, oUnit: cfg.HeadDim}
	mla := cfg.MLA.KVLoraRank > 0
	if mla {
		a := cfg.MLA
		p.qUnit, p.kvUnit, p.oUnit = a.QKNopeHeadDim+a.QKRopeHeadDim, a.QKNopeHeadDim+a.VHeadDim, a.VHeadDim
	}
	if cfg.NumHeads%size != 0 {
		return nil, fmt.Errorf("the model's %d attention heads do not divide evenly among %d ranks (tensor parallelism splits whole heads)", cfg.NumHeads, size)
	}
	if !mla && cfg.NumKVHeads%size != 0 && size%cfg.NumKVHeads != 0 {
		return nil, fmt.Errorf("the model's %d KV heads neither divide evenly among %d ranks nor evenly replicate over them (%d ranks must be a multiple or a divisor of %d)", cfg.NumKVHeads, size, size, cfg.NumKVHeads)
	}
	for _, c := range []struct {
		name string
		n    int
	}{
		{"intermediate_size", cfg.IntermediateSize},
		{"the experts' intermediate size", cfg.MoE.IntermediateSize},
		{"the shared expert's intermediate size", cfg.MoE.SharedIntermediateSize},
	} {
		if c.n%size != 0 {
			return nil, fmt.Errorf("the model's %s %d does not divide evenly among %d ranks", c.name, c.n, size)
		}
	}
	return p, nil
}

// RankConfig is the config one rank's model is built with: its share of
// the heads and of every intermediate size. The vocabulary stays whole:
// the embedding and LM head are split by the device ops (see Ops), so
// token ids and logits keep their global meaning.
func (p *Plan) RankConfig() model.Config {
	c := p.Config
	c.NumHeads /= p.Size
	c.NumKVHeads = p.kvHeadsPerRank()
	c.IntermediateSize /= p.Size
	c.MoE.IntermediateSize /= p.Size
	c.MoE.SharedIntermediateSize /= p.Size
	return c
}

func (p *Plan) kvHeadsPerRank() int {
	kv := p.Config.NumKVHeads
	if kv%p.Size == 0 {
		return kv / p.Size
	}
	return 1
}

// kvHead is the first KV head rank holds: with fewer KV heads than ranks,
// the one its q heads read.
func (p *Plan) kvHead(rank int) int { return rank * p.Config.NumKVHeads / p.Size }

// VocabShard is the rows [Start, Start+Rows) of the vocabulary rank holds,
// Rows the same on every rank; rows past Vocab are zero padding.
func (p *Plan) VocabShard(rank int) (start, rows int) {
	rows = (p.Config.VocabSize + p.Size - 1) / p.Size
	return rank * rows, rows
}

// Kind is how a tensor is distributed.
type Kind uint8

const (
	// Replicated: every rank holds the whole tensor.
	Replicated Kind = iota
	// Split: each rank holds its Segments along Dim, concatenated.
	Split
	// AddOnce: rank 0 holds the tensor, the others zeros of its shape (the
	// bias of a row-parallel linear, whose outputs are summed).
	AddOnce
	// Vocab: rows VocabShard(rank) of dim 0, zero rows past the vocabulary.
	Vocab
)

func (k Kind) String() string {
	return [...]string{"replicated", "split", "add-once", "vocab"}[k]
}

// Segment is the range [Start, Start+Len) of one dimension.
type Segment struct{ Start, Len int }

// Spec is one tensor's distribution on one rank.
type Spec struct {
	Kind     Kind
	Dim      int       // Split: the dimension cut
	Segments []Segment // Split: this rank's ranges of Dim, in order
	// RowParallel: the tensor is the weight of a linear whose outputs are
	// partial sums over the ranks (Dim is its input dimension).
	RowParallel bool
}

// Spec says how the tensor name of shape is distributed and what rank
// holds of it. A name no rule covers is an error rather than a guess, so
// an architecture added later cannot be silently replicated or mis-cut.
func (p *Plan) Spec(name string, shape []int, rank int) (Spec, error) {
	if rank < 0 || rank >= p.Size {
		return Spec{}, fmt.Errorf("rank %d outside the %d ranks", rank, p.Size)
	}
	leaf, param := splitName(name)
	rows := func() int { return shape[0] }
	cols := func() int { return shape[len(shape)-1] }
	even := func(dim, n int, row bool) (Spec, error) {
		if n%p.Size != 0 {
			return Spec{}, fmt.Errorf("tensor %s: dimension %d (%d) does not divide evenly among %d ranks", name, dim, n, p.Size)
		}
		per := n / p.Size
		return Spec{Kind: Split, Dim: dim, Segments: []Segment{{rank * per, per}}, RowParallel: row}, nil
	}
	heads := func(unit int) Spec {
		per := p.Config.NumHeads / p.Size * unit
		return Spec{Kind: Split, Dim: 0, Segments: []Segment{{rank * per, per}}}
	}
	kvHeads := func() Spec {
		per := p.kvHeadsPerRank() * p.Config.HeadDim
		return Spec{Kind: Split, Dim: 0, Segments: []Segment{{p.kvHead(rank) * p.Config.HeadDim, per}}}
	}
	if len(shape) == 0 {
		return Spec{}, fmt.Errorf("tensor %s has no dimensions", name)
	}
	switch {
	case leaf == "embed_tokens" || leaf == "lm_head":
		return Spec{Kind: Vocab}, nil
	case strings.HasSuffix(leaf, "norm") || param == "e_score_correction_bias":
		return Spec{Kind: Replicated}, nil
	case leaf == "q_proj" || leaf == "q_b_proj":
		return heads(p.qUnit), nil
	case leaf == "kv_b_proj":
		return heads(p.kvUnit), nil
	case leaf == "k_proj" || leaf == "v_proj":
		return kvHeads(), nil
	case leaf == "sinks":
		return heads(1), nil
	case leaf == "q_a_proj" || leaf == "kv_a_proj_with_mqa":
		return Spec{Kind: Replicated}, nil // MLA's latent: one per token, shared by all heads
	case leaf == "qkv_proj":
		q, k := heads(p.qUnit), kvHeads()
		qDim, kvDim := p.Config.NumHeads*p.Config.HeadDim, p.Config.NumKVHeads*p.Config.HeadDim
		ks := k.Segments[0]
		return Spec{Kind: Split, Dim: 0, Segments: []Segment{q.Segments[0],
			{qDim + ks.Start, ks.Len}, {qDim + kvDim + ks.Start, ks.Len}}}, nil
	case leaf == "o_proj":
		if param == "bias" {
			return Spec{Kind: AddOnce}, nil
		}
		per := p.Config.NumHeads / p.Size * p.oUnit
		return Spec{Kind: Split, Dim: len(shape) - 1, Segments: []Segment{{rank * per, per}}, RowParallel: true}, nil
	case leaf == "gate" || leaf == "router" || leaf == "shared_expert_gate":
		return Spec{Kind: Replicated}, nil // routing must agree on every rank
	case leaf == "gate_up_proj" && len(shape) == 3: // GPT-OSS [experts, hidden, 2·inter], gate and up interleaved
		return even(2, cols(), false)
	case leaf == "gate_up_proj_bias":
		return even(len(shape)-1, cols(), false)
	case leaf == "gate_up_proj": // Phi-3 [2·inter, hidden]: gate rows then up rows
		if rows()%(2*p.Size) != 0 {
			return Spec{}, fmt.Errorf("tensor %s: %d gate and up rows do not divide evenly among %d ranks", name, rows(), p.Size)
		}
		inter := rows() / 2
		per := inter / p.Size
		return Spec{Kind: Split, Dim: 0, Segments: []Segment{{rank * per, per}, {inter + rank*per, per}}}, nil
	case leaf == "gate_proj" || leaf == "up_proj" || leaf == "w1" || leaf == "w3":
		return even(0, rows(), false)
	case leaf == "down_proj" && len(shape) == 3: // GPT-OSS [experts, inter, hidden]
		return even(1, shape[1], true)
	case leaf == "down_proj_bias":
		return Spec{Kind: AddOnce}, nil
	case leaf == "down_proj" || leaf == "w2":
		if param == "bias" {
			return Spec{Kind: AddOnce}, nil
		}
		return even(len(shape)-1, cols(), true)
	}
	return Spec{}, fmt.Errorf("tensor %s: no tensor-parallel rule covers it (%s)", name, p.Config.Architecture)
}

// splitName returns the module a tensor belongs to and its parameter:
// "model.layers.0.mlp.down_proj.weight" → ("down_proj", "weight");
// GPT-OSS's "model.layers.0.mlp.experts.down_proj" → ("down_proj", "").
func splitName(name string) (leaf, param string) {
	if i := strings.IndexAny(name, "[ "); i >= 0 {
		name = name[:i] // a view made at load: "…qkv_proj.weight[rows 0:64 of each 128]"
	}
	parts := strings.Split(name, ".")
	n := len(parts)
	switch last := parts[n-1]; {
	case n >= 2 && (last == "weight" || last == "bias" || last == "e_score_correction_bias"):
		return parts[n-2], last
	default:
		return last, ""
	}
}
