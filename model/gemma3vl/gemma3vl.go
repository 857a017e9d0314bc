// Package gemma3vl implements Gemma 3's vision-language model
// (Gemma3ForConditionalGeneration): the Gemma 3 text model (model/gemma2)
// and a SigLIP vision tower whose patch features are average-pooled to
// mm_tokens_per_image soft tokens and projected to the text width:
//
//	x = patch_embed(image patches) + position_embedding      [P², hidden]
//	per layer: x += out(attn(q,k,v(ln1(x))));  x += fc2(gelu_tanh(fc1(ln2(x))))
//	x = post_layernorm(x)
//	y = rms_1+w(avgpool_k×k(x as a P×P grid)) · mm_input_projection   [tokens, text hidden]
//
// The text model sees the image tokens bidirectionally (a span per image).
package gemma3vl

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/model/blocks"
	"github.com/gosling-ai/gosling/model/gemma2"
	"github.com/gosling-ai/gosling/tensor"
	"github.com/gosling-ai/gosling/vision"
)

// Architectures are the config.json `architectures` names served here.
var Architectures = []string{"Gemma3ForConditionalGeneration"}

type layer struct {
	ln1w, ln1b, ln2w, ln2b device.Vector
	q, k, v, out           device.Matrix
	fc1, fc2               device.Matrix
	attn                   attention.Layer
}

// Model is Gemma 3 with its vision tower.
type Model struct {
	*gemma2.Model
	vc           model.VisionConfig
	ops          device.Ops
	vops         device.VisionOps
	patchEmbed   device.Matrix
	posTable     device.Matrix // position_embedding [patches, hidden], read with Embed
	layers       []layer
	postW, postB device.Vector
	softNorm     device.Vector // 1 + mm_soft_emb_norm.weight
	project      device.Matrix // mm_input_projection_weight transposed: [text hidden, vision hidden]
	grid         int           // patches per side
	pool         int           // pooling kernel (grid / tokens per side)
}

// textNames maps the text model's names to where this checkpoint keeps them.
type textNames struct{ model.WeightSource }

func (s textNames) name(n string) string {
	if strings.HasPrefix(n, "model.") || n == "lm_head.weight" {
		return "language_model." + n
	}
	return n
}
func (s textNames) Tensor(n string) (tensor.Weight, error) { return s.WeightSource.Tensor(s.name(n)) }
func (s textNames) Has(n string) bool                      { return s.WeightSource.Has(s.name(n)) }

