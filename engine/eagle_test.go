package engine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/model/eagle"
	"github.com/gosling-ai/gosling/model/random"
)

// eagleHead writes a random-weight head for the model at target into a
// temporary directory, in the layout SGLang loads, and returns it.
func eagleHead(t *testing.T, target string, o random.EagleOptions) string {
	t.Helper()
	ck, err := model.Open(target)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	dir := filepath.Join(t.TempDir(), "eagle")
	if err := eagle.WriteRandom(dir, &ck.Config, o); err != nil {
		t.Fatal(err)
	}
	return dir
}

// eagleConfigs are an EAGLE-3 head with a draft vocabulary of half the
// target's (mapped by d2t), as a tree, and an EAGLE head as a chain; and
// a tree so wide (64 of the 512 tokens at each of two levels) that even
// a random head's drafts are accepted now and then, which takes the
// accepted paths' KV compaction and the catch-up over several tokens.
func eagleConfigs(t *testing.T, target string, auxLayers []int) []engine.Config {
	head3 := eagleHead(t, target, random.EagleOptions{Eagle3: true, DraftVocab: 256, AuxLayerIDs: auxLayers, Seed: 7})
	return []engine.Config{
		{SpeculativeAlgorithm: "EAGLE3", SpeculativeNumSteps: 3, SpeculativeEagleTopk: 2, SpeculativeNumDraftTokens: 5, SpeculativeDraftModelPath: head3},
		{SpeculativeAlgorithm: "EAGLE", SpeculativeNumSteps: 3, SpeculativeEagleTopk: 1,
			SpeculativeDraftModelPath: eagleHead(t, target, random.EagleOptions{Seed: 8})},
		{SpeculativeAlgorithm: "EAGLE3", SpeculativeNumSteps: 2, SpeculativeEagleTopk: 64, SpeculativeNumDraftTokens: 96, SpeculativeDraftModelPath: head3},
	}
}

// TestEagleGreedyIdentity: with random-weight EAGLE and EAGLE-3 heads
// written in the real file layout, greedy output is token for token the
// output without speculation, for every CPU backend at page sizes 1 and
// 16, with the prompt prefilled in chunks, and again from a warm radix
// cache; every KV page comes back. Random heads draft near-random tokens,
// so their accept length says nothing of a trained head's: it is logged,
// not checked.
func TestEagleGreedyIdentity(t *testing.T) {
	stories := shared.Path(t, storiesGGUF)
	gqa := shared.Path(t, "models/reference-tiny/llama_gqa")
	var ref reference
	readJSON(t, filepath.Join(gqa, "reference.json"), &ref)
	targets := []struct {
		name, path string
		aux        []int // stories260K's 5 layers: SGLang's default picks layer 1 twice
		prompts    []engine.Request
		maxNew     int
	}{
		{"stories260K", stories, []int{0, 2, 3}, []engine.Request{{Prompt: copyPrompt}, {Prompt: "Lily saw a big dog"}}, 256},
		{"llama_gqa", gqa, nil, []engine.Request{{InputIDs: ref.InputIDs}}, 64},
	}
	backends := []engine.Config{{AttentionBackend: "native"}, {AttentionBackend: "flash"}, {AttentionBackend: "splitkv"},
		{PrefillBackend: "flash", DecodeBackend: "splitkv", SpeculativeAttentionMode: "decode"}}
	for _, tg := range targets {
		heads := eagleConfigs(t, tg.path, tg.aux)
		if tg.name == "stories260K" {
			heads = heads[:2] // the wide tree's verify steps are llama_gqa's to take: 95 drafts cost stories260K minutes
		}
		for _, choice := range backends {
			for _, pageSize := range []int{1, 16} {
				base := choice
				base.ModelPath, base.PageSize, base.ChunkedPrefillSize, base.KVCacheTokens = tg.path, pageSize, 13, 4096
				reqs := slices.Clone(tg.prompts)
				for i := range reqs {
					reqs[i].Sampling = greedy(tg.maxNew)
					reqs[i].Sampling.IgnoreEOS = tg.name == "llama_gqa"
				}
				want := generateReqs(t, newEngine(t, base), reqs)
				for _, sc := range heads {
					t.Run(fmt.Sprintf("%s/%s/%s/page%d", tg.name, specName(sc), choiceName(choice), pageSize), func(t *testing.T) {
						e := newEngine(t, withSpec(base, sc))
						for round := range 2 { // the second round starts from a warm radix cache
							got := generateReqs(t, e, reqs)
							for i := range reqs {
								if !slices.Equal(got[i].OutputIDs, want[i].OutputIDs) {
									t.Fatalf("round %d request %d:\nspeculative %v\nplain       %v", round, i, got[i].OutputIDs, want[i].OutputIDs)
								}
							}
							if round == 1 && got[0].CachedTokens == 0 {
								t.Errorf("round 2 found nothing in the radix cache")
							}
						}
						st, ss := e.Stats(), e.SpecStats()
						if ss.VerifySteps == 0 || ss.DraftedTokens == 0 {
							t.Fatalf("no drafts verified: %+v", ss)
						}
						if sc.SpeculativeEagleTopk == 64 && ss.AcceptedTokens == 0 {
							t.Errorf("a tree of 95 drafts was never accepted from: %+v", ss)
						}
						if st.KVPagesFree+st.KVPagesCached != st.KVPagesTotal {
							t.Errorf("%d free + %d cached of %d pages after all requests finished", st.KVPagesFree, st.KVPagesCached, st.KVPagesTotal)
						}
						t.Logf("random head: accept length %.2f over %d verify steps (%d of %d drafts accepted)",
							ss.AcceptLength(), ss.VerifySteps, ss.AcceptedTokens, ss.DraftedTokens)
					})
				}
			}
		}
	}
}

