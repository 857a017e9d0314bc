package registry

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/device/cpu"
	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/model/gguf"
	"github.com/gosling-ai/gosling/model/internal/modeltest"
	"github.com/gosling-ai/gosling/sample"
)

// promptLogits opens a checkpoint, builds it on the CPU and runs ids.
func promptLogits(t *testing.T, path string, ids []int) (*model.Checkpoint, [][]float32) {
	t.Helper()
	ck, err := model.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	m, err := Build(ck, cpu.NewOps(nil))
	if err != nil {
		t.Fatal(err)
	}
	return ck, modeltest.PromptLogits(t, m, ids)
}

// maxDiff is the largest |a-b| over two logit tables.
func maxDiff(a, b [][]float32) float64 {
	worst := 0.0
	for i := range a {
		for j := range a[i] {
			worst = max(worst, math.Abs(float64(a[i][j]-b[i][j])))
		}
	}
	return worst
}

// TestGGUFRoundTrip: each reference model written to GGUF by WriteGGUF,
// under llama.cpp's architecture, key and tensor names, loads back as the
// same architecture and config and gives the safetensors load's logits on
// the reference prompt, within 2e-4 of transformers' log-probabilities:
// bit for bit, except Mixtral, whose q/k rows the
// "llama" layout permutes into interleaved pairs, which reorders the sums
// of each q·k (the rotation itself is the same).
func TestGGUFRoundTrip(t *testing.T) {
	// names are some of layer 0's tensors as llama.cpp names them, with
	// their ggml ne (innermost first).
	type named map[string][]uint64
	for _, tc := range []struct {
		ref, arch string
		tol       float64
		names     named
	}{
		{"qwen3_moe", "qwen3moe", 0, named{"blk.0.ffn_gate_inp.weight": {64, 8}, "blk.0.ffn_gate_exps.weight": {64, 48, 8},
			"blk.0.ffn_down_exps.weight": {48, 64, 8}, "blk.0.attn_q_norm.weight": {32}}},
		{"qwen2_moe", "qwen2moe", 0, named{"blk.0.ffn_up_exps.weight": {64, 48, 8}, "blk.0.ffn_gate_inp_shexp.weight": {64, 1},
			"blk.0.ffn_down_shexp.weight": {96, 64}, "blk.0.attn_k.bias": {32}}},
		{"mixtral", "llama", 1e-4, named{"blk.0.ffn_gate_inp.weight": {64, 8}, "blk.0.ffn_up_exps.weight": {64, 160, 8}}},
		{"gemma3_text", "gemma3", 0, named{"blk.0.post_attention_norm.weight": {64}, "blk.0.ffn_norm.weight": {64},
			"blk.0.post_ffw_norm.weight": {64}, "blk.0.attn_k_norm.weight": {32}}},
		{"phi3", "phi3", 0, named{"blk.0.attn_qkv.weight": {64, 128}, "blk.0.ffn_up.weight": {64, 320}}},
		{"gpt_oss", "gpt-oss", 0, named{"blk.0.attn_sinks.weight": {4}, "blk.0.post_attention_norm.weight": {64},
			"blk.0.ffn_gate_inp.bias": {8}, "blk.0.ffn_gate_exps.weight": {64, 160, 8}, "blk.0.ffn_gate_exps.bias": {160, 8},
			"blk.0.ffn_down_exps.weight": {160, 64, 8}}},
		{"qwen3_yarn", "qwen3", 0, named{"blk.0.attn_q_norm.weight": {32}}},
	} {
		t.Run(tc.ref, func(t *testing.T) {
			dir := shared.Path(t, "models/reference-tiny/"+tc.ref)
			ref := modeltest.LoadReference(t, dir)
			hf, want := promptLogits(t, dir, ref.InputIDs)

			path := filepath.Join(t.TempDir(), tc.ref+".gguf")
			if err := model.WriteGGUF(hf, path); err != nil {
				t.Fatal(err)
			}
			f, err := gguf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			arch := f.Architecture()
			for name, ne := range tc.names {
				if info, ok := f.Info(name); !ok || !slices.Equal(info.Dims, ne) {
					t.Errorf("tensor %s: ne %v (present: %v), want %v", name, info.Dims, ok, ne)
				}
			}
			f.Close()
			if arch != tc.arch {
				t.Errorf("general.architecture %q, want %q", arch, tc.arch)
			}
			ck, got := promptLogits(t, path, ref.InputIDs)
			if ck.Config.Architecture != hf.Config.Architecture || ck.Config.NumLayers != hf.Config.NumLayers ||
				ck.Config.MoE.NumRoutedExperts != hf.Config.MoE.NumRoutedExperts || ck.Config.MoE.NormTopKProb != hf.Config.MoE.NormTopKProb {
				t.Errorf("GGUF config %+v, safetensors %+v", ck.Config, hf.Config)
			}
			d := maxDiff(want, got)
			t.Logf("%s: max |Δ logit| = %.3g over %d positions", tc.ref, d, len(got))
			if d > tc.tol {
				t.Errorf("max |Δ logit| = %.3g, want <= %g", d, tc.tol)
			}
			lp := make([]float32, len(got[0]))
			for i, want := range ref.PromptLogprobs {
				sample.LogSoftmax(got[i], lp)
				if g := float64(lp[ref.InputIDs[i+1]]); math.Abs(g-want) > 2e-4 {
					t.Errorf("prompt logprob %d: %.6f, transformers %.6f", i+1, g, want)
				}
			}
		})
	}
}

