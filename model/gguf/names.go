package gguf

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/gosling-ai/gosling/tensor"
)

// globalNames maps GGUF names outside the blocks to Hugging Face names.
var globalNames = map[string]string{
	"token_embd.weight":  "model.embed_tokens.weight",
	"output_norm.weight": "model.norm.weight",
	"output.weight":      "lm_head.weight",
}

// blockNames maps the part of a "blk.N.<part>.<weight|bias>" name to the
// Hugging Face module under model.layers.N, as llama.cpp's converter
// names the Llama family's tensors.
var blockNames = map[string]string{
	"attn_norm":   "input_layernorm",
	"attn_q":      "self_attn.q_proj",
	"attn_k":      "self_attn.k_proj",
	"attn_v":      "self_attn.v_proj",
	"attn_output": "self_attn.o_proj",
	"attn_q_norm": "self_attn.q_norm",
	"attn_k_norm": "self_attn.k_norm",
	"ffn_norm":    "post_attention_layernorm",
	"ffn_gate":    "mlp.gate_proj",
	"ffn_up":      "mlp.up_proj",
	"ffn_down":    "mlp.down_proj",
}

// archBlockNames are the parts whose module differs by architecture
// (general.architecture), over blockNames: the names llama.cpp's
// converter gives the Hugging Face modules of each.
var archBlockNames = map[string]map[string]string{
	// Mixtral is "llama" with experts.
	"llama": {"ffn_gate_inp": "block_sparse_moe.gate"},
	"qwen2moe": {
		"ffn_gate_inp":       "mlp.gate",
		"ffn_gate_inp_shexp": "mlp.shared_expert_gate",
		"ffn_gate_shexp":     "mlp.shared_expert.gate_proj",
		"ffn_up_shexp":       "mlp.shared_expert.up_proj",
		"ffn_down_shexp":     "mlp.shared_expert.down_proj",
	},
	"qwen3moe": {"ffn_gate_inp": "mlp.gate"},
	"gemma2":   gemmaNorms,
	"gemma3":   gemmaNorms,
	// phi3's fused gate_up_proj is stored as ffn_up, gate rows first.
	"phi3": {"attn_qkv": "self_attn.qkv_proj", "ffn_up": "mlp.gate_up_proj"},
	"gpt-oss": {
		"post_attention_norm": "post_attention_layernorm",
		"ffn_gate_inp":        "mlp.router",
		"attn_sinks":          "self_attn.sinks", // "<module>.weight" in GGUF, "<module>" alone in Hugging Face
	},
}

var gemmaNorms = map[string]string{
	"post_attention_norm": "post_attention_layernorm",
	"ffn_norm":            "pre_feedforward_layernorm",
	"post_ffw_norm":       "post_feedforward_layernorm",
}

// expertStacks are llama.cpp's per-layer stacks of expert matrices
// [experts, out, in] (and biases [experts, out]); each expert becomes its
// own Hugging Face tensor under ExpertPrefix. ffn_gate_up_exps holds
// each expert's gate rows, then its up rows.
var expertStacks = map[string][]string{
	"ffn_gate_exps":    {"gate"},
	"ffn_up_exps":      {"up"},
	"ffn_down_exps":    {"down"},
	"ffn_gate_up_exps": {"gate", "up"},
}

// ExpertNames is where an architecture's Hugging Face checkpoints keep
// expert e of layer n: Prefix(n, e) + Proj[gate|up|down].
type ExpertNames struct {
	Module string            // under model.layers.N.
	Proj   map[string]string // "gate", "up", "down" → the projection's name
}

// Experts are the per-expert Hugging Face names of each GGUF architecture
// with experts.
var Experts = map[string]ExpertNames{
	"llama":    {"block_sparse_moe.experts", map[string]string{"gate": "w1", "up": "w3", "down": "w2"}},
	"qwen2moe": {"mlp.experts", map[string]string{"gate": "gate_proj", "up": "up_proj", "down": "down_proj"}},
	"qwen3moe": {"mlp.experts", map[string]string{"gate": "gate_proj", "up": "up_proj", "down": "down_proj"}},
	"gpt-oss":  {"mlp.experts", map[string]string{"gate": "gate_proj", "up": "up_proj", "down": "down_proj"}},
}

// HFName translates a GGUF tensor name of a Llama-family file to its
// Hugging Face name; ok is false for names without an equivalent.
func HFName(name string) (string, bool) { return HFNameFor("llama", name) }

// HFNameFor translates a GGUF tensor name of architecture arch to its
// Hugging Face name; ok is false for names without an equivalent (expert
// stacks among them: HFView splits those by expert).
func HFNameFor(arch, name string) (string, bool) {
	if hf, ok := globalNames[name]; ok {
		return hf, true
	}
	layer, part, suffix, ok := splitBlockName(name)
	if !ok {
		return "", false
	}
	module, ok := archBlockNames[arch][part]
	if !ok {
		module, ok = blockNames[part]
	}
	if !ok {
		return "", false
	}
	if arch == "gpt-oss" && part == "attn_sinks" {
		if suffix != "weight" {
			return "", false
		}
		return "model.layers." + layer + "." + module, true
	}
	return "model.layers." + layer + "." + module + "." + suffix, true
}

