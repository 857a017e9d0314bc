package model

import (
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/internal/shared"
)

func TestParseEverySharedConfig(t *testing.T) {
	root := shared.Path(t, "")
	var paths []string
	for _, pattern := range []string{"models/*/config.json", "models/reference-tiny/*/config.json", "configs/*/config.json"} {
		matches, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, matches...)
	}
	if len(paths) < 15 {
		t.Fatalf("found only %d config.json files under %s", len(paths), root)
	}
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), `"text_config"`) {
			// Vision-language wrappers (gemma3_vl, qwen2_5_vl) nest their
			// text model, which is not read yet.
			continue
		}
		cfg, err := ParseHFConfig(data)
		if err != nil {
			t.Errorf("%s: %v", path, err)
			continue
		}
		if err := cfg.Validate(); err != nil {
			t.Errorf("%s: %v", path, err)
		}
		if cfg.Architecture == "" || cfg.RopeTheta <= 0 || cfg.RMSNormEps <= 0 || len(cfg.EOSTokenIDs) == 0 || cfg.TorchDType == "" {
			t.Errorf("%s: incomplete config %+v", path, cfg)
		}
	}
}

// TestPublishedConfigs checks the fields each published shape exercises.
func TestPublishedConfigs(t *testing.T) {
	configs := shared.Path(t, "configs")
	cases := []struct {
		name  string
		check func(t *testing.T, c Config)
	}{
		{"llama-3.1-8b", func(t *testing.T, c Config) {
			want := &RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8192}
			if !reflect.DeepEqual(c.RopeScaling, want) || c.RopeTheta != 500000 {
				t.Errorf("rope %v %+v, want 500000 %+v", c.RopeTheta, c.RopeScaling, want)
			}
			if !slices.Equal(c.EOSTokenIDs, []int{128001, 128008, 128009}) || c.BOSTokenID != 128000 || c.PadTokenID != -1 {
				t.Errorf("bos %d eos %v pad %d", c.BOSTokenID, c.EOSTokenIDs, c.PadTokenID)
			}
			if c.HeadDim != 128 || c.NumKVHeads != 8 || c.TieWordEmbeddings || c.TorchDType != "bfloat16" || c.RMSNormEps != 1e-5 {
				t.Errorf("%+v", c)
			}
		}},
		{"llama-3.2-1b", func(t *testing.T, c Config) {
			if !c.TieWordEmbeddings || c.RopeScaling.Factor != 32 || c.HeadDim != 64 {
				t.Errorf("%+v", c)
			}
		}},
		{"qwen3-0.6b", func(t *testing.T, c Config) {
			if !c.QKNorm || c.AttentionBias || !c.TieWordEmbeddings || c.HeadDim != 128 || c.NumHeads*c.HeadDim == c.HiddenSize || c.SlidingWindow != 0 {
				t.Errorf("%+v", c)
			}
		}},
		{"mistral-7b-v0.1", func(t *testing.T, c Config) {
			if c.SlidingWindow != 4096 || c.LayerTypes != nil || c.LayerWindow(31) != 4096 || c.HeadDim != 128 {
				t.Errorf("window %d types %v head %d", c.SlidingWindow, c.LayerTypes, c.HeadDim)
			}
		}},
		{"gemma-2-9b", func(t *testing.T, c Config) {
			if c.SlidingWindow != 4096 || len(c.LayerTypes) != 42 || c.LayerWindow(0) != 4096 || c.LayerWindow(1) != 0 || c.LayerWindow(40) != 4096 {
				t.Errorf("window %d types %v", c.SlidingWindow, c.LayerTypes)
			}
			if c.HiddenAct != "gelu_pytorch_tanh" || !c.TieWordEmbeddings || c.HeadDim != 256 {
				t.Errorf("%+v", c)
			}
		}},
		{"deepseek-v3", func(t *testing.T, c Config) {
			want := &RopeScaling{Type: "yarn", Factor: 40, OriginalMaxPositionEmbeddings: 4096, BetaFast: 32, BetaSlow: 1, MScale: 1, MScaleAllDim: 1}
			if !reflect.DeepEqual(c.RopeScaling, want) {
				t.Errorf("rope scaling %+v, want %+v", c.RopeScaling, want)
			}
			if c.BOSTokenID != 0 || !slices.Equal(c.EOSTokenIDs, []int{1}) {
				t.Errorf("bos %d eos %v", c.BOSTokenID, c.EOSTokenIDs)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(configs, tc.name, "config.json"))
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := ParseHFConfig(data)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, cfg)
		})
	}
}

