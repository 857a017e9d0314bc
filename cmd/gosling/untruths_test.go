package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/internal/shared"
)

// TestBackendsJSONNamesDTypes: the KV dtypes are names, not base64 bytes.
func TestBackendsJSONNamesDTypes(t *testing.T) {
	out, stderr, err := run(t, "", "backends", "--json")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	var rows []struct {
		Caps struct {
			KVDTypes []string
		} `json:"caps"`
	}
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) == 0 {
		t.Fatalf("%v\n%s", err, out)
	}
	if got := strings.Join(rows[0].Caps.KVDTypes, ","); got != "F32,BF16,FP8_E4M3" {
		t.Errorf("KV dtypes %q", got)
	}
}

// TestDamagedModelsReportedAsSuch: a GGUF with a damaged magic is not
// reported as a bad llama2.c header, a corrupt GGUF key reaches the
// terminal quoted, and a config.json without hidden_size says so.
func TestDamagedModelsReportedAsSuch(t *testing.T) {
	tmp := t.TempDir()
	gguf, err := os.ReadFile(shared.Path(t, "models/stories260K/stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	flipped := filepath.Join(tmp, "flipped.gguf")
	os.WriteFile(flipped, append([]byte("FUGG"), gguf[4:]...), 0o644)
	badKey := filepath.Join(tmp, "badkey.gguf")
	os.WriteFile(badKey, bytes.Replace(gguf, []byte("tokenizer.ggml.tokens"), []byte("tok\x1b[31mred\x07\x1b[0m..."), 1), 0o644)
	noHidden := filepath.Join(tmp, "nohidden")
	os.Mkdir(noHidden, 0o755)
	hf := shared.Path(t, "models/stories260K-hf")
	var cfg map[string]any
	data, _ := os.ReadFile(filepath.Join(hf, "config.json"))
	json.Unmarshal(data, &cfg)
	delete(cfg, "hidden_size")
	data, _ = json.Marshal(cfg)
	os.WriteFile(filepath.Join(noHidden, "config.json"), data, 0o644)
	for _, f := range []string{"model.safetensors", "tokenizer.json", "tokenizer_config.json"} {
		abs, _ := filepath.Abs(filepath.Join(hf, f))
		os.Symlink(abs, filepath.Join(noHidden, f))
	}
	for _, c := range []struct{ name, model, want string }{
		{"flipped magic", flipped, `not a GGUF file: it starts with "FUGG"`},
		{"corrupt key", badKey, `"tok\x1b[31mred\a\x1b[0m...`},
		{"no hidden_size", noHidden, "has no hidden_size"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, stderr, err := run(t, "", "generate", "--model-path", c.model, "--prompt", "Lily")
			if err == nil || !strings.Contains(stderr, c.want) || strings.Contains(stderr, "\x1b") {
				t.Errorf("err %v, stderr %q; want a failure saying %s, with no raw control bytes", err, stderr, c.want)
			}
		})
	}
}
