// Package random writes Llama-architecture checkpoints with random weights
// in the three formats gosling reads (llama2.c, Hugging Face safetensors,
// GGUF), for benchmarks and tests at real model shapes without downloads.
//
// Weights are normal with standard deviation Std (0.02, Llama's
// initializer), norms are 1. Each tensor draws from its own stream, seeded
// by Seed and the tensor's name, so one seed gives the same numbers in
// every format and dtype. (The formats still differ in RoPE layout:
// llama2.c and GGUF rotate interleaved pairs, Hugging Face halves, so the
// same numbers are not the same model across formats.)
package random

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/gosling-ai/gosling/model/gguf"
	"github.com/gosling-ai/gosling/tensor"
)

// Shape is a Llama model's size.
type Shape struct {
	Dim, Hidden, Layers, Heads, KVHeads, Vocab, SeqLen int
	Tied                                               bool // the output layer reuses the embedding
	RopeTheta, NormEps                                 float64
}

// Presets are published shapes: karpathy's tinyllamas (llama2.c) and Meta's
// Llama 3 sizes.
var Presets = map[string]Shape{
	"stories260K":  {Dim: 64, Hidden: 172, Layers: 5, Heads: 8, KVHeads: 4, Vocab: 512, SeqLen: 512, Tied: true, RopeTheta: 10000, NormEps: 1e-5},
	"stories15M":   {Dim: 288, Hidden: 768, Layers: 6, Heads: 6, KVHeads: 6, Vocab: 32000, SeqLen: 256, Tied: true, RopeTheta: 10000, NormEps: 1e-5},
	"stories42M":   {Dim: 512, Hidden: 1376, Layers: 8, Heads: 8, KVHeads: 8, Vocab: 32000, SeqLen: 1024, Tied: true, RopeTheta: 10000, NormEps: 1e-5},
	"stories110M":  {Dim: 768, Hidden: 2048, Layers: 12, Heads: 12, KVHeads: 12, Vocab: 32000, SeqLen: 1024, Tied: true, RopeTheta: 10000, NormEps: 1e-5},
	"llama-3.2-1b": {Dim: 2048, Hidden: 8192, Layers: 16, Heads: 32, KVHeads: 8, Vocab: 128256, SeqLen: 131072, Tied: true, RopeTheta: 500000, NormEps: 1e-5},
	"llama-3.2-3b": {Dim: 3072, Hidden: 8192, Layers: 28, Heads: 24, KVHeads: 8, Vocab: 128256, SeqLen: 131072, Tied: true, RopeTheta: 500000, NormEps: 1e-5},
	"llama-3.1-8b": {Dim: 4096, Hidden: 14336, Layers: 32, Heads: 32, KVHeads: 8, Vocab: 128256, SeqLen: 131072, RopeTheta: 500000, NormEps: 1e-5},
}