func TestParseHFConfigForms(t *testing.T) {
	base := `"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_hidden_layers":4,"num_attention_heads":4,"vocab_size":100`
	cases := []struct {
		name  string
		json  string
		check func(t *testing.T, c Config, tieGiven bool)
	}{
		{"defaults", `{` + base + `}`, func(t *testing.T, c Config, tieGiven bool) {
			want := Config{
				Architecture: "LlamaForCausalLM", ModelType: "llama", HiddenSize: 64, IntermediateSize: 128,
				NumLayers: 4, NumHeads: 4, NumKVHeads: 4, HeadDim: 16, VocabSize: 100, RMSNormEps: 1e-6,
				HiddenAct: "silu", RopeTheta: 10000, BOSTokenID: -1, PadTokenID: -1,
			}
			if !reflect.DeepEqual(c, want) || tieGiven {
				t.Errorf("got  %+v (tie given %v)\nwant %+v", c, tieGiven, want)
			}
		}},
		{"transformers 5 rope_parameters", `{` + base + `,"rope_parameters":{"rope_theta":500000.0,"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":8192}}`, func(t *testing.T, c Config, _ bool) {
			if c.RopeTheta != 500000 || c.RopeScaling == nil || c.RopeScaling.Type != "llama3" || c.RopeScaling.OriginalMaxPositionEmbeddings != 8192 {
				t.Errorf("%v %+v", c.RopeTheta, c.RopeScaling)
			}
		}},
		{"rope_parameters default type is plain RoPE", `{` + base + `,"rope_parameters":{"rope_theta":1e6,"rope_type":"default"}}`, func(t *testing.T, c Config, _ bool) {
			if c.RopeTheta != 1e6 || c.RopeScaling != nil {
				t.Errorf("%v %+v", c.RopeTheta, c.RopeScaling)
			}
		}},
		{"per-layer-type rope_parameters", `{` + base + `,"rope_parameters":{"full_attention":{"rope_theta":1e6,"rope_type":"linear","factor":8},"sliding_attention":{"rope_theta":1e4,"rope_type":"default"}}}`, func(t *testing.T, c Config, _ bool) {
			if c.RopeTheta != 1e6 || c.RopeScaling == nil || c.RopeScaling.Type != "linear" || c.RopeScaling.Factor != 8 {
				t.Errorf("%v %+v", c.RopeTheta, c.RopeScaling)
			}
		}},
		{"rope_scaling with old type key", `{` + base + `,"rope_theta":5e5,"rope_scaling":{"type":"linear","factor":2.0}}`, func(t *testing.T, c Config, _ bool) {
			if c.RopeTheta != 5e5 || c.RopeScaling == nil || c.RopeScaling.Type != "linear" || c.RopeScaling.Factor != 2 {
				t.Errorf("%v %+v", c.RopeTheta, c.RopeScaling)
			}
		}},
		{"nulls", `{` + base + `,"rope_scaling":null,"head_dim":null,"sliding_window":null,"bos_token_id":null,"eos_token_id":null,"pad_token_id":null,"num_key_value_heads":null}`, func(t *testing.T, c Config, _ bool) {
			if c.RopeScaling != nil || c.HeadDim != 16 || c.SlidingWindow != 0 || c.BOSTokenID != -1 || c.EOSTokenIDs != nil || c.PadTokenID != -1 || c.NumKVHeads != 4 {
				t.Errorf("%+v", c)
			}
		}},
		{"explicit fields", `{` + base + `,"num_key_value_heads":2,"head_dim":32,"eos_token_id":[5,6],"bos_token_id":3,"pad_token_id":0,"tie_word_embeddings":true,"attention_bias":true,"torch_dtype":"float16","rms_norm_eps":1e-5,"hidden_act":"gelu"}`, func(t *testing.T, c Config, tieGiven bool) {
			if c.NumKVHeads != 2 || c.HeadDim != 32 || !slices.Equal(c.EOSTokenIDs, []int{5, 6}) || c.BOSTokenID != 3 || c.PadTokenID != 0 ||
				!c.TieWordEmbeddings || !tieGiven || !c.AttentionBias || c.TorchDType != "float16" || c.RMSNormEps != 1e-5 || c.HiddenAct != "gelu" {
				t.Errorf("%+v", c)
			}
		}},
		{"dtype wins over torch_dtype", `{` + base + `,"dtype":"bfloat16","torch_dtype":"float32"}`, func(t *testing.T, c Config, _ bool) {
			if c.TorchDType != "bfloat16" {
				t.Errorf("TorchDType %q", c.TorchDType)
			}
		}},
		{"qwen2 window off by default", `{"architectures":["Qwen2ForCausalLM"],"model_type":"qwen2","hidden_size":64,"num_hidden_layers":4,"num_attention_heads":4,"sliding_window":4096}`, func(t *testing.T, c Config, _ bool) {
			if c.SlidingWindow != 0 || !c.AttentionBias || c.QKNorm {
				t.Errorf("%+v", c)
			}
		}},
		{"qwen2 window from max_window_layers", `{"model_type":"qwen2","hidden_size":64,"num_hidden_layers":4,"num_attention_heads":4,"sliding_window":32,"use_sliding_window":true,"max_window_layers":2}`, func(t *testing.T, c Config, _ bool) {
			want := []string{"full_attention", "full_attention", "sliding_attention", "sliding_attention"}
			if c.SlidingWindow != 32 || !slices.Equal(c.LayerTypes, want) || c.Architecture != "Qwen2ForCausalLM" {
				t.Errorf("%+v", c)
			}
		}},
		{"mistral window off", `{` + base + `,"sliding_window":4096,"use_sliding_window":false}`, func(t *testing.T, c Config, _ bool) {
			if c.SlidingWindow != 0 {
				t.Errorf("SlidingWindow %d", c.SlidingWindow)
			}
		}},
		{"gemma2 ties by default", `{"architectures":["Gemma2ForCausalLM"],"model_type":"gemma2","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"hidden_activation":"gelu_pytorch_tanh","hidden_act":"gelu"}`, func(t *testing.T, c Config, tieGiven bool) {
			if !c.TieWordEmbeddings || tieGiven || c.HiddenAct != "gelu_pytorch_tanh" {
				t.Errorf("%+v", c)
			}
		}},
		{"deepseek interleaved rope", `{"architectures":["DeepseekV3ForCausalLM"],"model_type":"deepseek_v3","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"rope_interleave":true,"kv_lora_rank":32,"n_routed_experts":8}`, func(t *testing.T, c Config, _ bool) {
			if !c.RopeInterleaved {
				t.Errorf("RopeInterleaved = false")
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, tieGiven, err := parseHFConfig([]byte(tc.json))
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, cfg, tieGiven)
		})
	}
}

