package model

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// hfConfig is the subset of a Hugging Face config.json that Config needs.
// Pointers and raw messages mark keys whose absence or null means something
// different from a zero value.
type hfConfig struct {
	Architectures        []string        `json:"architectures"`
	ModelType            string          `json:"model_type"`
	HiddenSize           int             `json:"hidden_size"`
	IntermediateSize     int             `json:"intermediate_size"`
	NumLayers            int             `json:"num_hidden_layers"`
	NumHeads             int             `json:"num_attention_heads"`
	NumKVHeads           *int            `json:"num_key_value_heads"`
	HeadDim              *int            `json:"head_dim"`
	VocabSize            int             `json:"vocab_size"`
	MaxPositions         int             `json:"max_position_embeddings"`
	RMSNormEps           *float64        `json:"rms_norm_eps"`
	HiddenAct            string          `json:"hidden_act"`
	HiddenActivation     string          `json:"hidden_activation"` // Gemma's name for hidden_act
	TieWordEmbeddings    *bool           `json:"tie_word_embeddings"`
	RopeTheta            *float64        `json:"rope_theta"`
	RopeScaling          json.RawMessage `json:"rope_scaling"`
	RopeParameters       json.RawMessage `json:"rope_parameters"`      // transformers 5
	RopeInterleave       *bool           `json:"rope_interleave"`      // DeepSeek V3
	RopeLocalBaseFreq    *float64        `json:"rope_local_base_freq"` // Gemma 3 (transformers 4)
	PartialRotary        *float64        `json:"partial_rotary_factor"`
	OrigMaxPositions     int             `json:"original_max_position_embeddings"` // Phi-3, beside rope_scaling
	AttentionBias        *bool           `json:"attention_bias"`
	SlidingWindow        *int            `json:"sliding_window"`
	UseSlidingWindow     *bool           `json:"use_sliding_window"` // Qwen2/Qwen3
	MaxWindowLayers      *int            `json:"max_window_layers"`  // Qwen2/Qwen3
	LayerTypes           []string        `json:"layer_types"`
	SlidingWindowPattern *int            `json:"sliding_window_pattern"` // Gemma 3 without layer_types
	BOSTokenID           json.RawMessage `json:"bos_token_id"`
	EOSTokenID           json.RawMessage `json:"eos_token_id"`
	PadTokenID           json.RawMessage `json:"pad_token_id"`
	DType                string          `json:"dtype"`       // transformers 5
	TorchDType           string          `json:"torch_dtype"` // transformers 4

	// Gemma 2.
	QueryPreAttnScalar    *float64        `json:"query_pre_attn_scalar"`
	AttnLogitSoftcapping  json.RawMessage `json:"attn_logit_softcapping"`
	FinalLogitSoftcapping json.RawMessage `json:"final_logit_softcapping"`

	// DeepSeek V2/V3: multi-head latent attention and mixture of experts.
	QLoraRank           json.RawMessage `json:"q_lora_rank"` // null: plain q_proj
	KVLoraRank          *int            `json:"kv_lora_rank"`
	QKNopeHeadDim       *int            `json:"qk_nope_head_dim"`
	QKRopeHeadDim       *int            `json:"qk_rope_head_dim"`
	VHeadDim            *int            `json:"v_head_dim"`
	NRoutedExperts      *int            `json:"n_routed_experts"`
	NSharedExperts      *int            `json:"n_shared_experts"`
	NumExpertsPerTok    *int            `json:"num_experts_per_tok"`
	MoEIntermediateSize *int            `json:"moe_intermediate_size"`
	FirstKDenseReplace  *int            `json:"first_k_dense_replace"`
	MoELayerFreq        *int            `json:"moe_layer_freq"`
	NGroup              *int            `json:"n_group"`
	TopKGroup           *int            `json:"topk_group"`
	NormTopKProb        *bool           `json:"norm_topk_prob"`
	RoutedScalingFactor *float64        `json:"routed_scaling_factor"`
	ScoringFunc         string          `json:"scoring_func"`
	TopKMethod          string          `json:"topk_method"`

	// Qwen2-MoE, Qwen3-MoE, Mixtral, GPT-OSS.
	NumExperts            *int     `json:"num_experts"`       // Qwen
	NumLocalExperts       *int     `json:"num_local_experts"` // Mixtral, GPT-OSS (and Qwen3-MoE in transformers 5)
	SharedExpertInterSize *int     `json:"shared_expert_intermediate_size"`
	DecoderSparseStep     *int     `json:"decoder_sparse_step"`
	MLPOnlyLayers         []int    `json:"mlp_only_layers"`
	SwigluLimit           *float64 `json:"swiglu_limit"` // GPT-OSS
}

