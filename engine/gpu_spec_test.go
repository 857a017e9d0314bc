package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/server"
)

// gpuSpecTarget is a model the GPU speculative tests decode, with its
// requests (greedy, maxNew tokens each, one batch).
type gpuSpecTarget struct {
	name, path string
	reqs       []engine.Request
	aux        []int // EAGLE-3 capture layers (stories260K's 5 layers: SGLang's default picks layer 1 twice)
}

func gpuSpecTargets(t *testing.T) []gpuSpecTarget {
	gqa := shared.Path(t, "models/reference-tiny/llama_gqa")
	var ref reference
	readJSON(t, filepath.Join(gqa, "reference.json"), &ref)
	stories := []engine.Request{{Prompt: copyPrompt, Sampling: greedy(256)}, {Prompt: "Lily saw a big dog", Sampling: greedy(256)}}
	p := greedy(64)
	p.IgnoreEOS = true
	return []gpuSpecTarget{
		{"stories260K", shared.Path(t, storiesGGUF), stories, []int{0, 2, 3}},
		{"llama_gqa", gqa, []engine.Request{{InputIDs: ref.InputIDs, Sampling: p}}, nil},
	}
}

// bf16Tie is the widest gap, in nats between the two tokens' log-probabilities
// under the plain run, at which a bf16 speculative run may part from
// the plain one: a verify step computes its rows in one GEMM where a
// decode step computes one row, and with activations rounded to bf16
// between layers the two orders can round a value one bf16 step apart.
const bf16Tie = 0.1

// checkGPUSpec requires got to equal want request by request; with
// bf16 weights (tie true) a request may part from want only where the
// plain engine finds the two tokens within bf16Tie of each other.
func checkGPUSpec(t *testing.T, plain *engine.Engine, reqs []engine.Request, got, want []*engine.Result, tie bool) {
	t.Helper()
	for i := range reqs {
		g, w := got[i].OutputIDs, want[i].OutputIDs
		if slices.Equal(g, w) {
			continue
		}
		at := 0
		for at < min(len(g), len(w)) && g[at] == w[at] {
			at++
		}
		if !tie || at == min(len(g), len(w)) {
			t.Fatalf("request %d parts from the plain output at token %d:\nspeculative %v\nplain       %v", i, at, g, w)
		}
		gap := logprobGap(t, plain, slices.Concat(want[i].PromptIDs, w[:at]), g[at], w[at])
		t.Logf("bf16: request %d parts from the plain output at token %d, where the plain run's log-probabilities of %d and %d are %.3g apart",
			i, at, g[at], w[at], gap)
		if gap > bf16Tie {
			t.Fatalf("request %d parts from the plain output at token %d (%d for %d), %.3g nats from a tie (bound %g):\nspeculative %v\nplain       %v",
				i, at, g[at], w[at], gap, bf16Tie, g, w)
		}
	}
}

// logprobGap is |log p(a) − log p(b)| for the token after ids, under e
// (both must be among its 20 most likely tokens, else +Inf).
func logprobGap(t *testing.T, e *engine.Engine, ids []int, a, b int) float64 {
	t.Helper()
	res, err := e.Generate(context.Background(), engine.Request{InputIDs: ids, Sampling: greedy(1), TopLogprobs: 20})
	if err != nil {
		t.Fatal(err)
	}
	lp := map[int]float64{}
	for _, x := range res.TopLogprobs[0] {
		lp[x.ID] = float64(x.Logprob)
	}
	la, okA := lp[a]
	lb, okB := lp[b]
	if !okA || !okB {
		return math.Inf(1)
	}
	return math.Abs(la - lb)
}

