// Package model describes a checkpoint: its architecture configuration
// (Config), its weights (WeightSource) and its generation defaults, read from
// any of the three supported formats (Hugging Face directory, GGUF, llama2.c).
// Architectures that turn a checkpoint into a runnable network live in
// model/<arch>; model/registry maps `architectures` names to them.
package model

import (
	"fmt"
	"slices"
)

// Config is the architecture configuration, normalised across formats.
// Field names follow Hugging Face's config.json.
type Config struct {
	Architecture string // e.g. "LlamaForCausalLM"
	ModelType    string // e.g. "llama"

	HiddenSize        int
	IntermediateSize  int
	NumLayers         int
	NumHeads          int
	NumKVHeads        int
	HeadDim           int // per head; hidden/heads unless config.json says otherwise
	VocabSize         int
	MaxPositions      int // max_position_embeddings (trained context)
	RMSNormEps        float64
	HiddenAct         string // "silu", "gelu_pytorch_tanh", ...
	TieWordEmbeddings bool

	RopeTheta float64
	// RopeLocalTheta is the base of the sliding-window layers' plain RoPE
	// where it differs from the global layers' (Gemma 3); 0: RopeTheta
	// and RopeScaling serve every layer.
	RopeLocalTheta float64
	// RopeScaling is nil for plain RoPE.
	RopeScaling *RopeScaling
	// RopeInterleaved selects GPT-J-style rotation of adjacent pairs
	// (x[2i], x[2i+1]), the layout of Meta's original weights, llama2.c and
	// GGUF llama; false is Hugging Face's rotate-half (x[i], x[i+d/2]).
	RopeInterleaved bool
	// RotaryDim is how many values at the start of each head RoPE rotates
	// (head_dim·partial_rotary_factor, Phi-4-mini); 0 means the whole
	// head. The frequencies are those of a head of RotaryDim values.
	RotaryDim int

	AttentionBias bool // q/k/v projections carry biases (Qwen2)
	QKNorm        bool // per-head RMSNorm on q and k before RoPE (Qwen3)

	// SlidingWindow is the attention window in tokens (a query attends to
	// itself and the window-1 tokens before it); 0 means full attention.
	SlidingWindow int
	// LayerTypes, when set, has one entry per layer: "full_attention" or
	// "sliding_attention". When nil and SlidingWindow > 0, every layer slides.
	LayerTypes []string

	// Gemma 2: the attention scale is QueryPreAttnScalar^-0.5 instead of
	// HeadDim^-0.5 (0: use HeadDim); softcaps squash scores or logits as
	// cap*tanh(x/cap) (0: off).
	QueryPreAttnScalar float64
	AttnLogitSoftcap   float64
	FinalLogitSoftcap  float64
	// GemmaNormsShifted says the checkpoint stores Gemma's norm weights
	// as the factor 1 + w (GGUF: llama.cpp's converter adds the 1), not w.
	GemmaNormsShifted bool

	// MLA is DeepSeek's multi-head latent attention; zero for other models.
	MLA MLAConfig
	// MoE is the mixture-of-experts layout; zero for dense models.
	MoE MoEConfig
	// SwigluLimit clamps GPT-OSS's expert activations (swiglu_limit).
	SwigluLimit float64

	BOSTokenID  int   // -1 when none
	EOSTokenIDs []int // generation stops on any of these
	PadTokenID  int   // -1 when none

	TorchDType string // dtype the checkpoint declares ("float32", "bfloat16", ...)

	// Vision is a vision-language model's image side; nil for text-only models.
	Vision *VisionConfig
}

// RopeScaling is rope_scaling / rope_parameters beyond the base theta.
// Type is one of RopeTypes.
type RopeScaling struct {
	Type                          string    // "linear", "llama3", "yarn", "dynamic", "longrope"
	Factor                        float64   // context extension factor (yarn, longrope: 0 derives it from the context lengths)
	LowFreqFactor                 float64   // llama3
	HighFreqFactor                float64   // llama3
	OriginalMaxPositionEmbeddings int       // llama3, yarn, longrope
	BetaFast, BetaSlow            float64   // yarn
	MScale, MScaleAllDim          float64   // yarn (DeepSeek)
	NoTruncate                    bool      // yarn: "truncate": false (GPT-OSS) keeps the ramp's ends fractional
	AttentionFactor               float64   // yarn, longrope: cos/sin factor; 0 derives it from the factor
	ShortFactor, LongFactor       []float64 // longrope: per-frequency divisors [head_dim/2]
}

