package engine_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/internal/testnet"
)

// TestTPStoriesGolden runs the golden greedy continuation through the
// whole engine split over two CPU ranks, in every checkpoint format and
// with every attention setting.
func TestTPStoriesGolden(t *testing.T) {
	var golden struct {
		OutputIDs []int `json:"output_ids"`
	}
	readJSON(t, shared.Path(t, "models/stories260K/golden_greedy.json"), &golden)
	for _, f := range []struct{ name, model, tok string }{
		{"llama2c", "models/stories260K/stories260K.bin", "models/stories260K/tok512.bin"},
		{"gguf", "models/stories260K/stories260K.gguf", ""},
		{"hf", "models/stories260K-hf", ""},
	} {
		for _, choice := range attentionChoices() {
			t.Run(f.name+"/"+choiceName(choice), func(t *testing.T) {
				cfg := choice
				cfg.ModelPath, cfg.TPSize, cfg.Device, cfg.PageSize = shared.Path(t, f.model), 2, "cpu", 16
				if f.tok != "" {
					cfg.TokenizerPath = shared.Path(t, f.tok)
				}
				e := newEngine(t, cfg)
				if got := e.Settings().TPSize; got != 2 {
					t.Fatalf("Settings().TPSize = %d, want 2", got)
				}
				res, err := e.Generate(context.Background(), engine.Request{InputIDs: []int{1}, Sampling: greedy(len(golden.OutputIDs))})
				if err != nil {
					t.Fatal(err)
				}
				for i, want := range golden.OutputIDs {
					if i >= len(res.OutputIDs) || res.OutputIDs[i] != want {
						t.Fatalf("token %d differs: got %v, want %v", i, res.OutputIDs[i:min(i+5, len(res.OutputIDs))], golden.OutputIDs[i:min(i+5, len(golden.OutputIDs))])
					}
				}
			})
		}
	}
}

// tpModels are the reference-tiny checkpoints of every text architecture
// (the vision-language ones are refused by the sharding plan).
var tpModels = []string{"llama_gqa", "llama_mha_tied", "qwen2_bias", "qwen3_qknorm", "qwen3_yarn", "mistral_swa",
	"phi3", "gemma2_softcap_swa", "gemma3_text", "qwen2_moe", "qwen3_moe", "mixtral", "gpt_oss", "deepseek_v3_mla_moe"}

// TestTPReferenceModels: through the whole engine at TP=2 on the CPU, each
// reference model's prompt log-probabilities are within 1e-4 of TP=1's
// and within 2e-4 of transformers', and greedy decoding matches both
// (checkReference) wherever the reference's margin is clear.
func TestTPReferenceModels(t *testing.T) {
	type tc struct {
		name  string
		chunk int // chunked prefill: later chunks attend over a cached prefix
	}
	var cases []tc
	for _, name := range tpModels {
		cases = append(cases, tc{name, 0})
	}
	cases = append(cases, tc{"llama_gqa", 13}, tc{"mistral_swa", 13})
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s/chunk%d", c.name, c.chunk), func(t *testing.T) {
			dir := shared.Path(t, "models/reference-tiny/"+c.name)
			var ref reference
			readJSON(t, filepath.Join(dir, "reference.json"), &ref)
			compareTP(t, ref, func(tp int) engine.Config {
				return engine.Config{ModelPath: dir, Device: "cpu", TPSize: tp, PageSize: 16, ChunkedPrefillSize: c.chunk}
			}, nil)
		})
	}
}

