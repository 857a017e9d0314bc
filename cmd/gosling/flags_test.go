package main

import (
	"encoding/json"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/internal/shared"
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
// network, and more than one rank is refused naming what is missing, on
// every command that loads a model; nothing is accepted and ignored.
func TestTensorParallelFlags(t *testing.T) {
	llama8b := shared.Path(t, "configs/llama-3.1-8b")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String() // closed: nobody listens there
	ln.Close()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tp-size", "3"}, "--tp-size 3: the model's 32 attention heads do not divide evenly among 3 ranks"},
		{[]string{"--tp", "3"}, "--tp-size 3: the model's 32 attention heads"},
		{[]string{"--tp-size", "2", "--nnodes", "2", "--node-rank", "2", "--dist-init-addr", dead}, "--node-rank 2 must lie in [0, --nnodes 2)"},
		{[]string{"--tp-size", "2", "--nnodes", "2", "--node-rank", "1", "--dist-init-addr", dead}, "--dist-init-addr " + dead + ": node 0 is unreachable from node 1"},
		{[]string{"--tp-size", "2", "--nnodes", "2", "--node-rank", "1"}, "--nnodes 2 needs --dist-init-addr HOST:PORT"},
		{[]string{"--dist-init-addr", dead}, "--dist-init-addr is for ranks on several hosts"},
		{[]string{"--tp-size", "2", "--nnodes", "2", "--node-rank", "0", "--dist-init-addr", dead}, "--nnodes 2: tensor parallelism across hosts is not wired into the engine yet (issue 21)"},
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