// TestGGUFPartialRotary: a Phi-3 whose partial_rotary_factor rotates 12
// of its 16 head values (Phi-4-mini's 0.75) is written with
// phi3.rope.dimension_count 12, as llama.cpp's converter writes it, and
// loads back with the safetensors load's logits; the factor changes them.
func TestGGUFPartialRotary(t *testing.T) {
	src, err := filepath.Abs(shared.Path(t, "models/reference-tiny/phi3"))
	if err != nil {
		t.Fatal(err)
	}
	ref := modeltest.LoadReference(t, src)
	_, whole := promptLogits(t, src, ref.InputIDs)

	dir := t.TempDir()
	data, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	data = []byte(strings.Replace(string(data), `"partial_rotary_factor": 1.0`, `"partial_rotary_factor": 0.75`, 1))
	if !strings.Contains(string(data), `"partial_rotary_factor": 0.75`) {
		t.Fatal("phi3's config.json has no partial_rotary_factor 1.0 to change")
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(src, "model.safetensors"), filepath.Join(dir, "model.safetensors")); err != nil {
		t.Fatal(err)
	}
	hf, want := promptLogits(t, dir, ref.InputIDs)
	if hf.Config.RotaryDim != 12 {
		t.Fatalf("rotary dims %d, want 12", hf.Config.RotaryDim)
	}
	if d := maxDiff(want, whole); d < 1e-2 {
		t.Fatalf("rotating 12 of 16 values moved the logits by only %.3g", d)
	}
	path := filepath.Join(t.TempDir(), "phi3_partial.gguf")
	if err := model.WriteGGUF(hf, path); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	n, ok := gguf.Int(f.Metadata, "phi3.rope.dimension_count")
	f.Close()
	if !ok || n != 12 {
		t.Errorf("phi3.rope.dimension_count = %d (present %v), want 12", n, ok)
	}
	ck, got := promptLogits(t, path, ref.InputIDs)
	if ck.Config.RotaryDim != 12 {
		t.Errorf("GGUF load rotates %d dims, want 12", ck.Config.RotaryDim)
	}
	if d := maxDiff(want, got); d != 0 {
		t.Errorf("GGUF logits differ from the safetensors load by %.3g", d)
	}
}