// TestGPUSpeculativeGreedyIdentity: on the GPU, with the flash and splitkv
// backends (and, in float32, the hybrid of the two verifying on the decode
// side: --speculative-attention-mode decode) at page sizes 1 and 16, NGRAM and a STANDALONE draft model (the
// target itself, as a chain and as a tree) give the plain greedy output
// token for token in float32 (stories260K, 256 tokens, two requests in a
// batch; llama_gqa, 64), with the prompt prefilled in chunks and again
// from a warm radix cache; every KV page comes back. In bf16 a request
// may part only at a near-tie (checkGPUSpec). The draft = target chain
// accepts at least 90% of its drafts: the draft computes a token in a
// decode step and the target in a verify step, whose float orders may
// pick different argmaxes at a near-tie.
func TestGPUSpeculativeGreedyIdentity(t *testing.T) {
	needGPU(t)
	choices := []engine.Config{{AttentionBackend: "flash"}, {AttentionBackend: "splitkv"},
		{PrefillBackend: "flash", DecodeBackend: "splitkv", SpeculativeAttentionMode: "decode"}}
	for _, tg := range gpuSpecTargets(t) {
		for _, choice := range choices {
			for _, pageSize := range []int{1, 16} {
				for _, dtype := range []string{"float32", "bfloat16"} {
					if choice.AttentionBackend == "" && dtype != "float32" {
						continue
					}
					base := choice
					base.ModelPath, base.Device, base.DType, base.PageSize = tg.path, "cuda", dtype, pageSize
					base.ChunkedPrefillSize, base.KVCacheTokens, base.MaxRunningRequests, base.ContextLength = 13, 4096, 4, 512
					// One plain engine per group, closed with it.
					t.Run(fmt.Sprintf("%s/%s/page%d/%s", tg.name, choiceName(choice), pageSize, dtype), func(t *testing.T) {
						plain := newEngine(t, base)
						want := generateReqs(t, plain, tg.reqs)
						for _, sc := range specAlgorithms(t, tg.path) {
							t.Run(specName(sc), func(t *testing.T) {
								e := newEngine(t, withSpec(base, sc))
								for round := range 2 { // the second round starts from a warm radix cache
									got := generateReqs(t, e, tg.reqs)
									checkGPUSpec(t, plain, tg.reqs, got, want, dtype == "bfloat16")
									if round == 1 && got[0].CachedTokens == 0 {
										t.Errorf("round 2 found nothing in the radix cache")
									}
								}
								checkSpecStats(t, e, sc)
							})
						}
					})
				}
			}
		}
	}
}

// checkSpecStats: drafts were verified and accepted, the draft = target
// chain accepted nearly all, and every KV page came back.
func checkSpecStats(t *testing.T, e *engine.Engine, sc engine.Config) {
	t.Helper()
	st, ss := e.Stats(), e.SpecStats()
	if ss.VerifySteps == 0 || ss.DraftedTokens == 0 {
		t.Fatalf("no drafts verified: %+v", ss)
	}
	if sc.SpeculativeAlgorithm == "STANDALONE" && sc.SpeculativeEagleTopk == 1 && ss.AcceptedTokens < ss.DraftedTokens*9/10 {
		t.Errorf("draft = target accepted %d of %d drafted tokens", ss.AcceptedTokens, ss.DraftedTokens)
	}
	if st.KVPagesFree+st.KVPagesCached != st.KVPagesTotal {
		t.Errorf("%d free + %d cached of %d pages after all requests finished", st.KVPagesFree, st.KVPagesCached, st.KVPagesTotal)
	}
	t.Logf("accept length %.2f over %d verify steps (%d of %d drafts accepted)", ss.AcceptLength(), ss.VerifySteps, ss.AcceptedTokens, ss.DraftedTokens)
}

