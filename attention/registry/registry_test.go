package registry_test

import (
	"os"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/attention/registry"
	"github.com/gosling-ai/gosling/device/cuda"
	_ "github.com/gosling-ai/gosling/device/cudadev" // the CUDA entries, as cmd/gosling links them
)

// TestDocsTableIsCurrent fails when docs/attention-backends.md differs from
// what the registry renders; regenerate with
// `go run ./cmd/gosling backends --markdown > docs/attention-backends.md`.
func TestDocsTableIsCurrent(t *testing.T) {
	data, err := os.ReadFile("../../docs/attention-backends.md")
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != registry.Markdown() {
		t.Fatal("docs/attention-backends.md is stale: run `go run ./cmd/gosling backends --markdown > docs/attention-backends.md`")
	}
}

// TestSinksResolve: every backend declares attention sinks on each device
// it runs on (GPT-OSS), so a model with sinks resolves on each; cudnn only
// fails for what has nothing to do with sinks (the CPU, or no cuDNN here).
func TestSinksResolve(t *testing.T) {
	_, noCudnn := cuda.CudnnAvailable()
	for _, dev := range []string{"cpu", "cuda"} {
		need := attention.Need{Device: dev, Sinks: true}
		for _, name := range append(registry.Names(), "auto") {
			_, err := registry.Resolve(attention.Choice{Backend: name, KVDType: "bf16"}, need)
			switch {
			case err != nil && strings.Contains(err.Error(), "sinks"):
				t.Errorf("%s %s: %v", dev, name, err)
			case name == "cudnn" && dev == "cpu":
				if err == nil || !strings.Contains(err.Error(), "does not run on cpu") {
					t.Errorf("cpu cudnn: %v, want the device refused", err)
				}
			case name == "cudnn" && noCudnn != nil:
				if err == nil || !strings.Contains(err.Error(), noCudnn.Error()) {
					t.Errorf("cuda cudnn: %v, want the reason it is not offered", err)
				}
			case err != nil:
				t.Errorf("%s %s: %v", dev, name, err)
			}
		}
	}
}

// TestCudnnResolve: Resolve refuses what the cudnn backend's capabilities
// leave out, each time naming what is missing, and otherwise resolves it
// where libcudnn.so.9 loads or says why it is not offered. auto never
// chooses it over gosling's own kernels.
func TestCudnnResolve(t *testing.T) {
	llama := attention.Need{Device: "cuda", HeadDims: []int{128}}
	with := func(f func(n *attention.Need)) attention.Need { n := llama; f(&n); return n }
	bf16 := attention.Choice{Backend: "cudnn", KVDType: "bf16"}
	for _, c := range []struct {
		name   string
		choice attention.Choice
		need   attention.Need
		want   string
	}{
		{"sliding window", bf16, with(func(n *attention.Need) { n.SlidingWindow = true }), "sliding-window"},
		{"softcap", bf16, with(func(n *attention.Need) { n.LogitSoftcap = true }), "logit softcapping"},
		{"tree masks", bf16, with(func(n *attention.Need) { n.SpecDecoding = true }), "speculative decoding (tree masks)"},
		{"MLA", bf16, with(func(n *attention.Need) { n.MLA = true; n.HeadDims = []int{576} }), "does not support MLA"},
		{"head dim 256", bf16, with(func(n *attention.Need) { n.HeadDims = []int{256} }), "head dim 256"},
		{"float32 KV", attention.Choice{Backend: "cudnn", KVDType: "float32"}, llama, "KV cache dtype F32"},
		{"fp8 KV", attention.Choice{Backend: "cudnn", KVDType: "fp8_e4m3"}, llama, "KV cache dtype FP8_E4M3"},
		{"CPU", bf16, with(func(n *attention.Need) { n.Device = "cpu" }), "does not run on cpu"},
		{"page size 3", attention.Choice{Backend: "cudnn", KVDType: "bf16", PageSize: 3, PageSizeSet: true}, llama, "--page-size 3 is not supported"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := registry.Resolve(c.choice, c.need)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want one containing %q", err, c.want)
			}
		})
	}
	res, err := registry.Resolve(bf16, llama)
	if _, missing := cuda.CudnnAvailable(); missing != nil {
		if err == nil || !strings.Contains(err.Error(), `"cudnn" is not offered here: `+missing.Error()) {
			t.Fatalf("without cuDNN: %v, want the reason it is not offered", err)
		}
	} else if err != nil || res.Prefill.Name != "cudnn" || res.Decode.Name != "cudnn" || res.PageSize != 1 {
		t.Fatalf("with cuDNN: %+v, %v", res, err)
	}
	auto, err := registry.Resolve(attention.Choice{KVDType: "bf16"}, llama)
	if err != nil || auto.Prefill.Name == "cudnn" || auto.Decode.Name == "cudnn" {
		t.Fatalf("auto: %+v, %v; want gosling's own backends", auto, err)
	}
}
