package model

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/tensor"
)

// TestOpenDummy: dummy weights are synthetic matrices with no host data
// (values uniform in ±dummyScale, deterministic per name, different between
// names), random F32 biases and norm scales of 1, at the shapes given.
func TestOpenDummy(t *testing.T) {
	dir := t.TempDir()
	cfg := `{"architectures": ["Qwen3ForCausalLM"], "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
		"num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32, "vocab_size": 100, "max_position_embeddings": 64,
		"rms_norm_eps": 1e-6, "rope_theta": 10000}`
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	shapes := func(c *Config) map[string][]int {
		return map[string][]int{
			"model.embed_tokens.weight":            {c.VocabSize, c.HiddenSize},
			"model.layers.0.mlp.up_proj.weight":    {c.IntermediateSize, c.HiddenSize},
			"model.layers.0.self_attn.q_proj.bias": {c.HiddenSize},
			"model.norm.weight":                    {c.HiddenSize},
		}
	}
	if _, err := OpenDummy(dir, shapes, tensor.Q8_0); err == nil {
		t.Error("Q8_0 dummy weights were accepted")
	}
	for _, dt := range []tensor.DType{tensor.BF16, tensor.F32} {
		ck, err := OpenDummy(dir, shapes, dt)
		if err != nil {
			t.Fatal(err)
		}
		ws := ck.Weights
		if ck.Config.HiddenSize != 64 || !slices.Equal(ws.Names(), slices.Sorted(maps.Keys(shapes(&ck.Config)))) {
			t.Fatalf("config %+v, names %v", ck.Config, ws.Names())
		}
		if _, err := ws.Tensor("lm_head.weight"); err == nil || ws.Has("lm_head.weight") {
			t.Error("a tensor the architecture does not list was served")
		}
		embed, err := Expect(ws, "model.embed_tokens.weight", 100, 64)
		if err != nil {
			t.Fatal(err)
		}
		if embed.Data != nil || embed.Synthetic == nil || embed.DType != dt || embed.Validate() != nil {
			t.Fatalf("%v matrix: %d bytes, synthetic %v, dtype %v", dt, len(embed.Data), embed.Synthetic, embed.DType)
		}
		again, _ := ws.Tensor("model.embed_tokens.weight")
		up, _ := ws.Tensor("model.layers.0.mlp.up_proj.weight")
		vals, vals2, upVals := embed.Float32(), again.Float32(), up.Float32()
		if !slices.Equal(vals, vals2) {
			t.Error("a dummy tensor differs between requests")
		}
		if slices.Equal(vals[:64], upVals[:64]) {
			t.Error("two dummy matrices have the same values")
		}
		m, err := embed.Materialize()
		if err != nil || !slices.Equal(m.Float32(), vals) {
			t.Fatalf("materialised bytes differ from the synthetic values (%v)", err)
		}
		var sq float64
		for _, v := range vals {
			if v < -dummyScale || v > dummyScale {
				t.Fatalf("value %v outside ±%v", v, dummyScale)
			}
			sq += float64(v) * float64(v)
		}
		if std := sq / float64(len(vals)); std < 0.017*0.017 || std > 0.023*0.023 {
			t.Errorf("variance %v, want about 0.02²", std)
		}
		for name, want := range map[string]func(float32) bool{
			"model.norm.weight":                    func(v float32) bool { return v == 1 },
			"model.layers.0.self_attn.q_proj.bias": func(v float32) bool { return v != 1 && v >= -dummyScale && v < dummyScale },
		} {
			w, err := ws.Tensor(name)
			if err != nil {
				t.Fatal(err)
			}
			if w.DType != tensor.F32 || len(w.Data) != 4*64 {
				t.Errorf("%s: %v, %d bytes; want F32 with its bytes", name, w.DType, len(w.Data))
			}
			for _, v := range w.Float32() {
				if !want(v) {
					t.Errorf("%s holds %v", name, v)
					break
				}
			}
			if strings.HasSuffix(name, ".bias") && slices.Equal(w.Float32()[:8], make([]float32, 8)) {
				t.Errorf("%s is zero", name)
			}
		}
	}
}
