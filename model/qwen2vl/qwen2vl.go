// Package qwen2vl implements Qwen2.5-VL (Qwen2_5_VLForConditionalGeneration):
// a Qwen2 language model whose rotary embedding takes three position
// streams (M-RoPE), and a ViT whose output replaces the image placeholder
// tokens.
//
// The vision tower, on the patches of one image in the processor's order
// (each 2×2 merge group consecutive):
//
//	x = patch_embed(patches)                         conv3d as a linear [N, 1176] → [N, hidden]
//	x = x[window order]                              merge groups grouped by attention window
//	per block: x += proj(attn(rope2d(qkv(rms1(x)))))  windows, or the whole image in full-attention blocks
//	           x += down(silu(gate(rms2(x))) · up(rms2(x)))
//	y = mlp2(gelu(mlp0(rms_q(x) viewed [N/4, 4·hidden])))   the 2×2 merger → [N/4, text hidden]
//	y = y[inverse window order]
package qwen2vl

import (
	"fmt"
	"math"
	"slices"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/model/blocks"
	"github.com/gosling-ai/gosling/model/llama"
	"github.com/gosling-ai/gosling/tensor"
	"github.com/gosling-ai/gosling/vision"
)

// Architectures are the config.json `architectures` names served here.
var Architectures = []string{"Qwen2_5_VLForConditionalGeneration"}

type block struct {
	norm1, norm2   device.Vector
	q, k, v, proj  device.Matrix
	gate, up, down device.Matrix
	attn           attention.Layer
	full           bool // attends over the whole image, not its windows
}

// Model is Qwen2.5-VL: the text model (llama.Model with M-RoPE) and the
// vision tower.
type Model struct {
	*llama.Model
	vc         model.VisionConfig
	ops        device.Ops
	vops       device.VisionOps
	patchEmbed device.Matrix
	blocks     []block
	mergeNorm  device.Vector
	merge0     device.Matrix
	merge2     device.Matrix
	ropeH      *device.Rope // 2-D rope: the first half of the frequencies by patch row,
	ropeW      *device.Rope // the second half by patch column
}

