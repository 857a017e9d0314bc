package engine_test

import (
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/internal/shared"
)

// TestStartupRefusesBadSettings: settings that cannot work, or would work
// silently otherwise than asked, fail engine.New with a sentence that says
// what to do, instead of failing every request later.
func TestStartupRefusesBadSettings(t *testing.T) {
	stories := shared.Path(t, "models/stories260K/stories260K.gguf")
	qwen3 := shared.Path(t, "tokenizers/qwen3")
	tests := []struct {
		name string
		cfg  engine.Config
		want string // a substring of the error
	}{
		{"another model's tokenizer", engine.Config{TokenizerPath: qwen3}, "it is not this model's tokenizer"},
		{"a context past the trained positions", engine.Config{ContextLength: 100000}, "--allow-longer-context"},
		{"page size 0", engine.Config{PageSize: 0, PageSizeSet: true}, "--page-size must be positive, got 0"},
		{"negative page size", engine.Config{PageSize: -4, PageSizeSet: true}, "--page-size must be positive"},
		{"negative context length", engine.Config{ContextLength: -1}, "--context-length must not be negative"},
		{"negative KV tokens", engine.Config{KVCacheTokens: -16}, "--kv-cache-tokens must not be negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.ModelPath = stories
			cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
			e, err := engine.New(cfg)
			if err == nil {
				e.Close()
				t.Fatalf("engine.New accepted %+v", tc.cfg)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want it to say %q", err, tc.want)
			}
		})
	}
	// The override runs the longer context, and reports it.
	e := newEngine(t, engine.Config{ModelPath: stories, ContextLength: 1024, AllowLongerContext: true})
	if got := e.Settings().ContextLength; got != 1024 {
		t.Errorf("context length %d with the override, want 1024", got)
	}
}

// TestCloseTwice: a second Close returns the first one's result instead
// of panicking on the closed stop channel.
func TestCloseTwice(t *testing.T) {
	e, err := engine.New(engine.Config{ModelPath: shared.Path(t, "models/stories260K/stories260K.gguf")})
	if err != nil {
		t.Fatal(err)
	}
	first := e.Close()
	if second := e.Close(); second != first {
		t.Errorf("second Close: %v, first %v", second, first)
	}
}