// PresetNames lists the presets, sorted.
func PresetNames() []string {
	var names []string
	for n := range Presets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// HeadDim is the width of one attention head.
func (s Shape) HeadDim() int { return s.Dim / s.Heads }

// KVDim is the width of the k and v projections.
func (s Shape) KVDim() int { return s.HeadDim() * s.KVHeads }

// Validate checks that the shape describes a Llama model gosling can
// build and that the tokenizer's 259 fixed tokens fit.
func (s Shape) Validate() error {
	switch {
	case s.Dim <= 0 || s.Hidden <= 0 || s.Layers <= 0 || s.Heads <= 0 || s.KVHeads <= 0 || s.SeqLen <= 0:
		return fmt.Errorf("shape %+v: every size must be positive", s)
	case s.Dim%s.Heads != 0 || s.HeadDim()%2 != 0:
		return fmt.Errorf("shape: dim %d must split into %d heads of an even width", s.Dim, s.Heads)
	case s.Heads%s.KVHeads != 0:
		return fmt.Errorf("shape: %d heads do not share %d kv heads evenly", s.Heads, s.KVHeads)
	case s.Vocab < minVocab:
		return fmt.Errorf("shape: vocab %d is below %d (<unk>, <s>, </s> and 256 byte tokens)", s.Vocab, minVocab)
	}
	return nil
}

// Options say what to write.
type Options struct {
	Shape  Shape
	Format string       // "llama2c", "hf" or "gguf"
	DType  tensor.DType // of the matrices; llama2c is F32 only, hf has no Q8_0
	// MixQ6K stores the output layer, and attention v and MLP down of
	// every other layer, as Q6_K: the mix of llama.cpp's Q4_K_M and
	// Q5_K_M files (it keeps more bits where the error hurts most).
	MixQ6K bool
	Seed   uint64
	Std    float64 // 0: 0.02
}

// Formats are the accepted Options.Format values.
var Formats = []string{"llama2c", "hf", "gguf"}

// Write writes the checkpoint to path: a file for llama2c (with
// tokenizer.bin beside it) and gguf (tokenizer embedded), a directory for
// hf (config.json, model.safetensors; no tokenizer: prompt with token ids).
func Write(path string, o Options) error {
	if err := o.Shape.Validate(); err != nil {
		return err
	}
	if o.Std == 0 {
		o.Std = 0.02
	}
	parent := path
	if o.Format != "hf" {
		parent = filepath.Dir(path)
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("write random checkpoint: %w", err)
	}
	switch o.Format {
	case "llama2c":
		if o.DType != tensor.F32 {
			return fmt.Errorf("the llama2.c format stores float32 only, not %v (gosling converts at load with --dtype/--quantization)", o.DType)
		}
		return writeLlama2C(path, o)
	case "hf":
		if _, awq := awqGroup(o.DType); o.DType != tensor.F32 && o.DType != tensor.BF16 && o.DType != tensor.F16 && !awq {
			return fmt.Errorf("hf (safetensors) checkpoints here are float32, bfloat16, float16 or AWQ (awq4_g32, awq4_g64, awq4_g128), not %v; use --format gguf for Q8_0", o.DType)
		}
		return writeHF(path, o)
	case "gguf":
		if _, ok := gguf.GGMLTypeOf(o.DType); !ok || !tensor.CanEncode(o.DType) {
			return fmt.Errorf("gosling writes no GGUF %v files", o.DType)
		}
		return writeGGUF(path, o)
	}
	return fmt.Errorf("unknown format %q (want %s)", o.Format, strings.Join(Formats, ", "))
}

// spec is one tensor under its Hugging Face name.
type spec struct {
	name  string
	shape []int // PyTorch order, [out, in] for matrices
}

func (s spec) norm() bool { return len(s.shape) == 1 }

func (s spec) count() int {
	n := 1
	for _, d := range s.shape {
		n *= d
	}
	return n
}

// tensors lists the model's tensors in Hugging Face order.
func (s Shape) tensors() []spec {
	out := []spec{{"model.embed_tokens.weight", []int{s.Vocab, s.Dim}}}
	for l := range s.Layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		out = append(out,
			spec{p + "input_layernorm.weight", []int{s.Dim}},
			spec{p + "self_attn.q_proj.weight", []int{s.Dim, s.Dim}},
			spec{p + "self_attn.k_proj.weight", []int{s.KVDim(), s.Dim}},
			spec{p + "self_attn.v_proj.weight", []int{s.KVDim(), s.Dim}},
			spec{p + "self_attn.o_proj.weight", []int{s.Dim, s.Dim}},
			spec{p + "post_attention_layernorm.weight", []int{s.Dim}},
			spec{p + "mlp.gate_proj.weight", []int{s.Hidden, s.Dim}},
			spec{p + "mlp.up_proj.weight", []int{s.Hidden, s.Dim}},
			spec{p + "mlp.down_proj.weight", []int{s.Dim, s.Hidden}},
		)
	}
	out = append(out, spec{"model.norm.weight", []int{s.Dim}})
	if !s.Tied {
		out = append(out, spec{"lm_head.weight", []int{s.Vocab, s.Dim}})
	}
	return out
}