// TestGPUEagleGreedyIdentity: random-weight EAGLE and EAGLE-3 heads in
// the real file layout, run on the GPU beside their target, keep the
// plain greedy output as TestGPUSpeculativeGreedyIdentity states it
// (float32 token for token, bf16 up to a near-tie), for flash and splitkv
// at page sizes 1 and 16; llama_gqa also takes a tree of 95 drafts, wide
// enough that a random head's drafts are accepted now and then, which
// takes the accepted paths' KV compaction on the device. Random heads'
// accept lengths say nothing of trained ones': logged, not checked.
func TestGPUEagleGreedyIdentity(t *testing.T) {
	needGPU(t)
	for _, tg := range gpuSpecTargets(t) {
		heads := eagleConfigs(t, tg.path, tg.aux)
		if tg.name == "stories260K" {
			heads = heads[:2]
		}
		for _, backend := range []string{"flash", "splitkv"} {
			for _, pageSize := range []int{1, 16} {
				for _, dtype := range []string{"float32", "bfloat16"} {
					base := engine.Config{ModelPath: tg.path, Device: "cuda", DType: dtype, AttentionBackend: backend, PageSize: pageSize,
						ChunkedPrefillSize: 13, KVCacheTokens: 4096, MaxRunningRequests: 4, ContextLength: 512}
					t.Run(fmt.Sprintf("%s/%s/page%d/%s", tg.name, backend, pageSize, dtype), func(t *testing.T) {
						plain := newEngine(t, base)
						want := generateReqs(t, plain, tg.reqs)
						for _, sc := range heads {
							t.Run(fmt.Sprintf("%s-steps%d", specName(sc), sc.SpeculativeNumSteps), func(t *testing.T) {
								e := newEngine(t, withSpec(base, sc))
								for range 2 { // the second round starts from a warm radix cache
									got := generateReqs(t, e, tg.reqs)
									checkGPUSpec(t, plain, tg.reqs, got, want, dtype == "bfloat16")
								}
								ss := e.SpecStats()
								if sc.SpeculativeEagleTopk == 64 && ss.AcceptedTokens == 0 {
									t.Errorf("a tree of 95 drafts was never accepted from: %+v", ss)
								}
								checkSpecStats(t, e, sc)
							})
						}
					})
				}
			}
		}
	}
}

// TestGPUSpeculativeHostVerify: requests whose trees are verified on the
// host from device logits keep their outputs. Greedy with logprobs (the
// rows come to the host for the logprobs) equals the plain run, logprobs
// within 1e-4; at temperature 1e-4, seeded and with logprobs (which keep
// its rows on the host), the rejection-sampling path
// (sample.Sampler.Verify) draws the argmax wherever the two best tokens
// are more than ~2e-3 nats apart, so it gives the plain greedy output.
// stories260K, float32, NGRAM and STANDALONE.
func TestGPUSpeculativeHostVerify(t *testing.T) {
	needGPU(t)
	model := shared.Path(t, storiesGGUF)
	base := engine.Config{ModelPath: model, Device: "cuda", DType: "float32", AttentionBackend: "flash", PageSize: 16,
		KVCacheTokens: 4096, MaxRunningRequests: 4, ContextLength: 512}
	seed := uint64(7)
	cold := greedy(256)
	cold.Temperature, cold.Seed = 1e-4, &seed
	reqs := []engine.Request{
		{Prompt: copyPrompt, Sampling: greedy(256), Logprobs: true},
		{Prompt: copyPrompt, Sampling: cold, Logprobs: true},
	}
	plain := generateReqs(t, newEngine(t, base), []engine.Request{{Prompt: copyPrompt, Sampling: greedy(256), Logprobs: true}})[0]
	for _, sc := range specAlgorithms(t, model)[:2] {
		t.Run(specName(sc), func(t *testing.T) {
			e := newEngine(t, withSpec(base, sc))
			got := generateReqs(t, e, reqs)
			for i, g := range got {
				if !slices.Equal(g.OutputIDs, plain.OutputIDs) {
					t.Fatalf("request %d (temperature %g, logprobs %v):\nspeculative %v\nplain       %v", i, reqs[i].Sampling.Temperature, reqs[i].Logprobs, g.OutputIDs, plain.OutputIDs)
				}
				if g.SpecVerifySteps == 0 {
					t.Errorf("request %d verified no drafts", i)
				}
			}
			for k, lp := range got[0].OutputLogprobs {
				if d := math.Abs(float64(lp - plain.OutputLogprobs[k])); d > 1e-4 {
					t.Fatalf("logprob of token %d: speculative %g, plain %g", k, lp, plain.OutputLogprobs[k])
				}
			}
		})
	}
}