// ropeParams is one rope_scaling or rope_parameters object.
type ropeParams struct {
	RopeTheta                     *float64  `json:"rope_theta"`
	RopeType                      string    `json:"rope_type"`
	Type                          string    `json:"type"` // the older key for rope_type
	Factor                        float64   `json:"factor"`
	LowFreqFactor                 float64   `json:"low_freq_factor"`
	HighFreqFactor                float64   `json:"high_freq_factor"`
	OriginalMaxPositionEmbeddings float64   `json:"original_max_position_embeddings"`
	BetaFast                      float64   `json:"beta_fast"`
	BetaSlow                      float64   `json:"beta_slow"`
	MScale                        float64   `json:"mscale"`
	MScaleAllDim                  float64   `json:"mscale_all_dim"`
	Truncate                      *bool     `json:"truncate"`
	AttentionFactor               float64   `json:"attention_factor"`
	ShortFactor                   []float64 `json:"short_factor"`
	LongFactor                    []float64 `json:"long_factor"`
	PartialRotaryFactor           *float64  `json:"partial_rotary_factor"`
}

// Defaults of the transformers config classes for keys a config.json may
// omit.
const (
	defaultRopeTheta       = 10000.0
	defaultRMSNormEps      = 1e-6
	defaultHiddenAct       = "silu"
	defaultMaxWindowLayers = 28 // Qwen2Config, Qwen3Config
)

// architectureOfType names the class for the rare config.json without
// "architectures".
var architectureOfType = map[string]string{
	"llama":   "LlamaForCausalLM",
	"mistral": "MistralForCausalLM",
	"qwen2":   "Qwen2ForCausalLM",
	"qwen3":   "Qwen3ForCausalLM",
	"gemma2":  "Gemma2ForCausalLM",

	"gemma3_text": "Gemma3ForCausalLM",
	"qwen2_moe":   "Qwen2MoeForCausalLM",
	"qwen3_moe":   "Qwen3MoeForCausalLM",
	"mixtral":     "MixtralForCausalLM",
	"phi3":        "Phi3ForCausalLM",

	"deepseek_v2": "DeepseekV2ForCausalLM",
	"deepseek_v3": "DeepseekV3ForCausalLM",
}

// ParseHFConfig decodes a Hugging Face config.json into a Config. It
// accepts both rope_theta + rope_scaling (transformers 4) and
// rope_parameters (transformers 5). The Config is not validated.
func ParseHFConfig(data []byte) (Config, error) {
	cfg, _, err := parseHFConfig(data)
	return cfg, err
}

// parseHFConfig also reports whether tie_word_embeddings was given, so
// that the loader can let the weights decide when it was not.
func parseHFConfig(data []byte) (cfg Config, tieGiven bool, err error) {
	if cfg, tieGiven, ok, err := parseVLConfig(data); ok {
		return cfg, tieGiven, err
	}
	return parseTextConfig(data)
}