// compareTP runs ref's prompt through the engines cfg(1) and cfg(2):
// rank 0 of the second holds half the heads, its prompt log-probabilities
// are within 1e-4 of the first's, and it passes checkReference; after,
// when set, checks each engine last.
func compareTP(t *testing.T, ref reference, cfg func(tp int) engine.Config, after func(tp int, e *engine.Engine)) {
	t.Helper()
	heads := map[int]int{}
	logprobs := func(tp int) []float64 {
		e := newEngine(t, cfg(tp))
		heads[tp] = e.ModelConfig().NumHeads
		res, err := e.Generate(context.Background(), engine.Request{InputIDs: ref.InputIDs, Sampling: greedy(0), PromptLogprobs: true})
		if err != nil {
			t.Fatal(err)
		}
		out := make([]float64, len(res.PromptLogprobs)-1)
		for i := range out {
			out[i] = float64(*res.PromptLogprobs[i+1])
		}
		if tp > 1 {
			checkReference(t, e, ref)
		}
		if after != nil {
			after(tp, e)
		}
		return out
	}
	one, two := logprobs(1), logprobs(2)
	if heads[2]*2 != heads[1] {
		t.Fatalf("rank 0 runs %d heads at TP=2, %d at TP=1: the model was not split", heads[2], heads[1])
	}
	worst := 0.0
	for i := range one {
		worst = max(worst, math.Abs(one[i]-two[i]))
	}
	t.Logf("max |Δ prompt logprob| TP=2 vs TP=1 = %.2e", worst)
	if worst > 1e-4 {
		t.Errorf("TP=2 prompt logprobs differ from TP=1 by %.2e (> 1e-4)", worst)
	}
}

// TestTPRefusals: a model whose heads do not split over the ranks is
// refused by engine.New with the reason.
func TestTPRefusals(t *testing.T) {
	dir := shared.Path(t, "models/reference-tiny/llama_gqa") // 8 heads, 2 KV heads
	_, err := engine.New(engine.Config{ModelPath: dir, Device: "cpu", TPSize: 3})
	if err == nil || !strings.Contains(err.Error(), "--tp-size 3: the model's 8 attention heads do not divide evenly among 3 ranks") {
		t.Fatalf("TPSize 3 on 8 heads: err %v", err)
	}
	_, err = engine.New(engine.Config{ModelPath: dir, Device: "cpu", TPSize: -1})
	if err == nil || !strings.Contains(err.Error(), "--tp-size must not be negative") {
		t.Fatalf("TPSize -1: err %v", err)
	}
	for _, cfg := range []engine.Config{
		{ModelPath: dir, Device: "cpu", TPSize: 2, EnableCustomAllReduce: true},
		{ModelPath: dir, Device: "cuda", EnableCustomAllReduce: true},
	} {
		_, err = engine.New(cfg)
		if err == nil || !strings.Contains(err.Error(), "--enable-custom-all-reduce is for --tp-size > 1 on --device cuda") {
			t.Fatalf("custom all-reduce on %s at TP=%d: err %v", cfg.Device, cfg.TPSize, err)
		}
	}
	_, err = engine.New(engine.Config{ModelPath: dir, Device: "cuda", TPSize: 2, EnableCustomAllReduce: true, DisableCustomAllReduce: true})
	if err == nil || !strings.Contains(err.Error(), "--enable-custom-all-reduce and --disable-custom-all-reduce contradict") {
		t.Fatalf("both custom all-reduce flags: err %v", err)
	}
}

