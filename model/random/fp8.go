package random

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/gosling-ai/gosling/model/safetensors"
	"github.com/gosling-ai/gosling/tensor"
)

// WriteFP8 copies the float32 Hugging Face checkpoint in src to dst as an
// fp8 checkpoint of the layout transformers' FineGrainedFP8 and
// DeepSeek-V3 use: every 2-D projection weight (a name ending in
// "_proj.weight") stored as F8_E4M3 with NAME_scale_inv block scales over
// block[0]×block[1] tiles (tensor.QuantizeFP8Blocks: each tile's max|w|
// maps to 448), or, with block nil, one NAME_scale per tensor; config.json gains the matching
// quantization_config. It returns the quantized tensors' names.
func WriteFP8(src, dst string, block []int) ([]string, error) {
	cfgData, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		return nil, err
	}
	var cfg map[string]any
	if err := json.Unmarshal(cfgData, &cfg); err != nil {
		return nil, err
	}
	q := map[string]any{"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic"}
	if block != nil {
		q["weight_block_size"] = block
	}
	cfg["quantization_config"] = q
	in, err := safetensors.Open(filepath.Join(src, "model.safetensors"))
	if err != nil {
		return nil, err
	}
	defer in.Close()
	var out []safetensors.Tensor
	var quantized []string
	for _, name := range in.Names() {
		w, err := in.Tensor(name)
		if err != nil {
			return nil, err
		}
		if w.DType != tensor.F32 {
			return nil, fmt.Errorf("%s is %v; WriteFP8 reads float32 checkpoints", name, w.DType)
		}
		if len(w.Shape) != 2 || !strings.HasSuffix(name, "_proj.weight") {
			out = append(out, safetensors.Tensor{Name: name, DType: "F32", Shape: w.Shape, Data: w.Data})
			continue
		}
		rows, cols := w.Shape[0], w.Shape[1]
		br, bc := rows, cols
		if block != nil {
			br, bc = block[0], block[1]
		}
		q, err := tensor.QuantizeFP8Blocks(w, br, bc)
		if err != nil {
			return nil, err
		}
		sb := make([]byte, 4*len(q.Scales))
		for i, s := range q.Scales {
			binary.LittleEndian.PutUint32(sb[4*i:], math.Float32bits(s))
		}
		out = append(out, safetensors.Tensor{Name: name, DType: "F8_E4M3", Shape: w.Shape, Data: q.Q.Data})
		if block != nil {
			out = append(out, safetensors.Tensor{Name: name + "_scale_inv", DType: "F32", Shape: []int{(rows + br - 1) / br, q.ScaleCols()}, Data: sb})
		} else {
			out = append(out, safetensors.Tensor{Name: name + "_scale", DType: "F32", Shape: []int{}, Data: sb})
		}
		quantized = append(quantized, name)
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return nil, err
	}
	data, _ := json.MarshalIndent(cfg, "", "  ")
	if err := os.WriteFile(filepath.Join(dst, "config.json"), append(data, '\n'), 0o644); err != nil {
		return nil, err
	}
	return quantized, safetensors.Write(filepath.Join(dst, "model.safetensors"), out)
}