// parseTextConfig reads a language model's config (a whole text-only
// config.json, or a vision-language model's text_config).
func parseTextConfig(data []byte) (cfg Config, tieGiven bool, err error) {
	var hf hfConfig
	if err := json.Unmarshal(data, &hf); err != nil {
		return Config{}, false, jsonError(err)
	}
	cfg = Config{
		ModelType:        hf.ModelType,
		HiddenSize:       hf.HiddenSize,
		IntermediateSize: hf.IntermediateSize,
		NumLayers:        hf.NumLayers,
		NumHeads:         hf.NumHeads,
		NumKVHeads:       hf.NumHeads,
		VocabSize:        hf.VocabSize,
		MaxPositions:     hf.MaxPositions,
		RMSNormEps:       defaultRMSNormEps,
		HiddenAct:        defaultHiddenAct,
		LayerTypes:       hf.LayerTypes,
		TorchDType:       hf.DType,
	}
	if len(hf.Architectures) > 0 {
		cfg.Architecture = hf.Architectures[0]
	} else {
		cfg.Architecture = architectureOfType[hf.ModelType]
	}
	if hf.ModelType == "" { // hand-written configs: the architecture says it
		for t, a := range architectureOfType {
			if a == cfg.Architecture {
				hf.ModelType, cfg.ModelType = t, t
			}
		}
	}
	if hf.NumKVHeads != nil {
		cfg.NumKVHeads = *hf.NumKVHeads
	}
	switch {
	case hf.HeadDim != nil && *hf.HeadDim > 0:
		cfg.HeadDim = *hf.HeadDim
	case hf.NumHeads > 0:
		cfg.HeadDim = hf.HiddenSize / hf.NumHeads
	}
	if hf.RMSNormEps != nil {
		cfg.RMSNormEps = *hf.RMSNormEps
	}
	// Gemma configs carry both; hidden_activation is the one Gemma reads.
	if hf.HiddenActivation != "" {
		cfg.HiddenAct = hf.HiddenActivation
	} else if hf.HiddenAct != "" {
		cfg.HiddenAct = hf.HiddenAct
	}
	if cfg.TorchDType == "" {
		cfg.TorchDType = hf.TorchDType
	}

	isQwen2 := hf.ModelType == "qwen2" || hf.ModelType == "qwen2_moe" || hf.ModelType == "qwen2_5_vl_text" || hf.ModelType == "qwen2_5_vl"
	isQwen3 := hf.ModelType == "qwen3" || hf.ModelType == "qwen3_moe"
	isGemma := hf.ModelType == "gemma" || hf.ModelType == "gemma2" || hf.ModelType == "gemma3_text"

	// The config classes' own defaults: Gemma ties, the others do not.
	cfg.TieWordEmbeddings = isGemma
	if hf.TieWordEmbeddings != nil {
		cfg.TieWordEmbeddings, tieGiven = *hf.TieWordEmbeddings, true
	}
	// Qwen2 always has q/k/v biases; its config has no key for them.
	cfg.AttentionBias = isQwen2 || (hf.AttentionBias != nil && *hf.AttentionBias)
	cfg.QKNorm = isQwen3 || hf.ModelType == "gemma3_text"
	cfg.RopeInterleaved = hf.RopeInterleave != nil && *hf.RopeInterleave
	isDeepseek := hf.ModelType == "deepseek_v2" || hf.ModelType == "deepseek_v3"
	if isDeepseek && hf.RopeInterleave == nil {
		// DeepSeek checkpoints keep Meta's interleaved rope layout: V2 always,
		// V3 unless rope_interleave says otherwise (its config default is true).
		cfg.RopeInterleaved = true
	}

	if err := parseRope(&hf, &cfg); err != nil {
		return Config{}, false, err
	}
	if hf.ModelType == "gemma3_text" && cfg.RopeLocalTheta == 0 {
		cfg.RopeLocalTheta = 10000 // Gemma3TextConfig's rope_local_base_freq
	}
	parseWindow(&hf, &cfg, isQwen2 || isQwen3)
	if err := parseGemma2(&hf, &cfg); err != nil {
		return Config{}, false, err
	}
	if isDeepseek {
		if err := parseDeepseek(&hf, &cfg); err != nil {
			return Config{}, false, err
		}
	}
	if err := parseMoE(&hf, &cfg); err != nil {
		return Config{}, false, err
	}

	if cfg.BOSTokenID, err = optionalTokenID(hf.BOSTokenID, "bos_token_id"); err != nil {
		return Config{}, false, err
	}
	if cfg.PadTokenID, err = optionalTokenID(hf.PadTokenID, "pad_token_id"); err != nil {
		return Config{}, false, err
	}
	if cfg.EOSTokenIDs, err = tokenIDList(hf.EOSTokenID, "eos_token_id"); err != nil {
		return Config{}, false, err
	}
	return cfg, tieGiven, nil
}