// New binds the weights.
func New(cfg *model.Config, ws model.WeightSource, ops device.Ops) (*Model, error) {
	vc := cfg.Vision
	if vc == nil || vc.MRopeSection == nil {
		return nil, fmt.Errorf("%s: config.json needs vision_config and rope mrope_section", cfg.Architecture)
	}
	vops, ok := ops.(device.VisionOps)
	if !ok {
		return nil, fmt.Errorf("%s: the vision tower needs LayerNorm/GELU kernels that device %s does not have yet", cfg.Architecture, ops.Name())
	}
	if vc.HiddenAct != "silu" || vc.NumHeads <= 0 || vc.HiddenSize%vc.NumHeads != 0 || vc.SpatialMergeSize <= 0 || vc.PatchSize <= 0 || vc.TemporalPatchSize <= 0 {
		return nil, fmt.Errorf("%s: unsupported vision_config %+v", cfg.Architecture, *vc)
	}
	text, err := llama.New(cfg, ws, ops)
	if err != nil {
		return nil, err
	}
	m := &Model{Model: text, vc: *vc, ops: ops, vops: vops}
	h, hd := vc.HiddenSize, vc.HiddenSize/vc.NumHeads
	ld := &blocks.Loader{WS: ws, Ops: ops}
	patchIn := 3 * vc.TemporalPatchSize * vc.PatchSize * vc.PatchSize
	pw := ld.Get("visual.patch_embed.proj.weight", h, 3, vc.TemporalPatchSize, vc.PatchSize, vc.PatchSize)
	pw.Shape = []int{h, patchIn} // the conv over one whole patch is a linear map of it
	m.patchEmbed = ld.Matrix(pw, nil)
	for i := range vc.NumLayers {
		p := fmt.Sprintf("visual.blocks.%d.", i)
		qkv := ld.Get(p+"attn.qkv.weight", 3*h, h)
		qkvBias := ld.Floats(p+"attn.qkv.bias", 3*h)
		bl := block{
			norm1: ld.Vec(p+"norm1.weight", h),
			norm2: ld.Vec(p+"norm2.weight", h),
			proj:  ld.Linear(p+"attn.proj", h, h, true),
			gate:  ld.Linear(p+"mlp.gate_proj", vc.IntermediateSize, h, true),
			up:    ld.Linear(p+"mlp.up_proj", vc.IntermediateSize, h, true),
			down:  ld.Linear(p+"mlp.down_proj", h, vc.IntermediateSize, true),
			attn: attention.Layer{Index: i, NumHeads: vc.NumHeads, NumKVHeads: vc.NumHeads,
				HeadDim: hd, HeadDimV: hd, Scale: float32(1 / math.Sqrt(float64(hd)))},
			full: slices.Contains(vc.FullAttBlocks, i),
		}
		if ld.Err == nil { // the fused qkv as three matrices, so attention gets q, k, v apart
			all := qkv.Float32()
			for j, dst := range []*device.Matrix{&bl.q, &bl.k, &bl.v} {
				*dst = ld.Matrix(tensor.FromFloat32(fmt.Sprintf("%sattn.qkv.weight[%d]", p, j), all[j*h*h:(j+1)*h*h], h, h), qkvBias[j*h:(j+1)*h])
			}
		}
		m.blocks = append(m.blocks, bl)
	}
	merged := h * vc.SpatialMergeSize * vc.SpatialMergeSize
	m.mergeNorm = ld.Vec("visual.merger.ln_q.weight", h)
	m.merge0 = ld.Linear("visual.merger.mlp.0", merged, merged, true)
	m.merge2 = ld.Linear("visual.merger.mlp.2", vc.OutHiddenSize, merged, true)
	if ld.Err != nil {
		return nil, ld.Err
	}
	if vc.OutHiddenSize != cfg.HiddenSize {
		return nil, fmt.Errorf("%s: vision out_hidden_size %d differs from the text hidden_size %d", cfg.Architecture, vc.OutHiddenSize, cfg.HiddenSize)
	}
	// VisionRotaryEmbedding(head_dim/2): theta 10000 over head_dim/2 values.
	quarter := hd / 4
	fh, fw := make([]float32, hd/2), make([]float32, hd/2)
	for i := range quarter {
		f := float32(1 / math.Pow(10000, float64(2*i)/float64(hd/2)))
		fh[i], fw[quarter+i] = f, f
	}
	m.ropeH = &device.Rope{HeadDim: hd, InvFreq: fh}
	m.ropeW = &device.Rope{HeadDim: hd, InvFreq: fw}
	return m, nil
}

// WeightShapes lists the text model's tensors and the vision tower's.
func WeightShapes(cfg *model.Config) map[string][]int {
	out := llama.WeightShapes(cfg)
	vc := cfg.Vision
	if vc == nil {
		return out
	}
	h := vc.HiddenSize
	out["visual.patch_embed.proj.weight"] = []int{h, 3, vc.TemporalPatchSize, vc.PatchSize, vc.PatchSize}
	for i := range vc.NumLayers {
		p := fmt.Sprintf("visual.blocks.%d.", i)
		out[p+"norm1.weight"], out[p+"norm2.weight"] = []int{h}, []int{h}
		out[p+"attn.qkv.weight"], out[p+"attn.qkv.bias"] = []int{3 * h, h}, []int{3 * h}
		out[p+"attn.proj.weight"], out[p+"attn.proj.bias"] = []int{h, h}, []int{h}
		for _, n := range []string{"gate_proj", "up_proj"} {
			out[p+"mlp."+n+".weight"], out[p+"mlp."+n+".bias"] = []int{vc.IntermediateSize, h}, []int{vc.IntermediateSize}
		}
		out[p+"mlp.down_proj.weight"], out[p+"mlp.down_proj.bias"] = []int{h, vc.IntermediateSize}, []int{h}
	}
	merged := h * vc.SpatialMergeSize * vc.SpatialMergeSize
	out["visual.merger.ln_q.weight"] = []int{h}
	out["visual.merger.mlp.0.weight"], out["visual.merger.mlp.0.bias"] = []int{merged, merged}, []int{merged}
	out["visual.merger.mlp.2.weight"], out["visual.merger.mlp.2.bias"] = []int{vc.OutHiddenSize, merged}, []int{vc.OutHiddenSize}
	return out
}

