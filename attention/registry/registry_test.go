package registry_test

import (
	"os"
	"testing"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/attention/registry"
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

// TestSinksResolve: every backend declares attention sinks on both devices
// (GPT-OSS), so a model with sinks resolves on each.
func TestSinksResolve(t *testing.T) {
	for _, dev := range []string{"cpu", "cuda"} {
		need := attention.Need{Device: dev, Sinks: true}
		for _, name := range append(registry.Names(), "auto") {
			if _, err := registry.Resolve(attention.Choice{Backend: name}, need); err != nil {
				t.Errorf("%s %s: %v", dev, name, err)
			}
		}
	}
}
