package registry

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/device/cpu"
	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/model"
)

// TestBuildUnsupported: an architecture nobody serves is refused naming
// the file, the field it came from and the value.
func TestBuildUnsupported(t *testing.T) {
	for _, tc := range []struct {
		format model.Format
		field  string
	}{
		{model.FormatGGUF, "general.architecture"},
		{model.FormatHF, "config.json architectures"},
	} {
		ck := &model.Checkpoint{Path: "/models/x", Format: tc.format, Config: model.Config{Architecture: "qwen3next"}}
		_, err := Build(ck, nil)
		if err == nil || !strings.Contains(err.Error(), "/models/x: "+tc.field+`: architecture "qwen3next" is not supported`) {
			t.Errorf("%s: err = %v", tc.format, err)
		}
	}
}

// TestBadInputNamesFileAndField: issue 23's bad inputs, opened the way
// every command opens a model (model.Open, then Build), are errors that
// name the file and the field: a config.json whose rope type is none
// transformers defines (in either of its keys), a MoE config.json whose
// expert count disagrees with the router's rows, and a GGUF whose
// general.architecture nobody serves.
func TestBadInputNamesFileAndField(t *testing.T) {
	open := func(path string) error {
		ck, err := model.Open(path)
		if err != nil {
			return err
		}
		defer ck.Close()
		_, err = Build(ck, cpu.NewOps(nil))
		return err
	}
	for _, tc := range []struct {
		ref, from, to string
		want          []string
	}{
		{"qwen3_yarn", `"rope_type": "yarn"`, `"rope_type": "ntk-by-parts"`,
			[]string{"config.json: ", `rope_parameters.rope_type "ntk-by-parts" is not supported`}},
		{"qwen3_yarn", `"rope_parameters": {`, `"rope_scaling": {"type": "su", "factor": 2}, "rope_parameters": {`,
			[]string{"config.json: ", `rope_scaling.rope_type "su" is not supported`}},
		{"qwen3_moe", `"num_local_experts": 8`, `"num_local_experts": 16`,
			[]string{"tensor model.layers.0.mlp.gate.weight has 8 experts, but config.json num_local_experts is 16"}},
		{"mixtral", `"num_local_experts": 8`, `"num_local_experts": 4`,
			[]string{"tensor model.layers.0.block_sparse_moe.gate.weight has 8 experts, but config.json num_local_experts is 4"}},
	} {
		dir := copyCheckpoint(t, shared.Path(t, "models/reference-tiny/"+tc.ref), func(cfg string) string {
			if !strings.Contains(cfg, tc.from) {
				t.Fatalf("%s's config.json has no %s", tc.ref, tc.from)
			}
			return strings.Replace(cfg, tc.from, tc.to, 1)
		})
		err := open(dir)
		if err == nil || !strings.Contains(err.Error(), dir) {
			t.Errorf("%s with %s: %v, want an error naming %s", tc.ref, tc.to, err, dir)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s with %s: %v, want one containing %q", tc.ref, tc.to, err, w)
			}
		}
	}

	// A GGUF of llama_gqa whose general.architecture says "mamba".
	ck, err := model.Open(shared.Path(t, "models/reference-tiny/llama_gqa"))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	path := filepath.Join(t.TempDir(), "mamba.gguf")
	if err := model.WriteGGUF(ck, path); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// The key, its value type (string, 8) and length (5), then the value.
	key := []byte("general.architecture\x08\x00\x00\x00\x05\x00\x00\x00\x00\x00\x00\x00llama")
	i := bytes.Index(data, key)
	if i < 0 {
		t.Fatal("the GGUF has no general.architecture \"llama\"")
	}
	copy(data[i+len(key)-5:], "mamba")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	err = open(path)
	if err == nil || !strings.Contains(err.Error(), path+`: general.architecture "mamba" is not supported`) {
		t.Errorf("a GGUF of architecture mamba: %v", err)
	}
}

// copyCheckpoint copies a checkpoint directory into a new one, its
// config.json rewritten by edit.
func copyCheckpoint(t *testing.T, src string, edit func(string) string) string {
	t.Helper()
	dir := t.TempDir()
	shared.CopyDir(t, src, dir)
	path := filepath.Join(dir, "config.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(edit(string(data))), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}
