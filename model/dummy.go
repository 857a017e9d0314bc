package model

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gosling-ai/gosling/tensor"
)

// OpenDummy reads only config.json (a directory holding it, or the file)
// and serves random weights of the shapes the architecture lists: the
// --load-format dummy of SGLang and vLLM, for measuring speed at a real
// model's shape without its weights.
//
// Matrices are synthetic tensor.Weights in dtype (bf16 or F32) with no host
// data: values uniform in [-0.035, 0.035) (std ≈ 0.02), element i a pure
// function of (the name's seed, i), so a device fills its copy itself (the
// CUDA backend does, on the GPU) and host consumers make the bytes on every
// core (Weight.Materialize, DecodeRow, Float32). Biases are random like
// matrices and norm scales are 1, both F32 and made at once (they are small).
func OpenDummy(path string, shapes func(cfg *Config) map[string][]int, dtype tensor.DType) (*Checkpoint, error) {
	configPath := path
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		configPath = filepath.Join(path, "config.json")
	}
	data, err := os.ReadFile(configPath)
	if err != nil {
		return nil, fmt.Errorf("open model (dummy weights): %w", err)
	}
	cfg, _, err := parseHFConfig(data)
	if err != nil {
		return nil, fmt.Errorf("open model: %s: %w", configPath, err)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("open model: %s: %w", configPath, err)
	}
	if dtype != tensor.F32 && dtype != tensor.BF16 {
		return nil, fmt.Errorf("dummy weights are float32 or bfloat16, not %v", dtype)
	}
	return &Checkpoint{Path: path, Format: FormatHF, Config: cfg,
		Weights: &dummyWeights{shapes: shapes(&cfg), dtype: dtype}}, nil
}

// dummyScale is the half-width of the uniform matrix and bias values
// (std dummyScale/√3 ≈ 0.02, the usual initialiser's).
const dummyScale = 0.035

type dummyWeights struct {
	shapes map[string][]int
	dtype  tensor.DType
}

func (d *dummyWeights) Has(name string) bool { _, ok := d.shapes[name]; return ok }

func (d *dummyWeights) Names() []string {
	var names []string
	for n := range d.shapes {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func (d *dummyWeights) Close() error { return nil }

// Tensor describes the tensor (deterministic per name): nothing is made for
// a matrix until a consumer asks, so asking is free and nothing is cached.
func (d *dummyWeights) Tensor(name string) (tensor.Weight, error) {
	shape, ok := d.shapes[name]
	if !ok {
		return tensor.Weight{}, fmt.Errorf("dummy weights: no tensor %s for this architecture", name)
	}
	syn := &tensor.Synthetic{Seed: tensor.NameSeed(name), Scale: dummyScale}
	if len(shape) == 1 && !strings.HasSuffix(name, ".bias") {
		syn = &tensor.Synthetic{Seed: syn.Seed, Offset: 1} // a norm's scale
	}
	w := tensor.Weight{Name: name, DType: d.dtype, Shape: slices.Clone(shape), Synthetic: syn}
	if len(shape) != 1 {
		return w, nil
	}
	w.DType = tensor.F32 // vectors are small; keep them exact, and made
	return w.Materialize()
}