func TestParseHFConfigErrors(t *testing.T) {
	cases := map[string]string{
		`{"hidden_size": 64,`:                          "invalid JSON",
		`{"hidden_size": "64"}`:                        "hidden_size",
		`{"eos_token_id": "x"}`:                        "eos_token_id must be an integer or a list of integers",
		`{"bos_token_id": [1.5]}`:                      "bos_token_id",
		`{"rope_scaling": 3}`:                          "rope_scaling must be an object",
		`{"rope_parameters": {"rope_theta": "big"}}`:   "rope_parameters",
		`{"eos_token_id": 1, "pad_token_id": {"a":1}}`: "pad_token_id",
	}
	for js, want := range cases {
		_, err := ParseHFConfig([]byte(js))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseHFConfig(%s) = %v, want an error mentioning %q", js, err, want)
		}
	}
}

func TestParseGenerationConfig(t *testing.T) {
	g, err := parseGenerationConfig([]byte(`{"do_sample":true,"temperature":0.6,"top_p":0.9,"top_k":20,"min_p":0.05,"repetition_penalty":1.1,"max_new_tokens":256,"eos_token_id":[128001,128009],"bos_token_id":128000}`))
	if err != nil {
		t.Fatal(err)
	}
	if *g.Temperature != 0.6 || *g.TopP != 0.9 || *g.TopK != 20 || *g.MinP != 0.05 || *g.RepetitionPenalty != 1.1 || *g.MaxNewTokens != 256 || !slices.Equal(g.EOSTokenIDs, []int{128001, 128009}) {
		t.Errorf("%+v", g)
	}
	g, err = parseGenerationConfig([]byte(`{"eos_token_id": 2}`))
	if err != nil || g.Temperature != nil || g.TopK != nil || !slices.Equal(g.EOSTokenIDs, []int{2}) {
		t.Errorf("%+v %v", g, err)
	}
	if _, err := parseGenerationConfig([]byte(`{"top_k": "x"}`)); err == nil {
		t.Error("no error for a string top_k")
	}
}