// Processor is the image processor Qwen2.5-VL's published checkpoints
// ship (Qwen2.5-VL-7B-Instruct's preprocessor_config.json: CLIP's mean and
// std, bicubic, 3136 to 12845056 pixels) with the patch sizes of cfg, for
// dummy weights, which come without a preprocessor_config.json.
func Processor(cfg *model.Config) vision.ProcessorConfig {
	vc := cfg.Vision
	return vision.ProcessorConfig{Type: "Qwen2VLImageProcessor",
		Mean: []float64{0.48145466, 0.4578275, 0.40821073}, Std: []float64{0.26862954, 0.26130258, 0.27577711},
		MinPixels: 56 * 56, MaxPixels: 16384 * 28 * 28,
		PatchSize: vc.PatchSize, MergeSize: vc.SpatialMergeSize, TemporalPatchSize: vc.TemporalPatchSize}
}

// ImageTokens is one token per merge group of patches.
func (m *Model) ImageTokens(px *vision.Pixels) int { return m.vc.ImageTokens(px.Grid) }

// windows is Qwen2.5-VL's get_window_index for one image: the merge groups
// (tokens) in window order and the window sizes in tokens. Windows tile
// the token grid in squares of window_size/merge/patch tokens, row-major,
// the last ones cut at the grid's edge.
func (m *Model) windows(grid [3]int) (order []int, sizes []int) {
	ms := m.vc.SpatialMergeSize
	gh, gw := grid[1]/ms, grid[2]/ms
	ws := max(m.vc.WindowSize/ms/m.vc.PatchSize, 1)
	for t := range grid[0] {
		for wy := 0; wy < gh; wy += ws {
			for wx := 0; wx < gw; wx += ws {
				n := 0
				for y := wy; y < min(wy+ws, gh); y++ {
					for x := wx; x < min(wx+ws, gw); x++ {
						order = append(order, (t*gh+y)*gw+x)
						n++
					}
				}
				sizes = append(sizes, n)
			}
		}
	}
	return order, sizes
}

