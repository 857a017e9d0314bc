// Package modeltest holds the checks every architecture package's tests
// make of its weight list (WeightShapes).
package modeltest

import (
	"os"
	"slices"
	"testing"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/device/cpu"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/tensor"
)

// Architecture is what the check needs of one: its weight list, and its
// constructor.
type Architecture struct {
	WeightShapes func(cfg *model.Config) map[string][]int
	New          func(cfg *model.Config, ws model.WeightSource, ops device.Ops) error
}

// CheckWeightShapes: the list matches the checkpoint at refDir tensor for
// tensor (a tied head that an exporter stored but is never read aside),
// dummy weights made from it load, and for the config.json at
// publishedConfig it counts wantParams parameters ("" when the shared
// folder has no published config of the architecture).
func CheckWeightShapes(t testing.TB, a Architecture, refDir, publishedConfig string, wantParams int) {
	t.Helper()
	ck, err := model.Open(refDir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	shapes := a.WeightShapes(&ck.Config)
	for name, shape := range shapes {
		w, err := ck.Weights.Tensor(name)
		if err != nil {
			t.Errorf("listed %s: %v", name, err)
		} else if !slices.Equal(w.Shape, shape) {
			t.Errorf("%s: listed %v, checkpoint %v", name, shape, w.Shape)
		}
	}
	for _, name := range ck.Weights.Names() {
		if _, ok := shapes[name]; !ok && !(name == "lm_head.weight" && ck.Config.TieWordEmbeddings) {
			t.Errorf("checkpoint tensor %s is not listed", name)
		}
	}

	dummy, err := model.OpenDummy(refDir, a.WeightShapes, tensor.BF16)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.New(&dummy.Config, dummy.Weights, cpu.NewOps(nil)); err != nil {
		t.Fatalf("dummy weights: %v", err)
	}

	if publishedConfig == "" {
		return
	}
	data, err := os.ReadFile(publishedConfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := model.ParseHFConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range a.WeightShapes(&cfg) {
		p := 1
		for _, d := range s {
			p *= d
		}
		n += p
	}
	if n != wantParams {
		t.Errorf("%s: %d parameters, want %d", publishedConfig, n, wantParams)
	}
}