// parseRope fills RopeTheta, RopeLocalTheta and RopeScaling. rope_parameters
// (transformers 5) wins over rope_theta and rope_scaling (transformers 4)
// where both are present, because transformers 5 reads it first.
func parseRope(hf *hfConfig, cfg *Config) error {
	scaling, scalingLocal, err := decodeRopeParams(hf.RopeScaling, "rope_scaling")
	if err != nil {
		return err
	}
	params, paramsLocal, err := decodeRopeParams(hf.RopeParameters, "rope_parameters")
	if err != nil {
		return err
	}
	switch {
	case params != nil && params.RopeTheta != nil:
		cfg.RopeTheta = *params.RopeTheta
	case hf.RopeTheta != nil:
		cfg.RopeTheta = *hf.RopeTheta
	case scaling != nil && scaling.RopeTheta != nil: // transformers 5 accepts rope_scaling as an alias
		cfg.RopeTheta = *scaling.RopeTheta
	default:
		cfg.RopeTheta = defaultRopeTheta
	}
	switch {
	case paramsLocal != nil && paramsLocal.RopeTheta != nil:
		cfg.RopeLocalTheta = *paramsLocal.RopeTheta
	case scalingLocal != nil && scalingLocal.RopeTheta != nil:
		cfg.RopeLocalTheta = *scalingLocal.RopeTheta
	case hf.RopeLocalBaseFreq != nil:
		cfg.RopeLocalTheta = *hf.RopeLocalBaseFreq
	}
	if cfg.RopeScaling, err = params.scaling("rope_parameters"); err != nil {
		return err
	}
	// rope_scaling is checked even where rope_parameters' scaling wins:
	// a type nobody defines is an error wherever it is written.
	legacy, err := scaling.scaling("rope_scaling")
	if err != nil {
		return err
	}
	if cfg.RopeScaling == nil {
		cfg.RopeScaling = legacy
	}
	if rs := cfg.RopeScaling; rs != nil && rs.OriginalMaxPositionEmbeddings == 0 && hf.OrigMaxPositions > 0 {
		rs.OriginalMaxPositionEmbeddings = hf.OrigMaxPositions // Phi-3 keeps it beside rope_scaling
	}
	partial, key := hf.PartialRotary, "partial_rotary_factor"
	for _, q := range []struct {
		p   *ropeParams
		key string
	}{{params, "rope_parameters"}, {scaling, "rope_scaling"}} {
		if partial == nil && q.p != nil && q.p.PartialRotaryFactor != nil {
			partial, key = q.p.PartialRotaryFactor, q.key+".partial_rotary_factor"
		}
	}
	if partial == nil || *partial == 1 {
		return nil
	}
	// Of the architectures served here only Phi-3's attention (Phi-4-mini)
	// rotates part of each head in transformers; the others would fail
	// there on the shorter cos/sin, so a factor is refused rather than
	// guessed at.
	if !partialRotaryTypes[hf.ModelType] {
		return fmt.Errorf("%s %v is not supported for model_type %q (rotary embeddings over part of each head: %s)", key, *partial, hf.ModelType, strings.Join(slices.Sorted(maps.Keys(partialRotaryTypes)), ", "))
	}
	// transformers: dim = int(head_dim · partial_rotary_factor).
	rot := int(float64(cfg.HeadDim) * *partial)
	if *partial <= 0 || *partial > 1 || rot == 0 || rot%2 != 0 {
		return fmt.Errorf("%s %v gives %d rotary dims of a %d-value head; they must be even and positive", key, *partial, rot, cfg.HeadDim)
	}
	cfg.RotaryDim = rot
	return nil
}

// partialRotaryTypes are the model types whose attention applies RoPE to
// the first head_dim·partial_rotary_factor values only.
var partialRotaryTypes = map[string]bool{"phi3": true}

