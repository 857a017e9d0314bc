package random

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/gosling-ai/gosling/model/safetensors"
	"github.com/gosling-ai/gosling/tensor"
)

// EagleTarget is what a head takes from its target model's config.
type EagleTarget struct {
	Hidden, Intermediate, Heads, KVHeads, HeadDim, Vocab, MaxPositions int
	RMSNormEps, RopeTheta                                              float64
}

// EagleOptions describe a random-weight EAGLE head for a target model.
type EagleOptions struct {
	Eagle3 bool // LlamaForCausalLMEagle3, else LlamaForCausalLMEagle
	// DraftVocab is EAGLE-3's draft vocabulary (0: the target's); a
	// smaller one holds every k-th target token, mapped by d2t.
	DraftVocab int
	// AuxLayerIDs, when set, go to config.json as
	// eagle_config.eagle_aux_hidden_state_layer_ids (EAGLE-3).
	AuxLayerIDs []int
	Seed        uint64
	Std         float64 // of the matrices (0: 0.02); norms are 1
}

// WriteEagle writes an EAGLE or EAGLE-3 head for target into dir in the
// layout SGLang loads (config.json and model.safetensors, the tensors
// under the head's own names, without "model."). The head takes the
// target's shapes: hidden size, heads, head width and MLP width.
func WriteEagle(dir string, target EagleTarget, o EagleOptions) error {
	if o.Std == 0 {
		o.Std = 0.02
	}
	h, vocab := target.Hidden, target.Vocab
	draftVocab := vocab
	if o.Eagle3 && o.DraftVocab > 0 {
		draftVocab = o.DraftVocab
	}
	if draftVocab > vocab {
		return fmt.Errorf("a draft vocabulary of %d tokens is larger than the target's %d", draftVocab, vocab)
	}
	arch := "LlamaForCausalLMEagle"
	if o.Eagle3 {
		arch = "LlamaForCausalLMEagle3"
	}
	config := map[string]any{
		"architectures":           []string{arch},
		"model_type":              "llama",
		"hidden_size":             h,
		"intermediate_size":       target.Intermediate,
		"num_hidden_layers":       1,
		"num_attention_heads":     target.Heads,
		"num_key_value_heads":     target.KVHeads,
		"head_dim":                target.HeadDim,
		"vocab_size":              vocab,
		"max_position_embeddings": target.MaxPositions,
		"rms_norm_eps":            target.RMSNormEps,
		"rope_theta":              target.RopeTheta,
		"hidden_act":              "silu",
		"tie_word_embeddings":     false,
		"torch_dtype":             "float32",
	}
	if o.Eagle3 {
		config["draft_vocab_size"] = draftVocab
		config["target_hidden_size"] = h
		if o.AuxLayerIDs != nil {
			config["eagle_config"] = map[string]any{"eagle_aux_hidden_state_layer_ids": o.AuxLayerIDs}
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write eagle head: %w", err)
	}
	data, _ := json.MarshalIndent(config, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "config.json"), append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("write eagle head: %w", err)
	}

	qDim, kvDim, inter := target.Heads*target.HeadDim, target.KVHeads*target.HeadDim, target.Intermediate
	var specs []spec
	layer := func(p string, in int, inputNorm bool) {
		if inputNorm {
			specs = append(specs, spec{p + "input_layernorm.weight", []int{h}})
		}
		specs = append(specs,
			spec{p + "self_attn.q_proj.weight", []int{qDim, in}},
			spec{p + "self_attn.k_proj.weight", []int{kvDim, in}},
			spec{p + "self_attn.v_proj.weight", []int{kvDim, in}},
			spec{p + "self_attn.o_proj.weight", []int{h, qDim}},
			spec{p + "post_attention_layernorm.weight", []int{h}},
			spec{p + "mlp.gate_proj.weight", []int{inter, h}},
			spec{p + "mlp.up_proj.weight", []int{inter, h}},
			spec{p + "mlp.down_proj.weight", []int{h, inter}},
		)
	}
	if o.Eagle3 {
		specs = append(specs, spec{"fc.weight", []int{h, 3 * h}}, spec{"midlayer.hidden_norm.weight", []int{h}})
		layer("midlayer.", 2*h, true)
		specs = append(specs, spec{"norm.weight", []int{h}}, spec{"lm_head.weight", []int{draftVocab, h}})
	} else {
		// EAGLE checkpoints carry a copy of the target's embedding, which
		// SGLang (and gosling) replace by the target's own.
		specs = append(specs, spec{"embed_tokens.weight", []int{vocab, h}}, spec{"fc.weight", []int{h, 2 * h}}, spec{"fc.bias", []int{h}})
		layer("layers.0.", h, false)
	}
	opts := Options{Seed: o.Seed, Std: o.Std}
	var out []safetensors.Tensor
	for _, s := range specs {
		v := opts.values(s)
		if strings.HasSuffix(s.name, ".bias") {
			v = opts.values(spec{s.name, []int{1, s.shape[0]}})
		}
		data := make([]byte, 4*len(v))
		tensor.EncodeInto(tensor.F32, v, data)
		out = append(out, safetensors.Tensor{Name: s.name, DType: "F32", Shape: s.shape, Data: data})
	}
	if o.Eagle3 {
		// Draft token d is target token d·vocab/draftVocab: d2t holds the
		// offsets (int64), t2d marks the target tokens drafted.
		d2t := make([]byte, 8*draftVocab)
		t2d := make([]byte, vocab)
		for d := range draftVocab {
			t := d * vocab / draftVocab
			binary.LittleEndian.PutUint64(d2t[8*d:], uint64(int64(t-d)))
			t2d[t] = 1
		}
		out = append(out, safetensors.Tensor{Name: "d2t", DType: "I64", Shape: []int{draftVocab}, Data: d2t},
			safetensors.Tensor{Name: "t2d", DType: "BOOL", Shape: []int{vocab}, Data: t2d})
	}
	return safetensors.Write(filepath.Join(dir, "model.safetensors"), out)
}
