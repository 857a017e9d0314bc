package parallel_test

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/attention/native"
	"github.com/gosling-ai/gosling/device/cpu"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/model/registry"
	"github.com/gosling-ai/gosling/parallel"
	"github.com/gosling-ai/gosling/sample"
	"github.com/gosling-ai/gosling/tensor"
)

// textModels are the reference-tiny checkpoints of every text
// architecture gosling runs (the vision-language ones are refused by
// NewPlan, see TestPlanRefusals).
var textModels = []string{"llama_gqa", "llama_mha_tied", "qwen2_bias", "qwen3_qknorm", "qwen3_yarn", "mistral_swa",
	"phi3", "gemma2_softcap_swa", "gemma3_text", "qwen2_moe", "qwen3_moe", "mixtral", "gpt_oss", "deepseek_v3_mla_moe"}

type reference struct {
	InputIDs        []int32   `json:"input_ids"`
	PromptLogprobs  []float64 `json:"prompt_logprobs"`
	GreedyPromptLen int       `json:"greedy_prompt_len"`
	GreedyIDs       []int32   `json:"greedy_ids"`
}

func readReference(t *testing.T, dir string) reference {
	t.Helper()
	data, err := os.ReadFile(dir + "/reference.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref reference
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	return ref
}

// singleRank is the unsharded model run directly, without the
// tensor-parallel ops: the TP=1 baseline.
func singleRank(t *testing.T, ck *model.Checkpoint, w *cpu.Workers, ids []int32) tensor.T {
	t.Helper()
	m, err := registry.Build(ck, cpu.NewOps(w))
	if err != nil {
		t.Fatal(err)
	}
	n := len(ids)
	kv, err := kvcache.NewCache(m.KVSpec(), 1, n, 1, n)
	if err != nil {
		t.Fatal(err)
	}
	seq, _ := kv.NewSeq()
	if ok, err := kv.Grow(seq, n); !ok || err != nil {
		t.Fatal(err)
	}
	kv.PrepareSWA(seq, n)
	attn, err := native.Entry.New(attention.Options{Device: "cpu", KV: kv, Runtime: cpu.NewRuntime(w), Layers: m.AttentionLayers()})
	if err != nil {
		t.Fatal(err)
	}
	b := &forward.Batch{Mode: forward.Extend, KV: kv, ReqRows: []int32{int32(seq.Row)}, PrefixLens: []int32{0}, ExtendLens: []int32{int32(n)}}
	slots := kv.Table.Row(seq.Row)
	for i, id := range ids {
		b.InputIDs, b.Positions = append(b.InputIDs, id), append(b.Positions, int32(i))
		b.OutSlots, b.LogitRows = append(b.OutSlots, slots[i]), append(b.LogitRows, int32(i))
	}
	if err := b.Finalize(); err != nil {
		t.Fatal(err)
	}
	if err := attn.Plan(b); err != nil {
		t.Fatal(err)
	}
	out, err := m.Forward(b, attn)
	if err != nil {
		t.Fatal(err)
	}
	return tensor.From(slices.Clone(out.HostData()), out.Shape...)
}

// promptLogprobs is log p(ids[i+1] | ids[:i+1]) from logits of every row.
func promptLogprobs(logits tensor.T, ids []int32) []float64 {
	lp := make([]float32, logits.Cols())
	out := make([]float64, len(ids)-1)
	for i := range out {
		sample.LogSoftmax(logits.Row(i), lp)
		out[i] = float64(lp[ids[i+1]])
	}
	return out
}

func argmax(x []float32) int32 {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return int32(best)
}

func maxDelta(a, b []float64) float64 {
	worst := 0.0
	for i := range a {
		worst = max(worst, math.Abs(a[i]-b[i]))
	}
	return worst
}

// greedy extends the group's sequence by prompt, then decodes n tokens
// one forward each (decode batches, the KV cache read back).
func greedy(t *testing.T, g *parallel.Group, prompt []int32, n int) []int32 {
	t.Helper()
	g.Reset()
	logits, err := g.Extend(prompt, false)
	if err != nil {
		t.Fatal(err)
	}
	var out []int32
	for len(out) < n {
		next := argmax(logits.Row(0))
		out = append(out, next)
		if logits, err = g.Extend([]int32{next}, false); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestTPMatchesSingleRank: every reference-tiny text model split over 2
// and 4 in-process ranks (where its head counts allow; where they do not,
// NewPlan says why) gives prompt log-probabilities within 1e-4 of the
// unsharded model and within 2e-4 of transformers, and transformers'
// greedy continuation token for token.
func TestTPMatchesSingleRank(t *testing.T) {
	w := cpu.NewWorkers(0)
	defer w.Close()
	for _, name := range textModels {
		dir := shared.Path(t, "models/reference-tiny/"+name)
		ck, err := model.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		ref := readReference(t, dir)
		base := promptLogprobs(singleRank(t, ck, w, ref.InputIDs), ref.InputIDs)
		for _, size := range []int{2, 4} {
			t.Run(fmt.Sprintf("%s/tp%d", name, size), func(t *testing.T) {
				if _, err := parallel.NewPlan(&ck.Config, size); err != nil {
					if !strings.Contains(err.Error(), "divide") {
						t.Fatalf("refusal does not say why: %v", err)
					}
					t.Logf("refused: %v", err)
					return
				}
				g, err := parallel.NewCPUGroup(ck, size, len(ref.InputIDs)+len(ref.GreedyIDs)+1, w)
				if err != nil {
					t.Fatal(err)
				}
				defer g.Close()
				logits, err := g.Extend(ref.InputIDs, true)
				if err != nil {
					t.Fatal(err)
				}
				got := promptLogprobs(logits, ref.InputIDs)
				dBase, dRef := maxDelta(got, base), maxDelta(got, ref.PromptLogprobs)
				t.Logf("max |Δ| vs TP=1 %.2e, vs transformers %.2e", dBase, dRef)
				if dBase > 1e-4 || dRef > 2e-4 {
					t.Errorf("prompt logprobs: max |Δ| vs TP=1 %.2e (limit 1e-4), vs reference %.2e (limit 2e-4)", dBase, dRef)
				}
				ids := greedy(t, g, ref.InputIDs[:ref.GreedyPromptLen], len(ref.GreedyIDs))
				if !slices.Equal(ids, ref.GreedyIDs) {
					t.Errorf("greedy:\n got %v\nwant %v", ids, ref.GreedyIDs)
				}
			})
		}
		ck.Close()
	}
}

// TestTPStoriesGolden: stories260K (8 heads, 4 KV heads) at TP=2 and
// TP=4 reproduces run.c's 256 greedy tokens from BOS; TP=8 replicates
// each KV head over two ranks and must too.
func TestTPStoriesGolden(t *testing.T) {
	var golden struct {
		OutputIDs []int32 `json:"output_ids"`
	}
	data, err := os.ReadFile(shared.Path(t, "models/stories260K/golden_greedy.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &golden); err != nil {
		t.Fatal(err)
	}
	w := cpu.NewWorkers(0)
	defer w.Close()
	for _, path := range []string{"models/stories260K/stories260K.gguf", "models/stories260K-hf"} {
		ck, err := model.Open(shared.Path(t, path))
		if err != nil {
			t.Fatal(err)
		}
		for _, size := range []int{2, 4} {
			t.Run(fmt.Sprintf("%s/tp%d", path, size), func(t *testing.T) {
				g, err := parallel.NewCPUGroup(ck, size, len(golden.OutputIDs)+2, w)
				if err != nil {
					t.Fatal(err)
				}
				defer g.Close()
				if got := greedy(t, g, []int32{1}, len(golden.OutputIDs)); !slices.Equal(got, golden.OutputIDs) {
					t.Errorf("greedy:\n got %v\nwant %v", got, golden.OutputIDs)
				}
			})
		}
		ck.Close()
	}
}

// TestTPDummyWeights: with --load-format dummy weights (bf16, made per
// shard) TP=2 scores a prompt as the unsharded dummy model does, for the
// fused (Phi-3), fused-expert (GPT-OSS) and MLA (DeepSeek) layouts.
func TestTPDummyWeights(t *testing.T) {
	w := cpu.NewWorkers(0)
	defer w.Close()
	ids := []int32{1, 17, 300, 42, 7, 99, 511, 256, 3}
	for _, name := range []string{"phi3", "gpt_oss", "deepseek_v3_mla_moe", "qwen2_moe"} {
		t.Run(name, func(t *testing.T) {
			dir := shared.Path(t, "models/reference-tiny/"+name)
			probe, err := model.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			arch, err := registry.Lookup(probe.Config.Architecture)
			probe.Close()
			if err != nil {
				t.Fatal(err)
			}
			ck, err := model.OpenDummy(dir, arch.WeightShapes, tensor.BF16)
			if err != nil {
				t.Fatal(err)
			}
			base := promptLogprobs(singleRank(t, ck, w, ids), ids)
			g, err := parallel.NewCPUGroup(ck, 2, len(ids), w)
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			logits, err := g.Extend(ids, true)
			if err != nil {
				t.Fatal(err)
			}
			d := maxDelta(promptLogprobs(logits, ids), base)
			t.Logf("max |Δ| vs TP=1 %.2e", d)
			if d > 1e-4 {
				t.Errorf("dummy weights: TP=2 prompt logprobs differ from TP=1 by %.2e", d)
			}
		})
	}
}
