package model

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/gosling-ai/gosling/model/gguf"
	"github.com/gosling-ai/gosling/tensor"
)

// WriteGGUF writes an opened checkpoint as a GGUF file the way llama.cpp's
// converter lays it out: its architecture name and metadata keys, its
// tensor names, experts stacked per layer, "llama" q/k rows permuted into
// the interleaved RoPE layout, Gemma's norms stored as 1 + w. Weights
// keep their dtype. The tokenizer is not embedded: a checkpoint's
// tokenizer.json has no GGUF form here yet, so the file is for running
// token ids (or with --tokenizer).
func WriteGGUF(ck *Checkpoint, path string) error {
	cfg := &ck.Config
	arch, md, err := ggufMetadata(cfg)
	if err != nil {
		return fmt.Errorf("write gguf %s: %w", path, err)
	}
	tensors, err := ggufTensors(arch, cfg, ck.Weights)
	if err != nil {
		return fmt.Errorf("write gguf %s: %w", path, err)
	}
	return gguf.Write(path, md, tensors)
}

// ggufMetadata is the architecture's GGUF name and its metadata, or an
// error naming what llama.cpp's format cannot express.
func ggufMetadata(cfg *Config) (string, []gguf.KV, error) {
	arch := ""
	for a, hf := range ggufArchitectures {
		if hf == cfg.Architecture {
			arch = a
		}
	}
	if cfg.Architecture == "MixtralForCausalLM" {
		arch = "llama"
	}
	if arch == "" {
		return "", nil, fmt.Errorf("architecture %s has no GGUF form here (supported: %v)", cfg.Architecture, slices.Sorted(func(yield func(string) bool) {
			for _, hf := range ggufArchitectures {
				if !yield(hf) {
					return
				}
			}
			yield("MixtralForCausalLM")
		}))
	}
	key := func(k string) string { return arch + "." + k }
	u32 := func(v int) uint32 { return uint32(v) }
	md := []gguf.KV{
		{Key: "general.architecture", Value: arch},
		{Key: "general.name", Value: "gosling conversion"},
		{Key: "general.alignment", Value: uint32(gguf.DefaultAlignment)},
		{Key: key("context_length"), Value: u32(cfg.MaxPositions)},
		{Key: key("embedding_length"), Value: u32(cfg.HiddenSize)},
		{Key: key("block_count"), Value: u32(cfg.NumLayers)},
		{Key: key("feed_forward_length"), Value: u32(cfg.IntermediateSize)},
		{Key: key("attention.head_count"), Value: u32(cfg.NumHeads)},
		{Key: key("attention.head_count_kv"), Value: u32(cfg.NumKVHeads)},
		{Key: key("attention.key_length"), Value: u32(cfg.HeadDim)},
		{Key: key("attention.value_length"), Value: u32(cfg.HeadDim)},
		{Key: key("attention.layer_norm_rms_epsilon"), Value: float32(cfg.RMSNormEps)},
		{Key: key("rope.freq_base"), Value: float32(cfg.RopeTheta)},
		{Key: key("rope.dimension_count"), Value: u32(cfg.RopeDim())},
	}
	if rs := cfg.RopeScaling; rs != nil {
		switch {
		case rs.Type != "yarn" && rs.Type != "linear":
			return "", nil, fmt.Errorf("rope_scaling type %s is not written to GGUF here (yarn and linear are)", rs.Type)
		case rs.Type == "yarn" && rs.NoTruncate != (arch == "gpt-oss"):
			return "", nil, fmt.Errorf("rope_scaling truncate=%v cannot be stored for GGUF architecture %s, whose YaRN fixes it", !rs.NoTruncate, arch)
		case rs.Type == "yarn" && (rs.AttentionFactor != 0 || rs.MScale != 0 || rs.MScaleAllDim != 0):
			return "", nil, fmt.Errorf("rope_scaling attention_factor/mscale are not written to GGUF here")
		}
		md = append(md, gguf.KV{Key: key("rope.scaling.type"), Value: rs.Type},
			gguf.KV{Key: key("rope.scaling.factor"), Value: float32(cfg.RopeFactor())})
		if rs.Type == "yarn" {
			md = append(md, gguf.KV{Key: key("rope.scaling.original_context_length"), Value: u32(int(cfg.ropeOrigMax()))},
				gguf.KV{Key: key("rope.scaling.yarn_beta_fast"), Value: float32(orDefault(rs.BetaFast, 32))},
				gguf.KV{Key: key("rope.scaling.yarn_beta_slow"), Value: float32(orDefault(rs.BetaSlow, 1))})
		}
	}
	if cfg.SlidingWindow > 0 {
		md = append(md, gguf.KV{Key: key("attention.sliding_window"), Value: u32(cfg.SlidingWindow)})
		if arch == "gemma3" || arch == "gpt-oss" {
			sliding := make([]bool, cfg.NumLayers)
			for i := range sliding {
				sliding[i] = cfg.LayerWindow(i) > 0
			}
			md = append(md, gguf.KV{Key: key("attention.sliding_window_pattern"), Value: sliding})
		} else if cfg.LayerTypes != nil {
			return "", nil, fmt.Errorf("layer_types mixing sliding and full layers cannot be stored for GGUF architecture %s", arch)
		}
	}
	if e := cfg.MoE; e.NumRoutedExperts > 0 {
		if e.ScoringFunc != "softmax" || e.TopKMethod != "greedy" || e.RoutedScaling != 1 || e.SparseStep > 1 || e.LayerFreq > 1 || e.FirstKDenseReplace > 0 {
			return "", nil, fmt.Errorf("this mixture of experts' routing or layer pattern has no GGUF form here")
		}
		md = append(md, gguf.KV{Key: key("expert_count"), Value: u32(e.NumRoutedExperts)},
			gguf.KV{Key: key("expert_used_count"), Value: u32(e.NumExpertsPerTok)},
			gguf.KV{Key: key("expert_feed_forward_length"), Value: u32(e.IntermediateSize)},
			gguf.KV{Key: key("expert_weights_norm"), Value: e.NormTopKProb})
		if e.SharedIntermediateSize > 0 {
			md = append(md, gguf.KV{Key: key("expert_shared_feed_forward_length"), Value: u32(e.SharedIntermediateSize)})
		}
	}
	switch arch {
	case "gemma3":
		want := float64(cfg.HeadDim)
		if cfg.NumLayers == 62 {
			want = float64(cfg.HiddenSize / cfg.NumHeads)
		}
		if cfg.QueryPreAttnScalar != 0 && cfg.QueryPreAttnScalar != want {
			return "", nil, fmt.Errorf("query_pre_attn_scalar %v cannot be stored: llama.cpp's gemma3 scales by %v", cfg.QueryPreAttnScalar, want)
		}
		if cfg.AttnLogitSoftcap != 0 {
			return "", nil, fmt.Errorf("attn_logit_softcapping has no gemma3 GGUF key")
		}
		if cfg.RopeLocalTheta > 0 {
			md = append(md, gguf.KV{Key: key("rope.freq_base_swa"), Value: float32(cfg.RopeLocalTheta)})
		}
		if cfg.FinalLogitSoftcap != 0 {
			md = append(md, gguf.KV{Key: key("final_logit_softcapping"), Value: float32(cfg.FinalLogitSoftcap)})
		}
	case "gpt-oss":
		if cfg.SwigluLimit != 7 {
			return "", nil, fmt.Errorf("swiglu_limit %v cannot be stored: llama.cpp's gpt-oss fixes it at 7", cfg.SwigluLimit)
		}
	}
	ids := func(k string, id int) {
		if id >= 0 {
			md = append(md, gguf.KV{Key: k, Value: u32(id)})
		}
	}
	ids("tokenizer.ggml.bos_token_id", cfg.BOSTokenID)
	if len(cfg.EOSTokenIDs) > 0 {
		ids("tokenizer.ggml.eos_token_id", cfg.EOSTokenIDs[0])
	}
	ids("tokenizer.ggml.padding_token_id", cfg.PadTokenID)
	return arch, md, nil
}

