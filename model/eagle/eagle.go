// Package eagle implements EAGLE draft heads in the Hugging Face layout
// SGLang loads: a small Llama decoder fed the target model's hidden states
// beside the token embeddings, which drafts the target's next tokens.
//
//	EAGLE (LlamaForCausalLMEagle): x = fc([embed(t), f]) with f the
//	target's final-norm hidden state; Llama decoder layers, the first
//	without its input norm; no final norm; logits = target lm_head(x).
//	Names: fc.weight, fc.bias, layers.N.*.
//
//	EAGLE-3 (LlamaForCausalLMEagle3): f is three target layers' residual
//	streams side by side (low, middle, high), h = fc(f); one layer whose
//	attention reads [input_layernorm(embed(t)), hidden_norm(h)] (2·hidden
//	wide) with h as its residual; logits = lm_head(norm(h')) over a draft
//	vocabulary of draft_vocab_size tokens, draft id d being target id
//	d + d2t[d]. Names: fc.weight, midlayer.*, norm.weight, lm_head.weight,
//	d2t, t2d.
//
// Either takes the target's embedding. A later draft step feeds back the
// head's own output state (x, or h' before the norm) in place of f, so an
// EAGLE-3 step with a hidden-wide input skips fc, as SGLang does.
package eagle

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/model/blocks"
	"github.com/gosling-ai/gosling/model/random"
	"github.com/gosling-ai/gosling/tensor"
)

// Architecture names in config.json.
const (
	ArchEagle  = "LlamaForCausalLMEagle"
	ArchEagle3 = "LlamaForCausalLMEagle3"
)

// Target is what a head needs of the model it drafts for.
type Target interface {
	Config() *model.Config
	model.HiddenCapture
}

type layer struct {
	attnNorm       device.Vector // nil: EAGLE's first layer reads x as is
	mlpNorm        device.Vector
	q, k, v, o     device.Matrix
	gate, up, down device.Matrix
	attn           attention.Layer
}

// Head is a loaded EAGLE or EAGLE-3 head bound to its target.
type Head struct {
	Eagle3 bool
	cfg    model.Config
	ops    device.Ops
	embed  device.Matrix // the target's
	lmHead device.Matrix
	fc     device.Matrix
	layers []layer
	// EAGLE-3
	inputNorm, hiddenNorm, norm device.Vector
	d2t                         []int32 // draft id → target id; nil: the same ids
	rope                        *device.Rope
	points                      []int // the target's capture points (model.HiddenCapture)
	featWidth                   int   // the target's features per token
}

// extra is what config.json says beyond a Llama config.
type extra struct {
	DraftVocabSize   *int  `json:"draft_vocab_size"`
	TargetHiddenSize *int  `json:"target_hidden_size"`
	Bias             *bool `json:"bias"`
	AuxLayerIDs      []int `json:"eagle_aux_hidden_state_layer_ids"`
	EagleConfig      struct {
		AuxLayerIDs []int `json:"eagle_aux_hidden_state_layer_ids"`
	} `json:"eagle_config"`
}