// TestTPNodes: two CPU ranks as two nodes joined only by TCP (node 1
// through RunNode, node 0 serving), on every text architecture with a
// sliding window or not: prompt log-probabilities identical to the bit
// with the same two ranks in one process (the star communicator adds as
// the in-process one does), the stories260K golden, and node 1 ending
// cleanly when node 0 closes.
func TestTPNodes(t *testing.T) {
	var golden struct {
		OutputIDs []int `json:"output_ids"`
	}
	readJSON(t, shared.Path(t, "models/stories260K/golden_greedy.json"), &golden)
	for _, name := range []string{"stories260K", "llama_gqa", "mistral_swa", "gemma2_softcap_swa", "qwen3_moe", "deepseek_v3_mla_moe"} {
		t.Run(name, func(t *testing.T) {
			var dir string
			if name == "stories260K" {
				dir = shared.Path(t, "models/stories260K/stories260K.gguf")
			} else {
				dir = shared.Path(t, "models/reference-tiny/"+name)
			}
			addr := testnet.FreeAddr(t)
			cfg := engine.Config{ModelPath: dir, Device: "cpu", TPSize: 2, NNodes: 2, DistInitAddr: addr, PageSize: 16, ChunkedPrefillSize: 13,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
			node1 := make(chan error, 1)
			go func() {
				c := cfg
				c.NodeRank = 1
				err := engine.RunNode(context.Background(), c)
				if err != nil {
					t.Logf("node 1: %v", err)
				}
				node1 <- err
			}()
			e0, err := engine.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			one := newEngine(t, engine.Config{ModelPath: dir, Device: "cpu", TPSize: 2, PageSize: 16, ChunkedPrefillSize: 13})
			if name == "stories260K" {
				res, err := e0.Generate(context.Background(), engine.Request{InputIDs: []int{1}, Sampling: greedy(len(golden.OutputIDs))})
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(res.OutputIDs, golden.OutputIDs) {
					t.Errorf("two nodes from BOS: %d tokens differing from run.c's golden", len(res.OutputIDs))
				}
			} else {
				var ref reference
				readJSON(t, filepath.Join(dir, "reference.json"), &ref)
				req := engine.Request{InputIDs: ref.InputIDs, Sampling: greedy(8), PromptLogprobs: true}
				a, err := e0.Generate(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				b, err := one.Generate(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				for i := 1; i < len(b.PromptLogprobs); i++ {
					if *a.PromptLogprobs[i] != *b.PromptLogprobs[i] {
						t.Fatalf("prompt logprob %d: %v on two nodes, %v in one process", i, *a.PromptLogprobs[i], *b.PromptLogprobs[i])
					}
				}
				if !slices.Equal(a.OutputIDs, b.OutputIDs) {
					t.Errorf("greedy: %v on two nodes, %v in one process", a.OutputIDs, b.OutputIDs)
				}
			}
			e0.Close()
			select {
			case err := <-node1:
				if err != nil {
					t.Errorf("node 1 after node 0 closed: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("node 1 still runs after node 0 closed")
			}
		})
	}
}

// TestTPNodeLeaves: when node 1 goes away between requests, node 0's
// engine stops with the reason instead of waiting for the next step, and
// refuses requests.
func TestTPNodeLeaves(t *testing.T) {
	addr := testnet.FreeAddr(t)
	cfg := engine.Config{ModelPath: shared.Path(t, "models/stories260K/stories260K.gguf"), Device: "cpu", TPSize: 2, NNodes: 2,
		DistInitAddr: addr, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx, stopNode1 := context.WithCancel(context.Background())
	node1 := make(chan error, 1)
	go func() {
		c := cfg
		c.NodeRank = 1
		node1 <- engine.RunNode(ctx, c)
	}()
	e := newEngine(t, cfg)
	if _, err := e.Generate(context.Background(), engine.Request{InputIDs: []int{1}, Sampling: greedy(4)}); err != nil {
		t.Fatal(err)
	}
	stopNode1()
	if err := <-node1; !errors.Is(err, context.Canceled) {
		t.Errorf("node 1 stopped by its context: %v", err)
	}
	select {
	case <-e.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("node 0's engine still runs after node 1 left")
	}
	var rankErr *engine.RankError
	if err := e.Err(); !errors.As(err, &rankErr) || !strings.Contains(err.Error(), "node 1") {
		t.Fatalf("Err() = %v, want a RankError naming node 1", err)
	}
	if _, err := e.Generate(context.Background(), engine.Request{InputIDs: []int{1}, Sampling: greedy(4)}); !errors.As(err, &rankErr) {
		t.Fatalf("a request after node 1 left: %v", err)
	}
}

// TestTPSpeculative: n-gram speculative decoding over two ranks keeps the
// golden greedy output; accepted drafts' KV moves on every rank's pool.
func TestTPSpeculative(t *testing.T) {
	var golden struct {
		OutputIDs []int `json:"output_ids"`
	}
	readJSON(t, shared.Path(t, "models/stories260K/golden_greedy.json"), &golden)
	e := newEngine(t, engine.Config{ModelPath: shared.Path(t, "models/stories260K/stories260K.gguf"), Device: "cpu", TPSize: 2,
		SpeculativeAlgorithm: "NGRAM"})
	res, err := e.Generate(context.Background(), engine.Request{InputIDs: []int{1}, Sampling: greedy(len(golden.OutputIDs))})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.OutputIDs, golden.OutputIDs) {
		t.Fatalf("NGRAM at TP=2 left run.c's greedy output")
	}
	if st := e.SpecStats(); st.AcceptedTokens == 0 {
		t.Fatalf("no draft was accepted (%+v): the test shows nothing", st)
	}
}
