package gemma2_test

import (
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/model/internal/modeltest"

	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/model/gemma2"
)

var quiet = slog.New(slog.DiscardHandler)

const refDir = "models/reference-tiny/gemma2_softcap_swa"

func TestConfig(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(shared.Path(t, refDir), "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := model.ParseHFConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.QueryPreAttnScalar != 32 || cfg.AttnLogitSoftcap != 20 || cfg.FinalLogitSoftcap != 15 || cfg.HeadDim != 32 {
		t.Errorf("scalar %v softcaps %v/%v head dim %d", cfg.QueryPreAttnScalar, cfg.AttnLogitSoftcap, cfg.FinalLogitSoftcap, cfg.HeadDim)
	}
	for i, want := range []int{24, 0, 24} {
		if got := cfg.LayerWindow(i); got != want {
			t.Errorf("layer %d window %d, want %d", i, got, want)
		}
	}
}

// TestConfigDefaults checks Gemma2Config's defaults for omitted keys, and
// that null turns a softcap off.
func TestConfigDefaults(t *testing.T) {
	base := `"architectures":["Gemma2ForCausalLM"],"model_type":"gemma2","hidden_size":64,"num_hidden_layers":4,"num_attention_heads":4,"sliding_window":8`
	cfg, err := model.ParseHFConfig([]byte(`{` + base + `}`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.QueryPreAttnScalar != 256 || cfg.AttnLogitSoftcap != 50 || cfg.FinalLogitSoftcap != 30 {
		t.Errorf("defaults: scalar %v softcaps %v/%v", cfg.QueryPreAttnScalar, cfg.AttnLogitSoftcap, cfg.FinalLogitSoftcap)
	}
	if cfg.LayerWindow(0) != 8 || cfg.LayerWindow(1) != 0 || cfg.LayerWindow(2) != 8 {
		t.Errorf("older configs: even layers slide, got %v", cfg.LayerTypes)
	}
	cfg, err = model.ParseHFConfig([]byte(`{` + base + `,"attn_logit_softcapping":null,"final_logit_softcapping":null}`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.AttnLogitSoftcap != 0 || cfg.FinalLogitSoftcap != 0 {
		t.Errorf("null softcaps: %v/%v", cfg.AttnLogitSoftcap, cfg.FinalLogitSoftcap)
	}
}

// TestWeightShapes: the list matches the tiny reference checkpoint tensor
// for tensor, dummy weights made from it load, and at Gemma-2-9B's shape
// it counts the published 9,241,705,984 parameters.
func TestWeightShapes(t *testing.T) {
	modeltest.CheckWeightShapes(t, modeltest.Architecture{WeightShapes: gemma2.WeightShapes,
		New: func(cfg *model.Config, ws model.WeightSource, ops device.Ops) error {
			_, err := gemma2.New(cfg, ws, ops)
			return err
		}}, shared.Path(t, refDir), shared.Path(t, "configs/gemma-2-9b/config.json"), 9_241_705_984)
}

// TestGemma3: the tiny reference's list matches its checkpoint and its
// dummy weights load; Gemma-3-12B's config (transformers 4 keys) gives
// five sliding layers of every six, the local base 10000 unscaled, and the
// global layers' linear scaling by 8.
func TestGemma3(t *testing.T) {
	modeltest.CheckWeightShapes(t, modeltest.Architecture{WeightShapes: gemma2.WeightShapes,
		New: func(cfg *model.Config, ws model.WeightSource, ops device.Ops) error {
			_, err := gemma2.New(cfg, ws, ops)
			return err
		}}, shared.Path(t, "models/reference-tiny/gemma3_text"), "", 0)

	data, err := os.ReadFile(shared.Path(t, "configs/gemma-3-12b/config.json"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := model.ParseHFConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range map[int]int{0: 1024, 4: 1024, 5: 0, 11: 0, 12: 1024} {
		if got := cfg.LayerWindow(i); got != want {
			t.Errorf("layer %d window %d, want %d", i, got, want)
		}
	}
	if !cfg.QKNorm || cfg.QueryPreAttnScalar != 256 || cfg.AttnLogitSoftcap != 0 || cfg.FinalLogitSoftcap != 0 {
		t.Errorf("%+v", cfg)
	}
	global, local := cfg.RopeInvFreq(256), cfg.LocalRopeInvFreq(256)
	if cfg.RopeLocalTheta != 10000 || local[1] != float32(1/math.Pow(10000, 2.0/256)) || global[1] != float32(1/math.Pow(1e6, 2.0/256))/8 {
		t.Errorf("local theta %v: local %v, global %v", cfg.RopeLocalTheta, local[1], global[1])
	}
}