// New binds the weights.
func New(cfg *model.Config, ws model.WeightSource, ops device.Ops) (*Model, error) {
	vc := cfg.Vision
	if vc == nil || vc.MMTokensPerImage <= 0 || vc.PatchSize <= 0 || vc.ImageSize%vc.PatchSize != 0 {
		return nil, fmt.Errorf("%s: config.json needs vision_config (image_size a multiple of patch_size) and mm_tokens_per_image", cfg.Architecture)
	}
	vops, ok := ops.(device.VisionOps)
	if !ok {
		return nil, fmt.Errorf("%s: the vision tower needs LayerNorm/GELU kernels that device %s does not have yet", cfg.Architecture, ops.Name())
	}
	grid := vc.ImageSize / vc.PatchSize
	side := int(math.Round(math.Sqrt(float64(vc.MMTokensPerImage))))
	if side*side != vc.MMTokensPerImage || grid%side != 0 || vc.NumHeads <= 0 || vc.HiddenSize%vc.NumHeads != 0 {
		return nil, fmt.Errorf("%s: mm_tokens_per_image %d must be a square whose side divides %d patches per side", cfg.Architecture, vc.MMTokensPerImage, grid)
	}
	text, err := gemma2.New(cfg, textNames{ws}, ops)
	if err != nil {
		return nil, err
	}
	m := &Model{Model: text, vc: *vc, ops: ops, vops: vops, grid: grid, pool: grid / side}
	h, hd := vc.HiddenSize, vc.HiddenSize/vc.NumHeads
	ld := &blocks.Loader{WS: ws, Ops: ops}
	p := "vision_tower.vision_model."
	if !ws.Has(p + "post_layernorm.weight") {
		p = "vision_tower." // transformers 5 drops the inner vision_model
	}
	patchIn := 3 * vc.PatchSize * vc.PatchSize
	pw := ld.Get(p+"embeddings.patch_embedding.weight", h, 3, vc.PatchSize, vc.PatchSize)
	pw.Shape = []int{h, patchIn} // the conv over one whole patch is a linear map of it
	m.patchEmbed = ld.Matrix(pw, ld.Floats(p+"embeddings.patch_embedding.bias", h))
	m.posTable = ld.Weight(p+"embeddings.position_embedding.weight", grid*grid, h)
	for i := range vc.NumLayers {
		lp := fmt.Sprintf("%sencoder.layers.%d.", p, i)
		m.layers = append(m.layers, layer{
			ln1w: ld.Vec(lp+"layer_norm1.weight", h), ln1b: ld.Vec(lp+"layer_norm1.bias", h),
			ln2w: ld.Vec(lp+"layer_norm2.weight", h), ln2b: ld.Vec(lp+"layer_norm2.bias", h),
			q: ld.Linear(lp+"self_attn.q_proj", h, h, true), k: ld.Linear(lp+"self_attn.k_proj", h, h, true),
			v: ld.Linear(lp+"self_attn.v_proj", h, h, true), out: ld.Linear(lp+"self_attn.out_proj", h, h, true),
			fc1: ld.Linear(lp+"mlp.fc1", vc.IntermediateSize, h, true), fc2: ld.Linear(lp+"mlp.fc2", h, vc.IntermediateSize, true),
			attn: attention.Layer{Index: i, NumHeads: vc.NumHeads, NumKVHeads: vc.NumHeads, HeadDim: hd, HeadDimV: hd,
				Scale: float32(1 / math.Sqrt(float64(hd)))},
		})
	}
	m.postW, m.postB = ld.Vec(p+"post_layernorm.weight", h), ld.Vec(p+"post_layernorm.bias", h)
	norm := ld.Floats("multi_modal_projector.mm_soft_emb_norm.weight", h)
	proj := ld.Get("multi_modal_projector.mm_input_projection_weight", h, cfg.HiddenSize)
	if ld.Err != nil {
		return nil, ld.Err
	}
	onePlus := make([]float32, h)
	for i, w := range norm {
		onePlus[i] = 1 + w
	}
	m.softNorm = ld.VecOf(onePlus)
	// x·W with W [vision, text] is a linear layer of Wᵀ.
	pv := proj.Float32()
	t := make([]float32, len(pv))
	for i := range h {
		for j := range cfg.HiddenSize {
			t[j*h+i] = pv[i*cfg.HiddenSize+j]
		}
	}
	m.project = ld.Matrix(tensor.FromFloat32("multi_modal_projector.mm_input_projection_weight^T", t, cfg.HiddenSize, h), nil)
	return m, ld.Err
}

// WeightShapes lists the text model's tensors (under language_model.) and
// the vision tower's.
func WeightShapes(cfg *model.Config) map[string][]int {
	out := map[string][]int{}
	for n, s := range gemma2.WeightShapes(cfg) {
		out[textNames{}.name(n)] = s
	}
	vc := cfg.Vision
	if vc == nil || vc.PatchSize == 0 {
		return out
	}
	h, grid := vc.HiddenSize, vc.ImageSize/vc.PatchSize
	p := "vision_tower."
	out[p+"embeddings.patch_embedding.weight"], out[p+"embeddings.patch_embedding.bias"] = []int{h, 3, vc.PatchSize, vc.PatchSize}, []int{h}
	out[p+"embeddings.position_embedding.weight"] = []int{grid * grid, h}
	for i := range vc.NumLayers {
		lp := fmt.Sprintf("%sencoder.layers.%d.", p, i)
		for _, n := range []string{"layer_norm1", "layer_norm2"} {
			out[lp+n+".weight"], out[lp+n+".bias"] = []int{h}, []int{h}
		}
		for _, n := range []string{"q_proj", "k_proj", "v_proj", "out_proj"} {
			out[lp+"self_attn."+n+".weight"], out[lp+"self_attn."+n+".bias"] = []int{h, h}, []int{h}
		}
		out[lp+"mlp.fc1.weight"], out[lp+"mlp.fc1.bias"] = []int{vc.IntermediateSize, h}, []int{vc.IntermediateSize}
		out[lp+"mlp.fc2.weight"], out[lp+"mlp.fc2.bias"] = []int{h, vc.IntermediateSize}, []int{h}
	}
	out[p+"post_layernorm.weight"], out[p+"post_layernorm.bias"] = []int{h}, []int{h}
	out["multi_modal_projector.mm_soft_emb_norm.weight"] = []int{h}
	out["multi_modal_projector.mm_input_projection_weight"] = []int{h, cfg.HiddenSize}
	return out
}

