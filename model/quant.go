package model

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"

	"github.com/gosling-ai/gosling/tensor"
)

// quantConfig is config.json's quantization_config, as far as gosling
// reads it. "mxfp4" checkpoints are mxfp4.go's. Otherwise only "fp8" checkpoints (transformers' FineGrainedFP8 and the
// per-tensor / per-channel FP8 layouts) load: their F8_E4M3 weights are
// widened at load (weight × scale), so every device serves them with the
// kernels it has. Any other method is refused by name rather than read as
// if it were plain weights.
type quantConfig struct {
	Method    string `json:"quant_method"`
	Format    string `json:"fmt"`
	BlockSize []int  `json:"weight_block_size"`
}

// parseQuantConfig reads quantization_config from config.json's bytes;
// nil when there is none.
func parseQuantConfig(data []byte) (*quantConfig, error) {
	var raw struct {
		Q *quantConfig `json:"quantization_config"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, err
	}
	q := raw.Q
	if q == nil {
		return nil, nil
	}
	switch q.Method {
	case "fp8":
	case "mxfp4":
		return q, nil
	case "":
		return nil, fmt.Errorf("quantization_config has no quant_method")
	default:
		return nil, fmt.Errorf("quantization_config.quant_method %q is not supported (gosling reads \"fp8\" and \"mxfp4\" checkpoints; use an unquantized or GGUF file)", q.Method)
	}
	if q.Format != "" && q.Format != "e4m3" && q.Format != "float8_e4m3fn" {
		return nil, fmt.Errorf("quantization_config.fmt %q is not supported (e4m3 only)", q.Format)
	}
	if q.BlockSize != nil && (len(q.BlockSize) != 2 || q.BlockSize[0] <= 0 || q.BlockSize[1] <= 0) {
		return nil, fmt.Errorf("quantization_config.weight_block_size %v: want [rows, cols], both positive", q.BlockSize)
	}
	return q, nil
}

// fp8Source serves an fp8 checkpoint's weights dequantized to float32: a
// weight stored as F8_E4M3 is multiplied by its scale, found beside it as
// NAME_scale_inv (block scales [ceil(out/br), ceil(in/bc)], DeepSeek-V3 and
// Qwen3-FP8; the multiplier despite its name) or NAME_scale (one scale, or
// one per output row). Other tensors pass through.
type fp8Source struct {
	WeightSource
	q *quantConfig
}

// plainSource refuses F8_E4M3 weights in a checkpoint that declares no
// quantization: without scales their values would be wrong.
type plainSource struct{ WeightSource }

func (s plainSource) Tensor(name string) (tensor.Weight, error) {
	w, err := s.WeightSource.Tensor(name)
	if err == nil && w.DType == tensor.FP8E4M3 {
		return tensor.Weight{}, fmt.Errorf("tensor %s is F8_E4M3 but config.json has no quantization_config to scale it", name)
	}
	return w, err
}

// withQuantization wraps a checkpoint's weights for its quantization_config.
func withQuantization(ws WeightSource, q *quantConfig) (WeightSource, error) {
	switch {
	case q == nil:
		return plainSource{ws}, nil
	case q.Method == "mxfp4":
		return newMXFP4Source(ws)
	}
	return fp8Source{ws, q}, nil
}

func (s fp8Source) Tensor(name string) (tensor.Weight, error) {
	w, err := s.WeightSource.Tensor(name)
	if err != nil || w.DType != tensor.FP8E4M3 {
		return w, err
	}
	if len(w.Shape) != 2 {
		return tensor.Weight{}, fmt.Errorf("fp8 tensor %s has shape %v; only 2-D weights are quantized", name, w.Shape)
	}
	rows, cols := w.Shape[0], w.Shape[1]
	scale, err := s.scales(name, rows, cols)
	if err != nil {
		return tensor.Weight{}, err
	}
	out := make([]byte, 4*rows*cols)
	for r := range rows {
		for c := range cols {
			v := tensor.FP8E4M3ToF32(w.Data[r*cols+c]) * scale(r, c)
			binary.LittleEndian.PutUint32(out[4*(r*cols+c):], math.Float32bits(v))
		}
	}
	return tensor.Weight{Name: w.Name, DType: tensor.F32, Shape: []int{rows, cols}, Data: out}, nil
}

// scales returns the scale of element (r, c) of the fp8 weight name.
func (s fp8Source) scales(name string, rows, cols int) (func(r, c int) float32, error) {
	if s.Has(name + "_scale_inv") {
		sw, err := s.float32s(name + "_scale_inv")
		if err != nil {
			return nil, err
		}
		br, bc := 128, 128
		if s.q.BlockSize != nil {
			br, bc = s.q.BlockSize[0], s.q.BlockSize[1]
		}
		gr, gc := (rows+br-1)/br, (cols+bc-1)/bc
		if len(sw) != gr*gc {
			return nil, fmt.Errorf("tensor %s_scale_inv has %d values; a [%d, %d] weight in %dx%d blocks needs %d", name, len(sw), rows, cols, br, bc, gr*gc)
		}
		return func(r, c int) float32 { return sw[(r/br)*gc+c/bc] }, nil
	}
	if s.Has(name + "_scale") {
		sw, err := s.float32s(name + "_scale")
		if err != nil {
			return nil, err
		}
		switch len(sw) {
		case 1:
			return func(int, int) float32 { return sw[0] }, nil
		case rows:
			return func(r, _ int) float32 { return sw[r] }, nil
		}
		return nil, fmt.Errorf("tensor %s_scale has %d values; want 1 or one per row (%d)", name, len(sw), rows)
	}
	return nil, fmt.Errorf("fp8 tensor %s has no %s_scale_inv or %s_scale beside it", name, name, name)
}

// float32s reads a (small) scale tensor as float32 values.
func (s fp8Source) float32s(name string) ([]float32, error) {
	w, err := s.WeightSource.Tensor(name)
	if err != nil {
		return nil, err
	}
	f, err := tensor.Convert(w, tensor.F32)
	if err != nil {
		return nil, fmt.Errorf("scale tensor %s: %w", name, err)
	}
	out := make([]float32, len(f.Data)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(f.Data[4*i:]))
	}
	return out, nil
}
