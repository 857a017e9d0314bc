package model

import (
	"fmt"
	"maps"
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
	"llama":    "LlamaForCausalLM", // MixtralForCausalLM with experts
	"qwen2":    "Qwen2ForCausalLM",
	"qwen3":    "Qwen3ForCausalLM",
	"qwen2moe": "Qwen2MoeForCausalLM",
	"qwen3moe": "Qwen3MoeForCausalLM",
	"gemma3":   "Gemma3ForCausalLM",
	"phi3":     "Phi3ForCausalLM",
	"gpt-oss":  "GptOssForCausalLM",
}

// ggufModelTypes are the config.json model_type of each architecture
// whose GGUF name differs from it.
var ggufModelTypes = map[string]string{
	"qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe", "gemma3": "gemma3_text", "phi3": "phi3", "gpt-oss": "gpt_oss",
}

// ggufNormTopK is whether an architecture renormalises its top-k routing
// weights when the file does not say (expert_weights_norm): llama.cpp's
// graphs fix it per architecture.
var ggufNormTopK = map[string]bool{"llama": true, "qwen2moe": false, "qwen3moe": true, "gpt-oss": true}

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
			if _, known := ggufArchitectures[arch]; !known {
				// Another architecture's metadata: its name is the problem.
				return 0, fmt.Errorf("general.architecture %q is not supported (supported: %s); its metadata has no %s",
					arch, strings.Join(slices.Sorted(maps.Keys(ggufArchitectures)), ", "), key(name))
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
	if mt, ok := ggufModelTypes[arch]; ok {
		cfg.ModelType = mt
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
	ggufSet(md, key("attention.key_length"), &cfg.HeadDim)
	ggufSet(md, key("attention.layer_norm_rms_epsilon"), &cfg.RMSNormEps)
	ggufSet(md, key("rope.freq_base"), &cfg.RopeTheta)
	ggufSet(md, key("context_length"), &cfg.MaxPositions)
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
	// Rotating part of each head is Phi-3's (Phi-4-mini); the other
	// architectures here rotate whole heads, so a shorter count is refused
	// rather than ignored.
	if v, ok := gguf.Int(md, key("rope.dimension_count")); ok && v != cfg.HeadDim {
		if !partialRotaryTypes[cfg.ModelType] || v <= 0 || v > cfg.HeadDim || v%2 != 0 {
			return Config{}, fmt.Errorf("metadata %s is %d, but heads are %d wide: rotary embeddings over part of each head are supported for %s only, over an even count", key("rope.dimension_count"), v, cfg.HeadDim, strings.Join(slices.Sorted(maps.Keys(partialRotaryTypes)), ", "))
		}
		cfg.RotaryDim = v
	}

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

	if err := ggufArchitectureKeys(md, arch, key, ws, &cfg); err != nil {
		return Config{}, err
	}

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

// ggufArchitectureKeys reads what the architectures beyond the Llama
// layer add: experts, Gemma 3's layer pattern and local RoPE base,
// GPT-OSS's alternating windows. Where llama.cpp fixes a value in its
// graph rather than reading a key, the default here is that value.
func ggufArchitectureKeys(md map[string]any, arch string, key func(string) string, ws WeightSource, cfg *Config) error {
	if n, ok := gguf.Int(md, key("expert_count")); ok && n > 0 {
		if arch == "llama" {
			cfg.Architecture, cfg.ModelType = "MixtralForCausalLM", "mixtral"
		}
		e := MoEConfig{NumRoutedExperts: n, ExpertsKey: key("expert_count"), NumExpertsPerTok: 2,
			IntermediateSize: cfg.IntermediateSize, NormTopKProb: ggufNormTopK[arch],
			RoutedScaling: 1, ScoringFunc: "softmax", TopKMethod: "greedy", LayerFreq: 1}
		ggufSet(md, key("expert_used_count"), &e.NumExpertsPerTok)
		ggufSet(md, key("expert_feed_forward_length"), &e.IntermediateSize)
		ggufSet(md, key("expert_shared_feed_forward_length"), &e.SharedIntermediateSize)
		if v, ok := gguf.Bool(md, key("expert_weights_norm")); ok {
			e.NormTopKProb = v
		}
		if strings.HasPrefix(arch, "qwen") {
			// A layer without a router is dense (mlp_only_layers).
			e.SparseStep = 1
			for i := range cfg.NumLayers {
				if !ws.Has(fmt.Sprintf("model.layers.%d.mlp.gate.weight", i)) {
					e.DenseLayers = append(e.DenseLayers, i)
				}
			}
		}
		if e.NumExpertsPerTok <= 0 || e.NumExpertsPerTok > e.NumRoutedExperts {
			return fmt.Errorf("metadata %s %d must be in [1, %s %d]", key("expert_used_count"), e.NumExpertsPerTok, key("expert_count"), n)
		}
		cfg.MoE = e
	}
	if def, ok := ggufWindowPatterns[arch]; ok && cfg.SlidingWindow > 0 {
		types, err := ggufWindowPattern(md, key("attention.sliding_window_pattern"), cfg.NumLayers, def)
		if err != nil {
			return err
		}
		cfg.LayerTypes = types
	}
	switch arch {
	case "gemma3":
		cfg.GemmaNormsShifted = true
		cfg.QKNorm = true
		cfg.QueryPreAttnScalar = float64(cfg.HeadDim)
		if cfg.NumLayers == 62 { // Gemma 3 27B scales by hidden/heads; llama.cpp knows it by its depth
			cfg.QueryPreAttnScalar = float64(cfg.HiddenSize / cfg.NumHeads)
		}
		cfg.RopeLocalTheta = 10000
		ggufSet(md, key("rope.freq_base_swa"), &cfg.RopeLocalTheta)
		ggufSet(md, key("final_logit_softcapping"), &cfg.FinalLogitSoftcap)
	case "gpt-oss":
		cfg.SwigluLimit = 7 // fixed in llama.cpp's graph, as in GptOssConfig
		if rs := cfg.RopeScaling; rs != nil && rs.Type == "yarn" {
			rs.NoTruncate = true // GPT-OSS's YaRN keeps the ramp's ends fractional
		}
	case "phi3":
		if ws.Has("rope_factors_long.weight") || ws.Has("rope_factors_short.weight") {
			return fmt.Errorf("tensors rope_factors_long/rope_factors_short (LongRoPE) are not supported in GGUF files yet")
		}
	}
	return nil
}

// ggufSet sets *dst to md[key] when the file has it as a number.
func ggufSet[T int | float64](md map[string]any, key string, dst *T) {
	switch d := any(dst).(type) {
	case *int:
		if v, ok := gguf.Int(md, key); ok {
			*d = v
		}
	case *float64:
		if v, ok := gguf.Float(md, key); ok {
			*d = v
		}
	}
}

// ggufWindowPatterns are the architectures that mix sliding and full
// layers, with llama.cpp's period when the file gives none: every n-th
// layer is full.
var ggufWindowPatterns = map[string]int{"gemma3": 6, "gpt-oss": 2}

// ggufWindowPattern reads which layers slide: an array of bools (true:
// sliding), or n, meaning every n-th layer is full and the others slide;
// def when the key is absent.
func ggufWindowPattern(md map[string]any, key string, layers, def int) ([]string, error) {
	types := make([]string, layers)
	if a, ok := gguf.Array(md, key); ok {
		if len(a) != layers {
			return nil, fmt.Errorf("metadata %s has %d entries for %d layers", key, len(a), layers)
		}
		for i, v := range a {
			b, ok := v.(bool)
			if !ok {
				return nil, fmt.Errorf("metadata %s[%d] is %T, want a bool", key, i, v)
			}
			types[i] = "full_attention"
			if b {
				types[i] = "sliding_attention"
			}
		}
		return types, nil
	}
	n := def
	if v, ok := gguf.Int(md, key); ok {
		n = v
	}
	if n <= 0 {
		return nil, fmt.Errorf("metadata %s must be positive, got %d", key, n)
	}
	for i := range types {
		types[i] = "sliding_attention"
		if (i+1)%n == 0 {
			types[i] = "full_attention"
		}
	}
	return types, nil
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
