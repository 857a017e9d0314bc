package random

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/gosling-ai/gosling/model/safetensors"
	"github.com/gosling-ai/gosling/tensor"
)

// writeHF writes a Hugging Face directory: config.json (LlamaForCausalLM)
// and one model.safetensors.
func writeHF(dir string, o Options) error {
	s := o.Shape
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write hf checkpoint: %w", err)
	}
	torchDType := map[tensor.DType]string{tensor.F32: "float32", tensor.BF16: "bfloat16", tensor.F16: "float16"}[o.DType]
	group, awq := awqGroup(o.DType)
	if awq {
		torchDType = "float16"
	}
	config := map[string]any{
		"architectures":           []string{"LlamaForCausalLM"},
		"model_type":              "llama",
		"hidden_size":             s.Dim,
		"intermediate_size":       s.Hidden,
		"num_hidden_layers":       s.Layers,
		"num_attention_heads":     s.Heads,
		"num_key_value_heads":     s.KVHeads,
		"head_dim":                s.HeadDim(),
		"vocab_size":              s.Vocab,
		"max_position_embeddings": s.SeqLen,
		"rms_norm_eps":            s.NormEps,
		"rope_theta":              s.RopeTheta,
		"hidden_act":              "silu",
		"tie_word_embeddings":     s.Tied,
		"bos_token_id":            1,
		"eos_token_id":            2,
		"torch_dtype":             torchDType,
	}
	if awq {
		config["quantization_config"] = map[string]any{"quant_method": "awq", "bits": 4, "group_size": group, "zero_point": true, "version": "gemm"}
	}
	data, _ := json.MarshalIndent(config, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "config.json"), append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("write hf checkpoint: %w", err)
	}
	return writeSafetensors(filepath.Join(dir, "model.safetensors"), o)
}

// writeSafetensors writes the shape's tensors in o's dtypes. An AWQ dtype
// stores the projections AutoAWQ quantizes (packAWQ; those whose rows are
// whole groups), the other matrices in float16 and the norms in float32.
func writeSafetensors(path string, o Options) error {
	names := map[tensor.DType]string{tensor.F32: "F32", tensor.BF16: "BF16", tensor.F16: "F16"}
	group, awq := awqGroup(o.DType)
	var out []safetensors.Tensor
	for _, t := range o.Shape.tensors() {
		d := o.dtypeOf(t)
		if awq && len(t.shape) == 2 && (d != o.DType || !strings.HasSuffix(t.name, "_proj.weight") || t.shape[0]%8 != 0) {
			d = tensor.F16
		}
		data, _ := o.encodedAs(t, d)
		if awq && d == o.DType {
			out = append(out, packAWQ(strings.TrimSuffix(t.name, ".weight"), data, t.shape[0], t.shape[1], group)...)
			continue
		}
		out = append(out, safetensors.Tensor{Name: t.name, DType: names[d], Shape: t.shape, Data: data})
	}
	return safetensors.Write(path, out)
}

// awqGroup is the group size of an AWQ4 dtype; ok is false for others.
func awqGroup(d tensor.DType) (group int, ok bool) {
	for _, g := range []int{32, 64, 128} {
		if a, _ := tensor.AWQ4Format(g); a == d {
			return g, true
		}
	}
	return 0, false
}