// GGUFName is the inverse of HFNameFor: the GGUF name llama.cpp gives a
// Hugging Face tensor of architecture arch (expert tensors excluded).
func GGUFName(arch, hf string) (string, bool) {
	for g, h := range globalNames {
		if h == hf {
			return g, true
		}
	}
	rest, ok := strings.CutPrefix(hf, "model.layers.")
	if !ok {
		return "", false
	}
	layer, module, ok := strings.Cut(rest, ".")
	if !ok {
		return "", false
	}
	parts := maps.Clone(blockNames)
	for p, m := range archBlockNames[arch] {
		for q, n := range parts {
			if n == m {
				delete(parts, q) // the architecture moved the module to another part
			}
		}
		parts[p] = m
	}
	if arch == "gpt-oss" && module == archBlockNames[arch]["attn_sinks"] {
		return "blk." + layer + ".attn_sinks.weight", true
	}
	module, suffix, ok := cutLast(module, ".")
	if !ok {
		return "", false
	}
	for p, m := range parts {
		if m == module {
			return "blk." + layer + "." + p + "." + suffix, true
		}
	}
	return "", false
}

func cutLast(s, sep string) (before, after string, ok bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

// splitBlockName splits "blk.N.<part>.<weight|bias>".
func splitBlockName(name string) (layer, part, suffix string, ok bool) {
	rest, ok := strings.CutPrefix(name, "blk.")
	if !ok {
		return "", "", "", false
	}
	layer, rest, ok = strings.Cut(rest, ".")
	if !ok {
		return "", "", "", false
	}
	if n, err := strconv.Atoi(layer); err != nil || n < 0 || strconv.Itoa(n) != layer {
		return "", "", "", false
	}
	part, suffix, ok = strings.Cut(rest, ".")
	if !ok || (suffix != "weight" && suffix != "bias") {
		return "", "", "", false
	}
	return layer, part, suffix, true
}

// HFView presents a File's tensors under Hugging Face names, satisfying
// model.WeightSource. Tensors without an equivalent keep their GGUF name
// (for example rope_freqs.weight), so nothing in the file is hidden.
// Expert stacks are presented one expert at a time, as views of the
// stack's bytes.
//
// Names change, layouts do not: llama.cpp's converter permutes the q and k
// rows of "llama" models into the interleaved RoPE layout, so those weights
// differ from the Hugging Face originals by a per-head row permutation.
type HFView struct {
	File *File

	toGGUF map[string]slice
	names  []string
}

// slice is where a Hugging Face tensor lies in the file: a whole GGUF
// tensor, or expert e's rows [start, start+n) of a stack (n = 0: all).
type slice struct {
	gguf     string
	expert   int // -1: the whole tensor
	start, n int
}

// NewHFView indexes f's tensors by their Hugging Face names.
func NewHFView(f *File) *HFView {
	arch := f.Architecture()
	v := &HFView{File: f, toGGUF: make(map[string]slice, len(f.Tensors))}
	add := func(hf string, s slice) {
		v.toGGUF[hf] = s
		v.names = append(v.names, hf)
	}
	for _, t := range f.Tensors {
		if hf, ok := HFNameFor(arch, t.Name); ok {
			add(hf, slice{gguf: t.Name, expert: -1})
			continue
		}
		layer, part, suffix, ok := splitBlockName(t.Name)
		projs, stacked := expertStacks[part]
		names, hasExperts := Experts[arch]
		if !ok || !stacked || !hasExperts || len(t.Dims) < 2 {
			add(t.Name, slice{gguf: t.Name, expert: -1})
			continue
		}
		experts := int(t.Dims[len(t.Dims)-1])
		rows := int(t.Dims[len(t.Dims)-2])
		for e := range experts {
			for i, p := range projs {
				hf := fmt.Sprintf("model.layers.%s.%s.%d.%s.%s", layer, names.Module, e, names.Proj[p], suffix)
				s := slice{gguf: t.Name, expert: e}
				if len(projs) > 1 {
					s.start, s.n = i*rows/len(projs), rows/len(projs)
				}
				add(hf, s)
			}
		}
	}
	slices.Sort(v.names)
	return v
}

// Tensor returns the tensor with the given Hugging Face name; the weight's
// Name is that name.
func (v *HFView) Tensor(name string) (tensor.Weight, error) {
	s, ok := v.toGGUF[name]
	if !ok {
		return tensor.Weight{}, fmt.Errorf("tensor %s not found in %s", name, v.File.Path)
	}
	w, err := v.File.Tensor(s.gguf)
	if err != nil {
		return tensor.Weight{}, err
	}
	if s.expert >= 0 {
		// Each expert is whole rows of whole blocks, so its bytes are a
		// contiguous run in every dtype.
		per := len(w.Data) / w.Shape[0]
		w.Data, w.Shape = w.Data[s.expert*per:(s.expert+1)*per], w.Shape[1:]
		if s.n > 0 {
			rb := len(w.Data) / w.Shape[0]
			w.Data = w.Data[s.start*rb : (s.start+s.n)*rb]
			w.Shape = append([]int{s.n}, w.Shape[1:]...)
		}
	}
	w.Name = name
	return w, nil
}

// Has reports whether the file holds the tensor of that Hugging Face name.
func (v *HFView) Has(name string) bool {
	_, ok := v.toGGUF[name]
	return ok
}

// Names lists every tensor under its Hugging Face name, sorted.
func (v *HFView) Names() []string { return slices.Clone(v.names) }

// Close closes the underlying file.
func (v *HFView) Close() error { return v.File.Close() }
