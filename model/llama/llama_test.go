package llama_test

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/device/cpu"
	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/model/internal/modeltest"
	"github.com/gosling-ai/gosling/model/llama"
	"github.com/gosling-ai/gosling/model/safetensors"
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

// writeFused copies the checkpoint at dir to a new directory with each
// layer's experts in transformers' fused layout: mlp.experts.gate_up_proj
// [experts, 2·inter, hidden] (an expert's gate rows, then its up rows)
// and mlp.experts.down_proj [experts, hidden, inter].
func writeFused(t *testing.T, dir string, cfg *model.Config, ws model.WeightSource) string {
	t.Helper()
	out := t.TempDir()
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "config.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	var tensors []safetensors.Tensor
	stacks := map[string]*safetensors.Tensor{}
	experts := cfg.MoE.NumRoutedExperts
	for _, name := range ws.Names() {
		w, err := ws.Tensor(name)
		if err != nil {
			t.Fatal(err)
		}
		prefix, rest, isExpert := strings.Cut(name, ".mlp.experts.")
		if !isExpert {
			tensors = append(tensors, safetensors.Tensor{Name: name, DType: "F32", Shape: w.Shape, Data: w.Data})
			continue
		}
		num, proj, _ := strings.Cut(rest, ".")
		e, _ := strconv.Atoi(num)
		stack, part := prefix+".mlp.experts.gate_up_proj", 0
		switch proj {
		case "up_proj.weight":
			part = 1
		case "down_proj.weight":
			stack = prefix + ".mlp.experts.down_proj"
		}
		s, ok := stacks[stack]
		if !ok {
			rows := w.Shape[0]
			if part == 0 && proj != "down_proj.weight" {
				rows *= 2
			}
			s = &safetensors.Tensor{Name: stack, DType: "F32", Shape: []int{experts, rows, w.Shape[1]}, Data: make([]byte, experts*rows*w.Shape[1]*4)}
			stacks[stack] = s
		}
		per := len(s.Data) / experts
		copy(s.Data[e*per+part*len(w.Data):], w.Data)
	}
	for _, s := range stacks {
		tensors = append(tensors, *s)
	}
	if err := safetensors.Write(filepath.Join(out, "model.safetensors"), tensors); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestFusedExperts: Qwen MoE checkpoints with the experts fused per layer
// (transformers' gate_up_proj and down_proj stacks) load as the same
// model: logits equal to the per-expert checkpoint's bit for bit; and so
// does their GGUF, whose experts are llama.cpp's fused ffn_gate_up_exps.
func TestFusedExperts(t *testing.T) {
	for _, ref := range []string{"qwen3_moe", "qwen2_moe"} {
		t.Run(ref, func(t *testing.T) {
			dir := shared.Path(t, "models/reference-tiny/"+ref)
			ids := modeltest.LoadReference(t, dir).InputIDs
			logits := func(path string) [][]float32 {
				ck, err := model.Open(path)
				if err != nil {
					t.Fatal(err)
				}
				defer ck.Close()
				if path != dir && ck.Format == model.FormatHF && ck.Weights.Has("model.layers.0.mlp.experts.0.gate_proj.weight") {
					t.Fatal("the fused copy still has per-expert tensors")
				}
				m, err := llama.New(&ck.Config, ck.Weights, cpu.NewOps(nil))
				if err != nil {
					t.Fatal(err)
				}
				return modeltest.PromptLogits(t, m, ids)
			}
			ck, err := model.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			fused := writeFused(t, dir, &ck.Config, ck.Weights)
			fck, err := model.Open(fused)
			if err != nil {
				t.Fatal(err)
			}
			defer fck.Close()
			gguf := filepath.Join(t.TempDir(), "fused.gguf")
			if err := model.WriteGGUF(fck, gguf); err != nil {
				t.Fatal(err)
			}
			want := logits(dir)
			for _, path := range []string{fused, gguf} {
				got := logits(path)
				for i := range want {
					if !slices.Equal(want[i], got[i]) {
						t.Fatalf("%s: position %d: logits differ from the per-expert ones", path, i)
					}
				}
			}
		})
	}
}
