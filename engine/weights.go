package engine

import (
	"fmt"
	"math"
	"strings"

	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/tensor"
)

// Weight dtypes. Activations are always float32; the weights of matrices
// (linear layers and embeddings) are served in the dtype Config.DType and
// Config.Quantization select, converted once at load:
//
//	DType auto               as stored (F32, BF16, F16, GGUF Q8_0 ...)
//	DType float32/bfloat16/float16   converted to that dtype
//	Quantization q8_0        quantised to Q8_0 (blocks of 32, llama.cpp's
//	                         scheme); matrices whose rows are not whole
//	                         blocks keep DType
//	Quantization fp8         the linear layers (model.FP8Linear) quantised
//	                         to e4m3 with per-channel scales, multiplied by
//	                         the device's FP8 kernels (device.FP8Ops: a GPU
//	                         of compute capability 8.9+, or the CPU's
//	                         reference path); the rest keeps DType
//
// Vectors (norms, biases) stay as stored. Fewer bytes per weight is what
// makes CPU decode faster: it reads every weight once per step.

// convertedWeights converts matrices as the model asks for them; nothing
// is cached, so a converted tensor lives only as long as the model keeps it
// (the linear layers repack it anyway).
type convertedWeights struct {
	model.WeightSource
	dtype    tensor.DType
	anyDType bool // DType auto: keep each matrix's stored dtype
	q8       bool
	fp8      *model.FP8Quantizer // --quantization fp8, set by wrap
	// lazy: converted rows are computed when read (tensor.Lazily), for a
	// device that keeps only what it packs of them (the CPU).
	lazy bool
}

// parseWeightDType reads Config.DType and Config.Quantization; nil means
// no conversion.
func parseWeightDType(dtype, quantization string) (*convertedWeights, error) {
	c := &convertedWeights{}
	switch strings.ToLower(dtype) {
	case "", "auto":
		c.anyDType = true
	default:
		d, err := tensor.ParseDType(dtype)
		if err != nil || (d != tensor.F32 && d != tensor.BF16 && d != tensor.F16) {
			return nil, fmt.Errorf("--dtype must be auto, float32, bfloat16 or float16, got %q (for Q8_0 use --quantization q8_0)", dtype)
		}
		c.dtype = d
	}
	switch strings.ToLower(quantization) {
	case "", "none":
	case "q8_0":
		c.q8 = true
	case "fp8":
		c.fp8 = &model.FP8Quantizer{}
	default:
		return nil, fmt.Errorf("--quantization must be none, q8_0 or fp8, got %q", quantization)
	}
	if c.anyDType && !c.q8 && c.fp8 == nil {
		return nil, nil
	}
	return c, nil
}

// wrap makes c serve ws's weights (through the fp8 quantiser for
// --quantization fp8).
func (c *convertedWeights) wrap(ws model.WeightSource) error {
	c.WeightSource = ws
	if c.fp8 == nil {
		return nil
	}
	q, err := model.QuantizeFP8(ws)
	if err != nil {
		return err
	}
	c.fp8, c.WeightSource = q, q
	return nil
}

// TensorFP8 hands over the weights the fp8 quantiser or an fp8
// checkpoint serves in e4m3 (model.FP8Source).
func (c *convertedWeights) TensorFP8(name string) (tensor.ScaledFP8, bool, error) {
	if fs, ok := c.WeightSource.(model.FP8Source); ok {
		return fs.TensorFP8(name)
	}
	return tensor.ScaledFP8{}, false, nil
}

// convertWeights wraps the checkpoint's weights so the model is built
// from converted matrices.
func (e *Engine) convertWeights() error {
	c, err := parseWeightDType(e.cfg.DType, e.cfg.Quantization)
	if err != nil || c == nil {
		return err
	}
	if err := c.wrap(e.checkpoint.Weights); err != nil {
		return err
	}
	e.checkpoint.Weights = c
	e.log.Info("weights converted at load", "dtype", e.cfg.DType, "quantization", e.cfg.Quantization)
	return nil
}

// convertLazily has the weights ws converts or dequantizes at load (its
// --dtype / --quantization conversion, an fp8 or MXFP4 checkpoint's
// dequantization) computed row by row when read, for the CPU: its matrices
// pack what they read into panels of their own, and an embedding table
// reads a few rows per step, so no whole converted copy is kept (on the
// heap it doubled the weights' memory and the collector's goal with it).
func convertLazily(ws model.WeightSource) {
	if c, ok := ws.(*convertedWeights); ok {
		c.lazy = true
		ws = c.WeightSource
	}
	model.DequantizeLazily(ws)
}

