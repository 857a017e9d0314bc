package server_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestNodeClient runs OpenAI's official Node SDK (testdata/node, pinned in
// its package-lock.json) against the server. .ci/run installs it with npm ci.
func TestNodeClient(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: skipping the Node SDK test (CI installs it)")
	}
	dir := filepath.Join("testdata", "node")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai")); err != nil {
		t.Skipf("%s/node_modules is missing: run (cd server/testdata/node && npm ci) to enable the Node SDK test", dir)
	}
	ts, _ := newServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "client_test.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOSLING_BASE_URL="+ts.URL, "GOSLING_MODEL=stories260K.gguf")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node client_test.mjs: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
