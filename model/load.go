package model

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/gosling-ai/gosling/model/gguf"
	"github.com/gosling-ai/gosling/model/llama2c"
	"github.com/gosling-ai/gosling/model/safetensors"
)

// Open reads the checkpoint at path, detecting its format:
//   - a directory: Hugging Face (config.json + model.safetensors or a
//     sharded model.safetensors.index.json);
//   - a file starting with "GGUF": GGUF;
//   - any other file: a llama2.c checkpoint.
//
// Weights are memory-mapped, not read; Close the Checkpoint to unmap them.
// The Config is validated, so a Checkpoint that opens has sane dimensions.
func Open(path string) (*Checkpoint, error) {
	info, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("open model: %s does not exist; pass a Hugging Face model directory, a .gguf file or a llama2.c .bin file", path)
		}
		return nil, fmt.Errorf("open model: %w", err)
	}
	if info.IsDir() {
		return openHF(path)
	}
	magic, err := readMagic(path)
	if err != nil {
		return nil, fmt.Errorf("open model: %w", err)
	}
	switch {
	case string(magic) == "GGUF":
		return openGGUF(path)
	case strings.EqualFold(filepath.Ext(path), ".gguf"):
		return nil, fmt.Errorf("open model %s: not a GGUF file: it starts with %q, not \"GGUF\" (a damaged or incomplete download?)", path, magic)
	case strings.EqualFold(filepath.Ext(path), ".json"):
		return nil, fmt.Errorf("open model %s: this is a JSON file; pass the directory that holds config.json and the .safetensors files", path)
	case strings.EqualFold(filepath.Ext(path), ".safetensors"):
		return nil, fmt.Errorf("open model %s: a .safetensors file carries no config; pass its directory %s, which must hold config.json", path, filepath.Dir(path))
	}
	return openLlama2C(path)
}

func readMagic(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	magic := make([]byte, 4)
	n, err := io.ReadFull(f, magic)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return magic[:n], nil
}

func openHF(dir string) (*Checkpoint, error) {
	configPath := filepath.Join(dir, "config.json")
	data, err := os.ReadFile(configPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("open model: directory %s has no config.json%s", dir, dirHint(dir))
	}
	if err != nil {
		return nil, fmt.Errorf("open model: %w", err)
	}
	cfg, tieGiven, err := parseHFConfig(data)
	if err != nil {
		return nil, fmt.Errorf("open model: %s: %w", configPath, err)
	}
	quant, err := parseQuantConfig(data)
	if err != nil {
		return nil, fmt.Errorf("open model: %s: %w", configPath, err)
	}

	weights, err := openSafetensors(dir)
	if err != nil {
		return nil, err
	}
	quantized, err := withQuantization(weights, quant)
	if err != nil {
		weights.Close()
		return nil, fmt.Errorf("open model: %s: %w", configPath, err)
	}
	weights = quantized
	ckpt := &Checkpoint{Path: dir, Format: FormatHF, Config: cfg, Weights: weights}
	fail := func(err error) (*Checkpoint, error) {
		ckpt.Close()
		return nil, err
	}

	// A config.json silent on tying (older exports) is settled by the
	// weights: without lm_head the output layer must reuse the embedding.
	if !tieGiven && !weights.Has("lm_head.weight") && weights.Has("model.embed_tokens.weight") {
		ckpt.Config.TieWordEmbeddings = true
	}
	if err := ckpt.Config.Validate(); err != nil {
		return fail(fmt.Errorf("open model: %s: %w", configPath, err))
	}

	genPath := filepath.Join(dir, "generation_config.json")
	if data, err := os.ReadFile(genPath); err == nil {
		if ckpt.Generation, err = parseGenerationConfig(data); err != nil {
			return fail(fmt.Errorf("open model: %s: %w", genPath, err))
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fail(fmt.Errorf("open model: %w", err))
	}

	if fileExists(filepath.Join(dir, "tokenizer.json")) {
		ckpt.Tokenizer.HFDir = dir
	}
	return ckpt, nil
}

// openSafetensors opens the sharded index when there is one, else the
// single model.safetensors.
func openSafetensors(dir string) (WeightSource, error) {
	index := filepath.Join(dir, safetensors.IndexFile)
	if fileExists(index) {
		s, err := safetensors.OpenIndex(index)
		if err != nil {
			return nil, fmt.Errorf("open model: %w", err)
		}
		return s, nil
	}
	single := filepath.Join(dir, "model.safetensors")
	if fileExists(single) {
		f, err := safetensors.Open(single)
		if err != nil {
			return nil, fmt.Errorf("open model: %w", err)
		}
		return f, nil
	}
	hint := ""
	if fileExists(filepath.Join(dir, "pytorch_model.bin")) || fileExists(filepath.Join(dir, "pytorch_model.bin.index.json")) {
		hint = "; it has PyTorch .bin weights, which gosling does not read: convert them to safetensors"
	}
	return nil, fmt.Errorf("open model: directory %s has neither model.safetensors nor %s%s", dir, safetensors.IndexFile, hint)
}

// dirHint suggests what to pass instead of a directory without config.json.
func dirHint(dir string) string {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		switch ext := strings.ToLower(filepath.Ext(e.Name())); ext {
		case ".gguf", ".bin":
			return fmt.Sprintf("; to load %s, pass the file's path instead of the directory", filepath.Join(dir, e.Name()))
		}
	}
	return "; a Hugging Face model directory needs config.json beside its .safetensors files"
}

