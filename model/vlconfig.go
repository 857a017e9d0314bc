package model

import (
	"encoding/json"
	"fmt"
)

// VisionConfig is a vision-language model's image side: its vision tower
// (vision_config) and how images appear in the token stream.
type VisionConfig struct {
	ModelType        string // "qwen2_5_vl_vision", "siglip_vision_model"
	HiddenSize       int
	IntermediateSize int
	NumLayers        int
	NumHeads         int
	PatchSize        int
	ImageSize        int // SigLIP: the fixed input size
	HiddenAct        string
	LayerNormEps     float64

	// Qwen2.5-VL.
	OutHiddenSize     int   // the merger's output (the text hidden size)
	SpatialMergeSize  int   // patches merged per side into one token
	TemporalPatchSize int   // frames per patch
	WindowSize        int   // window attention span in pixels
	FullAttBlocks     []int // blocks attending over the whole image
	MRopeSection      []int // the text rope's frequencies per (t, h, w) stream

	// Tokens: placeholder, and the markers around each image.
	ImageTokenID, StartTokenID, EndTokenID int
	// Qwen2.5-VL's video placeholder (-1: the model reads no video), and
	// the M-RoPE temporal positions per second of video.
	VideoTokenID    int
	TokensPerSecond int
	// MMTokensPerImage is Gemma 3's fixed image length in tokens.
	MMTokensPerImage int
}

// ImageTokens is how many placeholder tokens one image (or video) whose
// patch grid is grid takes: Gemma 3's fixed mm_tokens_per_image, or
// Qwen2.5-VL's one per spatial_merge_size² patches.
func (v *VisionConfig) ImageTokens(grid [3]int) int {
	if v.MMTokensPerImage > 0 {
		return v.MMTokensPerImage
	}
	return grid[0] * grid[1] * grid[2] / (v.SpatialMergeSize * v.SpatialMergeSize)
}

// hfVLConfig is the top level of a vision-language config.json.
type hfVLConfig struct {
	Architectures     []string        `json:"architectures"`
	ModelType         string          `json:"model_type"`
	TextConfig        json.RawMessage `json:"text_config"`
	VisionConfig      json.RawMessage `json:"vision_config"`
	TieWordEmbeddings *bool           `json:"tie_word_embeddings"`
	ImageTokenID      *int            `json:"image_token_id"`
	ImageTokenIndex   *int            `json:"image_token_index"` // Gemma 3
	VideoTokenID      *int            `json:"video_token_id"`
	VisionStartID     *int            `json:"vision_start_token_id"`
	VisionEndID       *int            `json:"vision_end_token_id"`
	BOIIndex          *int            `json:"boi_token_index"` // Gemma 3
	EOIIndex          *int            `json:"eoi_token_index"`
	MMTokensPerImage  int             `json:"mm_tokens_per_image"`
}

type hfVisionConfig struct {
	ModelType         string   `json:"model_type"`
	HiddenSize        int      `json:"hidden_size"`
	IntermediateSize  int      `json:"intermediate_size"`
	Depth             int      `json:"depth"`             // Qwen
	NumLayers         int      `json:"num_hidden_layers"` // SigLIP
	NumHeads          int      `json:"num_heads"`         // Qwen
	NumAttentionHeads int      `json:"num_attention_heads"`
	PatchSize         int      `json:"patch_size"`
	ImageSize         int      `json:"image_size"`
	HiddenAct         string   `json:"hidden_act"`
	LayerNormEps      *float64 `json:"layer_norm_eps"`
	OutHiddenSize     int      `json:"out_hidden_size"`
	SpatialMergeSize  int      `json:"spatial_merge_size"`
	TemporalPatchSize int      `json:"temporal_patch_size"`
	WindowSize        int      `json:"window_size"`
	FullAttBlocks     []int    `json:"fullatt_block_indexes"`
	TokensPerSecond   int      `json:"tokens_per_second"`
}