// valueChunk is how many of a tensor's values one random stream draws:
// chunk c of a tensor draws from its own stream, so that the chunks of a
// large tensor are drawn on every core (an 8B model is 8·10⁹ normals),
// while a tensor of at most one chunk has the values it always had.
const valueChunk = 1 << 20

// values returns a tensor's numbers.
func (o *Options) values(s spec) []float32 {
	v := make([]float32, s.count())
	if s.norm() {
		for i := range v {
			v[i] = 1
		}
		return v
	}
	h := fnv.New64a()
	h.Write([]byte(s.name))
	stream := h.Sum64()
	parallel((len(v)+valueChunk-1)/valueChunk, func(c int) {
		// Chunk 0 keeps the tensor's stream; chunk c > 0 takes one of its
		// own (the golden-ratio multiple spreads the stream ids apart).
		rng := rand.New(rand.NewPCG(o.Seed, stream+uint64(c)*0x9e3779b97f4a7c15))
		for i := c * valueChunk; i < min(len(v), (c+1)*valueChunk); i++ {
			v[i] = float32(rng.NormFloat64() * o.Std)
		}
	})
	return v
}

// parallel runs fn(0..n-1) on every core.
func parallel(n int, fn func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, runtime.GOMAXPROCS(0)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				fn(i)
			}
		}()
	}
	wg.Wait()
}

// Tensor is one tensor a checkpoint written with some Options holds.
type Tensor struct {
	Name  string // the Hugging Face name
	Shape []int  // PyTorch order, [out, in] for matrices
	DType tensor.DType
}

// Tensors lists what Write writes for o (names, shapes and the dtypes a
// GGUF file stores them in), without writing: what a file of a large
// shape holds, counted without making it.
func (o Options) Tensors() []Tensor {
	var out []Tensor
	for _, s := range o.Shape.tensors() {
		out = append(out, Tensor{Name: s.name, Shape: append([]int(nil), s.shape...), DType: o.dtypeOf(s)})
	}
	return out
}

// dtypeOf is the dtype a tensor is stored in: norms float32, matrices the
// chosen dtype (or Q6_K, MixQ6K says where), except block-format
// matrices whose rows are not whole blocks, which stay float32.
func (o *Options) dtypeOf(s spec) tensor.DType {
	if s.norm() {
		return tensor.F32
	}
	d := o.DType
	if o.MixQ6K && (s.name == "lm_head.weight" || ((strings.HasSuffix(s.name, ".self_attn.v_proj.weight") || strings.HasSuffix(s.name, ".mlp.down_proj.weight")) && layerOf(s.name)%2 == 0)) {
		d = tensor.Q6_K
	}
	if s.shape[len(s.shape)-1]%tensor.BlockValues(d) != 0 {
		return tensor.F32
	}
	return d
}

// layerOf is the layer index in a model.layers.N… name.
func layerOf(name string) int {
	n := 0
	for _, c := range strings.TrimPrefix(name, "model.layers.") {
		if c < '0' || c > '9' {
			break
		}
		n = 10*n + int(c-'0')
	}
	return n
}

// encoded is a tensor stored in its dtype.
func (o *Options) encoded(s spec) ([]byte, tensor.DType) { return o.encodedAs(s, o.dtypeOf(s)) }

// encodedAs is a tensor stored in dtype d.
func (o *Options) encodedAs(s spec, d tensor.DType) ([]byte, tensor.DType) {
	cols := s.shape[len(s.shape)-1]
	rowBytes, _ := d.RowBytes(cols)
	v := o.values(s)
	rows := len(v) / cols
	out := make([]byte, rowBytes*rows)
	// Bands of rows of about a chunk of values each, quantised on every core.
	band := max(1, valueChunk/cols)
	parallel((rows+band-1)/band, func(b int) {
		for r := b * band; r < min(rows, (b+1)*band); r++ {
			tensor.EncodeInto(d, v[r*cols:(r+1)*cols], out[r*rowBytes:(r+1)*rowBytes])
		}
	})
	return out, d
}