// TestGPUSpeculativeDeviceVerify: sampled requests (no logprobs, no
// penalties) have every node of their trees decided on the device
// (device.SpecVerifier, the spec_verify kernel): a STANDALONE self-draft
// run (draft = target, chains and top-2 trees) at temperature > 0
// completes with device-verified nodes and none verified on the host,
// accepts drafts, gives every page back, and at temperature 1e-4 gives
// the plain greedy output (the argmax wins wherever the two best tokens
// are more than ~2e-3 nats apart, as on the host). A seeded request
// alone draws the same output on two engines. stories260K, float32,
// flash, page size 16.
func TestGPUSpeculativeDeviceVerify(t *testing.T) {
	needGPU(t)
	model := shared.Path(t, storiesGGUF)
	base := engine.Config{ModelPath: model, Device: "cuda", DType: "float32", AttentionBackend: "flash", PageSize: 16,
		KVCacheTokens: 4096, MaxRunningRequests: 4, ContextLength: 512}
	seeds := []uint64{7, 8, 9}
	cold := greedy(200)
	cold.Temperature, cold.Seed = 1e-4, &seeds[0]
	warm := greedy(200)
	warm.Temperature, warm.TopP, warm.Seed = 0.8, 0.95, &seeds[1]
	hot := greedy(200)
	hot.Temperature, hot.TopK, hot.Seed = 1, 40, &seeds[2]
	hot.IgnoreEOS = true
	reqs := []engine.Request{
		{Prompt: copyPrompt, Sampling: cold},
		{Prompt: copyPrompt, Sampling: warm},
		{Prompt: "Lily saw a big dog", Sampling: hot},
	}
	plain := generateReqs(t, newEngine(t, base), []engine.Request{{Prompt: copyPrompt, Sampling: greedy(200)}})[0]
	for _, sc := range specAlgorithms(t, model)[1:] {
		t.Run(specName(sc), func(t *testing.T) {
			e := newEngine(t, withSpec(base, sc))
			got := generateReqs(t, e, reqs)
			if !slices.Equal(got[0].OutputIDs, plain.OutputIDs) {
				t.Errorf("temperature 1e-4:\nspeculative %v\nplain       %v", got[0].OutputIDs, plain.OutputIDs)
			}
			for i, g := range got {
				if len(g.OutputIDs) == 0 || g.SpecVerifySteps == 0 {
					t.Errorf("request %d: %d tokens, %d verify steps", i, len(g.OutputIDs), g.SpecVerifySteps)
				}
			}
			if n := len(got[2].OutputIDs); n != 200 {
				t.Errorf("request 2 (ignore_eos) emitted %d tokens, want 200", n)
			}
			ss := e.SpecStats()
			t.Logf("%+v, accept length %.2f", ss, ss.AcceptLength())
			if ss.DeviceVerifiedNodes < ss.VerifySteps || ss.HostVerifiedNodes != 0 || ss.AcceptedTokens == 0 {
				t.Errorf("spec stats %+v: want every node verified on the device (at least one a step), drafts accepted", ss)
			}
			if st := e.Stats(); st.KVPagesFree+st.KVPagesCached != st.KVPagesTotal {
				t.Errorf("%d free + %d cached of %d pages after all requests finished", st.KVPagesFree, st.KVPagesCached, st.KVPagesTotal)
			}
			// Alone on two engines (the same shapes step for step, so the
			// same logits and trees), a seeded request draws the same.
			one := generateReqs(t, newEngine(t, withSpec(base, sc)), reqs[1:2])[0]
			two := generateReqs(t, newEngine(t, withSpec(base, sc)), reqs[1:2])[0]
			if !slices.Equal(one.OutputIDs, two.OutputIDs) {
				t.Errorf("seeded request on two engines:\n%v\n%v", one.OutputIDs, two.OutputIDs)
			}
		})
	}
}