// TestRopeTypes: every rope_type transformers defines parses; any other is
// an error naming the key and the value (a YaRN config once loaded with
// its scaling silently ignored).
func TestRopeTypes(t *testing.T) {
	base := `"architectures":["Qwen3ForCausalLM"],"model_type":"qwen3","hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"head_dim":16,"vocab_size":100,"max_position_embeddings":1024`
	for _, tc := range []struct{ rope, wantErr string }{
		{`"rope_parameters":{"rope_type":"yarn","factor":4,"original_max_position_embeddings":64,"rope_theta":1e6}`, ""},
		{`"rope_scaling":{"type":"dynamic","factor":2}`, ""},
		{`"rope_scaling":{"rope_type":"linear","factor":2}`, ""},
		{`"rope_scaling":{"rope_type":"longrope","short_factor":[1,1,1,1,1,1,1,1],"long_factor":[2,2,2,2,2,2,2,2],"original_max_position_embeddings":256}`, ""},
		{`"rope_scaling":{"rope_type":"llama3","factor":8,"low_freq_factor":1,"high_freq_factor":4,"original_max_position_embeddings":8192}`, ""},
		{`"rope_scaling":{"type":"mrope","mrope_section":[2,3,3]}`, ""},
		{`"rope_parameters":{"rope_type":"su","factor":2}`, `rope_parameters.rope_type "su" is not supported`},
		{`"rope_scaling":{"type":"ntk-by-parts","factor":2}`, `rope_scaling.rope_type "ntk-by-parts" is not supported`},
		{`"rope_parameters":{"rope_type":"yarn","factor":4,"original_max_position_embeddings":64},"rope_scaling":{"type":"su","factor":2}`, `rope_scaling.rope_type "su" is not supported`},
		{`"rope_scaling":{"rope_type":"linear"}`, `rope_scaling.factor must be positive`},
		{`"rope_scaling":{"rope_type":"longrope","short_factor":[1],"long_factor":[1,2]}`, `short_factor and long_factor`},
		{`"partial_rotary_factor":0.5`, `partial_rotary_factor 0.5 is not supported for model_type "qwen3"`},
		{`"rope_parameters":{"rope_type":"default","partial_rotary_factor":0.75}`, `rope_parameters.partial_rotary_factor 0.75 is not supported for model_type "qwen3"`},
		{`"partial_rotary_factor":1`, ""},
	} {
		cfg, err := ParseHFConfig([]byte(`{` + base + `,` + tc.rope + `}`))
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: %v", tc.rope, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: got error %v, want one containing %q", tc.rope, err, tc.wantErr)
		case err == nil:
			if err := cfg.Validate(); err != nil {
				t.Errorf("%s: %v", tc.rope, err)
			}
		}
	}
}

