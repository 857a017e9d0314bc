package engine

import (
	"testing"

	"github.com/gosling-ai/gosling/internal/shared"
)

// TestAttentionNeedMultimodal: a vision-language model asks its attention
// backend for bidirectional image spans (attention.Need.Multimodal, which
// Resolve checks against Caps.Multimodal); a text model does not.
func TestAttentionNeedMultimodal(t *testing.T) {
	for _, tc := range []struct {
		name string
		want bool
	}{{"qwen2_5_vl", true}, {"gemma3_vl", true}, {"llama_gqa", false}} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := New(Config{ModelPath: shared.Path(t, "models/reference-tiny/"+tc.name), Device: "cpu", ContextLength: 256, KVCacheTokens: 1024})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			if got := e.attentionNeed(false).Multimodal; got != tc.want {
				t.Errorf("Need.Multimodal = %v, want %v", got, tc.want)
			}
		})
	}
}
