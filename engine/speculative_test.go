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
	if c.SpeculativeAlgorithm != "NGRAM" {
		return fmt.Sprintf("%s-topk%d", c.SpeculativeAlgorithm, c.SpeculativeEagleTopk)
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
// the output without (stories260K, 256 tokens, two requests in a batch
// and one prompt prefilled in chunks of 13), also when the prompt comes
// from a warm radix cache; drafts are accepted, and every KV page comes
// back.
func TestSpeculativeGreedyIdentity(t *testing.T) {
	model := shared.Path(t, storiesGGUF)
	prompts := []string{copyPrompt, "Lily saw a big dog"}
	backends := []engine.Config{{AttentionBackend: "native"}, {AttentionBackend: "flash"}, {AttentionBackend: "splitkv"},
		// Hybrid, verifying on the decode side (--speculative-attention-mode decode).
		{PrefillBackend: "flash", DecodeBackend: "splitkv", SpeculativeAttentionMode: "decode"}}
	for _, choice := range backends {
		for _, pageSize := range []int{1, 16} {
			base := choice
			base.ModelPath, base.PageSize, base.ChunkedPrefillSize, base.KVCacheTokens = model, pageSize, 13, 4096
			prompts := prompts
			if choice.AttentionBackend == "native" {
				prompts = prompts[:1] // the slow reference: one request keeps the test short
			}
			plain := newEngine(t, base)
			want := generateAll(t, plain, prompts, 256)
			for _, sc := range specAlgorithms(t, model) {
				t.Run(fmt.Sprintf("%s/%s/page%d", specName(sc), choiceName(choice), pageSize), func(t *testing.T) {
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
					// greedy continuation, so every token is accepted but at
					// a near-tie: the draft computes a token in a decode
					// step, the target in a verify extend, and the two float
					// orders can pick different argmaxes (4 of 408 drafts
					// in one CI run here). A bookkeeping bug rejects far
					// more.
					if sc.SpeculativeAlgorithm == "STANDALONE" && sc.SpeculativeEagleTopk == 1 && ss.AcceptedTokens < ss.DraftedTokens*97/100 {
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

// TestSpeculativeReferenceModels: greedy identity with speculation on the
// reference-tiny architectures (GQA, MLA, MoE, sliding windows — verified
// as chains — softcaps, sinks), every CPU backend, page sizes 1 and 16.
func TestSpeculativeReferenceModels(t *testing.T) {
	names := []string{"llama_gqa", "qwen3_qknorm", "mistral_swa", "gemma2_softcap_swa", "deepseek_v3_mla_moe", "qwen3_moe", "phi3", "gemma3_text", "gpt_oss", "qwen2_5_vl"}
	for _, name := range names {
		dir := shared.Path(t, "models/reference-tiny/"+name)
		var ref reference
		readJSON(t, filepath.Join(dir, "reference.json"), &ref)
		p := greedy(64)
		p.IgnoreEOS = true
		req := engine.Request{InputIDs: ref.InputIDs, Sampling: p}
		for _, backend := range []string{"native", "flash", "splitkv"} {
			for _, pageSize := range []int{1, 16} {
				base := engine.Config{ModelPath: dir, AttentionBackend: backend, PageSize: pageSize, ChunkedPrefillSize: 40, KVCacheTokens: 1024}
				want, err := newEngine(t, base).Generate(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				for _, sc := range specAlgorithms(t, dir)[:2] {
					t.Run(fmt.Sprintf("%s/%s/%s/page%d", name, specName(sc), backend, pageSize), func(t *testing.T) {
						ss := checkSameAsPlain(t, withSpec(base, sc), req, want)
						// The draft computes a token in a decode step, the
						// target in a verify extend: at a near-tie of random
						// weights (MoE routing most of all) the two float
						// orders may pick different argmaxes, so a rare
						// rejection is no bug; many would be.
						if sc.SpeculativeAlgorithm == "STANDALONE" && ss.AcceptedTokens < ss.DraftedTokens*9/10 {
							t.Errorf("draft = target accepted %d of %d drafted tokens", ss.AcceptedTokens, ss.DraftedTokens)
						}
					})
				}
			}
		}
	}
}

// TestSpeculativeStopsAndLogprobs: stop strings, stop tokens, max_tokens
// and logprobs behave as without speculation (the stop falls inside an
// accepted run of drafts).
func TestSpeculativeStopsAndLogprobs(t *testing.T) {
	model := shared.Path(t, storiesGGUF)
	plain := newEngine(t, engine.Config{ModelPath: model})
	e := newEngine(t, engine.Config{ModelPath: model, SpeculativeAlgorithm: "NGRAM"})
	base, err := plain.Generate(context.Background(), engine.Request{Prompt: copyPrompt, Sampling: greedy(120)})
	if err != nil {
		t.Fatal(err)
	}
	words := strings.Fields(base.Text)
	withStop := greedy(120)
	withStop.Stop = []string{words[len(words)/2]}
	withToken := greedy(120)
	withToken.StopTokenIDs = []int{base.OutputIDs[30]}
	cases := map[string]engine.Request{
		"logprobs":    {Prompt: copyPrompt, Sampling: greedy(120), Logprobs: true, TopLogprobs: 3},
		"max tokens":  {Prompt: copyPrompt, Sampling: greedy(37)},
		"stop string": {Prompt: copyPrompt, Sampling: withStop},
		"stop token":  {Prompt: copyPrompt, Sampling: withToken},
	}
	for name, req := range cases {
		t.Run(name, func(t *testing.T) {
			want, err := plain.Generate(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			got, err := e.Generate(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.OutputIDs, want.OutputIDs) || got.Text != want.Text || got.FinishReason != want.FinishReason || got.MatchedStop != want.MatchedStop {
				t.Fatalf("speculative %v %q (%s, %v)\nplain       %v %q (%s, %v)", got.OutputIDs, got.Text, got.FinishReason, got.MatchedStop,
					want.OutputIDs, want.Text, want.FinishReason, want.MatchedStop)
			}
			if got.SpecAcceptedTokens == 0 {
				t.Errorf("no drafted token was accepted (%d verify steps)", got.SpecVerifySteps)
			}
			if len(got.OutputLogprobs) != len(want.OutputLogprobs) || len(got.TopLogprobs) != len(want.TopLogprobs) {
				t.Fatalf("%d logprobs, %d top lists; want %d, %d", len(got.OutputLogprobs), len(got.TopLogprobs), len(want.OutputLogprobs), len(want.TopLogprobs))
			}
			for i := range want.OutputLogprobs {
				if abs32(got.OutputLogprobs[i]-want.OutputLogprobs[i]) > 1e-4 || got.TopLogprobs[i][0].ID != want.TopLogprobs[i][0].ID {
					t.Fatalf("token %d: logprob %v top %v, want %v top %v", i, got.OutputLogprobs[i], got.TopLogprobs[i], want.OutputLogprobs[i], want.TopLogprobs[i])
				}
			}
		})
	}
}

// TestSpeculativeSampling: seeded sampling with speculation (penalties
// too) is reproducible, accepts drafts, and returns every page; on the
// CPU every tree node is decided on the host. That it draws from the
// target's distribution is sample's chi-square tests (and runner's
// TestAcceptTreeDeviceVerdictsDistribution for the walk).
func TestSpeculativeSampling(t *testing.T) {
	model := shared.Path(t, storiesGGUF)
	e := newEngine(t, engine.Config{ModelPath: model, SpeculativeAlgorithm: "NGRAM", PageSize: 4})
	run := func(seed uint64, penalty float64) *engine.Result {
		p := greedy(100)
		p.Temperature, p.TopP, p.RepetitionPenalty = 0.8, 0.95, penalty
		p.Seed = &seed
		res, err := e.Generate(context.Background(), engine.Request{Prompt: copyPrompt, Sampling: p, Logprobs: true})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for _, penalty := range []float64{1, 1.2} {
		a, b, c := run(3, penalty), run(3, penalty), run(4, penalty)
		if !slices.Equal(a.OutputIDs, b.OutputIDs) {
			t.Errorf("penalty %v: same seed, different outputs", penalty)
		}
		if slices.Equal(a.OutputIDs, c.OutputIDs) {
			t.Errorf("penalty %v: seeds 3 and 4 gave the same output", penalty)
		}
		if a.SpecAcceptedTokens == 0 || len(a.OutputLogprobs) != len(a.OutputIDs) {
			t.Errorf("penalty %v: %d drafts accepted, %d logprobs for %d tokens", penalty, a.SpecAcceptedTokens, len(a.OutputLogprobs), len(a.OutputIDs))
		}
	}
	if st := e.Stats(); st.KVPagesFree+st.KVPagesCached != st.KVPagesTotal {
		t.Errorf("%d free + %d cached of %d pages after all requests finished", st.KVPagesFree, st.KVPagesCached, st.KVPagesTotal)
	}
	if ss := e.SpecStats(); ss.HostVerifiedNodes < ss.VerifySteps || ss.DeviceVerifiedNodes != 0 {
		t.Errorf("spec stats %+v: want every node decided on the host, at least one a verify step", ss)
	}
}

// TestSpeculativeUnderMemoryPressure: drafts never retract a request;
// with a cache too small for every request, requests are retracted and
// re-queued (draft model sequences too) and still match the plain run.
func TestSpeculativeUnderMemoryPressure(t *testing.T) {
	model := shared.Path(t, storiesGGUF)
	roomy := newEngine(t, engine.Config{ModelPath: model})
	want := generateAll(t, roomy, storyPrompts, 60)
	// EAGLE heads too: a re-admitted request's features and the head's
	// entries under its slots start over.
	for _, sc := range append(specAlgorithms(t, model)[:2], eagleConfigs(t, model, []int{0, 2, 3})[:2]...) {
		t.Run(specName(sc), func(t *testing.T) {
			tight := newEngine(t, withSpec(engine.Config{ModelPath: model, KVCacheTokens: 160, PageSize: 4, ContextLength: 128}, sc))
			got := generateAll(t, tight, storyPrompts, 60)
			for i := range storyPrompts {
				if !slices.Equal(got[i].OutputIDs, want[i].OutputIDs) {
					t.Errorf("prompt %q: under pressure %v, roomy %v", storyPrompts[i], got[i].OutputIDs, want[i].OutputIDs)
				}
			}
			st := tight.Stats()
			if st.KVPagesFree+st.KVPagesCached != st.KVPagesTotal || st.Retractions == 0 {
				t.Errorf("%d free + %d cached of %d pages, %d retractions", st.KVPagesFree, st.KVPagesCached, st.KVPagesTotal, st.Retractions)
			}
		})
	}
}

// TestSpeculativeWithImages: requests with an image (M-RoPE positions for
// Qwen2.5-VL, a bidirectional image span for Gemma 3) decode to the same
// greedy tokens with speculation, verified as chains.
func TestSpeculativeWithImages(t *testing.T) {
	for _, tc := range vlmCases {
		dir := shared.Path(t, "models/reference-tiny/"+tc.name)
		var ref reference
		readJSON(t, filepath.Join(dir, "reference.json"), &ref)
		p := greedy(48)
		p.IgnoreEOS = true
		req := engine.Request{InputIDs: ref.InputIDs, Images: []engine.Image{{Pixels: storedPixels(t, dir, tc.grid)}}, Sampling: p}
		base := engine.Config{ModelPath: dir, PageSize: 16, KVCacheTokens: 1024}
		want, err := newEngine(t, base).Generate(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		for _, sc := range specAlgorithms(t, dir)[:2] {
			t.Run(tc.name+"/"+specName(sc), func(t *testing.T) {
				checkSameAsPlain(t, withSpec(base, sc), req, want)
			})
		}
	}
}

// checkSameAsPlain runs req on a speculative engine of cfg, requires the
// plain run's tokens and at least one verified draft, and returns the
// speculation counters.
func checkSameAsPlain(t *testing.T, cfg engine.Config, req engine.Request, want *engine.Result) engine.SpecStats {
	t.Helper()
	e := newEngine(t, cfg)
	got, err := e.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.OutputIDs, want.OutputIDs) {
		t.Fatalf("speculative %v\nplain       %v", got.OutputIDs, want.OutputIDs)
	}
	ss := e.SpecStats()
	if ss.VerifySteps == 0 || got.SpecVerifySteps == 0 {
		t.Fatalf("no draft was verified")
	}
	return ss
}

// TestStandaloneStartupErrors: a STANDALONE draft whose token ids would
// not mean the target's stops engine.New with what to change: another
// vocabulary size, or the same size under another tokenizer; so do the
// flag combinations spec.Config.Normalize refuses.
func TestStandaloneStartupErrors(t *testing.T) {
	stories := shared.Path(t, storiesGGUF)
	gqa := shared.Path(t, "models/reference-tiny/llama_gqa")
	dir := t.TempDir()
	small := `{"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
		"num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 300, "max_position_embeddings": 256,
		"rms_norm_eps": 1e-5, "rope_theta": 10000, "tie_word_embeddings": false}`
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(small), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		cfg  engine.Config
		want string
	}{
		{engine.Config{ModelPath: dir, LoadFormat: "dummy", SpeculativeAlgorithm: "STANDALONE", SpeculativeDraftModelPath: gqa},
			"the draft model's vocabulary has 512 tokens, the target's 300: --speculative-draft-model-path needs a model with the target's tokenizer"},
		// TinyStories' and AIDreams' 512-token vocabularies.
		{engine.Config{ModelPath: stories, SpeculativeAlgorithm: "STANDALONE", SpeculativeDraftModelPath: shared.Path(t, "models/aidreams260K/aidreams260K.bin")},
			"in the draft model's tokenizer but"},
		{engine.Config{ModelPath: stories, SpeculativeAlgorithm: "STANDALONE", SpeculativeDraftModelPath: "/nonexistent/draft"},
			"--speculative-draft-model-path"},
		{engine.Config{ModelPath: stories, SpeculativeAlgorithm: "STANDALONE"}, "needs --speculative-draft-model-path"},
		{engine.Config{ModelPath: stories, SpeculativeAlgorithm: "STANDALONE", SpeculativeDraftModelPath: stories, SpeculativeEagleTopk: -1},
			"--speculative-eagle-topk must be positive"},
		{engine.Config{ModelPath: stories, SpeculativeAlgorithm: "LOOKAHEAD"}, "must be NGRAM, STANDALONE, EAGLE or EAGLE3"},
		{engine.Config{ModelPath: stories, SpeculativeNumDraftTokens: 4}, "need --speculative-algorithm"},
		{engine.Config{ModelPath: stories, SpeculativeAlgorithm: "NGRAM", SpeculativeAttentionMode: "both"}, "--speculative-attention-mode"},
	}
	for _, c := range cases {
		_, err := engine.New(c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s with draft %q: got %v, want an error with %q", c.cfg.SpeculativeAlgorithm, c.cfg.SpeculativeDraftModelPath, err, c.want)
		}
	}
}
