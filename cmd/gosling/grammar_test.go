package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/internal/shared"
)

// TestGrammarCommand checks texts against a schema token by token with
// the qwen3 tokenizer, compact and indented alike, and the exit status 2
// of a schema the compiler refuses.
func TestGrammarCommand(t *testing.T) {
	tok := shared.Path(t, "tokenizers/qwen3")
	dir := t.TempDir()
	schema := filepath.Join(dir, "s.json")
	os.WriteFile(schema, []byte(`{"type":"object","properties":{"n":{"type":"integer","maximum":9}},"required":["n"]}`), 0o644)
	stdin := `{"text": "{\"n\": 7}"}` + "\n" + `{"text": "{\n  \"n\": 7\n}"}` + "\n" + `{"text": "{\"n\": 10}"}` + "\n"
	out, stderr, err := run(t, stdin, "grammar", "--tokenizer", tok, "--json-schema", schema, "--json")
	if err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := []bool{true, true, false}
	if len(lines) != len(want) {
		t.Fatalf("%d lines: %s", len(lines), out)
	}
	for i, line := range lines {
		var r struct {
			Accepted   bool      `json:"accepted"`
			RejectedAt *int      `json:"rejected_at_token"`
			MaskUS     []float64 `json:"mask_us"`
			CompileUS  *int64    `json:"compile_us"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		if r.Accepted != want[i] || (r.RejectedAt == nil) != want[i] || len(r.MaskUS) == 0 || r.CompileUS == nil {
			t.Errorf("line %d: %s", i, line)
		}
	}
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"type":"array","uniqueItems":true}`), 0o644)
	_, stderr, err = run(t, "", "grammar", "--tokenizer", tok, "--json-schema", bad)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(stderr, "uniqueItems") || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
		t.Errorf("refused schema: %v, stderr %q", err, stderr)
	}
}