// EncodeImage runs the vision tower: [ImageTokens(px), text hidden] on
// the host.
func (m *Model) EncodeImage(px *vision.Pixels, attn attention.Backend) (tensor.T, error) {
	ops, vc := m.ops, &m.vc
	ms2 := vc.SpatialMergeSize * vc.SpatialMergeSize
	patchIn := m.patchEmbed.In()
	n := px.Grid[0] * px.Grid[1] * px.Grid[2]
	if n == 0 || len(px.Data) != n*patchIn || px.Grid[1]%vc.SpatialMergeSize != 0 || px.Grid[2]%vc.SpatialMergeSize != 0 {
		return tensor.T{}, fmt.Errorf("pixel input of %d values for grid %v does not fit patches of %d values", len(px.Data), px.Grid, patchIn)
	}
	order, sizes := m.windows(px.Grid)
	// Patch rows in window order, and each patch's (row, column) for the 2-D rope.
	rows := make([]int32, 0, n)
	posH, posW := make([]int32, 0, n), make([]int32, 0, n)
	gw := px.Grid[2] / vc.SpatialMergeSize
	for _, tok := range order {
		ty, tx := (tok/gw)%(px.Grid[1]/vc.SpatialMergeSize), tok%gw
		for j := range ms2 {
			rows = append(rows, int32(tok*ms2+j))
			posH = append(posH, int32(ty*vc.SpatialMergeSize+j/vc.SpatialMergeSize))
			posW = append(posW, int32(tx*vc.SpatialMergeSize+j%vc.SpatialMergeSize))
		}
	}
	windowLens := make([]int, len(sizes))
	for i, s := range sizes {
		windowLens[i] = s * ms2
	}
	windowed, err := model.EncodeBatch(windowLens)
	if err != nil {
		return tensor.T{}, err
	}
	// Full-attention blocks attend within each temporal patch (a video's
	// frames apart, as cu_seqlens repeats h·w per t).
	frames := make([]int, px.Grid[0])
	for i := range frames {
		frames[i] = px.Grid[1] * px.Grid[2]
	}
	whole, err := model.EncodeBatch(frames)
	if err != nil {
		return tensor.T{}, err
	}

	ops.BeginForward()
	defer ops.EndForward()
	x := ops.Linear(ops.GatherRows(m.vops.Upload(tensor.From(px.Data, n, patchIn)), rows), m.patchEmbed) // [N, hidden]
	var planned *forward.Batch
	for i := range m.blocks {
		bl := &m.blocks[i]
		b := windowed
		if bl.full {
			b = whole
		}
		if b != planned { // a new attention pattern is a new plan
			if err := attn.Plan(b); err != nil {
				return tensor.T{}, err
			}
			planned = b
		}
		qkv := ops.NormLinearGroup(x, bl.norm1, 1e-6, bl.q, bl.k, bl.v)
		q, k, v := qkv[0], qkv[1], qkv[2]
		ops.RopeQK(q, k, posH, m.ropeH)
		ops.RopeQK(q, k, posW, m.ropeW)
		a, err := attention.Run(attn, q, k, v, &bl.attn, b)
		if err != nil {
			return tensor.T{}, fmt.Errorf("vision block %d: %w", i, err)
		}
		ops.Adopt(a)
		ops.LinearAdd(x, a, bl.proj)
		gateUp := ops.NormLinearGroup(x, bl.norm2, 1e-6, bl.gate, bl.up)
		ops.SiLUMul(gateUp[0], gateUp[1])
		ops.LinearAdd(x, gateUp[0], bl.down)
	}
	merged := ops.RMSNorm(x, m.mergeNorm, 1e-6)
	merged = merged.Reshape(n/ms2, m.merge0.In())
	hid := ops.Linear(merged, m.merge0)
	m.vops.GELU(hid)
	y := ops.Linear(hid, m.merge2) // [tokens, text hidden], window order
	inverse := make([]int32, len(order))
	for i, tok := range order {
		inverse[tok] = int32(i)
	}
	out := ops.ToHost(ops.GatherRows(y, inverse))
	return tensor.Host{Data: slices.Clone(out.HostData()), Shape: []int{len(order), y.Cols()}}.T(), nil
}

// Layout computes M-RoPE positions as get_rope_index does: text tokens
// count up from the previous position; an image's tokens take the
// position after the text before it, plus their (temporal, row, column)
// in the merged grid; text after the image resumes past the image's
// largest position. A video's temporal index is its patch's start in
// seconds times tokens_per_second, truncated. delta is the offset of
// later tokens' positions from their sequence index. Qwen2.5-VL attends
// causally over images.
func (m *Model) Layout(ids []int, images []model.ImageSpan) ([]int32, int, [][2]int) {
	n := len(ids)
	pos := make([]int32, 3*n)
	next, i := int32(0), 0
	set := func(at int, t, h, w int32) { pos[at], pos[n+at], pos[2*n+at] = t, h, w }
	for _, img := range images {
		for ; i < img.Start; i++ {
			set(i, next, next, next)
			next++
		}
		ms := m.vc.SpatialMergeSize
		gt, gh, gw := img.Grid[0], img.Grid[1]/ms, img.Grid[2]/ms
		top := next
		for t := range gt {
			// An image has one temporal patch (t = 0). A video's product
			// is float32, as torch computes it from an int64 index.
			tt := int32(t)
			if img.SecondsPerGrid > 0 {
				tt = int32(float32(t) * float32(img.SecondsPerGrid) * float32(m.vc.TokensPerSecond))
			}
			for y := range gh {
				for x := range gw {
					set(i, next+tt, next+int32(y), next+int32(x))
					top = max(top, next+max(tt, int32(y), int32(x)))
					i++
				}
			}
		}
		next = top + 1
	}
	for ; i < n; i++ {
		set(i, next, next, next)
		next++
	}
	return pos, int(next) - n, nil
}
