package model

import (
	"fmt"
	"strings"
)

// The mixture-of-experts and MLA keys of config.json: DeepSeek's, and the
// Qwen-MoE / Mixtral / GPT-OSS ones.

// deepseekDefaults are the config classes' defaults for the MLA and MoE keys
// a config.json may omit (DeepseekV2Config, DeepseekV3Config).
var deepseekDefaults = map[string]struct {
	mla                                                              MLAConfig
	routed, shared, perTok, moeInter, firstDense, groups, topkGroups int
	norm                                                             bool
	scaling                                                          float64
	scoring, method                                                  string
}{
	"deepseek_v2": {MLAConfig{1536, 512, 128, 64, 128}, 0, 0, 0, 1407, 0, 1, 1, false, 1, "softmax", "greedy"},
	"deepseek_v3": {MLAConfig{1536, 512, 128, 64, 128}, 256, 1, 8, 2048, 3, 8, 4, true, 2.5, "sigmoid", "noaux_tc"},
}

// parseDeepseek fills MLA and MoE for deepseek_v2 / deepseek_v3 configs.
func parseDeepseek(hf *hfConfig, cfg *Config) error {
	d := deepseekDefaults[hf.ModelType]
	intOr := func(p *int, def int) int {
		if p != nil {
			return *p
		}
		return def
	}
	cfg.MLA = MLAConfig{
		QLoraRank:     d.mla.QLoraRank,
		KVLoraRank:    intOr(hf.KVLoraRank, d.mla.KVLoraRank),
		QKNopeHeadDim: intOr(hf.QKNopeHeadDim, d.mla.QKNopeHeadDim),
		QKRopeHeadDim: intOr(hf.QKRopeHeadDim, d.mla.QKRopeHeadDim),
		VHeadDim:      intOr(hf.VHeadDim, d.mla.VHeadDim),
	}
	if len(hf.QLoraRank) > 0 {
		rank, err := optionalFloat(hf.QLoraRank, "q_lora_rank", 0)
		if err != nil {
			return err
		}
		cfg.MLA.QLoraRank = int(rank)
	}
	cfg.MoE = MoEConfig{
		NumRoutedExperts:   intOr(hf.NRoutedExperts, d.routed),
		NumSharedExperts:   intOr(hf.NSharedExperts, d.shared),
		NumExpertsPerTok:   intOr(hf.NumExpertsPerTok, d.perTok),
		IntermediateSize:   intOr(hf.MoEIntermediateSize, d.moeInter),
		FirstKDenseReplace: intOr(hf.FirstKDenseReplace, d.firstDense),
		LayerFreq:          intOr(hf.MoELayerFreq, 1),
		NumGroups:          intOr(hf.NGroup, d.groups),
		TopKGroups:         intOr(hf.TopKGroup, d.topkGroups),
		NormTopKProb:       d.norm,
		RoutedScaling:      d.scaling,
		ScoringFunc:        d.scoring,
		TopKMethod:         d.method,
	}
	cfg.MoE.ExpertsKey = "n_routed_experts"
	cfg.MoE.SharedIntermediateSize = cfg.MoE.IntermediateSize * cfg.MoE.NumSharedExperts
	if hf.NormTopKProb != nil {
		cfg.MoE.NormTopKProb = *hf.NormTopKProb
	}
	if hf.RoutedScalingFactor != nil {
		cfg.MoE.RoutedScaling = *hf.RoutedScalingFactor
	}
	if hf.ScoringFunc != "" {
		cfg.MoE.ScoringFunc = hf.ScoringFunc
	}
	if hf.TopKMethod != "" {
		cfg.MoE.TopKMethod = hf.TopKMethod
	}
	return nil
}

// moeDefaults are the config classes' defaults for the MoE keys a
// config.json may omit: experts, experts per token, expert and shared
// expert sizes (0: intermediate_size), top-k renormalised.
var moeDefaults = map[string]struct {
	experts, perTok, inter, shared int
	norm                           bool
}{
	"qwen2_moe": {60, 4, 1408, 5632, false},
	"qwen3_moe": {128, 8, 768, 0, false},
	"mixtral":   {8, 2, 0, 0, true},   // Mixtral always renormalises
	"gpt_oss":   {128, 4, 0, 0, true}, // softmax over the top-k logits
}

// parseMoE fills MoE for the Qwen MoE models, Mixtral and GPT-OSS: softmax
// routing over every expert, no groups, no scaling.
func parseMoE(hf *hfConfig, cfg *Config) error {
	d, ok := moeDefaults[hf.ModelType]
	if !ok {
		return nil
	}
	e := MoEConfig{NumRoutedExperts: d.experts, ExpertsKey: "num_experts", NumExpertsPerTok: d.perTok,
		IntermediateSize: d.inter, SharedIntermediateSize: d.shared, NormTopKProb: d.norm,
		RoutedScaling: 1, ScoringFunc: "softmax", TopKMethod: "greedy", DenseLayers: hf.MLPOnlyLayers, LayerFreq: 1}
	switch {
	case hf.NumExperts != nil:
		e.NumRoutedExperts = *hf.NumExperts
	case hf.NumLocalExperts != nil:
		e.NumRoutedExperts, e.ExpertsKey = *hf.NumLocalExperts, "num_local_experts"
	}
	if hf.NumExpertsPerTok != nil {
		e.NumExpertsPerTok = *hf.NumExpertsPerTok
	}
	if hf.MoEIntermediateSize != nil {
		e.IntermediateSize = *hf.MoEIntermediateSize
	}
	if e.IntermediateSize == 0 { // Mixtral, GPT-OSS: experts are intermediate_size wide
		e.IntermediateSize = cfg.IntermediateSize
	}
	if hf.SharedExpertInterSize != nil {
		e.SharedIntermediateSize = *hf.SharedExpertInterSize
	}
	if hf.NormTopKProb != nil && (hf.ModelType == "qwen2_moe" || hf.ModelType == "qwen3_moe") {
		e.NormTopKProb = *hf.NormTopKProb
	}
	if strings.HasPrefix(hf.ModelType, "qwen") {
		e.SparseStep = 1
		if hf.DecoderSparseStep != nil {
			e.SparseStep = *hf.DecoderSparseStep
		}
	}
	cfg.SwigluLimit = 7 // GptOssConfig's default
	if hf.SwigluLimit != nil {
		cfg.SwigluLimit = *hf.SwigluLimit
	}
	switch {
	case e.NumRoutedExperts <= 0:
		return fmt.Errorf("%s must be positive, got %d", e.ExpertsKey, e.NumRoutedExperts)
	case e.NumExpertsPerTok <= 0 || e.NumExpertsPerTok > e.NumRoutedExperts:
		return fmt.Errorf("num_experts_per_tok %d must be in [1, %s %d]", e.NumExpertsPerTok, e.ExpertsKey, e.NumRoutedExperts)
	case e.SparseStep < 0:
		return fmt.Errorf("decoder_sparse_step must be positive, got %d", e.SparseStep)
	}
	cfg.MoE = e
	return nil
}