// served is the dtype a stored tensor is served in.
func (c *convertedWeights) served(name string, w tensor.Weight) tensor.DType {
	// MoE routers stay as stored: llama.cpp keeps them unquantised too, and
	// they are a rounding error of the bytes.
	if len(w.Shape) != 2 || strings.HasSuffix(name, ".mlp.gate.weight") {
		return w.DType
	}
	if c.q8 && w.Cols()%tensor.Q8_0BlockSize == 0 {
		return tensor.Q8_0
	}
	if c.anyDType {
		return w.DType
	}
	return c.dtype
}

func (c *convertedWeights) Tensor(name string) (tensor.Weight, error) {
	w, err := c.WeightSource.Tensor(name)
	if err != nil {
		return w, err
	}
	to := c.served(name, w)
	if to == w.DType {
		return w, nil
	}
	if c.lazy && w.Synthetic == nil {
		if err := w.Validate(); err != nil {
			return tensor.Weight{}, err
		}
		if _, err := to.RowBytes(w.Cols()); err != nil {
			return tensor.Weight{}, fmt.Errorf("convert %s to %v: %w", name, to, err)
		}
		return tensor.Lazily(w, to), nil
	}
	out, err := tensor.Convert(w, to)
	if err != nil {
		return tensor.Weight{}, fmt.Errorf("convert weights: %w", err)
	}
	return out, nil
}

// WeightBytesPerToken is what one decode step reads of the weights as
// served: every matrix except the embedding table, which only counts when
// it doubles as the output layer (tied embeddings). Divided by the memory
// bandwidth it bounds decode speed (the roofline). Mixture-of-experts
// models read only their routed experts; this counts them all (see
// WeightBytes for the split). Under tensor parallelism it is one rank's
// share, what each device reads.
func (e *Engine) WeightBytesPerToken() int64 { return e.WeightBytes().Total }

// WeightBytes is WeightBytesPerToken split into what every decode step
// reads and the routed experts, of which a step reads only those its
// tokens chose.
type WeightBytes struct {
	Total  int64 // every matrix a step may read (WeightBytesPerToken)
	Routed int64 // of it, the routed experts' matrices (0 for dense models)
	// Experts and ExpertsPerToken are the model's routed experts per MoE
	// layer and how many each token runs (0 for dense models).
	Experts, ExpertsPerToken int
}

// ActivePerToken is what one token's forward reads: the dense weights and
// ExpertsPerToken of each MoE layer's experts.
func (w WeightBytes) ActivePerToken() int64 { return w.PerStep(1) }

// PerStep is what a decode step of tokens reads, expected under uniform
// routing: each expert of a layer is left out by one token with
// probability 1-k/E (a token picks k distinct experts), so by all of them
// with (1-k/E)^tokens.
func (w WeightBytes) PerStep(tokens int) int64 {
	if w.Routed == 0 || w.Experts <= 0 {
		return w.Total
	}
	untouched := math.Pow(1-float64(w.ExpertsPerToken)/float64(w.Experts), float64(tokens))
	return w.Total - w.Routed + int64(math.Round(float64(w.Routed)*(1-untouched)))
}

// routedExpert reports a routed expert's tensor: every layout keeps them
// under "experts." of the layer's MLP (experts.N.gate_proj, Mixtral's
// experts.N.w1, fused experts.gate_up_proj); shared experts are
// "shared_expert." / "shared_experts.", which every token reads.
func routedExpert(name string) bool { return strings.Contains(name, ".experts.") }

// WeightBytes counts the weights as WeightBytesPerToken describes.
func (e *Engine) WeightBytes() WeightBytes {
	ws := e.checkpoint.Weights
	conv, _ := ws.(*convertedWeights)
	if conv != nil {
		ws = conv.WeightSource
	}
	tied := !ws.Has("lm_head.weight")
	out := WeightBytes{}
	if moe := e.checkpoint.Config.MoE; moe.NumRoutedExperts > 0 {
		out.Experts, out.ExpertsPerToken = moe.NumRoutedExperts, moe.NumExpertsPerTok
	}
	for _, name := range ws.Names() {
		w, err := ws.Tensor(name)
		// Matrices, and experts stacked into [experts, out, in] tensors.
		if err != nil || len(w.Shape) < 2 || len(w.Shape) > 3 || (name == "model.embed_tokens.weight" && !tied) {
			continue
		}
		d := w.DType
		if conv != nil {
			d = conv.served(name, w)
			if conv.fp8 != nil && model.FP8Linear(name) {
				d = tensor.FP8E4M3
			}
		}
		if rb, err := d.RowBytes(w.Cols()); err == nil {
			b := e.rankWeightBytes(name, w.Shape, int64(rb)*int64(w.Rows()))
			out.Total += b
			if out.Experts > 0 && routedExpert(name) {
				out.Routed += b
			}
		}
	}
	return out
}

// Unwrap is the source converted (model.RawTensor looks through it).
func (c *convertedWeights) Unwrap() model.WeightSource { return c.WeightSource }
