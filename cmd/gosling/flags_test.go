package main

import (
	"bytes"
	"encoding/json"
	"net"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/internal/testnet"
)

// TestFlagsTheHelpOffers: negative values the help text offers parse, the
// README's chat example runs with a --chat-template, and settings that
// cannot be honoured fail at start-up with what to do.
func TestFlagsTheHelpOffers(t *testing.T) {
	stories := shared.Path(t, "models/stories260K/stories260K.gguf")
	base := []string{"generate", "--model-path", stories, "--max-new-tokens", "4", "--temperature", "0", "--json"}
	ok := func(args ...string) map[string]any {
		t.Helper()
		out, stderr, err := run(t, "", append(slices.Clone(base), args...)...)
		if err != nil {
			t.Fatalf("gosling %v: %v\n%s", args, err, stderr)
		}
		var res map[string]any
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("gosling %v: %v\n%s", args, err, out)
		}
		return res
	}
	fails := func(want string, args ...string) {
		t.Helper()
		_, stderr, err := run(t, "", append(slices.Clone(base), args...)...)
		if err == nil || !strings.Contains(stderr, want) {
			t.Errorf("gosling %v: err %v, stderr %q; want a failure saying %q", args, err, stderr, want)
		}
	}
	ok("--prompt", "Lily", "--chunked-prefill-size", "-1", "--top-k", "-1")
	if on, off := ok("--prompt", "Lily"), ok("--prompt", "Lily", "--disable-overlap-schedule"); !slices.Equal(ids(on), ids(off)) || len(ids(on)) != 4 {
		t.Errorf("--disable-overlap-schedule changed the output: %v, without it %v", ids(off), ids(on))
	}
	fails("--allow-longer-context", "--prompt", "Lily", "--context-length", "100000")
	ok("--prompt", "Lily", "--context-length", "1024", "--allow-longer-context")
	fails("--page-size must be positive, got 0", "--prompt", "Lily", "--page-size", "0")
	fails("not this model's tokenizer", "--prompt", "Lily", "--tokenizer", shared.Path(t, "tokenizers/qwen3"))
	fails("no chat template", "--chat", "--prompt", "Once upon a time")
	res := ok("--chat", "--prompt", "Once upon a time", "--chat-template", `{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}`)
	if text, _ := res["text"].(string); text == "" {
		t.Errorf("--chat with --chat-template generated no text: %v", res)
	}
}

// TestTensorParallelFlags: SGLang's distributed flags are checked against
// each other, the model (Llama-3.1-8B's 32 heads and 8 KV heads) and the
// network, on every command that loads a model, before anything loads.
func TestTensorParallelFlags(t *testing.T) {
	llama8b := shared.Path(t, "configs/llama-3.1-8b")
	dead := testnet.FreeAddr(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tp-size", "3"}, "--tp-size 3: the model's 32 attention heads do not divide evenly among 3 ranks"},
		{[]string{"--tp", "3"}, "--tp-size 3: the model's 32 attention heads"},
		{[]string{"--tp-size", "2", "--nnodes", "2", "--node-rank", "2", "--dist-init-addr", dead}, "--node-rank 2 must lie in [0, --nnodes 2)"},
		{[]string{"--tp-size", "2", "--nnodes", "2", "--node-rank", "1", "--dist-init-addr", dead, "--dist-timeout", "1"}, "--dist-init-addr " + dead + ": node 0 is unreachable from node 1 within 1s"},
		{[]string{"--tp-size", "2", "--nnodes", "2", "--dist-init-addr", dead, "--dist-timeout", "0"}, "--dist-timeout must be positive"},
		{[]string{"--tp-size", "2", "--nnodes", "2", "--node-rank", "1"}, "--nnodes 2 needs --dist-init-addr HOST:PORT"},
		{[]string{"--dist-init-addr", dead}, "--dist-init-addr is for ranks on several hosts"},
	} {
		for _, cmd := range [][]string{
			{"generate", "--prompt", "hi", "--max-new-tokens", "1"},
			{"serve", "--port", "0"},
		} {
			args := append(append(slices.Clone(cmd), "--model-path", llama8b, "--load-format", "dummy"), tc.args...)
			_, stderr, err := run(t, "", args...)
			if err == nil || !strings.Contains(stderr, tc.want) {
				t.Errorf("gosling %v: err %v, stderr %q; want %q", args, err, stderr, tc.want)
			}
		}
	}
}

// TestTensorParallelGenerate: `generate --tp-size 2` on the CPU, in one
// process and as two processes (node 1 started first, joined to node 0
// over TCP), reproduces run.c's greedy output, and node 1 exits cleanly
// once node 0 is done.
func TestTensorParallelGenerate(t *testing.T) {
	golden := storiesGolden(t)
	stories := shared.Path(t, "models/stories260K/stories260K.gguf")
	args := []string{"generate", "--model-path", stories, "--device", "cpu", "--tp-size", "2", "--input-ids", "1",
		"--max-new-tokens", "256", "--temperature", "0", "--json"}
	check := func(what, out, stderr string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v\n%s", what, err, stderr)
		}
		var res struct {
			OutputIDs []int `json:"output_ids"`
		}
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("%s: %v\n%s", what, err, out)
		}
		if !slices.Equal(res.OutputIDs, golden) {
			t.Errorf("%s: %d tokens differing from run.c's golden", what, len(res.OutputIDs))
		}
	}
	out, stderr, err := run(t, "", args...)
	check("--tp-size 2", out, stderr, err)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	nodes := append(slices.Clone(args), "--nnodes", "2", "--dist-init-addr", addr, "--dist-timeout", "60")
	node1 := exec.Command(binary, append(slices.Clone(nodes), "--node-rank", "1")...)
	var node1Err bytes.Buffer
	node1.Stderr = &node1Err
	if err := node1.Start(); err != nil {
		t.Fatal(err)
	}
	out, stderr, err = run(t, "", append(slices.Clone(nodes), "--node-rank", "0")...)
	check("--nnodes 2, node 0", out, stderr, err)
	done := make(chan error, 1)
	go func() { done <- node1.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("node 1: %v\n%s", err, node1Err.String())
		}
	case <-time.After(30 * time.Second):
		node1.Process.Kill()
		t.Fatalf("node 1 still runs after node 0 finished:\n%s", node1Err.String())
	}
}

// ids are the output_ids of generate --json's result.
func ids(res map[string]any) []any {
	v, _ := res["output_ids"].([]any)
	return v
}