// Load binds the head in ck to target on the device of ops. Every
// disagreement between the head and the target is an error naming the
// config.json field or tensor.
func Load(ck *model.Checkpoint, ops device.Ops, target Target) (*Head, error) {
	cfg := ck.Config
	tc := target.Config()
	h := &Head{cfg: cfg, ops: ops, embed: target.TokenEmbedding()}
	where := ck.Path
	switch cfg.Architecture {
	case ArchEagle:
	case ArchEagle3:
		h.Eagle3 = true
	default:
		return nil, fmt.Errorf("%s: config.json architectures is %q; an EAGLE head is %s or %s", where, cfg.Architecture, ArchEagle, ArchEagle3)
	}
	var ex extra
	if data, err := os.ReadFile(filepath.Join(ck.Path, "config.json")); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	} else if err := json.Unmarshal(data, &ex); err != nil {
		return nil, fmt.Errorf("%s: config.json: %w", where, err)
	}
	if cfg.VocabSize != tc.VocabSize {
		return nil, fmt.Errorf("%s: config.json vocab_size is %d, the target's vocabulary %d: the head was trained for another model", where, cfg.VocabSize, tc.VocabSize)
	}
	targetHidden := cfg.HiddenSize
	if ex.TargetHiddenSize != nil {
		targetHidden = *ex.TargetHiddenSize
	}
	if targetHidden != tc.HiddenSize {
		field := "hidden_size"
		if ex.TargetHiddenSize != nil {
			field = "target_hidden_size"
		}
		return nil, fmt.Errorf("%s: config.json %s is %d, the target's hidden_size %d: the head was trained for another model", where, field, targetHidden, tc.HiddenSize)
	}
	if cfg.HiddenSize != tc.HiddenSize {
		// The target's embedding feeds the head.
		return nil, fmt.Errorf("%s: config.json hidden_size is %d, the target's %d: gosling feeds the head the target's embedding, which needs the same width", where, cfg.HiddenSize, tc.HiddenSize)
	}
	if cfg.HiddenAct != "silu" {
		return nil, fmt.Errorf("%s: config.json hidden_act is %q; EAGLE heads here are SwiGLU (silu)", where, cfg.HiddenAct)
	}
	if cfg.SlidingWindow > 0 || cfg.MoE.NumRoutedExperts > 0 {
		return nil, fmt.Errorf("%s: an EAGLE head with sliding-window attention or experts is not supported", where)
	}

	ws := prefixed{ck.Weights}
	ld := &blocks.Loader{WS: ws, Ops: ops}
	hid := cfg.HiddenSize
	if h.Eagle3 {
		if cfg.NumLayers != 1 {
			return nil, fmt.Errorf("%s: config.json num_hidden_layers is %d; gosling's EAGLE-3 heads have one (midlayer)", where, cfg.NumLayers)
		}
		points, err := capturePoints(ex, tc.NumLayers, where)
		if err != nil {
			return nil, err
		}
		h.points, h.featWidth = points, 3*tc.HiddenSize
		h.fc = ld.Linear("fc", hid, 3*tc.HiddenSize, ex.Bias != nil && *ex.Bias)
		h.inputNorm = ld.Vec("midlayer.input_layernorm.weight", hid)
		h.hiddenNorm = ld.Vec("midlayer.hidden_norm.weight", hid)
		h.norm = ld.Vec("norm.weight", hid)
		h.layers = []layer{h.loadLayer(ld, "midlayer.", 0, 2*hid, false)}
		draftVocab := cfg.VocabSize
		if ex.DraftVocabSize != nil {
			draftVocab = *ex.DraftVocabSize
		}
		switch {
		case cfg.TieWordEmbeddings:
			h.lmHead = h.embed
		case ex.DraftVocabSize == nil:
			h.lmHead = target.OutputHead() // SGLang's load_lm_head_from_target
		default:
			h.lmHead = ld.Weight("lm_head.weight", draftVocab, hid)
		}
		if draftVocab != cfg.VocabSize || ws.Has("d2t") {
			if h.d2t, err = readD2T(ck.Weights, draftVocab, tc.VocabSize, where); err != nil {
				return nil, err
			}
		}
	} else {
		h.points, h.featWidth = []int{model.CaptureFinalNorm}, tc.HiddenSize
		h.fc = ld.Linear("fc", hid, 2*hid, true)
		for i := range cfg.NumLayers {
			h.layers = append(h.layers, h.loadLayer(ld, fmt.Sprintf("layers.%d.", i), i, hid, i > 0))
		}
		h.lmHead = target.OutputHead()
	}
	if ld.Err != nil {
		return nil, fmt.Errorf("%s: %w", where, ld.Err)
	}
	h.rope = &device.Rope{HeadDim: cfg.HeadDim, InvFreq: cfg.RopeInvFreq(cfg.HeadDim), Interleaved: cfg.RopeInterleaved}
	return h, nil
}

// loadLayer loads one decoder layer under prefix p whose attention reads
// in values per token.
func (h *Head) loadLayer(ld *blocks.Loader, p string, index, in int, inputNorm bool) layer {
	cfg := &h.cfg
	hd, hid := cfg.HeadDim, cfg.HiddenSize
	qDim, kvDim := cfg.NumHeads*hd, cfg.NumKVHeads*hd
	scale := cfg.RopeAttentionFactor() * cfg.RopeAttentionFactor() / math.Sqrt(float64(hd))
	l := layer{
		mlpNorm: ld.Vec(p+"post_attention_layernorm.weight", hid),
		q:       ld.Linear(p+"self_attn.q_proj", qDim, in, cfg.AttentionBias),
		k:       ld.Linear(p+"self_attn.k_proj", kvDim, in, cfg.AttentionBias),
		v:       ld.Linear(p+"self_attn.v_proj", kvDim, in, cfg.AttentionBias),
		o:       ld.Linear(p+"self_attn.o_proj", hid, qDim, false),
		attn: attention.Layer{Index: index, NumHeads: cfg.NumHeads, NumKVHeads: cfg.NumKVHeads,
			HeadDim: hd, HeadDimV: hd, Scale: float32(scale)},
	}
	if inputNorm {
		l.attnNorm = ld.Vec(p+"input_layernorm.weight", hid)
	}
	mlp := ld.MLP(p+"mlp.", blocks.ProjNames, hid, cfg.IntermediateSize)
	l.gate, l.up, l.down = mlp.Gate, mlp.Up, mlp.Down
	return l
}