// TestGPUTPSpeculative: at --tp-size 2 on two GPUs (every rank's KV
// compacted on its own device), NGRAM and a STANDALONE draft chain give
// the one-GPU plain greedy output (stories260K, float32, 256 tokens).
func TestGPUTPSpeculative(t *testing.T) {
	needGPUs(t, 2)
	model := shared.Path(t, storiesGGUF)
	reqs := []engine.Request{{Prompt: copyPrompt, Sampling: greedy(256)}, {Prompt: "Lily saw a big dog", Sampling: greedy(256)}}
	forGPUStories(t, model, func(t *testing.T, base engine.Config) {
		want := generateReqs(t, newEngine(t, base), reqs)
		for _, sc := range specAlgorithms(t, model)[:2] {
			t.Run(specName(sc), func(t *testing.T) {
				cfg := withSpec(base, sc)
				cfg.TPSize = 2
				e := newEngine(t, cfg)
				checkGPUSpec(t, nil, reqs, generateReqs(t, e, reqs), want, false)
				checkSpecStats(t, e, sc)
			})
		}
	})
}

// forGPUStories runs fn as a subtest per CUDA backend (flash, splitkv)
// and page size (1, 16) with a float32 engine configuration of model.
func forGPUStories(t *testing.T, model string, fn func(t *testing.T, base engine.Config)) {
	for _, backend := range []string{"flash", "splitkv"} {
		for _, pageSize := range []int{1, 16} {
			base := engine.Config{ModelPath: model, Device: "cuda", DType: "float32", AttentionBackend: backend, PageSize: pageSize,
				KVCacheTokens: 4096, MaxRunningRequests: 4, ContextLength: 512}
			t.Run(fmt.Sprintf("%s/page%d", backend, pageSize), func(t *testing.T) { fn(t, base) })
		}
	}
}

// TestGPUVerifyGraphs: verify steps replayed from CUDA graphs (trees
// padded to --speculative-num-draft-tokens, three requests padded to a
// batch of four) give the plain greedy output in float32, token for token,
// and the same output as with --disable-cuda-graph; they are replayed, never
// fall back to eager, and are captured a bounded number of times. So are
// the drafters' steps (runner.Draft): a STANDALONE draft model's chain
// levels as decode graphs, its tree levels and an EAGLE-3 head's as
// draft-extend graphs, captured, then replayed more often, never eager.
// NGRAM, STANDALONE chains and trees and a random-weight EAGLE-3 tree,
// flash and splitkv, page sizes 1 and 16, stories260K, 200 tokens.
func TestGPUVerifyGraphs(t *testing.T) {
	needGPU(t)
	model := shared.Path(t, storiesGGUF)
	p := greedy(200)
	reqs := []engine.Request{{Prompt: copyPrompt, Sampling: p}, {Prompt: "Lily saw a big dog", Sampling: p}, {Prompt: "Once upon a time", Sampling: p}}
	drafters := append(specAlgorithms(t, model), eagleConfigs(t, model, []int{0, 2, 3})[0])
	forGPUStories(t, model, func(t *testing.T, base engine.Config) {
		want := generateReqs(t, newEngine(t, base), reqs)
		for _, sc := range drafters {
			t.Run(specName(sc), func(t *testing.T) {
				cfg := withSpec(base, sc)
				cfg.DisableCUDAGraph = true
				eager := generateReqs(t, newEngine(t, cfg), reqs)
				cfg.DisableCUDAGraph = false
				e := newEngine(t, cfg)
				got := generateReqs(t, e, reqs)
				checkGPUSpec(t, nil, reqs, got, want, false)
				checkGPUSpec(t, nil, reqs, eager, want, false)
				st := e.Stats()
				t.Logf("verify graphs: %d replays, %d captures, %d eager; decode graphs: %d replays", st.VerifyGraphReplays,
					st.VerifyGraphCaptures, st.VerifyGraphEager, st.GraphReplays)
				if st.VerifyGraphReplays == 0 || st.VerifyGraphEager != 0 {
					t.Errorf("verify graphs: %d replays, %d eager; want replays and no eager step", st.VerifyGraphReplays, st.VerifyGraphEager)
				}
				// Batch sizes 4, 2 and 1, each re-captured as the longest
				// sequence crosses a power of two (the attention split) or the
				// mask comes and goes.
				if st.VerifyGraphCaptures > 3*8 {
					t.Errorf("%d verify graph captures", st.VerifyGraphCaptures)
				}
				t.Logf("draft graphs: %d replays, %d captures, %d eager", st.DraftGraphReplays, st.DraftGraphCaptures, st.DraftGraphEager)
				if sc.SpeculativeAlgorithm != "NGRAM" && (st.DraftGraphCaptures == 0 || st.DraftGraphReplays <= st.DraftGraphCaptures || st.DraftGraphEager != 0) {
					t.Errorf("draft graphs: %d replays, %d captures, %d eager; want captures, more replays, no eager step",
						st.DraftGraphReplays, st.DraftGraphCaptures, st.DraftGraphEager)
				}
				checkSpecStats(t, e, sc)
			})
		}
	})
}

