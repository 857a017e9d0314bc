package model

import "github.com/gosling-ai/gosling/tensor"

// WeightSource gives access to a checkpoint's tensors under their Hugging
// Face names ("model.layers.0.self_attn.q_proj.weight"), whatever the file
// format; GGUF and llama2.c sources translate their own names and layouts.
type WeightSource interface {
	// Tensor returns the named tensor, row-major in PyTorch order, or an
	// error naming the tensor and the file when it is missing or malformed.
	Tensor(name string) (tensor.Weight, error)
	Has(name string) bool
	// Names lists every tensor, sorted.
	Names() []string
	// Close releases memory maps; tensors obtained before become invalid.
	Close() error
}

// Format is the on-disk format a checkpoint was read from.
type Format string

const (
	FormatHF      Format = "hf"      // directory with config.json + *.safetensors
	FormatGGUF    Format = "gguf"    // GGUF v3 file
	FormatLlama2C Format = "llama2c" // karpathy/llama2.c checkpoint
)

// GenerationDefaults are sampling defaults from generation_config.json
// (or the format's equivalent); nil fields were not given.
type GenerationDefaults struct {
	Temperature       *float64
	TopP              *float64
	TopK              *int
	MinP              *float64
	RepetitionPenalty *float64
	MaxNewTokens      *int
	EOSTokenIDs       []int
}

// TokenizerSource says where the checkpoint's tokenizer lives. Exactly one
// of the fields is set, or none when the format carries no tokenizer.
type TokenizerSource struct {
	HFDir        string         // directory with tokenizer.json (+ tokenizer_config.json)
	GGUFMetadata map[string]any // GGUF metadata holding tokenizer.ggml.* keys
	Llama2CPath  string         // llama2.c tokenizer .bin
}

// Checkpoint is everything read from a model path.
type Checkpoint struct {
	Path       string
	Format     Format
	Config     Config
	Weights    WeightSource
	Generation GenerationDefaults
	Tokenizer  TokenizerSource
}

// Close releases the weights.
func (c *Checkpoint) Close() error {
	if c.Weights == nil {
		return nil
	}
	return c.Weights.Close()
}