// decodeRopeParams reads one rope object; null or absent is nil. A
// per-layer-type object ({"full_attention": {...}, "sliding_attention":
// {...}}, Gemma 3) yields its full-attention entry, the one that may be
// scaled, and its sliding-attention entry as local.
func decodeRopeParams(raw json.RawMessage, key string) (global, local *ropeParams, err error) {
	if isNull(raw) {
		return nil, nil, nil
	}
	var byType map[string]json.RawMessage
	if err := json.Unmarshal(raw, &byType); err != nil {
		return nil, nil, fmt.Errorf("%s must be an object: %v", key, err)
	}
	full, perType := byType["full_attention"]
	perType = perType && byType["rope_type"] == nil && byType["rope_theta"] == nil
	if perType {
		raw = full
		if slide, ok := byType["sliding_attention"]; ok {
			local = &ropeParams{}
			if err := json.Unmarshal(slide, local); err != nil {
				return nil, nil, fmt.Errorf("%s.sliding_attention: %w", key, jsonError(err))
			}
			if s, err := local.scaling(key + ".sliding_attention"); err != nil {
				return nil, nil, err
			} else if s != nil {
				return nil, nil, fmt.Errorf("%s.sliding_attention.rope_type %q is not supported (sliding layers take plain RoPE)", key, s.Type)
			}
		}
	}
	var p ropeParams
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", key, jsonError(err))
	}
	return &p, local, nil
}

// scaling converts to RopeScaling; plain RoPE ("default", or no type) is
// nil, and a type transformers does not define is an error naming it.
func (p *ropeParams) scaling(key string) (*RopeScaling, error) {
	if p == nil {
		return nil, nil
	}
	kind := p.RopeType
	if kind == "" {
		kind = p.Type
	}
	// mrope (Qwen2-VL) is plain RoPE for text, whose three position
	// streams are equal.
	if kind == "" || kind == "default" || kind == "mrope" {
		return nil, nil
	}
	rs := &RopeScaling{
		Type:                          kind,
		Factor:                        p.Factor,
		LowFreqFactor:                 p.LowFreqFactor,
		HighFreqFactor:                p.HighFreqFactor,
		OriginalMaxPositionEmbeddings: int(p.OriginalMaxPositionEmbeddings),
		BetaFast:                      p.BetaFast,
		BetaSlow:                      p.BetaSlow,
		MScale:                        p.MScale,
		MScaleAllDim:                  p.MScaleAllDim,
		NoTruncate:                    p.Truncate != nil && !*p.Truncate,
		AttentionFactor:               p.AttentionFactor,
		ShortFactor:                   p.ShortFactor,
		LongFactor:                    p.LongFactor,
	}
	if err := checkRopeScaling(rs, key); err != nil {
		return nil, err
	}
	return rs, nil
}

// parseWindow fills SlidingWindow and, where the config implies them
// without listing them, LayerTypes.
func parseWindow(hf *hfConfig, cfg *Config, isQwen bool) {
	if hf.SlidingWindow != nil && *hf.SlidingWindow > 0 {
		cfg.SlidingWindow = *hf.SlidingWindow
	}
	// Qwen configs carry a sliding_window that is off unless
	// use_sliding_window says otherwise (its default is false).
	if (hf.UseSlidingWindow != nil && !*hf.UseSlidingWindow) || (isQwen && hf.UseSlidingWindow == nil) {
		cfg.SlidingWindow = 0
	}
	if cfg.SlidingWindow == 0 || hf.LayerTypes != nil {
		return
	}
	switch {
	case hf.ModelType == "gemma2":
		cfg.LayerTypes = gemma2LayerTypes(cfg.NumLayers)
	case hf.ModelType == "gemma3_text":
		// Gemma 3: every sliding_window_pattern-th layer is global.
		pattern := 6
		if hf.SlidingWindowPattern != nil && *hf.SlidingWindowPattern > 0 {
			pattern = *hf.SlidingWindowPattern
		}
		cfg.LayerTypes = make([]string, cfg.NumLayers)
		for i := range cfg.LayerTypes {
			cfg.LayerTypes[i] = "sliding_attention"
			if (i+1)%pattern == 0 {
				cfg.LayerTypes[i] = "full_attention"
			}
		}
	case isQwen:
		// Qwen slides only from layer max_window_layers on.
		first := defaultMaxWindowLayers
		if hf.MaxWindowLayers != nil {
			first = *hf.MaxWindowLayers
		}
		cfg.LayerTypes = make([]string, cfg.NumLayers)
		for i := range cfg.LayerTypes {
			cfg.LayerTypes[i] = "full_attention"
			if i >= first {
				cfg.LayerTypes[i] = "sliding_attention"
			}
		}
	}
}