// TestGPUTimeSteps: on the GPU every timed step of Engine.TimeSteps (the
// steps gosling bench speculative --verify-steps times) replays a CUDA
// graph, decode and verify alike, chains and trees, at batch sizes 1 and
// 3 (padded to 4), and the synthetic sequences give their pages back:
// NGRAM and STANDALONE (draft = target) engines, flash and splitkv, in
// float32 and in bf16 over a bf16 KV cache (whose verify steps round q
// to bf16 in the forward's scratch). Times are logged, not checked.
func TestGPUTimeSteps(t *testing.T) {
	needGPU(t)
	model := shared.Path(t, storiesGGUF)
	for _, backend := range []string{"flash", "splitkv"} {
		for _, dtype := range []string{"float32", "bfloat16"} {
			for _, sc := range []engine.Config{{SpeculativeAlgorithm: "NGRAM"}, {SpeculativeAlgorithm: "STANDALONE", SpeculativeDraftModelPath: model}} {
				t.Run(fmt.Sprintf("%s/%s/%s", backend, dtype, sc.SpeculativeAlgorithm), func(t *testing.T) {
					e := newEngine(t, withSpec(engine.Config{ModelPath: model, Device: "cuda", DType: dtype, AttentionBackend: backend, PageSize: 16,
						KVCacheTokens: 4096, MaxRunningRequests: 4, ContextLength: 512}, sc))
					steps, err := e.TimeSteps(context.Background(), engine.StepTimingOptions{Batches: []int{1, 3}, DraftTokens: []int{4, 8}, Context: 200, Repeat: 3})
					if err != nil {
						t.Fatal(err)
					}
					for _, s := range steps {
						t.Logf("batch %d %s %d: median %.3f ms, %d of %d from a graph", s.Batch, s.Shape, s.DraftTokens, 1e3*s.Median(), s.Graphs, len(s.Seconds))
						if s.Graphs != len(s.Seconds) {
							t.Errorf("batch %d %s of %d tokens: %d of %d timed steps replayed a graph, %d captured one, %d ran eagerly (%s)",
								s.Batch, s.Shape, s.DraftTokens, s.Graphs, len(s.Seconds), s.Captures, s.Eager, s.EagerReason)
						}
					}
					if st := e.Stats(); st.KVPagesFree != st.KVPagesTotal || st.VerifyGraphEager != 0 {
						t.Errorf("%d of %d pages free, %d eager verify steps (%s)", st.KVPagesFree, st.KVPagesTotal, st.VerifyGraphEager, st.VerifyGraphEagerReason)
					}
				})
			}
		}
	}
}

