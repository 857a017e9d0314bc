package server_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/gosling-ai/gosling/server"
)

// TestNodeStructured runs testdata/node/structured_test.mjs (OpenAI's
// Node SDK): with Qwen3's chat template, response_format json_schema,
// tool_calls required, named and parallel, plain and streamed, and
// reasoning_content; with Llama 3.1's and Mistral's tool templates (random
// models of their tokenizers) the tool calls.
func TestNodeStructured(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: skipping the Node SDK test (CI installs it)")
	}
	dir := filepath.Join("testdata", "node")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai")); err != nil {
		t.Skipf("%s/node_modules is missing: run (cd server/testdata/node && npm ci) to enable the Node SDK test", dir)
	}
	runNode := func(t *testing.T, url string, env ...string) {
		ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, node, "structured_test.mjs")
		cmd.Dir = dir
		cmd.Env = append(append(os.Environ(), "GOSLING_BASE_URL="+url), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("node structured_test.mjs: %v\n%s", err, out)
		}
		t.Logf("%s", out)
	}
	t.Run("qwen3", func(t *testing.T) {
		tmpl := qwen3Template(t)
		ts, _ := newServer(t, func(o *server.Options) { o.ChatTemplate = tmpl; o.ReasoningParser = "qwen3" })
		runNode(t, ts.URL, "GOSLING_MODEL=stories260K.gguf", "GOSLING_SUITE=qwen3")
	})
	for _, tt := range toolTemplates {
		t.Run(tt.name, func(t *testing.T) {
			ts := randomServer(t, tt.tokenizer, tt.vocab, readTemplate(t, tt.file))
			id := "^call_[0-9a-f]{32}$"
			if tt.idPrefix == "" {
				id = "^[A-Za-z0-9]{9}$"
			}
			runNode(t, ts.URL, "GOSLING_MODEL=random", "GOSLING_SUITE=tools", "GOSLING_CALL_ID="+id)
		})
	}
}
