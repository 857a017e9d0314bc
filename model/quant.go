package model

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"

	"github.com/gosling-ai/gosling/model/safetensors"
	"github.com/gosling-ai/gosling/tensor"
)

// quantConfig is config.json's quantization_config, as far as gosling
// reads it. "mxfp4" checkpoints are mxfp4.go's, "awq" ones awq.go's,
// "gptq" ones gptq.go's.
// Otherwise only "fp8" checkpoints (transformers' FineGrainedFP8 and the
// per-tensor / per-channel FP8 layouts) load: their F8_E4M3 weights are
// widened at load (weight × scale), so every device serves them with the
// kernels it has. Any other method is refused by name rather than read as
// if it were plain weights.
type quantConfig struct {
	Method    string `json:"quant_method"`
	Format    string `json:"fmt"`
	BlockSize []int  `json:"weight_block_size"`
	// Activations: "dynamic" or "static". Either way gosling quantises
	// activations per token at run time (device.FP8Scaled): a static
	// checkpoint's input_scale (one per tensor) is coarser than that.
	Activations string `json:"activation_scheme"`
	// AWQ's (awq.go): bits (w_bit in AutoAWQ's own configs), group_size
	// (q_group_size), zero_point and the packing version.
	Bits       *int   `json:"bits"`
	WBit       *int   `json:"w_bit"`
	GroupSize  *int   `json:"group_size"`
	QGroupSize *int   `json:"q_group_size"`
	ZeroPoint  *bool  `json:"zero_point"`
	Version    string `json:"version"`
	awqGroup   int    // checkAWQ's or checkGPTQ's group size (GPTQ: -1 one per row)
	// GPTQ's (gptq.go): act-order and the zero-point convention.
	DescAct          *bool  `json:"desc_act"`
	CheckpointFormat string `json:"checkpoint_format"`
	gptq             bool
	zeroOffset       int // added to each stored zero point
}