func openGGUF(path string) (*Checkpoint, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open model: %w", err)
	}
	view := gguf.NewHFView(f)
	cfg, err := configFromGGUF(f.Metadata, view)
	if err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open model: gguf %s: %w", path, err)
	}
	return &Checkpoint{
		Path:      path,
		Format:    FormatGGUF,
		Config:    cfg,
		Weights:   view,
		Tokenizer: TokenizerSource{GGUFMetadata: f.Metadata},
	}, nil
}

func openLlama2C(path string) (*Checkpoint, error) {
	f, err := llama2c.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open model: %w", err)
	}
	h := f.Header
	cfg := Config{
		Architecture:      "LlamaForCausalLM",
		ModelType:         "llama",
		HiddenSize:        h.Dim,
		IntermediateSize:  h.HiddenDim,
		NumLayers:         h.NumLayers,
		NumHeads:          h.NumHeads,
		NumKVHeads:        h.NumKVHeads,
		HeadDim:           h.HeadDim(),
		VocabSize:         h.VocabSize,
		MaxPositions:      h.SeqLen,
		RMSNormEps:        1e-5, // run.c's rmsnorm
		HiddenAct:         "silu",
		TieWordEmbeddings: h.SharedClassifier,
		RopeTheta:         10000,
		RopeInterleaved:   true,
		// The Llama 2 SentencePiece ids that every llama2.c tokenizer keeps.
		// (run.c itself stops when it samples BOS, which it treats as a
		// sequence delimiter.)
		BOSTokenID:  1,
		EOSTokenIDs: []int{2},
		PadTokenID:  -1,
		TorchDType:  "float32",
	}
	if err := cfg.Validate(); err != nil {
		f.Close()
		return nil, fmt.Errorf("open model: llama2.c checkpoint %s: %w", path, err)
	}
	return &Checkpoint{
		Path:      path,
		Format:    FormatLlama2C,
		Config:    cfg,
		Weights:   f,
		Tokenizer: TokenizerSource{Llama2CPath: llama2CTokenizer(path)},
	}, nil
}

// llama2CTokenizer finds the tokenizer beside a llama2.c checkpoint:
// tokenizer.bin (run.c's default name), else the only other .bin whose
// name starts with "tok" (tok512.bin, tok512_aidreams.bin). It is best
// effort: "" when there is no unique candidate, and the CLI can name one.
func llama2CTokenizer(checkpoint string) string {
	dir := filepath.Dir(checkpoint)
	if p := filepath.Join(dir, "tokenizer.bin"); fileExists(p) && p != filepath.Clean(checkpoint) {
		return p
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return ""
	}
	var found []string
	for _, e := range entries {
		name := e.Name()
		if e.Type().IsRegular() && strings.HasPrefix(name, "tok") && strings.HasSuffix(name, ".bin") && name != filepath.Base(checkpoint) {
			found = append(found, filepath.Join(dir, name))
		}
	}
	if len(found) != 1 {
		return ""
	}
	return found[0]
}

func fileExists(path string) bool {
	info, err := os.Stat(path)
	return err == nil && !info.IsDir()
}
