package gguf

import (
	"fmt"
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
// Hugging Face module under model.layers.N.
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

// HFName translates a GGUF tensor name to its Hugging Face name; ok is
// false for names without a Llama-family equivalent.
func HFName(name string) (string, bool) {
	if hf, ok := globalNames[name]; ok {
		return hf, true
	}
	rest, ok := strings.CutPrefix(name, "blk.")
	if !ok {
		return "", false
	}
	layer, rest, ok := strings.Cut(rest, ".")
	if !ok {
		return "", false
	}
	if n, err := strconv.Atoi(layer); err != nil || n < 0 || strconv.Itoa(n) != layer {
		return "", false
	}
	part, suffix, ok := strings.Cut(rest, ".")
	if !ok || (suffix != "weight" && suffix != "bias") {
		return "", false
	}
	module, ok := blockNames[part]
	if !ok {
		return "", false
	}
	return "model.layers." + layer + "." + module + "." + suffix, true
}

// HFView presents a File's tensors under Hugging Face names, satisfying
// model.WeightSource. Tensors without an equivalent keep their GGUF name
// (for example rope_freqs.weight), so nothing in the file is hidden.
//
// Names change, layouts do not: llama.cpp's converter permutes the q and k
// rows of "llama" models into the interleaved RoPE layout, so those weights
// differ from the Hugging Face originals by a per-head row permutation.
type HFView struct {
	File *File

	toGGUF map[string]string
	names  []string
}

// NewHFView indexes f's tensors by their Hugging Face names.
func NewHFView(f *File) *HFView {
	v := &HFView{File: f, toGGUF: make(map[string]string, len(f.Tensors))}
	for _, t := range f.Tensors {
		hf, ok := HFName(t.Name)
		if !ok {
			hf = t.Name
		}
		v.toGGUF[hf] = t.Name
		v.names = append(v.names, hf)
	}
	slices.Sort(v.names)
	return v
}

// Tensor returns the tensor with the given Hugging Face name; the weight's
// Name is that name.
func (v *HFView) Tensor(name string) (tensor.Weight, error) {
	ggufName, ok := v.toGGUF[name]
	if !ok {
		return tensor.Weight{}, fmt.Errorf("tensor %s not found in %s", name, v.File.Path)
	}
	w, err := v.File.Tensor(ggufName)
	if err != nil {
		return tensor.Weight{}, err
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
