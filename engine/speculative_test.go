package engine_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/gosling-ai/gosling/engine"
)

const storiesGGUF = "models/stories260K/stories260K.gguf"

// specAlgorithms are the drafters under test: n-gram lookup, and a draft
// model that is the target itself (as a chain and as a tree), which must
// accept every drafted token it can.
func specAlgorithms(t *testing.T, target string) []engine.Config {
	return []engine.Config{
		{SpeculativeAlgorithm: "NGRAM"},
		{SpeculativeAlgorithm: "STANDALONE", SpeculativeDraftModelPath: target, SpeculativeNumSteps: 4, SpeculativeEagleTopk: 1},
		{SpeculativeAlgorithm: "STANDALONE", SpeculativeDraftModelPath: target, SpeculativeNumSteps: 3, SpeculativeEagleTopk: 2, SpeculativeNumDraftTokens: 5},
	}
}

func specName(c engine.Config) string {
	if c.SpeculativeAlgorithm == "STANDALONE" {
		return fmt.Sprintf("STANDALONE-topk%d", c.SpeculativeEagleTopk)
	}
	return c.SpeculativeAlgorithm
}

func withSpec(base, sc engine.Config) engine.Config {
	base.SpeculativeAlgorithm, base.SpeculativeDraftModelPath = sc.SpeculativeAlgorithm, sc.SpeculativeDraftModelPath
	base.SpeculativeNumSteps, base.SpeculativeEagleTopk, base.SpeculativeNumDraftTokens = sc.SpeculativeNumSteps, sc.SpeculativeEagleTopk, sc.SpeculativeNumDraftTokens
	return base
}

// copyPrompt repeats a story so that the continuation copies from it.
const copyPrompt = "Once upon a time, there was a little girl named Lily. She loved to play outside. " +
	"One day, she saw a big red ball in the park. Once upon a time, there was a little girl named Lily."

// TestSpeculativeGreedyIdentity: for every drafter, CPU attention backend
// and page size 1 and 16, greedy output with speculation is token for token
// the output without (stories260K, 256 tokens, several requests in a batch
// and one prompt prefilled in chunks of 13), also when the prompt comes
// from a warm radix cache; drafts are accepted, and every KV page comes
// back.
func TestSpeculativeGreedyIdentity(t *testing.T) {
	model := sharedPath(t, storiesGGUF)
	prompts := []string{copyPrompt, "Lily saw a big dog", "The sun was hot."}
	for _, choice := range []engine.Config{{AttentionBackend: "native"}, {AttentionBackend: "flash"}, {AttentionBackend: "splitkv"}} {
		for _, pageSize := range []int{1, 16} {
			base := choice
			base.ModelPath, base.PageSize, base.ChunkedPrefillSize = model, pageSize, 13
			plain := newEngine(t, base)
			want := generateAll(t, plain, prompts, 256)
			for _, sc := range specAlgorithms(t, model) {
				t.Run(fmt.Sprintf("%s/%s/page%d", specName(sc), choice.AttentionBackend, pageSize), func(t *testing.T) {
					e := newEngine(t, withSpec(base, sc))
					for round := range 2 { // the second round starts from a warm radix cache
						got := generateAll(t, e, prompts, 256)
						for i := range prompts {
							if !slices.Equal(got[i].OutputIDs, want[i].OutputIDs) {
								t.Fatalf("round %d prompt %q:\nspeculative %v\nplain       %v", round, prompts[i], got[i].OutputIDs, want[i].OutputIDs)
							}
						}
						if round == 1 && got[0].CachedTokens == 0 {
							t.Errorf("round 2 found nothing in the radix cache")
						}
					}
					st, ss := e.Stats(), e.SpecStats()
					if ss.VerifySteps == 0 || ss.AcceptedTokens == 0 {
						t.Fatalf("no drafts verified or accepted: %+v", ss)
					}
					// A chain drafted by the target itself is the target's
					// greedy continuation: every token is accepted.
					if sc.SpeculativeAlgorithm == "STANDALONE" && sc.SpeculativeEagleTopk == 1 && ss.AcceptedTokens != ss.DraftedTokens {
						t.Errorf("draft = target accepted %d of %d drafted tokens", ss.AcceptedTokens, ss.DraftedTokens)
					}
					if st.KVPagesFree+st.KVPagesCached != st.KVPagesTotal {
						t.Errorf("%d free + %d cached of %d pages after all requests finished", st.KVPagesFree, st.KVPagesCached, st.KVPagesTotal)
					}
					t.Logf("accept length %.2f over %d verify steps", ss.AcceptLength(), ss.VerifySteps)
				})
			}
		}
	}
}