// CopyTokenizer puts a Hugging Face tokenizer (tokenizer.json and
// tokenizer_config.json from tokDir) beside an hf checkpoint in dir, so
// that a random model of that tokenizer's vocabulary size takes text
// prompts and renders its chat template. The checkpoint's bos and eos ids
// become the tokenizer's (its added tokens named by bos_token and
// eos_token; none where it names none), not the llama2 ids 1 and 2 that
// are ordinary text elsewhere.
func CopyTokenizer(dir, tokDir string) error {
	files := map[string][]byte{}
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		data, err := os.ReadFile(filepath.Join(tokDir, f))
		if err != nil {
			return fmt.Errorf("copy tokenizer: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			return fmt.Errorf("copy tokenizer: %w", err)
		}
		files[f] = data
	}
	var tj struct {
		Added []struct {
			ID      int    `json:"id"`
			Content string `json:"content"`
		} `json:"added_tokens"`
	}
	var tc map[string]json.RawMessage
	if err := json.Unmarshal(files["tokenizer.json"], &tj); err != nil {
		return fmt.Errorf("copy tokenizer: tokenizer.json: %w", err)
	}
	if err := json.Unmarshal(files["tokenizer_config.json"], &tc); err != nil {
		return fmt.Errorf("copy tokenizer: tokenizer_config.json: %w", err)
	}
	cfgPath := filepath.Join(dir, "config.json")
	data, err := os.ReadFile(cfgPath)
	if err != nil {
		return fmt.Errorf("copy tokenizer: %w", err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(data, &cfg); err != nil {
		return fmt.Errorf("copy tokenizer: config.json: %w", err)
	}
	for _, key := range []string{"bos_token", "eos_token"} {
		var name string
		if v, ok := tc[key]; !ok || string(v) == "null" {
			delete(cfg, key+"_id") // the tokenizer has none
			continue
		}
		if json.Unmarshal(tc[key], &name) != nil {
			var obj struct {
				Content string `json:"content"`
			}
			if json.Unmarshal(tc[key], &obj) != nil {
				continue
			}
			name = obj.Content
		}
		for _, a := range tj.Added {
			if name != "" && a.Content == name {
				cfg[key+"_id"] = a.ID
			}
		}
	}
	if data, err = json.MarshalIndent(cfg, "", "  "); err != nil {
		return fmt.Errorf("copy tokenizer: %w", err)
	}
	return os.WriteFile(cfgPath, data, 0o644)
}

// AddControlTokens appends special (control) tokens to the tokenizer.json
// in dir, at the ids after its last, as Mistral's v3 tokenizers carry
// [TOOL_CALLS] and its kin: added tokens with "special": true, which
// decoding with skip_special_tokens drops. It returns their ids.
func AddControlTokens(dir string, names []string) ([]int, error) {
	path := filepath.Join(dir, "tokenizer.json")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("control tokens: %w", err)
	}
	var tj map[string]json.RawMessage
	if err := json.Unmarshal(data, &tj); err != nil {
		return nil, fmt.Errorf("control tokens: tokenizer.json: %w", err)
	}
	var model struct {
		Vocab map[string]int `json:"vocab"`
	}
	var added []map[string]any
	if err := json.Unmarshal(tj["model"], &model); err != nil {
		return nil, fmt.Errorf("control tokens: model: %w", err)
	}
	if raw, ok := tj["added_tokens"]; ok {
		if err := json.Unmarshal(raw, &added); err != nil {
			return nil, fmt.Errorf("control tokens: added_tokens: %w", err)
		}
	}
	next := 0
	for _, id := range model.Vocab {
		next = max(next, id+1)
	}
	for _, a := range added {
		if id, ok := a["id"].(float64); ok {
			next = max(next, int(id)+1)
		}
	}
	var ids []int
	for _, name := range names {
		added = append(added, map[string]any{"id": next, "content": name, "single_word": false, "lstrip": false,
			"rstrip": false, "normalized": false, "special": true})
		ids = append(ids, next)
		next++
	}
	if tj["added_tokens"], err = json.Marshal(added); err != nil {
		return nil, err
	}
	if data, err = json.Marshal(tj); err != nil {
		return nil, err
	}
	return ids, os.WriteFile(path, data, 0o644)
}
