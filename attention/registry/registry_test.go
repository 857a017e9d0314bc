package registry

import (
	"os"
	"testing"
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
