package model

import (
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/gosling-ai/gosling/tensor"
)

// FP8Source is a WeightSource that can hand linear layers' weights over in
// e4m3 with their scales, for a device that multiplies them so
// (device.FP8Ops): an fp8 checkpoint, or QuantizeFP8's quantisation.
type FP8Source interface {
	// TensorFP8 returns the weight name in e4m3; ok is false when it is
	// not served so (read it with Tensor).
	TensorFP8(name string) (w tensor.ScaledFP8, ok bool, err error)
}

// FP8Linear reports whether the weight name is a linear layer FP8 serving
// covers: a 2-D projection of the language model. Embedding tables (read
// by row, and the tied output layer), the output layer (lm_head), mixture
// of experts routers and vision towers stay as stored, as vLLM and SGLang
// leave them unquantised.
func FP8Linear(name string) bool {
	if !strings.HasSuffix(name, ".weight") {
		return false
	}
	for _, s := range []string{"embed", "lm_head", "visual.", "vision_tower", "multi_modal_projector"} {
		if strings.Contains(name, s) {
			return false
		}
	}
	for _, s := range []string{".gate.weight", ".router.weight", "shared_expert_gate.weight"} {
		if strings.HasSuffix(name, s) {
			return false
		}
	}
	return true
}

// FP8Quantizer is --quantization fp8: the weights of ws's linear layers
// (FP8Linear), stored in float32, float16 or bfloat16, are quantised at
// load to e4m3 with one float32 scale per output channel
// (tensor.QuantizeFP8Rows) when a device asks through TensorFP8. An fp8
// checkpoint's own e4m3 weights are served as stored. Tensor still reads
// every weight as the checkpoint has it.
type FP8Quantizer struct {
	WeightSource
	inner  FP8Source // the checkpoint's e4m3 weights, or nil
	served atomic.Int64
}

// QuantizeFP8 wraps ws for --quantization fp8. An mxfp4 checkpoint is
// refused: its experts are quantised already, in another format.
func QuantizeFP8(ws WeightSource) (*FP8Quantizer, error) {
	switch ws.(type) {
	case *mxfp4Source:
		return nil, fmt.Errorf("--quantization fp8: the checkpoint is quantized with mxfp4 already; serve it without --quantization")
	case *awqSource:
		return nil, fmt.Errorf("--quantization fp8: the checkpoint is quantized with awq already; serve it without --quantization")
	}
	q := &FP8Quantizer{WeightSource: ws}
	q.inner, _ = ws.(FP8Source)
	return q, nil
}

// TensorFP8 quantises the linear layer name (FP8Linear), or hands over the
// checkpoint's own e4m3 weight. A linear layer stored in another quantised
// format (a GGUF block format) is an error naming it.
func (q *FP8Quantizer) TensorFP8(name string) (tensor.ScaledFP8, bool, error) {
	if !FP8Linear(name) {
		return tensor.ScaledFP8{}, false, nil
	}
	if q.inner != nil {
		s, ok, err := q.inner.TensorFP8(name)
		if err != nil || ok {
			if ok {
				q.served.Add(1)
			}
			return s, ok, err
		}
	}
	w, err := q.WeightSource.Tensor(name)
	if err != nil {
		return tensor.ScaledFP8{}, false, err
	}
	if len(w.Shape) != 2 {
		return tensor.ScaledFP8{}, false, nil
	}
	switch w.DType {
	case tensor.F32, tensor.F16, tensor.BF16:
	default:
		return tensor.ScaledFP8{}, false, fmt.Errorf("--quantization fp8 quantises float weights; %s is stored as %v (serve this checkpoint without --quantization)", name, w.DType)
	}
	s, err := tensor.QuantizeFP8Rows(w)
	if err != nil {
		return tensor.ScaledFP8{}, false, err
	}
	q.served.Add(1)
	return s, true, nil
}

// Served is how many weights TensorFP8 has handed over in e4m3.
func (q *FP8Quantizer) Served() int64 { return q.served.Load() }