// parseQuantConfig reads quantization_config from config.json's bytes;
// nil when there is none.
func parseQuantConfig(data []byte) (*quantConfig, error) {
	var raw struct {
		Q *quantConfig `json:"quantization_config"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("quantization_config: %w", err)
	}
	q := raw.Q
	if q == nil {
		return nil, nil
	}
	switch q.Method {
	case "fp8":
	case "mxfp4":
		return q, nil
	case "awq":
		return q, q.checkAWQ()
	case "gptq":
		return q, q.checkGPTQ()
	case "":
		return nil, fmt.Errorf("quantization_config has no quant_method")
	default:
		return nil, fmt.Errorf("quantization_config.quant_method %q is not supported (gosling reads \"fp8\", \"mxfp4\", \"awq\" and \"gptq\" checkpoints; use an unquantized or GGUF file)", q.Method)
	}
	if q.Format != "" && q.Format != "e4m3" && q.Format != "float8_e4m3fn" {
		return nil, fmt.Errorf("quantization_config.fmt %q is not supported (e4m3 only)", q.Format)
	}
	if q.Activations != "" && q.Activations != "dynamic" && q.Activations != "static" {
		return nil, fmt.Errorf("quantization_config.activation_scheme %q is not supported (dynamic or static)", q.Activations)
	}
	if q.BlockSize != nil && (len(q.BlockSize) != 2 || q.BlockSize[0] <= 0 || q.BlockSize[1] <= 0) {
		return nil, fmt.Errorf("quantization_config.weight_block_size %v: want [rows, cols], both positive", q.BlockSize)
	}
	return q, nil
}

// fp8Source serves an fp8 checkpoint's weights: through Tensor dequantized
// to float32 (each F8_E4M3 weight multiplied by its scales), through
// TensorFP8 (FP8Source) as stored with their scales, for a device that
// multiplies e4m3 weights itself. Other tensors pass through.
type fp8Source struct {
	WeightSource
	q *quantConfig
	dequantizing
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
	case q.Method == "awq", q.Method == "gptq":
		return newAWQSource(ws, q)
	}
	return &fp8Source{WeightSource: ws, q: q}, nil
}

func (s *fp8Source) Tensor(name string) (tensor.Weight, error) {
	q, ok, err := s.TensorFP8(name)
	if err != nil || !ok {
		if err == nil {
			return s.WeightSource.Tensor(name)
		}
		return tensor.Weight{}, err
	}
	return s.hand(tensor.Weight{Name: q.Q.Name, DType: tensor.F32, Shape: []int{q.Out(), q.In()}, Lazy: q.WidenRow})
}

// TensorFP8 is the F8_E4M3 weight name with its scales, found beside it as
// NAME_scale_inv (block scales [ceil(out/br), ceil(in/bc)]; the multiplier
// despite its name) or NAME_scale (one scale, or one per output row); ok
// is false for a weight stored in another dtype.
func (s *fp8Source) TensorFP8(name string) (tensor.ScaledFP8, bool, error) {
	w, err := s.WeightSource.Tensor(name)
	if err != nil || w.DType != tensor.FP8E4M3 {
		return tensor.ScaledFP8{}, false, err
	}
	if len(w.Shape) != 2 {
		return tensor.ScaledFP8{}, false, fmt.Errorf("fp8 tensor %s has shape %v; only 2-D weights are quantized", name, w.Shape)
	}
	rows, cols := w.Shape[0], w.Shape[1]
	q := tensor.ScaledFP8{Q: w}
	switch {
	case s.Has(name + "_scale_inv"):
		if q.Scales, err = s.float32s(name + "_scale_inv"); err != nil {
			return tensor.ScaledFP8{}, false, err
		}
		q.BlockRows, q.BlockCols = 128, 128
		if s.q.BlockSize != nil {
			q.BlockRows, q.BlockCols = s.q.BlockSize[0], s.q.BlockSize[1]
		}
		if gr, gc := (rows+q.BlockRows-1)/q.BlockRows, (cols+q.BlockCols-1)/q.BlockCols; len(q.Scales) != gr*gc {
			return tensor.ScaledFP8{}, false, fmt.Errorf("tensor %s_scale_inv has %d values; a [%d, %d] weight in %dx%d blocks needs %d", name, len(q.Scales), rows, cols, q.BlockRows, q.BlockCols, gr*gc)
		}
	case s.Has(name + "_scale"):
		if q.Scales, err = s.float32s(name + "_scale"); err != nil {
			return tensor.ScaledFP8{}, false, err
		}
		switch len(q.Scales) {
		case 1:
			q.BlockRows, q.BlockCols = rows, cols
		case rows:
			q.BlockRows, q.BlockCols = 1, cols
		default:
			return tensor.ScaledFP8{}, false, fmt.Errorf("tensor %s_scale has %d values; want 1 or one per row (%d)", name, len(q.Scales), rows)
		}
	default:
		return tensor.ScaledFP8{}, false, fmt.Errorf("fp8 tensor %s has no %s_scale_inv or %s_scale beside it", name, name, name)
	}
	return q, true, q.Validate()
}

// float32s reads a (small) scale tensor as float32 values.
func (s *fp8Source) float32s(name string) ([]float32, error) {
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

// dequantizing is what a weight source that dequantizes tensors at load
// (an fp8 checkpoint, MXFP4 experts) shares: whether it hands them out
// whole, made on the heap (the default), or lazy (tensor.Weight.Lazy),
// computed row by row when read.
type dequantizing struct{ lazy bool }

func (d *dequantizing) setLazy() { d.lazy = true }

// hand returns the lazy weight w as it is, or made whole.
func (d *dequantizing) hand(w tensor.Weight) (tensor.Weight, error) {
	if d.lazy {
		return w, nil
	}
	return w.Materialize()
}

// DequantizeLazily has ws hand out the tensors it dequantizes at load as
// lazy weights (tensor.Weight.Lazy), for a device that keeps only what it
// packs of them; it reports whether ws dequantizes any. Call it before
// the model is built.
func DequantizeLazily(ws WeightSource) bool {
	if q, ok := ws.(*FP8Quantizer); ok {
		ws = q.WeightSource
	}
	s, ok := ws.(interface{ setLazy() })
	if ok {
		s.setLazy()
	}
	return ok
}

// RawTensor returns a tensor as stored, in any safetensors dtype (an
// integer map such as an EAGLE-3 head's d2t), from a Hugging Face
// checkpoint's weights, looking through the wrappers that convert or
// scale them (a wrapper shows what it wraps with Unwrap).
func RawTensor(ws WeightSource, name string) (safetensors.Raw, error) {
	for {
		switch s := ws.(type) {
		case interface {
			Raw(string) (safetensors.Raw, error)
		}:
			return s.Raw(name)
		case plainSource:
			ws = s.WeightSource
		case *fp8Source:
			ws = s.WeightSource
		case *FP8Quantizer:
			ws = s.WeightSource
		case interface{ Unwrap() WeightSource }:
			ws = s.Unwrap()
		default:
			return safetensors.Raw{}, fmt.Errorf("tensor %s: this checkpoint format keeps no integer tensors (a Hugging Face safetensors directory does)", name)
		}
	}
}
