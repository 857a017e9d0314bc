package random

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

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
	data, _ := json.MarshalIndent(config, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "config.json"), append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("write hf checkpoint: %w", err)
	}
	return writeSafetensors(filepath.Join(dir, "model.safetensors"), o)
}

// writeSafetensors: an 8-byte header length, the JSON header (padded with
// spaces to a multiple of 8), then the tensors back to back.
func writeSafetensors(path string, o Options) error {
	names := map[tensor.DType]string{tensor.F32: "F32", tensor.BF16: "BF16", tensor.F16: "F16"}
	header := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	specs := o.Shape.tensors()
	offset := 0
	for _, t := range specs {
		d := o.dtypeOf(t)
		n := bytesOf(d, t)
		header[t.name] = map[string]any{"dtype": names[d], "shape": t.shape, "data_offsets": []int{offset, offset + n}}
		offset += n
	}
	hdr, _ := json.Marshal(header)
	for len(hdr)%8 != 0 {
		hdr = append(hdr, ' ')
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write safetensors: %w", err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	binary.Write(w, binary.LittleEndian, uint64(len(hdr)))
	w.Write(hdr)
	for _, t := range specs {
		data, _ := o.encoded(t)
		w.Write(data)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("write safetensors: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write safetensors: %w", err)
	}
	return nil
}
