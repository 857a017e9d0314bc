package model

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/tensor"
)

// mapWeights is a WeightSource over a map, for configs built from metadata.
type mapWeights map[string]tensor.Weight

func (m mapWeights) Tensor(name string) (tensor.Weight, error) {
	w, ok := m[name]
	if !ok {
		return tensor.Weight{}, fmt.Errorf("tensor %s not found", name)
	}
	return w, nil
}
func (m mapWeights) Has(name string) bool { _, ok := m[name]; return ok }
func (m mapWeights) Names() []string {
	var names []string
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
func (m mapWeights) Close() error { return nil }

func embedding(vocab, hidden int) tensor.Weight {
	return tensor.Weight{Name: "model.embed_tokens.weight", DType: tensor.BF16, Shape: []int{vocab, hidden}, Data: make([]byte, 2*vocab*hidden)}
}

func TestConfigFromGGUF(t *testing.T) {
	qwenKeys := func(arch string) map[string]any {
		return map[string]any{
			"general.architecture":                     arch,
			arch + ".embedding_length":                 uint32(64),
			arch + ".feed_forward_length":              uint32(160),
			arch + ".block_count":                      uint32(3),
			arch + ".attention.head_count":             uint32(4),
			arch + ".attention.head_count_kv":          uint32(2),
			arch + ".attention.layer_norm_rms_epsilon": float32(1e-6),
			arch + ".rope.freq_base":                   float32(1e6),
			arch + ".context_length":                   uint32(32768),
			"tokenizer.ggml.bos_token_id":              uint32(151643),
			"tokenizer.ggml.eos_token_id":              uint32(151645),
			"tokenizer.ggml.eot_token_id":              uint32(151645), // same id: listed once
			"tokenizer.ggml.padding_token_id":          uint32(151643),
		}
	}
	cases := []struct {
		name    string
		md      map[string]any
		weights mapWeights
		want    func(c *Config)
	}{
		{"qwen2", qwenKeys("qwen2"), mapWeights{"model.embed_tokens.weight": embedding(1000, 64)}, func(c *Config) {
			*c = Config{
				Architecture: "Qwen2ForCausalLM", ModelType: "qwen2", HiddenSize: 64, IntermediateSize: 160, NumLayers: 3,
				NumHeads: 4, NumKVHeads: 2, HeadDim: 16, VocabSize: 1000, MaxPositions: 32768, RMSNormEps: 1e-6,
				HiddenAct: "silu", TieWordEmbeddings: true, RopeTheta: 1e6, AttentionBias: true,
				BOSTokenID: 151643, EOSTokenIDs: []int{151645}, PadTokenID: 151643, TorchDType: "bfloat16",
			}
		}},
		{"qwen3 with key_length and lm_head", func() map[string]any {
			md := qwenKeys("qwen3")
			md["qwen3.attention.key_length"] = uint32(32)
			md["tokenizer.ggml.padding_token_id"] = uint32(0xFFFFFFFF)
			md["tokenizer.ggml.eot_token_id"] = uint32(151644)
			return md
		}(), mapWeights{"model.embed_tokens.weight": embedding(1000, 64), "lm_head.weight": embedding(1000, 64)}, func(c *Config) {
			*c = Config{
				Architecture: "Qwen3ForCausalLM", ModelType: "qwen3", HiddenSize: 64, IntermediateSize: 160, NumLayers: 3,
				NumHeads: 4, NumKVHeads: 2, HeadDim: 32, VocabSize: 1000, MaxPositions: 32768, RMSNormEps: 1e-6,
				HiddenAct: "silu", RopeTheta: 1e6, QKNorm: true,
				BOSTokenID: 151643, EOSTokenIDs: []int{151645, 151644}, PadTokenID: -1, TorchDType: "bfloat16",
			}
		}},
		{"llama: interleaved, vocabulary from the token list, yarn", map[string]any{
			"general.architecture":                       "llama",
			"llama.embedding_length":                     uint64(64),
			"llama.feed_forward_length":                  int32(172),
			"llama.block_count":                          uint32(2),
			"llama.attention.head_count":                 uint32(8),
			"llama.rope.scaling.type":                    "yarn",
			"llama.rope.scaling.factor":                  float32(4),
			"llama.rope.scaling.original_context_length": uint32(4096),
			"llama.rope.scaling.yarn_beta_fast":          float32(32),
			"llama.rope.scaling.yarn_beta_slow":          float32(1),
			"tokenizer.ggml.tokens":                      []any{"a", "b", "c"},
		}, mapWeights{"model.layers.0.self_attn.q_proj.bias": {}}, func(c *Config) {
			*c = Config{
				Architecture: "LlamaForCausalLM", ModelType: "llama", HiddenSize: 64, IntermediateSize: 172, NumLayers: 2,
				NumHeads: 8, NumKVHeads: 8, HeadDim: 8, VocabSize: 3, RMSNormEps: 1e-5, HiddenAct: "silu",
				TieWordEmbeddings: true, RopeTheta: 10000, RopeInterleaved: true, AttentionBias: true,
				RopeScaling: &RopeScaling{Type: "yarn", Factor: 4, OriginalMaxPositionEmbeddings: 4096, BetaFast: 32, BetaSlow: 1},
				BOSTokenID:  -1, PadTokenID: -1,
			}
		}},
		{"unknown architecture keeps its name", map[string]any{
			"general.architecture":            "gemma2",
			"gemma2.embedding_length":         uint32(64),
			"gemma2.feed_forward_length":      uint32(128),
			"gemma2.block_count":              uint32(3),
			"gemma2.attention.head_count":     uint32(4),
			"gemma2.attention.sliding_window": uint32(24),
			"gemma2.rope.scaling.type":        "none",
			"tokenizer.ggml.eos_token_id":     int32(1),
			"tokenizer.ggml.bos_token_id":     int32(-1),
		}, mapWeights{"model.embed_tokens.weight": embedding(10, 64)}, func(c *Config) {
			*c = Config{
				Architecture: "gemma2", ModelType: "gemma2", HiddenSize: 64, IntermediateSize: 128, NumLayers: 3,
				NumHeads: 4, NumKVHeads: 4, HeadDim: 16, VocabSize: 10, RMSNormEps: 1e-5, HiddenAct: "gelu_pytorch_tanh",
				TieWordEmbeddings: true, RopeTheta: 10000, SlidingWindow: 24,
				LayerTypes: []string{"sliding_attention", "full_attention", "sliding_attention"},
				BOSTokenID: -1, EOSTokenIDs: []int{1}, PadTokenID: -1, TorchDType: "bfloat16",
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := configFromGGUF(tc.md, tc.weights)
			if err != nil {
				t.Fatal(err)
			}
			var want Config
			tc.want(&want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got  %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestConfigFromGGUFErrors(t *testing.T) {
	full := func() map[string]any {
		return map[string]any{
			"general.architecture":       "llama",
			"llama.embedding_length":     uint32(64),
			"llama.feed_forward_length":  uint32(172),
			"llama.block_count":          uint32(2),
			"llama.attention.head_count": uint32(8),
		}
	}
	cases := []struct {
		name   string
		mutate func(md map[string]any)
		want   string
	}{
		{"no architecture", func(md map[string]any) { delete(md, "general.architecture") }, "no general.architecture"},
		{"unsupported architecture", func(md map[string]any) { md["general.architecture"] = "mamba" },
			`general.architecture "mamba" is not supported (supported: gemma3, gpt-oss, llama, phi3, qwen2, qwen2moe, qwen3, qwen3moe); its metadata has no mamba.embedding_length`},
		{"no block count", func(md map[string]any) { delete(md, "llama.block_count") }, "metadata has no llama.block_count"},
		{"no embedding length", func(md map[string]any) { delete(md, "llama.embedding_length") }, "metadata has no llama.embedding_length"},
		{"per-layer kv heads", func(md map[string]any) { md["llama.attention.head_count_kv"] = []any{uint32(2), uint32(4)} }, "llama.attention.head_count_kv is []interface {}, want an integer"},
		{"string head count", func(md map[string]any) { md["llama.attention.head_count"] = "8" }, "llama.attention.head_count is string"},
		{"partial rotary", func(md map[string]any) { md["llama.rope.dimension_count"] = uint32(4) },
			"metadata llama.rope.dimension_count is 4, but heads are 8 wide: rotary embeddings over part of each head are supported for phi3 only"},
		{"experts used beyond experts", func(md map[string]any) {
			md["llama.expert_count"], md["llama.expert_used_count"] = uint32(4), uint32(5)
		}, "metadata llama.expert_used_count 5 must be in [1, llama.expert_count 4]"},
		{"window pattern length", func(md map[string]any) {
			md["general.architecture"] = "gpt-oss"
			for k, v := range md {
				if strings.HasPrefix(k, "llama.") {
					md["gpt-oss."+strings.TrimPrefix(k, "llama.")] = v
				}
			}
			md["gpt-oss.attention.sliding_window"] = uint32(8)
			md["gpt-oss.attention.sliding_window_pattern"] = []any{true}
		}, "metadata gpt-oss.attention.sliding_window_pattern has 1 entries for 2 layers"},
	}
	for _, tc := range cases {
		md := full()
		tc.mutate(md)
		_, err := configFromGGUF(md, mapWeights{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one mentioning %q", tc.name, err, tc.want)
		}
	}
}