// parseGemma2 reads the attention scale and the softcaps. Gemma2Config's
// defaults apply to a gemma2 config that omits them; null turns a softcap
// off.
func parseGemma2(hf *hfConfig, cfg *Config) error {
	isGemma2 := hf.ModelType == "gemma2"
	if hf.QueryPreAttnScalar != nil {
		cfg.QueryPreAttnScalar = *hf.QueryPreAttnScalar
	} else if isGemma2 || hf.ModelType == "gemma3_text" {
		cfg.QueryPreAttnScalar = 256
	}
	var err error
	attnDefault, finalDefault := 0.0, 0.0
	if isGemma2 {
		attnDefault, finalDefault = 50, 30
	}
	if cfg.AttnLogitSoftcap, err = optionalFloat(hf.AttnLogitSoftcapping, "attn_logit_softcapping", attnDefault); err != nil {
		return err
	}
	cfg.FinalLogitSoftcap, err = optionalFloat(hf.FinalLogitSoftcapping, "final_logit_softcapping", finalDefault)
	return err
}

// optionalFloat reads a number that may be absent (def) or null (0).
func optionalFloat(raw json.RawMessage, key string, def float64) (float64, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return def, nil
	}
	if isNull(raw) {
		return 0, nil
	}
	var v float64
	if err := json.Unmarshal(raw, &v); err != nil {
		return 0, fmt.Errorf("%s must be a number or null, got %s", key, raw)
	}
	return v, nil
}

// gemma2LayerTypes is Gemma 2's fixed pattern: layers alternate, starting
// with a sliding one.
func gemma2LayerTypes(layers int) []string {
	types := make([]string, layers)
	for i := range types {
		types[i] = "full_attention"
		if i%2 == 0 {
			types[i] = "sliding_attention"
		}
	}
	return types
}

// parseGenerationConfig decodes generation_config.json.
func parseGenerationConfig(data []byte) (GenerationDefaults, error) {
	var g struct {
		Temperature       *float64        `json:"temperature"`
		TopP              *float64        `json:"top_p"`
		TopK              *int            `json:"top_k"`
		MinP              *float64        `json:"min_p"`
		RepetitionPenalty *float64        `json:"repetition_penalty"`
		MaxNewTokens      *int            `json:"max_new_tokens"`
		EOSTokenID        json.RawMessage `json:"eos_token_id"`
	}
	if err := json.Unmarshal(data, &g); err != nil {
		return GenerationDefaults{}, jsonError(err)
	}
	eos, err := tokenIDList(g.EOSTokenID, "eos_token_id")
	if err != nil {
		return GenerationDefaults{}, err
	}
	// Like SGLang, take the sampling values as defaults even when
	// do_sample is false: a request can always ask for greedy.
	return GenerationDefaults{
		Temperature:       g.Temperature,
		TopP:              g.TopP,
		TopK:              g.TopK,
		MinP:              g.MinP,
		RepetitionPenalty: g.RepetitionPenalty,
		MaxNewTokens:      g.MaxNewTokens,
		EOSTokenIDs:       eos,
	}, nil
}

// optionalTokenID reads a token id that may be absent or null (-1).
func optionalTokenID(raw json.RawMessage, key string) (int, error) {
	if isNull(raw) {
		return -1, nil
	}
	ids, err := tokenIDList(raw, key)
	if err != nil {
		return 0, err
	}
	if len(ids) == 0 {
		return -1, nil
	}
	return ids[0], nil
}

// tokenIDList reads a token id given as an integer, a list, or null.
func tokenIDList(raw json.RawMessage, key string) ([]int, error) {
	if isNull(raw) {
		return nil, nil
	}
	var one int
	if err := json.Unmarshal(raw, &one); err == nil {
		return []int{one}, nil
	}
	var many []int
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, fmt.Errorf("%s must be an integer or a list of integers, got %s", key, raw)
	}
	return many, nil
}

// jsonError phrases a decoding error for the user: a syntax error, or the
// key whose value has the wrong type.
func jsonError(err error) error {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) && typeErr.Field != "" {
		return fmt.Errorf("%s: want %s, got a JSON %s", typeErr.Field, strings.TrimPrefix(typeErr.Type.String(), "*"), typeErr.Value)
	}
	return fmt.Errorf("invalid JSON: %v", err)
}

func isNull(raw json.RawMessage) bool {
	trimmed := bytes.TrimSpace(raw)
	return len(trimmed) == 0 || string(trimmed) == "null"
}