// generateReqs runs reqs concurrently (one batch) and returns the results
// in order.
func generateReqs(t *testing.T, e *engine.Engine, reqs []engine.Request) []*engine.Result {
	t.Helper()
	out := make([]*engine.Result, len(reqs))
	errs := make(chan error, len(reqs))
	for i, req := range reqs {
		go func() {
			res, err := e.Generate(context.Background(), req)
			out[i] = res
			errs <- err
		}()
	}
	for range reqs {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestEagleStartupErrors: a wrong EAGLE setting stops engine.New with a
// message naming the flag or the head's config field to change.
func TestEagleStartupErrors(t *testing.T) {
	stories := shared.Path(t, storiesGGUF)
	gqa := shared.Path(t, "models/reference-tiny/llama_gqa")
	head3 := eagleHead(t, gqa, random.EagleOptions{Eagle3: true, DraftVocab: 256})
	head1 := eagleHead(t, gqa, random.EagleOptions{})
	// Heads trained for other models: another width, another vocabulary.
	otherWidth, otherVocab := filepath.Join(t.TempDir(), "width"), filepath.Join(t.TempDir(), "vocab")
	shared.CopyDir(t, head3, otherWidth)
	rewriteConfig(t, otherWidth, `"target_hidden_size": 64`, `"target_hidden_size": 32`)
	shared.CopyDir(t, head3, otherVocab)
	rewriteConfig(t, otherVocab, `"vocab_size": 512`, `"vocab_size": 1000`)
	badLayers := eagleHead(t, gqa, random.EagleOptions{Eagle3: true, AuxLayerIDs: []int{0, 0, 1}})
	noD2T := filepath.Join(t.TempDir(), "nod2t")
	shared.CopyDir(t, head3, noD2T)
	rewriteConfig(t, noD2T, `"draft_vocab_size": 256`, `"draft_vocab_size": 128`)
	cases := []struct {
		cfg  engine.Config
		want string
	}{
		{engine.Config{ModelPath: gqa, SpeculativeAlgorithm: "EAGLE3"}, "needs --speculative-draft-model-path"},
		{engine.Config{ModelPath: gqa, SpeculativeAlgorithm: "EAGLE3", SpeculativeDraftModelPath: head3, SpeculativeNumSteps: 2, SpeculativeEagleTopk: 2, SpeculativeNumDraftTokens: 6},
			"--speculative-num-draft-tokens 6 is more than a EAGLE3 tree"},
		{engine.Config{ModelPath: gqa, SpeculativeAlgorithm: "EAGLE3", SpeculativeDraftModelPath: head1}, "needs a LlamaForCausalLMEagle3 head"},
		{engine.Config{ModelPath: gqa, SpeculativeAlgorithm: "EAGLE", SpeculativeDraftModelPath: head3}, "needs a LlamaForCausalLMEagle head"},
		{engine.Config{ModelPath: gqa, SpeculativeAlgorithm: "EAGLE3", SpeculativeDraftModelPath: otherWidth}, "config.json target_hidden_size is 32, the target's hidden_size 64"},
		{engine.Config{ModelPath: gqa, SpeculativeAlgorithm: "EAGLE3", SpeculativeDraftModelPath: otherVocab}, "config.json vocab_size is 1000, the target's vocabulary 512"},
		{engine.Config{ModelPath: gqa, SpeculativeAlgorithm: "EAGLE3", SpeculativeDraftModelPath: badLayers}, "eagle_config.eagle_aux_hidden_state_layer_ids"},
		{engine.Config{ModelPath: gqa, SpeculativeAlgorithm: "EAGLE3", SpeculativeDraftModelPath: noD2T}, "d2t is I64 [256]; want I64 [128] (config.json draft_vocab_size)"},
		{engine.Config{ModelPath: stories, SpeculativeAlgorithm: "EAGLE3", SpeculativeDraftModelPath: head3}, "three distinct layers of the target's 5"},
		{engine.Config{ModelPath: gqa, SpeculativeAlgorithm: "EAGLE3", SpeculativeDraftModelPath: gqa}, "needs a LlamaForCausalLMEagle3 head"},
		{engine.Config{ModelPath: gqa, SpeculativeAlgorithm: "EAGLE3", SpeculativeDraftModelPath: head3, TPSize: 2}, "EAGLE3 runs with one rank so far"},
		{engine.Config{ModelPath: shared.Path(t, "models/reference-tiny/gemma2_softcap_swa"), SpeculativeAlgorithm: "EAGLE3", SpeculativeDraftModelPath: head3},
			"cannot hand its hidden states to a head"},
	}
	for _, c := range cases {
		_, err := engine.New(c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s with %s: got %v, want an error with %q", c.cfg.SpeculativeAlgorithm, c.cfg.SpeculativeDraftModelPath, err, c.want)
		}
	}
}

func rewriteConfig(t *testing.T, dir, old, new string) {
	t.Helper()
	path := filepath.Join(dir, "config.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), old) {
		t.Fatalf("%s has no %s", path, old)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(data), old, new, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestEagleSampling: seeded sampling with a head is reproducible, and
// another seed draws another text. (TestSpeculativeUnderMemoryPressure
// runs the heads under retraction.)
func TestEagleSampling(t *testing.T) {
	model := shared.Path(t, storiesGGUF)
	for _, sc := range eagleConfigs(t, model, []int{0, 2, 3})[:2] {
		t.Run(specName(sc), func(t *testing.T) {
			e := newEngine(t, withSpec(engine.Config{ModelPath: model, PageSize: 4}, sc))
			sampled := func(seed uint64) []int {
				p := greedy(80)
				p.Temperature, p.TopP, p.Seed = 0.9, 0.95, &seed
				res, err := e.Generate(context.Background(), engine.Request{Prompt: copyPrompt, Sampling: p})
				if err != nil {
					t.Fatal(err)
				}
				if res.SpecVerifySteps == 0 {
					t.Fatalf("seed %d: no verify steps", seed)
				}
				return res.OutputIDs
			}
			if a, b, c := sampled(3), sampled(3), sampled(4); !slices.Equal(a, b) || slices.Equal(a, c) {
				t.Errorf("seed 3 twice: %v, %v; seed 4: %v", a, b, c)
			}
			if st := e.Stats(); st.KVPagesFree+st.KVPagesCached != st.KVPagesTotal {
				t.Errorf("%d free + %d cached of %d pages after all requests finished", st.KVPagesFree, st.KVPagesCached, st.KVPagesTotal)
			}
		})
	}
}