// capturePoints are the target's capture points for EAGLE-3: the layer
// ids of config.json (SGLang's eagle_config.eagle_aux_hidden_state_layer_ids,
// or the same key at the top level), each the output of that layer, else
// SGLang's default, the outputs of layers 1, N/2−1 and N−4 (the stream
// entering layers 2, N/2 and N−3). A point below 0 is the embeddings.
func capturePoints(ex extra, numLayers int, where string) ([]int, error) {
	ids, field := ex.EagleConfig.AuxLayerIDs, "eagle_config.eagle_aux_hidden_state_layer_ids"
	if ids == nil {
		ids, field = ex.AuxLayerIDs, "eagle_aux_hidden_state_layer_ids"
	}
	var points []int
	if ids == nil {
		points = []int{2, numLayers / 2, numLayers - 3}
		field = fmt.Sprintf("the default layers for a target of %d layers", numLayers)
	} else {
		for _, id := range ids {
			points = append(points, id+1)
		}
	}
	slices.Sort(points)
	if len(slices.Compact(slices.Clone(points))) != 3 || len(points) != 3 || points[0] < 0 || points[2] > numLayers {
		return nil, fmt.Errorf("%s: config.json %s: EAGLE-3 reads three distinct layers of the target's %d, got outputs of layers %v",
			where, field, numLayers, func() []int {
				out := make([]int, len(points))
				for i, p := range points {
					out[i] = p - 1
				}
				return out
			}())
	}
	return points, nil
}

// readD2T reads the draft→target map: d2t[d] is the offset from draft id
// d to its target id.
func readD2T(ws model.WeightSource, draftVocab, targetVocab int, where string) ([]int32, error) {
	if !ws.Has("d2t") {
		return nil, fmt.Errorf("%s: the head's lm_head has %d rows (draft_vocab_size) but the checkpoint has no d2t tensor mapping them to the target's %d tokens", where, draftVocab, targetVocab)
	}
	r, err := model.RawTensor(ws, "d2t")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if len(r.Shape) != 1 || r.Shape[0] != draftVocab || (r.DType != "I64" && r.DType != "I32") {
		return nil, fmt.Errorf("%s: d2t is %s %v; want I64 [%d] (config.json draft_vocab_size)", where, r.DType, r.Shape, draftVocab)
	}
	out := make([]int32, draftVocab)
	seen := make(map[int64]int, draftVocab)
	for d := range out {
		var off int64
		if r.DType == "I64" {
			off = int64(binary.LittleEndian.Uint64(r.Data[8*d:]))
		} else {
			off = int64(int32(binary.LittleEndian.Uint32(r.Data[4*d:])))
		}
		t := int64(d) + off
		if t < 0 || t >= int64(targetVocab) {
			return nil, fmt.Errorf("%s: d2t maps draft token %d to target token %d, outside the target's vocabulary of %d", where, d, t, targetVocab)
		}
		if prev, dup := seen[t]; dup {
			return nil, fmt.Errorf("%s: d2t maps draft tokens %d and %d both to target token %d", where, prev, d, t)
		}
		seen[t] = d
		out[d] = int32(t)
	}
	return out, nil
}

// prefixed finds each weight under its own name or under "model.".
type prefixed struct{ model.WeightSource }

func (p prefixed) name(n string) string {
	if !p.WeightSource.Has(n) && p.WeightSource.Has("model."+n) {
		return "model." + n
	}
	return n
}

func (p prefixed) Tensor(n string) (tensor.Weight, error) { return p.WeightSource.Tensor(p.name(n)) }
func (p prefixed) Has(n string) bool                      { return p.WeightSource.Has(p.name(n)) }

// Config is the head's own config.
func (h *Head) Config() *model.Config { return &h.cfg }

// CapturePoints are the target's hidden states the head reads
// (model.HiddenCapture.SetCapture), FeatureWidth their width per token.
func (h *Head) CapturePoints() []int { return h.points }
func (h *Head) FeatureWidth() int    { return h.featWidth }

// DraftVocab is the number of logits per row Forward returns.
func (h *Head) DraftVocab() int { return h.lmHead.Out() }

// TargetToken is the target's id of draft token d.
func (h *Head) TargetToken(d int) int {
	if h.d2t == nil {
		return d
	}
	return int(h.d2t[d])
}

