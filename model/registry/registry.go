// Package registry maps config.json `architectures` names to the packages
// that implement them. The list is explicit so a reader sees every
// supported architecture in one place.
package registry

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/model/deepseek"
	"github.com/gosling-ai/gosling/model/gemma2"
	"github.com/gosling-ai/gosling/model/gemma3vl"
	"github.com/gosling-ai/gosling/model/llama"
	"github.com/gosling-ai/gosling/model/qwen2vl"
	"github.com/gosling-ai/gosling/vision"
)

// Architecture is one registered architecture.
type Architecture struct {
	// New binds the weights on the device of ops.
	New func(cfg *model.Config, ws model.WeightSource, ops device.Ops) (model.Runnable, error)
	// KVSpec is the KV layout per token, known from the config alone (for
	// sizing caches of models whose weights are not loaded).
	KVSpec func(cfg *model.Config) kvcache.Spec
	// WeightShapes lists the tensors New reads (nil: dummy weights are not
	// available for the architecture yet).
	WeightShapes func(cfg *model.Config) map[string][]int
	// Processor is the image processor of the architecture's published
	// checkpoints, for dummy weights (which come without
	// preprocessor_config.json); nil for text-only architectures.
	Processor func(cfg *model.Config) vision.ProcessorConfig
}

var architectures = map[string]Architecture{}

func register(names []string, a Architecture) {
	for _, n := range names {
		architectures[n] = a
	}
}

func init() {
	register(llama.Architectures, Architecture{
		New: func(cfg *model.Config, ws model.WeightSource, ops device.Ops) (model.Runnable, error) {
			return llama.New(cfg, ws, ops)
		},
		KVSpec:       llama.KVSpec,
		WeightShapes: llama.WeightShapes,
	})
	register(deepseek.Architectures, Architecture{
		New: func(cfg *model.Config, ws model.WeightSource, ops device.Ops) (model.Runnable, error) {
			return deepseek.New(cfg, ws, ops)
		},
		KVSpec:       deepseek.KVSpec,
		WeightShapes: deepseek.WeightShapes,
	})
	register(gemma3vl.Architectures, Architecture{
		New: func(cfg *model.Config, ws model.WeightSource, ops device.Ops) (model.Runnable, error) {
			return gemma3vl.New(cfg, ws, ops)
		},
		KVSpec:       gemma2.KVSpec,
		WeightShapes: gemma3vl.WeightShapes,
		Processor:    gemma3vl.Processor,
	})
	register(qwen2vl.Architectures, Architecture{
		New: func(cfg *model.Config, ws model.WeightSource, ops device.Ops) (model.Runnable, error) {
			return qwen2vl.New(cfg, ws, ops)
		},
		KVSpec:       llama.KVSpec,
		WeightShapes: qwen2vl.WeightShapes,
		Processor:    qwen2vl.Processor,
	})
	register(gemma2.Architectures, Architecture{
		New: func(cfg *model.Config, ws model.WeightSource, ops device.Ops) (model.Runnable, error) {
			return gemma2.New(cfg, ws, ops)
		},
		KVSpec:       gemma2.KVSpec,
		WeightShapes: gemma2.WeightShapes,
	})
}

// Lookup finds an architecture, or explains which are supported.
func Lookup(name string) (Architecture, error) {
	a, ok := architectures[name]
	if !ok {
		return Architecture{}, fmt.Errorf("architecture %q is not supported; supported: %s", name, strings.Join(Supported(), ", "))
	}
	return a, nil
}

// Supported lists the architecture names, sorted.
func Supported() []string {
	var names []string
	for n := range architectures {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Build constructs the network for a checkpoint.
func Build(ck *model.Checkpoint, ops device.Ops) (model.Runnable, error) {
	a, err := Lookup(ck.Config.Architecture)
	if err != nil {
		// Name the field the architecture came from, so the user knows
		// what the file says.
		field := "architectures"
		switch ck.Format {
		case model.FormatHF:
			field = "config.json architectures"
		case model.FormatGGUF:
			field = "general.architecture"
		}
		return nil, fmt.Errorf("%s: %s: %w", ck.Path, field, err)
	}
	m, err := a.New(&ck.Config, ck.Weights, ops)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ck.Path, err)
	}
	return m, nil
}
