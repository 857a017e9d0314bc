package llama_test

import (
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/device/cpu"
	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/model/internal/modeltest"
	"github.com/gosling-ai/gosling/model/llama"
)

var arch = modeltest.Architecture{WeightShapes: llama.WeightShapes,
	New: func(cfg *model.Config, ws model.WeightSource, ops device.Ops) error {
		_, err := llama.New(cfg, ws, ops)
		return err
	}}

// TestWeightShapes: each list matches its tiny reference checkpoint tensor
// for tensor, dummy weights made from it load, and at a published shape it
// counts the published parameters (Qwen3-30B-A3B's 30,532,122,624 and
// Mixtral-8x7B's 46,702,792,704, GPT-OSS-20B's 20,914,757,184).
func TestWeightShapes(t *testing.T) {
	for _, tc := range []struct {
		ref, published string
		params         int
	}{
		{"qwen3_moe", "configs/qwen3-30b-a3b/config.json", 30_532_122_624},
		{"mixtral", "configs/mixtral-8x7b/config.json", 46_702_792_704},
		{"qwen2_moe", "", 0},
		{"phi3", "", 0},
		{"gpt_oss", "configs/gpt-oss-20b/config.json", 20_914_757_184},
		{"qwen3_yarn", "configs/qwen3-8b/config.json", 8_190_735_360},
	} {
		t.Run(tc.ref, func(t *testing.T) {
			published := "" // no published config to compare with
			if tc.published != "" {
				published = shared.Path(t, tc.published)
			}
			modeltest.CheckWeightShapes(t, arch, shared.Path(t, "models/reference-tiny/"+tc.ref), published, tc.params)
		})
	}
}

// TestExpertCountMismatch: a MoE config whose expert count disagrees with
// the checkpoint's router fails at load naming the tensor and the key.
func TestExpertCountMismatch(t *testing.T) {
	ck, err := model.Open(shared.Path(t, "models/reference-tiny/qwen3_moe"))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	cfg := ck.Config
	cfg.MoE.NumRoutedExperts = 16
	_, err = llama.New(&cfg, ck.Weights, cpu.NewOps(nil))
	if err == nil || !strings.Contains(err.Error(), "model.layers.0.mlp.gate.weight has 8 experts, but config.json num_local_experts is 16") {
		t.Fatalf("err = %v", err)
	}
}