// KVSpec is the head's own K/V per token: one layer per decoder layer.
func (h *Head) KVSpec() kvcache.Spec {
	return kvcache.Spec{NumLayers: len(h.layers), NumKVHeads: h.cfg.NumKVHeads, HeadDim: h.cfg.HeadDim, HeadDimV: h.cfg.HeadDim}
}

// AttentionLayers describes the head's attention layers.
func (h *Head) AttentionLayers() []attention.Layer {
	out := make([]attention.Layer, len(h.layers))
	for i, l := range h.layers {
		out[i] = l.attn
	}
	return out
}

// Forward runs b with feats [NumTokens, w] beside the tokens: the
// target's features (w = FeatureWidth) or the head's own output states
// (w = hidden), on the host or the ops' device (host features are
// uploaded into the forward's memory). It returns, for b.LogitRows, the draft-vocabulary logits
// and the output states a next step feeds back, both on the ops' device
// until the next Forward. The caller finalizes and plans b.
func (h *Head) Forward(b *forward.Batch, attn attention.Backend, feats tensor.T) (logits, hidden tensor.T, err error) {
	if err := model.CheckInputIDs(b.InputIDs, h.cfg.VocabSize); err != nil {
		return tensor.T{}, tensor.T{}, err
	}
	hid := h.cfg.HiddenSize
	if feats.Rows() != b.NumTokens() || (feats.Cols() != hid && feats.Cols() != h.featWidth) {
		return tensor.T{}, tensor.T{}, fmt.Errorf("eagle head: features %v for %d tokens of width %d or %d", feats.Shape, b.NumTokens(), h.featWidth, hid)
	}
	ops, eps := h.ops, h.cfg.RMSNormEps
	ops.BeginForward()
	defer ops.EndForward()
	if up, ok := ops.(uploader); ok && !feats.OnDevice() {
		feats = up.Upload(feats)
	}
	e := ops.Embed(h.embed, b.InputIDs) // [T, hidden]
	var x tensor.T                      // the residual stream [T, hidden]
	switch {
	case !h.Eagle3:
		x = ops.Linear(ops.ConcatHeads(e, feats, 1), h.fc)
	case feats.Cols() != hid:
		x = ops.Linear(feats, h.fc)
	default:
		x = ops.GatherRows(feats, model.AllRows(b.NumTokens())) // a copy: x changes in place
	}
	for i := range h.layers {
		l := &h.layers[i]
		var qkv []tensor.T
		switch {
		case h.Eagle3:
			in := ops.ConcatHeads(ops.RMSNorm(e, h.inputNorm, eps), ops.RMSNorm(x, h.hiddenNorm, eps), 1)
			qkv = ops.LinearGroup(in, l.q, l.k, l.v)
		case l.attnNorm == nil:
			qkv = ops.LinearGroup(x, l.q, l.k, l.v)
		default:
			qkv = ops.NormLinearGroup(x, l.attnNorm, eps, l.q, l.k, l.v)
		}
		q, k, v := qkv[0], qkv[1], qkv[2]
		ops.RopeQK(q, k, b.Positions, h.rope)
		a, err := attention.Run(attn, q, k, v, &l.attn, b)
		if err != nil {
			return tensor.T{}, tensor.T{}, err
		}
		ops.Adopt(a)
		ops.LinearAdd(x, a, l.o)
		ops.GatedMLPAdd(x, l.mlpNorm, eps, l.gate, l.up, l.down)
	}
	hidden = ops.GatherRows(x, b.LogitRows)
	if h.Eagle3 {
		return ops.Linear(ops.RMSNorm(hidden, h.norm, eps), h.lmHead), hidden, nil
	}
	return ops.Linear(hidden, h.lmHead), hidden, nil
}

// uploader is ops that take host activations into a forward's memory
// (device.VisionOps has it; on the CPU it is the tensor itself).
type uploader interface{ Upload(x tensor.T) tensor.T }

// WriteRandom writes a random-weight head of o's kind for a target of
// config target (random.WriteEagle at the target's shapes): a test and
// benchmark fixture, whose drafts are near-random.
func WriteRandom(dir string, target *model.Config, o random.EagleOptions) error {
	return random.WriteEagle(dir, random.EagleTarget{Hidden: target.HiddenSize, Intermediate: target.IntermediateSize,
		Heads: target.NumHeads, KVHeads: target.NumKVHeads, HeadDim: target.HeadDim, Vocab: target.VocabSize,
		MaxPositions: target.MaxPositions, RMSNormEps: target.RMSNormEps, RopeTheta: target.RopeTheta}, o)
}