// Processor is the image processor Gemma 3's published checkpoints ship
// (gemma-3-4b-it's preprocessor_config.json: bilinear resize to the
// tower's image_size, mean and std 0.5, no pan-and-scan), for dummy
// weights, which come without a preprocessor_config.json.
func Processor(cfg *model.Config) vision.ProcessorConfig {
	p := vision.ProcessorConfig{Type: "Gemma3ImageProcessor", Mean: []float64{0.5, 0.5, 0.5}, Std: []float64{0.5, 0.5, 0.5}}
	bilinear := int(vision.Bilinear)
	p.Resample = &bilinear
	p.Size.Height, p.Size.Width = cfg.Vision.ImageSize, cfg.Vision.ImageSize
	return p
}

// ImageTokens is fixed: every image is resized to one size.
func (m *Model) ImageTokens(px *vision.Pixels) int { return m.vc.ImageTokens(px.Grid) }

// EncodeImage runs SigLIP and the projector on one [3, S, S] image.
func (m *Model) EncodeImage(px *vision.Pixels, attn attention.Backend) (tensor.T, error) {
	ops, ps, s := m.ops, m.vc.PatchSize, m.vc.ImageSize
	if len(px.Data) != 3*s*s {
		return tensor.T{}, fmt.Errorf("pixel input of %d values; want a 3×%d×%d image", len(px.Data), s, s)
	}
	n := m.grid * m.grid
	patchIn := 3 * ps * ps
	patches := make([]float32, n*patchIn) // row-major patches, each (channel, y, x) as the conv reads it
	for py := range m.grid {
		for pxi := range m.grid {
			dst := patches[(py*m.grid+pxi)*patchIn:]
			i := 0
			for c := range 3 {
				for y := range ps {
					copy(dst[i:i+ps], px.Data[c*s*s+(py*ps+y)*s+pxi*ps:])
					i += ps
				}
			}
		}
	}
	b, err := model.EncodeBatch([]int{n})
	if err != nil {
		return tensor.T{}, err
	}
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(i)
	}
	ops.BeginForward()
	defer ops.EndForward()
	x := ops.Linear(m.vops.Upload(tensor.From(patches, n, patchIn)), m.patchEmbed) // [P², hidden]
	ops.Add(x, ops.Embed(m.posTable, ids))
	if err := attn.Plan(b); err != nil {
		return tensor.T{}, err
	}
	eps := m.vc.LayerNormEps
	for i := range m.layers {
		l := &m.layers[i]
		xn := m.vops.LayerNorm(x, l.ln1w, l.ln1b, eps)
		qkv := ops.LinearGroup(xn, l.q, l.k, l.v)
		a, err := attention.Run(attn, qkv[0], qkv[1], qkv[2], &l.attn, b)
		if err != nil {
			return tensor.T{}, fmt.Errorf("vision layer %d: %w", i, err)
		}
		ops.Adopt(a)
		ops.LinearAdd(x, a, l.out)
		hid := ops.Linear(m.vops.LayerNorm(x, l.ln2w, l.ln2b, eps), l.fc1)
		m.vops.GELUTanh(hid)
		ops.LinearAdd(x, hid, l.fc2)
	}
	x = m.vops.LayerNorm(x, m.postW, m.postB, eps)
	pooled := m.vops.AvgPool(x, m.grid, m.grid, m.pool)
	y := ops.Linear(ops.RMSNorm(pooled, m.softNorm, eps), m.project)
	out := ops.ToHost(y)
	return tensor.Host{Data: slices.Clone(out.HostData()), Shape: []int{y.Rows(), y.Cols()}}.T(), nil
}

// Layout: Gemma 3 has 1-D positions; each image's tokens attend to each
// other bidirectionally.
func (m *Model) Layout(ids []int, images []model.ImageSpan) ([]int32, int, [][2]int) {
	var spans [][2]int
	for _, img := range images {
		spans = append(spans, [2]int{img.Start, img.Start + img.Len})
	}
	return nil, 0, spans
}
