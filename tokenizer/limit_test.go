package tokenizer

import (
	"runtime"
	"strings"
	"testing"
)

// TestEncodeLimit: a text that fits gets exactly Encode's ids, whatever its
// size; one that does not is refused after a bounded amount of work and
// memory, not after encoding all of it.
func TestEncodeLimit(t *testing.T) {
	line := "Once upon a time, Lily saw a <|im_start|> café\n\n  with 12345 ducks.\t"
	toks := map[string]*Tokenizer{
		"llama3": hfTokenizer(t, "llama3"), "mistral": hfTokenizer(t, "mistral"), "qwen3": hfTokenizer(t, "qwen3"),
		"stories260K-hf": hfTokenizer(t, "stories260K"), "llama2c": llama2cTokenizer(t), "gguf": ggufStoriesTokenizer(t),
	}
	for name, tok := range toks {
		t.Run(name, func(t *testing.T) {
			for _, text := range []string{"", "a", line, strings.Repeat(line, 1200), strings.Repeat("x", 70_000)} {
				want := tok.Encode(text, true)
				got, ok := tok.EncodeLimit(text, true, len(want))
				if !ok || !equalIDs(got, want) {
					t.Errorf("%d bytes, limit %d (exactly its tokens): ok %v, %d ids, want %d", len(text), len(want), ok, len(got), len(want))
				}
				if len(want) > 0 {
					if got, ok := tok.EncodeLimit(text, true, len(want)-1); ok || got != nil {
						t.Errorf("%d bytes, limit %d (one token short): ok %v", len(text), len(want)-1, ok)
					}
				}
			}
		})
	}
}

// TestEncodeLimitMemory: refusing a 30 MB text with a 2048-token limit
// allocates a few megabytes (one chunk), not the tens of bytes per input
// byte that encoding it whole takes.
func TestEncodeLimitMemory(t *testing.T) {
	tok := hfTokenizer(t, "llama3")
	text := strings.Repeat("Once upon a time there was a little girl. ", 30<<20/43)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, ok := tok.EncodeLimit(text, true, 2048)
	runtime.ReadMemStats(&after)
	if ok {
		t.Fatal("a 30 MB text fits in 2048 tokens?")
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
		t.Errorf("refusing a 30 MB text allocated %d MB, want under 16", alloc>>20)
	}
}
