package model

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gosling-ai/gosling/model/gguf"
	"github.com/gosling-ai/gosling/tensor"
)

// ggufArchitectures maps general.architecture to the Hugging Face class
// whose tensors and layout the GGUF file holds (after gguf.HFName). Other
// architectures keep their GGUF name, which the registry reports as
// unsupported rather than running them with the wrong layers.
var ggufArchitectures = map[string]string{
	"llama": "LlamaForCausalLM",
	"qwen2": "Qwen2ForCausalLM",
	"qwen3": "Qwen3ForCausalLM",
}

// ggufInterleaved lists the architectures whose q/k rows llama.cpp's
// converter stores in the interleaved RoPE layout (its LLAMA_ROPE_TYPE_NORM);
// the others keep Hugging Face's rotate-half layout (NEOX).
var ggufInterleaved = map[string]bool{"llama": true}

// noToken is how GGUF writers mark an unset uint32 token id.
const noToken = 0xFFFFFFFF

// configFromGGUF builds a Config from GGUF metadata and the weights, viewed
// under Hugging Face names (the vocabulary size and the presence of
// lm_head, biases and q/k norms come from the tensors).
func configFromGGUF(md map[string]any, ws WeightSource) (Config, error) {
	arch, ok := gguf.String(md, "general.architecture")
	if !ok || arch == "" {
		return Config{}, fmt.Errorf("metadata has no general.architecture")
	}
	key := func(name string) string { return arch + "." + name }
	required := func(name string) (int, error) {
		v, ok := gguf.Int(md, key(name))
		if !ok {
			if _, present := md[key(name)]; present {
				return 0, fmt.Errorf("metadata %s is %T, want an integer (per-layer values are not supported)", key(name), md[key(name)])
			}
			return 0, fmt.Errorf("metadata has no %s", key(name))
		}
		return v, nil
	}

	cfg := Config{
		Architecture:    arch,
		ModelType:       arch,
		RMSNormEps:      1e-5, // llama.cpp's converters always write it; this is Llama's value
		HiddenAct:       defaultHiddenAct,
		RopeTheta:       defaultRopeTheta,
		RopeInterleaved: ggufInterleaved[arch],
		BOSTokenID:      -1,
		PadTokenID:      -1,
	}
	if hf, ok := ggufArchitectures[arch]; ok {
		cfg.Architecture = hf
	}
	var err error
	if cfg.HiddenSize, err = required("embedding_length"); err != nil {
		return Config{}, err
	}
	if cfg.IntermediateSize, err = required("feed_forward_length"); err != nil {
		return Config{}, err
	}
	if cfg.NumLayers, err = required("block_count"); err != nil {
		return Config{}, err
	}
	if cfg.NumHeads, err = required("attention.head_count"); err != nil {
		return Config{}, err
	}
	cfg.NumKVHeads = cfg.NumHeads
	if _, present := md[key("attention.head_count_kv")]; present {
		if cfg.NumKVHeads, err = required("attention.head_count_kv"); err != nil {
			return Config{}, err
		}
	}
	if cfg.NumHeads > 0 {
		cfg.HeadDim = cfg.HiddenSize / cfg.NumHeads
	}
	if v, ok := gguf.Int(md, key("attention.key_length")); ok {
		cfg.HeadDim = v
	}
	if v, ok := gguf.Float(md, key("attention.layer_norm_rms_epsilon")); ok {
		cfg.RMSNormEps = v
	}
	if v, ok := gguf.Float(md, key("rope.freq_base")); ok {
		cfg.RopeTheta = v
	}
	if v, ok := gguf.Int(md, key("context_length")); ok {
		cfg.MaxPositions = v
	}
	if v, ok := gguf.Int(md, key("attention.sliding_window")); ok && v > 0 {
		cfg.SlidingWindow = v
		if arch == "gemma2" {
			cfg.LayerTypes = gemma2LayerTypes(cfg.NumLayers)
		}
	}
	if strings.HasPrefix(arch, "gemma") {
		cfg.HiddenAct = "gelu_pytorch_tanh"
	}
	cfg.RopeScaling = ggufRopeScaling(md, key)

	embed, err := ws.Tensor("model.embed_tokens.weight")
	switch {
	case err == nil && len(embed.Shape) == 2:
		cfg.VocabSize = embed.Shape[0]
		cfg.TorchDType = dtypeName(embed.DType)
	default:
		if tokens, ok := gguf.Array(md, "tokenizer.ggml.tokens"); ok {
			cfg.VocabSize = len(tokens)
		} else if v, ok := gguf.Int(md, key("vocab_size")); ok {
			cfg.VocabSize = v
		}
	}

	cfg.TieWordEmbeddings = !ws.Has("lm_head.weight")
	cfg.AttentionBias = arch == "qwen2" || ws.Has("model.layers.0.self_attn.q_proj.bias")
	cfg.QKNorm = arch == "qwen3" || ws.Has("model.layers.0.self_attn.q_norm.weight")

	if id, ok := ggufTokenID(md, "tokenizer.ggml.bos_token_id"); ok {
		cfg.BOSTokenID = id
	}
	if id, ok := ggufTokenID(md, "tokenizer.ggml.padding_token_id"); ok {
		cfg.PadTokenID = id
	}
	// End-of-turn and end-of-message tokens also end generation, as in
	// llama.cpp (Llama 3 chat models end turns with <|eot_id|>).
	for _, k := range []string{"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"} {
		if id, ok := ggufTokenID(md, k); ok && !slices.Contains(cfg.EOSTokenIDs, id) {
			cfg.EOSTokenIDs = append(cfg.EOSTokenIDs, id)
		}
	}
	return cfg, nil
}

// ggufRopeScaling reads <arch>.rope.scaling.*; nil for plain RoPE. Llama 3
// style scaling is not in the metadata: llama.cpp stores its per-frequency
// factors as the tensor rope_freqs.weight.
func ggufRopeScaling(md map[string]any, key func(string) string) *RopeScaling {
	kind, _ := gguf.String(md, key("rope.scaling.type"))
	factor, hasFactor := gguf.Float(md, key("rope.scaling.factor"))
	if linear, ok := gguf.Float(md, key("rope.scale_linear")); ok && kind == "" && linear != 1 {
		kind, factor, hasFactor = "linear", linear, true // the key older converters wrote
	}
	if kind == "" || kind == "none" || (!hasFactor && kind == "linear") {
		return nil
	}
	rs := &RopeScaling{Type: kind, Factor: factor}
	if v, ok := gguf.Int(md, key("rope.scaling.original_context_length")); ok {
		rs.OriginalMaxPositionEmbeddings = v
	}
	if v, ok := gguf.Float(md, key("rope.scaling.yarn_beta_fast")); ok {
		rs.BetaFast = v
	}
	if v, ok := gguf.Float(md, key("rope.scaling.yarn_beta_slow")); ok {
		rs.BetaSlow = v
	}
	return rs
}

// ggufTokenID reads a token id, treating the writers' "unset" markers
// (0xFFFFFFFF, negative values) as absent.
func ggufTokenID(md map[string]any, key string) (int, bool) {
	v, ok := gguf.Int(md, key)
	if !ok || v < 0 || v == noToken {
		return 0, false
	}
	return v, true
}

// dtypeName is the torch_dtype-style name of a stored dtype.
func dtypeName(d tensor.DType) string {
	switch d {
	case tensor.F32:
		return "float32"
	case tensor.F16:
		return "float16"
	case tensor.BF16:
		return "bfloat16"
	}
	return strings.ToLower(d.String())
}