// parseVLConfig reads a config.json with a vision_config: the text model
// from text_config (transformers 5, Gemma 3) or from the top level
// (Qwen2.5-VL under transformers 4), the vision tower into cfg.Vision.
// ok is false for text-only configs.
func parseVLConfig(data []byte) (cfg Config, tieGiven, ok bool, err error) {
	var top hfVLConfig
	if err := json.Unmarshal(data, &top); err != nil || len(top.VisionConfig) == 0 || string(top.VisionConfig) == "null" {
		return Config{}, false, false, nil
	}
	text := data
	if len(top.TextConfig) > 0 && string(top.TextConfig) != "null" {
		text = top.TextConfig
	}
	if cfg, tieGiven, err = parseTextConfig(text); err != nil {
		return Config{}, false, true, fmt.Errorf("text_config: %w", err)
	}
	if len(top.Architectures) > 0 {
		cfg.Architecture = top.Architectures[0]
	}
	// The composite model's tying rules: Gemma3ForConditionalGeneration
	// ties through the top-level key, whatever text_config says.
	if top.TieWordEmbeddings != nil {
		cfg.TieWordEmbeddings, tieGiven = *top.TieWordEmbeddings, true
	}
	var hv hfVisionConfig
	if err := json.Unmarshal(top.VisionConfig, &hv); err != nil {
		return Config{}, false, true, fmt.Errorf("vision_config: %w", jsonError(err))
	}
	v := &VisionConfig{
		ModelType: hv.ModelType, HiddenSize: hv.HiddenSize, IntermediateSize: hv.IntermediateSize,
		NumLayers: max(hv.Depth, hv.NumLayers), NumHeads: max(hv.NumHeads, hv.NumAttentionHeads),
		PatchSize: hv.PatchSize, ImageSize: hv.ImageSize, HiddenAct: hv.HiddenAct, LayerNormEps: 1e-6,
		OutHiddenSize: hv.OutHiddenSize, SpatialMergeSize: hv.SpatialMergeSize, TemporalPatchSize: hv.TemporalPatchSize,
		WindowSize: hv.WindowSize, FullAttBlocks: hv.FullAttBlocks, MMTokensPerImage: top.MMTokensPerImage,
		ImageTokenID: -1, StartTokenID: -1, EndTokenID: -1, VideoTokenID: -1, TokensPerSecond: hv.TokensPerSecond,
	}
	// Only Qwen2.5-VL's temporal patches read video; its video_token_id
	// alone does not make a model do so.
	if top.VideoTokenID != nil && hv.TemporalPatchSize > 0 && hv.TokensPerSecond > 0 {
		v.VideoTokenID = *top.VideoTokenID
	}
	if hv.LayerNormEps != nil {
		v.LayerNormEps = *hv.LayerNormEps
	}
	for _, f := range []struct {
		dst  *int
		vals []*int
	}{{&v.ImageTokenID, []*int{top.ImageTokenID, top.ImageTokenIndex}}, {&v.StartTokenID, []*int{top.VisionStartID, top.BOIIndex}}, {&v.EndTokenID, []*int{top.VisionEndID, top.EOIIndex}}} {
		for _, p := range f.vals {
			if p != nil {
				*f.dst = *p
			}
		}
	}
	if v.MRopeSection, err = mropeSection(text); err != nil {
		return Config{}, false, true, err
	}
	if v.ImageTokenID < 0 || v.ImageTokenID >= cfg.VocabSize {
		return Config{}, false, true, fmt.Errorf("image_token_id %d is outside the vocabulary [0, %d)", v.ImageTokenID, cfg.VocabSize)
	}
	cfg.Vision = v
	return cfg, tieGiven, true, nil
}

// mropeSection is rope_parameters (or rope_scaling).mrope_section.
func mropeSection(text []byte) ([]int, error) {
	var r struct {
		Params *struct {
			MRopeSection []int `json:"mrope_section"`
		} `json:"rope_parameters"`
		Scaling *struct {
			MRopeSection []int `json:"mrope_section"`
		} `json:"rope_scaling"`
	}
	if err := json.Unmarshal(text, &r); err != nil {
		return nil, fmt.Errorf("rope_parameters: %w", jsonError(err))
	}
	if r.Params != nil && r.Params.MRopeSection != nil {
		return r.Params.MRopeSection, nil
	}
	if r.Scaling != nil {
		return r.Scaling.MRopeSection, nil
	}
	return nil, nil
}
