package main

import (
	"encoding/json"
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
