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
// Node SDK: response_format json_schema, tool_calls required and named,
// streamed) against a server with Qwen3's chat template.
func TestNodeStructured(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: skipping the Node SDK test (CI installs it)")
	}
	dir := filepath.Join("testdata", "node")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai")); err != nil {
		t.Skipf("%s/node_modules is missing: run (cd server/testdata/node && npm ci) to enable the Node SDK test", dir)
	}
	tmpl := qwen3Template(t)
	ts, _ := newServer(t, func(o *server.Options) { o.ChatTemplate = tmpl })
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "structured_test.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOSLING_BASE_URL="+ts.URL, "GOSLING_MODEL=stories260K.gguf")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node structured_test.mjs: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