// MLAConfig is the shape of multi-head latent attention (DeepSeek V2/V3).
// Each head's query is [QKNopeHeadDim ‖ QKRopeHeadDim] values, its key is
// up-projected from a KVLoraRank latent plus one rope part shared by all
// heads, and its value has VHeadDim values.
type MLAConfig struct {
	QLoraRank     int // 0: the query comes from a plain q_proj
	KVLoraRank    int // 0: the model has no MLA
	QKNopeHeadDim int
	QKRopeHeadDim int
	VHeadDim      int
}

// MoEConfig is a mixture of experts (DeepSeek, Qwen-MoE, Mixtral, GPT-OSS).
type MoEConfig struct {
	NumRoutedExperts       int    // 0: every layer is dense
	ExpertsKey             string // the config.json key it came from, for errors
	NumSharedExperts       int
	NumExpertsPerTok       int
	IntermediateSize       int   // of each routed expert
	SharedIntermediateSize int   // of the shared expert (0: none)
	FirstKDenseReplace     int   // layers [0, FirstKDenseReplace) are dense
	LayerFreq              int   // MoE on layers i >= FirstKDenseReplace with i%LayerFreq == 0
	SparseStep             int   // decoder_sparse_step (Qwen): MoE on layers with (i+1)%SparseStep == 0 instead
	DenseLayers            []int // mlp_only_layers (Qwen): always dense
	NumGroups              int   // n_group: experts are split into this many groups
	TopKGroups             int   // topk_group: tokens choose experts from this many groups
	NormTopKProb           bool
	RoutedScaling          float64 // routed_scaling_factor
	ScoringFunc            string  // "sigmoid" (V3) or "softmax" (V2)
	TopKMethod             string  // "noaux_tc" (V3), "group_limited_greedy" or "greedy" (V2)
}

// IsMoELayer reports whether layer i uses the mixture of experts.
func (m *MoEConfig) IsMoELayer(i int) bool {
	switch {
	case m.NumRoutedExperts == 0 || i < m.FirstKDenseReplace || slices.Contains(m.DenseLayers, i):
		return false
	case m.SparseStep > 0:
		return (i+1)%m.SparseStep == 0
	}
	return i%max(m.LayerFreq, 1) == 0
}

// LayerWindow is the sliding window of layer i (0 = full attention).
func (c *Config) LayerWindow(i int) int {
	if c.SlidingWindow <= 0 {
		return 0
	}
	if c.LayerTypes == nil {
		return c.SlidingWindow
	}
	if i < len(c.LayerTypes) && c.LayerTypes[i] == "sliding_attention" {
		return c.SlidingWindow
	}
	return 0
}

// RopeDim is the number of values RoPE rotates at the start of each head.
func (c *Config) RopeDim() int {
	if c.RotaryDim > 0 {
		return c.RotaryDim
	}
	return c.HeadDim
}

// Validate reports the first inconsistency that would make the model
// unusable, phrased for the user.
func (c *Config) Validate() error {
	for _, f := range []struct {
		name  string
		value int
	}{{"hidden_size", c.HiddenSize}, {"num_hidden_layers", c.NumLayers}, {"num_attention_heads", c.NumHeads},
		{"head_dim", c.HeadDim}, {"vocab_size", c.VocabSize}, {"intermediate_size", c.IntermediateSize}} {
		if err := requirePositive(f.name, f.value); err != nil {
			return err
		}
	}
	if c.NumKVHeads <= 0 || c.NumHeads%c.NumKVHeads != 0 {
		return fmt.Errorf("num_key_value_heads %d must divide num_attention_heads %d", c.NumKVHeads, c.NumHeads)
	}
	switch {
	case c.LayerTypes != nil && len(c.LayerTypes) != c.NumLayers:
		return fmt.Errorf("layer_types has %d entries for %d layers", len(c.LayerTypes), c.NumLayers)
	case c.RotaryDim < 0 || c.RotaryDim > c.HeadDim || c.RotaryDim%2 != 0:
		return fmt.Errorf("rotary dims %d (head_dim·partial_rotary_factor) must be even and at most head_dim %d", c.RotaryDim, c.HeadDim)
	case c.RopeScaling != nil && c.RopeScaling.Type == "longrope" && len(c.RopeScaling.ShortFactor) != c.RopeDim()/2:
		return fmt.Errorf("rope_scaling.short_factor has %d entries, want rotary dims/2 = %d", len(c.RopeScaling.ShortFactor), c.RopeDim()/2)
	}
	return nil
}

// requirePositive: a zero is what a field absent from the config reads as.
func requirePositive(name string, value int) error {
	switch {
	case value == 0:
		return fmt.Errorf("the model's config has no %s (or it is 0); it is required", name)
	case value < 0:
		return fmt.Errorf("%s must be positive, got %d", name, value)
	}
	return nil
}