func orDefault(v, def float64) float64 {
	if v == 0 {
		return def
	}
	return v
}

// expertName matches one expert's tensor: layer, module, expert,
// projection, suffix.
var expertName = regexp.MustCompile(`^model\.layers\.(\d+)\.(.+)\.(\d+)\.(\w+)\.(weight|bias)$`)

// ggufTensors lists the checkpoint's tensors under llama.cpp's names and
// layouts, in the checkpoint's name order with each expert stack where its
// first expert was.
func ggufTensors(arch string, cfg *Config, ws WeightSource) ([]gguf.WriteTensor, error) {
	var out []gguf.WriteTensor
	stacks := map[string]int{} // GGUF name → index in out
	filled := map[string]int{} // GGUF name → experts copied in
	experts := gguf.Experts[arch]
	projOf := map[string]string{}
	for p, name := range experts.Proj {
		projOf[name] = p
	}
	get := func(name string) (tensor.Weight, error) {
		w, err := ws.Tensor(name)
		if err != nil {
			return w, err
		}
		return w.Materialize()
	}
	for _, name := range ws.Names() {
		if name == "lm_head.weight" && cfg.TieWordEmbeddings {
			continue
		}
		if m := expertName.FindStringSubmatch(name); m != nil && m[2] == experts.Module && projOf[m[4]] != "" {
			w, err := get(name)
			if err != nil {
				return nil, err
			}
			stack := fmt.Sprintf("blk.%s.ffn_%s_exps.%s", m[1], projOf[m[4]], m[5])
			e, _ := strconv.Atoi(m[3])
			if err := addExpert(&out, stacks, stack, e, cfg.MoE.NumRoutedExperts, w); err != nil {
				return nil, err
			}
			filled[stack]++
			continue
		}
		if layer, rest, ok := cutLayer(name, experts.Module+"."); ok && experts.Module != "" {
			ts, err := fusedExpertTensors(arch, layer, rest, name, get)
			if err != nil {
				return nil, err
			}
			out = append(out, ts...)
			continue
		}
		g, ok := gguf.GGUFName(arch, name)
		if !ok {
			return nil, fmt.Errorf("tensor %s has no GGUF name for architecture %s", name, arch)
		}
		w, err := get(name)
		if err != nil {
			return nil, err
		}
		t := gguf.WriteTensor{Name: g, DType: w.DType, Shape: w.Shape, Data: w.Data}
		switch {
		case arch == "llama" && (g == "blk."+layer(name)+".attn_q.weight" || g == "blk."+layer(name)+".attn_k.weight"):
			heads := cfg.NumHeads
			if g == "blk."+layer(name)+".attn_k.weight" {
				heads = cfg.NumKVHeads
			}
			t.Data, err = interleaveRows(w, heads)
		case arch == "gemma3" && len(w.Shape) == 1 && strings.HasSuffix(name, "norm.weight"):
			t.DType, t.Data = tensor.F32, shiftedNorm(w)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	for g := range stacks {
		if filled[g] != cfg.MoE.NumRoutedExperts {
			return nil, fmt.Errorf("expert stack %s has %d of %d experts", g, filled[g], cfg.MoE.NumRoutedExperts)
		}
	}
	return out, nil
}

var layerName = regexp.MustCompile(`^model\.layers\.(\d+)\.(.*)$`)

// layer is the layer number of a model.layers.N.… name.
func layer(name string) string {
	l, _, _ := cutLayer(name, "")
	return l
}

// cutLayer splits "model.layers.N.<module><rest>" into N and rest; ok is
// false when name is not under that module.
func cutLayer(name, module string) (layer, rest string, ok bool) {
	m := layerName.FindStringSubmatch(name)
	if m == nil {
		return "", "", false
	}
	rest, ok = strings.CutPrefix(m[2], module)
	return m[1], rest, ok
}

// addExpert copies expert e's weight into its layer's stack [experts, …].
func addExpert(out *[]gguf.WriteTensor, stacks map[string]int, stack string, e, experts int, w tensor.Weight) error {
	i, ok := stacks[stack]
	if !ok {
		i = len(*out)
		stacks[stack] = i
		shape := append([]int{experts}, w.Shape...)
		*out = append(*out, gguf.WriteTensor{Name: stack, DType: w.DType, Shape: shape, Data: make([]byte, experts*len(w.Data))})
	}
	t := &(*out)[i]
	per := len(t.Data) / experts
	if t.DType != w.DType || !slices.Equal(t.Shape[1:], w.Shape) || e >= experts || len(w.Data) != per {
		return fmt.Errorf("tensor %s (%v %v, expert %d) does not fit stack %s (%v %v)", w.Name, w.DType, w.Shape, e, stack, t.DType, t.Shape)
	}
	copy(t.Data[e*per:], w.Data)
	return nil
}

// fusedExpertTensors converts a layer's fused expert tensors: GPT-OSS's
// x·W stacks with gate and up interleaved by column become llama.cpp's
// separate [experts, out, in] stacks; transformers' [experts, 2·inter,
// hidden] gate_up_proj (gate rows first) is already ffn_gate_up_exps.
func fusedExpertTensors(arch, layer, rest, name string, get func(string) (tensor.Weight, error)) ([]gguf.WriteTensor, error) {
	w, err := get(name)
	if err != nil {
		return nil, err
	}
	p := "blk." + layer + "."
	if arch != "gpt-oss" {
		switch rest {
		case "gate_up_proj":
			return []gguf.WriteTensor{{Name: p + "ffn_gate_up_exps.weight", DType: w.DType, Shape: w.Shape, Data: w.Data}}, nil
		case "down_proj":
			return []gguf.WriteTensor{{Name: p + "ffn_down_exps.weight", DType: w.DType, Shape: w.Shape, Data: w.Data}}, nil
		}
		return nil, fmt.Errorf("tensor %s has no GGUF name for architecture %s", name, arch)
	}
	size, err := w.DType.RowBytes(1)
	if err != nil || tensor.IsBlockQuant(w.DType) || w.DType == tensor.Q8_0 {
		return nil, fmt.Errorf("tensor %s: %v experts cannot be rearranged", name, w.DType)
	}
	// pick returns, per expert, columns first, first+step, … of [rows, cols]
	// transposed to [out, rows].
	pick := func(first, step int, transpose bool) ([]int, []byte) {
		e := w.Shape[0]
		rows, cols := 1, w.Shape[len(w.Shape)-1]
		if len(w.Shape) == 3 {
			rows = w.Shape[1]
		}
		n := (cols - first + step - 1) / step
		data := make([]byte, 0, e*rows*n*size)
		for x := range e {
			src := w.Data[x*rows*cols*size:]
			if transpose {
				for o := range n {
					for r := range rows {
						at := (r*cols + first + o*step) * size
						data = append(data, src[at:at+size]...)
					}
				}
				continue
			}
			for o := range n {
				at := (first + o*step) * size
				data = append(data, src[at:at+size]...)
			}
		}
		if transpose {
			return []int{e, n, rows}, data
		}
		return []int{e, n}, data
	}
	t := func(g string, shape []int, data []byte) gguf.WriteTensor {
		return gguf.WriteTensor{Name: p + g, DType: w.DType, Shape: shape, Data: data}
	}
	switch rest {
	case "gate_up_proj":
		gs, gd := pick(0, 2, true)
		us, ud := pick(1, 2, true)
		return []gguf.WriteTensor{t("ffn_gate_exps.weight", gs, gd), t("ffn_up_exps.weight", us, ud)}, nil
	case "gate_up_proj_bias":
		gs, gd := pick(0, 2, false)
		us, ud := pick(1, 2, false)
		return []gguf.WriteTensor{t("ffn_gate_exps.bias", gs, gd), t("ffn_up_exps.bias", us, ud)}, nil
	case "down_proj":
		s, d := pick(0, 1, true)
		return []gguf.WriteTensor{t("ffn_down_exps.weight", s, d)}, nil
	case "down_proj_bias":
		return []gguf.WriteTensor{t("ffn_down_exps.bias", w.Shape, w.Data)}, nil
	}
	return nil, fmt.Errorf("tensor %s has no GGUF name for architecture %s", name, arch)
}

// interleaveRows permutes each head's rows from Hugging Face's rotate-half
// order (i, i+d/2) into llama.cpp's interleaved pairs (2i, 2i+1), as its
// converter does for "llama" q and k.
func interleaveRows(w tensor.Weight, heads int) ([]byte, error) {
	rows := w.Shape[0]
	if heads <= 0 || rows%(2*heads) != 0 {
		return nil, fmt.Errorf("tensor %s: %d rows do not split into %d heads of pairs", w.Name, rows, heads)
	}
	rb := len(w.Data) / rows
	half := rows / heads / 2
	out := make([]byte, len(w.Data))
	for h := range heads {
		for j := range half {
			for t := range 2 {
				dst, src := h*2*half+2*j+t, h*2*half+t*half+j
				copy(out[dst*rb:(dst+1)*rb], w.Data[src*rb:(src+1)*rb])
			}
		}
	}
	return out, nil
}

// shiftedNorm is a Gemma norm weight as the factor 1 + w, in float32.
func shiftedNorm(w tensor.Weight) []byte {
	v := w.Float32()
	out := make([]byte, 4*len(v))
	for i, x := range v {
		bits := math.Float32bits(1 + x)
		out[4*i], out[4*i+1], out[4*i+2], out[4*i+3] = byte(bits), byte(bits>>8), byte(bits>>16), byte(bits>>24)
	}
	return out
}
