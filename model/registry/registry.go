// Package registry maps config.json `architectures` names to the packages
// that implement them. The list is explicit so a reader sees every
// supported architecture in one place.
package registry

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gosling-ai/gosling/device/cpu"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/model/deepseek"
	"github.com/gosling-ai/gosling/model/gemma2"
	"github.com/gosling-ai/gosling/model/llama"
)

type builder func(cfg *model.Config, ws model.WeightSource, workers *cpu.Workers) (model.Runnable, error)

var architectures = map[string]builder{}

func init() {
	for _, name := range llama.Architectures {
		architectures[name] = func(cfg *model.Config, ws model.WeightSource, w *cpu.Workers) (model.Runnable, error) {
			return llama.New(cfg, ws, w)
		}
	}
	for _, name := range deepseek.Architectures {
		architectures[name] = func(cfg *model.Config, ws model.WeightSource, w *cpu.Workers) (model.Runnable, error) {
			return deepseek.New(cfg, ws, w)
		}
	}
	for _, name := range gemma2.Architectures {
		architectures[name] = func(cfg *model.Config, ws model.WeightSource, w *cpu.Workers) (model.Runnable, error) {
			return gemma2.New(cfg, ws, w)
		}
	}
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
func Build(ck *model.Checkpoint, workers *cpu.Workers) (model.Runnable, error) {
	b, ok := architectures[ck.Config.Architecture]
	if !ok {
		return nil, fmt.Errorf("%s: architecture %q is not supported; supported: %s",
			ck.Path, ck.Config.Architecture, strings.Join(Supported(), ", "))
	}
	m, err := b(&ck.Config, ck.Weights, workers)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ck.Path, err)
	}
	return m, nil
}