// TestPartialRotary: Phi-3's configs (Phi-4-mini) rotate the first
// int(head_dim·partial_rotary_factor) values of each head, with the
// frequencies (and longrope's factors) of a head that wide; a factor that
// leaves an odd or empty rotation, or one beyond 1, is an error naming it.
func TestPartialRotary(t *testing.T) {
	base := `"architectures":["Phi3ForCausalLM"],"model_type":"phi3","hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100,"max_position_embeddings":1024,"original_max_position_embeddings":256`
	for _, tc := range []struct {
		extra, wantErr string
		rot            int
	}{
		{`"partial_rotary_factor":0.75`, "", 12},
		{`"rope_parameters":{"rope_type":"default","rope_theta":10000,"partial_rotary_factor":0.5}`, "", 8},
		{`"partial_rotary_factor":0.75,"rope_scaling":{"rope_type":"longrope","short_factor":[1,1,1,1,1,1],"long_factor":[2,2,2,2,2,2]}`, "", 12},
		{`"partial_rotary_factor":1`, "", 0},
		{`"partial_rotary_factor":0.75,"rope_scaling":{"rope_type":"longrope","short_factor":[1,1,1,1,1,1,1,1],"long_factor":[2,2,2,2,2,2,2,2]}`, "short_factor has 8 entries, want rotary dims/2 = 6", 0},
		{`"partial_rotary_factor":0.3`, "", 4}, // int(16·0.3), as transformers rounds
		{`"partial_rotary_factor":0.1`, "partial_rotary_factor 0.1 gives 1 rotary dims", 0},
		{`"partial_rotary_factor":1.5`, "partial_rotary_factor 1.5 gives 24 rotary dims", 0},
	} {
		cfg, err := ParseHFConfig([]byte(`{` + base + `,` + tc.extra + `}`))
		if err == nil {
			err = cfg.Validate()
		}
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: %v", tc.extra, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: got error %v, want one containing %q", tc.extra, err, tc.wantErr)
		case err == nil && cfg.RotaryDim != tc.rot:
			t.Errorf("%s: %d rotary dims, want %d", tc.extra, cfg.RotaryDim, tc.rot)
		}
	}
}

// TestYarn checks YaRN against values transformers computes: qwen3_yarn's
// factor 4 over an original context of 64 (attention factor 0.1·ln 4 + 1),
// and GPT-OSS's untruncated ramp.
func TestYarn(t *testing.T) {
	cfg := Config{RopeTheta: 1e6, MaxPositions: 1024, RopeScaling: &RopeScaling{Type: "yarn", Factor: 4, OriginalMaxPositionEmbeddings: 64}}
	if got, want := cfg.RopeAttentionFactor(), 0.1*math.Log(4)+1; math.Abs(got-want) > 1e-12 {
		t.Errorf("attention factor %v, want %v", got, want)
	}
	inv := cfg.RopeInvFreq(32)
	plain := plainInvFreq(1e6, 32)
	// Over an original context of 64 the ramp runs over dims [0, 3]: the
	// fastest frequency is kept, the slowest divided by the factor.
	if inv[0] != plain[0] || math.Abs(float64(inv[15]-plain[15]/4)) > 1e-12 {
		t.Errorf("inv %v, plain %v", inv, plain)
	}
	truncated := YarnInvFreq(150000, 64, 32, 32, 1, 4096, true)
	exact := YarnInvFreq(150000, 64, 32, 32, 1, 4096, false)
	if slices.Equal(truncated, exact) {
		t.Error("truncate made no difference")
	}
}

// TestLongRope: long_factor serves a model run past its original context
// (short_factor otherwise), and cos/sin scale by
// sqrt(1 + ln(factor)/ln(original)), factor = max/original.
func TestLongRope(t *testing.T) {
	short, long := []float64{1, 1, 1, 1}, []float64{2, 4, 8, 16}
	cfg := Config{RopeTheta: 10000, MaxPositions: 4096, RopeScaling: &RopeScaling{Type: "longrope",
		OriginalMaxPositionEmbeddings: 1024, ShortFactor: short, LongFactor: long}}
	plain := plainInvFreq(10000, 8)
	inv := cfg.RopeInvFreq(8)
	for i := range inv {
		if want := float32(float64(plain[i]) / long[i]); math.Abs(float64(inv[i]-want)) > 1e-7*float64(want) {
			t.Errorf("long %d: %v, want %v", i, inv[i], want)
		}
	}
	if got, want := cfg.RopeAttentionFactor(), math.Sqrt(1+math.Log(4)/math.Log(1024)); math.Abs(got-want) > 1e-12 {
		t.Errorf("attention factor %v, want %v", got, want)
	}
	cfg.MaxPositions = 1024
	if inv := cfg.RopeInvFreq(8); !slices.Equal(inv, plain) || cfg.RopeAttentionFactor() != 1 {
		t.Errorf("within the original context: %v (factor %v), want the short (here plain) frequencies %v", inv, cfg.RopeAttentionFactor(), plain)
	}
}
