package registry

import (
	"os"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/attention"
)

// TestDocsTableIsCurrent fails when docs/attention-backends.md differs from
// what the registry renders; regenerate with
// `go run ./cmd/gosling backends --markdown > docs/attention-backends.md`.
func TestDocsTableIsCurrent(t *testing.T) {
	data, err := os.ReadFile("../../docs/attention-backends.md")
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != Markdown() {
		t.Fatal("docs/attention-backends.md is stale: run `go run ./cmd/gosling backends --markdown > docs/attention-backends.md`")
	}
}

// TestSinksResolve: every CPU backend serves a model with attention sinks;
// the CUDA backends do not declare them yet, so Resolve refuses each one
// by name, pointing at the column, rather than run without the sinks.
func TestSinksResolve(t *testing.T) {
	sinks := attention.Need{Device: "cpu", Sinks: true}
	for _, name := range Names() {
		if _, err := Resolve(attention.Choice{Backend: name}, sinks); err != nil {
			t.Errorf("cpu %s: %v", name, err)
		}
	}
	sinks.Device = "cuda"
	for _, name := range append(Names(), "auto") {
		_, err := Resolve(attention.Choice{Backend: name}, sinks)
		if err == nil || !strings.Contains(err.Error(), `"attention sinks" column`) {
			t.Errorf("cuda %s: err = %v, want a refusal naming the attention sinks column", name, err)
		}
	}
}
