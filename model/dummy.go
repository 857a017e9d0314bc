package model

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/gosling-ai/gosling/tensor"
)

// OpenDummy reads only config.json (a directory holding it, or the file)
// and serves random weights of the shapes the architecture lists: the
// --load-format dummy of SGLang and vLLM, for measuring speed at a real
// model's shape without its weights. Matrices are bf16 (or F32) values of
// about N(0, 0.02²); norm scales are 1.
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
		Weights: &dummyWeights{shapes: shapes(&cfg), dtype: dtype, made: map[string]tensor.Weight{}}}, nil
}

type dummyWeights struct {
	shapes map[string][]int
	dtype  tensor.DType
	mu     sync.Mutex
	made   map[string]tensor.Weight
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

// Tensor makes the tensor on first request (deterministic per name).
func (d *dummyWeights) Tensor(name string) (tensor.Weight, error) {
	shape, ok := d.shapes[name]
	if !ok {
		return tensor.Weight{}, fmt.Errorf("dummy weights: no tensor %s for this architecture", name)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if w, ok := d.made[name]; ok {
		return w, nil
	}
	n := 1
	for _, s := range shape {
		n *= s
	}
	isNorm := len(shape) == 1 && !strings.HasSuffix(name, ".bias")
	dt := d.dtype
	if len(shape) == 1 {
		dt = tensor.F32 // vectors are small; keep them exact
	}
	w := tensor.Weight{Name: name, DType: dt, Shape: slices.Clone(shape)}
	rowBytes, _ := dt.RowBytes(n)
	w.Data = make([]byte, rowBytes)
	state := uint64(len(name))*0x9e3779b97f4a7c15 + 1
	for _, c := range name {
		state = state*31 + uint64(c)
	}
	for i := range n {
		v := float32(1)
		if !isNorm {
			// xorshift64*: a cheap uniform in [-0.035, 0.035) (std ≈ 0.02).
			state ^= state >> 12
			state ^= state << 25
			state ^= state >> 27
			u := float32((state*0x2545f4914f6cdd1d)>>40) / (1 << 24)
			v = (u - 0.5) * 0.07
		}
		if dt == tensor.BF16 {
			binary.LittleEndian.PutUint16(w.Data[2*i:], tensor.F32ToBF16(v))
		} else {
			binary.LittleEndian.PutUint32(w.Data[4*i:], math.Float32bits(v))
		}
	}
	d.made[name] = w
	return w, nil
}
