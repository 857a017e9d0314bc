package deepseek_test

import (
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/model/internal/modeltest"

	"github.com/gosling-ai/gosling/device/cpu"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/model/deepseek"
)

var quiet = slog.New(slog.DiscardHandler)

const refDir = "models/reference-tiny/deepseek_v3_mla_moe"

// TestLatentKVCache checks the cache layout: one latent vector of
// kv_lora_rank + qk_rope_head_dim values per token and layer, the value
// being its first kv_lora_rank values, and nothing stored for V.
func TestLatentKVCache(t *testing.T) {
	ck, err := model.Open(shared.Path(t, refDir))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	w := cpu.NewWorkers(1)
	defer w.Close()
	m, err := deepseek.New(&ck.Config, ck.Weights, cpu.NewOps(w))
	if err != nil {
		t.Fatal(err)
	}
	const rank, rope, layers = 32, 16, 3
	spec := m.KVSpec()
	want := kvcache.Spec{NumLayers: layers, NumKVHeads: 1, HeadDim: rank + rope, HeadDimV: rank, SharedV: true}
	if !reflect.DeepEqual(spec, want) {
		t.Fatalf("KVSpec %+v, want %+v", spec, want)
	}
	if spec.KWidth() != rank+rope || spec.VWidth() != 0 || spec.BytesPerToken() != layers*(rank+rope)*4 {
		t.Errorf("K width %d, V width %d, bytes/token %d", spec.KWidth(), spec.VWidth(), spec.BytesPerToken())
	}
	pool, err := kvcache.NewPool(spec, 4, 1)
	if err != nil {
		t.Fatalf("the pool rejects the spec: %v", err)
	}
	if pool.VRowWidth() != rank+rope {
		t.Errorf("V rows are %d wide, want the latent's %d", pool.VRowWidth(), rank+rope)
	}
	for i, l := range m.AttentionLayers() {
		if !l.MLA || l.NumHeads != 4 || l.NumKVHeads != 1 || l.HeadDim != rank+rope || l.HeadDimV != rank {
			t.Errorf("layer %d: %+v", i, l)
		}
		if want := float32(1 / math.Sqrt(32+16)); math.Abs(float64(l.Scale-want)) > 1e-7 {
			t.Errorf("layer %d scale %v, want 1/sqrt(qk_nope+qk_rope) = %v", i, l.Scale, want)
		}
	}
}

func TestConfig(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(shared.Path(t, refDir), "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := model.ParseHFConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	wantMLA := model.MLAConfig{QLoraRank: 48, KVLoraRank: 32, QKNopeHeadDim: 32, QKRopeHeadDim: 16, VHeadDim: 32}
	wantMoE := model.MoEConfig{NumRoutedExperts: 8, NumSharedExperts: 1, NumExpertsPerTok: 2, IntermediateSize: 48,
		FirstKDenseReplace: 1, LayerFreq: 1, NumGroups: 2, TopKGroups: 1, NormTopKProb: true, RoutedScaling: 1,
		ScoringFunc: "sigmoid", TopKMethod: "noaux_tc", ExpertsKey: "n_routed_experts", SharedIntermediateSize: 48}
	if cfg.MLA != wantMLA || !reflect.DeepEqual(cfg.MoE, wantMoE) || !cfg.RopeInterleaved {
		t.Errorf("MLA %+v\nMoE %+v\ninterleaved %v", cfg.MLA, cfg.MoE, cfg.RopeInterleaved)
	}
	if cfg.MoE.IsMoELayer(0) || !cfg.MoE.IsMoELayer(1) || !cfg.MoE.IsMoELayer(2) {
		t.Errorf("layer 0 is dense, 1 and 2 are MoE")
	}

	// The published DeepSeek-V3 shape: no rope_interleave key (default
	// true), YaRN, q LoRA.
	data, err = os.ReadFile(shared.Path(t, "configs/deepseek-v3/config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err = model.ParseHFConfig(data); err != nil {
		t.Fatal(err)
	}
	if !cfg.RopeInterleaved || cfg.MLA.QLoraRank != 1536 || cfg.MoE.NumRoutedExperts != 256 || cfg.MoE.RoutedScaling != 2.5 || cfg.MoE.TopKGroups != 4 {
		t.Errorf("deepseek-v3: %+v %+v interleaved %v", cfg.MLA, cfg.MoE, cfg.RopeInterleaved)
	}

	// q_lora_rank null selects a plain q_proj (DeepSeek-V2-Lite).
	cfg, err = model.ParseHFConfig([]byte(`{"architectures":["DeepseekV2ForCausalLM"],"model_type":"deepseek_v2","hidden_size":64,` +
		`"num_hidden_layers":2,"num_attention_heads":4,"q_lora_rank":null,"kv_lora_rank":32,"n_routed_experts":8,"num_experts_per_tok":2}`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MLA.QLoraRank != 0 || cfg.MoE.ScoringFunc != "softmax" || cfg.MoE.TopKMethod != "greedy" || cfg.MoE.NormTopKProb || !cfg.RopeInterleaved {
		t.Errorf("deepseek-v2: %+v %+v", cfg.MLA, cfg.MoE)
	}
}

// TestWeightShapes: the list matches the tiny reference checkpoint tensor
// for tensor, dummy weights made from it load, and at DeepSeek-V3's shape
// it counts its 671,026,419,200 parameters (without the multi-token
// prediction layer, which is not served).
func TestWeightShapes(t *testing.T) {
	modeltest.CheckWeightShapes(t, modeltest.Architecture{WeightShapes: deepseek.WeightShapes,
		New: func(cfg *model.Config, ws model.WeightSource, ops device.Ops) error {
			_, err := deepseek.New(cfg, ws, ops)
			return err
		}}, shared.Path(t, refDir), shared.Path(t, "configs/deepseek-v3/config.json"), 671_026_419_200)
}