// TestGPUVerifyGraphsBF16: in bf16 over a bf16 KV cache, the serving
// path's verify steps replay CUDA graphs and never run eagerly — a
// verify step's float32 q is rounded to bf16 for the tensor-core kernels
// in scratch the forward's arena gives out in the same order every time,
// so a capture matches its dry run — and so do the drafters' steps; the
// greedy output is the plain bf16 run's up to a near-tie
// (checkGPUSpec). STANDALONE with the draft = the target (its default
// chain, as bench one-batch runs it, and a tree) and a random-weight
// EAGLE-3 tree, flash and splitkv, page sizes 1 and 16, stories260K, three
// requests (padded to four). The same counts come out of the HTTP
// server's /get_server_info and /metrics.
func TestGPUVerifyGraphsBF16(t *testing.T) {
	needGPU(t)
	model := shared.Path(t, storiesGGUF)
	p := greedy(200)
	reqs := []engine.Request{{Prompt: copyPrompt, Sampling: p}, {Prompt: "Lily saw a big dog", Sampling: p}, {Prompt: "Once upon a time", Sampling: p}}
	drafters := []engine.Config{{SpeculativeAlgorithm: "STANDALONE", SpeculativeDraftModelPath: model}, specAlgorithms(t, model)[2],
		eagleConfigs(t, model, []int{0, 2, 3})[0]}
	for _, backend := range []string{"flash", "splitkv"} {
		for _, pageSize := range []int{1, 16} {
			base := engine.Config{ModelPath: model, Device: "cuda", DType: "bfloat16", AttentionBackend: backend, PageSize: pageSize,
				KVCacheTokens: 4096, MaxRunningRequests: 4, ContextLength: 512}
			t.Run(fmt.Sprintf("%s/page%d", backend, pageSize), func(t *testing.T) {
				plain := newEngine(t, base)
				want := generateReqs(t, plain, reqs)
				for _, sc := range drafters {
					t.Run(fmt.Sprintf("%s-steps%d", specName(sc), sc.SpeculativeNumSteps), func(t *testing.T) {
						e := newEngine(t, withSpec(base, sc))
						checkGPUSpec(t, plain, reqs, generateReqs(t, e, reqs), want, true)
						st := e.Stats()
						t.Logf("verify graphs: %d replays, %d captures, %d eager; draft graphs: %d replays, %d captures, %d eager", st.VerifyGraphReplays,
							st.VerifyGraphCaptures, st.VerifyGraphEager, st.DraftGraphReplays, st.DraftGraphCaptures, st.DraftGraphEager)
						if st.VerifyGraphReplays == 0 || st.VerifyGraphEager != 0 {
							t.Errorf("verify graphs: %d replays, %d eager (%s); want replays and no eager step", st.VerifyGraphReplays, st.VerifyGraphEager, st.VerifyGraphEagerReason)
						}
						if st.DraftGraphCaptures == 0 || st.DraftGraphReplays <= st.DraftGraphCaptures || st.DraftGraphEager != 0 {
							t.Errorf("draft graphs: %d replays, %d captures, %d eager (%s); want captures, more replays, no eager step",
								st.DraftGraphReplays, st.DraftGraphCaptures, st.DraftGraphEager, st.DraftGraphEagerReason)
						}
						checkSpecStats(t, e, sc)
						checkServedGraphSteps(t, e)
					})
				}
			})
		}
	}
}

// checkServedGraphSteps: an HTTP server over e reports e's steps by
// graph path in /get_server_info (internal_states[0].cuda_graph_steps)
// and in /metrics (gosling:cuda_graph_steps_total), e being idle.
func checkServedGraphSteps(t *testing.T, e *engine.Engine) {
	t.Helper()
	srv, err := server.New(e, server.Options{ServedModelName: "m"})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	get := func(path string) []byte {
		res, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		if err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %v", path, res.StatusCode, err)
		}
		return body
	}
	var info struct {
		States []struct {
			Graphs map[string]engine.GraphCounts `json:"cuda_graph_steps"`
		} `json:"internal_states"`
	}
	if err := json.Unmarshal(get("/get_server_info"), &info); err != nil || len(info.States) == 0 {
		t.Fatalf("/get_server_info: %v", err)
	}
	metrics := string(get("/metrics"))
	var want [3]engine.GraphCounts
	want[0], want[1], want[2] = e.Stats().GraphPaths()
	for i, kind := range []string{"decode", "verify", "draft"} {
		if got := info.States[0].Graphs[kind]; got != want[i] {
			t.Errorf("/get_server_info %s steps by graph path %+v, the engine's %+v", kind, got, want[i])
		}
		for path, n := range map[string]int{"replayed": want[i].Replays, "captured": want[i].Captures, "eager": want[i].Eager} {
			series := fmt.Sprintf("gosling:cuda_graph_steps_total{model_name=%q,path=%q,step=%q} %d\n", "m", path, kind, n)
			if !strings.Contains(metrics, series) {
				t.Errorf("/metrics has no %q", series)
			}
		}
	}
}
