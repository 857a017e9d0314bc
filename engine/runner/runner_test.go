package runner

import (
	"fmt"
	"slices"
	"testing"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/attention/registry"
	"github.com/gosling-ai/gosling/device/cpu"
	"github.com/gosling-ai/gosling/engine/sched"
	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/model"
	modelregistry "github.com/gosling-ai/gosling/model/registry"
	"github.com/gosling-ai/gosling/sample"
	"github.com/gosling-ai/gosling/spec"
)

// testReq is a text request as a caller of the runner keeps one: the
// scheduler's state and a host sampler, no images, and a grammar's state
// when constraint is set.
type testReq struct {
	sched.Req
	sampler    *sample.Sampler
	logprobs   bool
	constraint Constraint
}

func (r *testReq) Sched() *sched.Req { return &r.Req }
func (r *testReq) NumImages() int    { return 0 }
func (r *testReq) Image(int) (model.ImageSpan, []float32) {
	panic("runner: a text request has no images")
}
func (r *testReq) MRope() ([]int32, int)    { return nil, 0 }
func (r *testReq) Sampler() *sample.Sampler { return r.sampler }
func (r *testReq) Constraint() Constraint   { return r.constraint }
func (r *testReq) WantsLogprobs() bool      { return r.logprobs }

// newStoriesRunner is a runner over stories260K on the CPU: the model,
// a KV cache of pageSize pages and the attention backend that auto
// resolves to, as the engine builds them.
func newStoriesRunner(t *testing.T, pageSize int) (*Runner[*testReq], *kvcache.Cache) {
	t.Helper()
	ck, err := model.Open(shared.Path(t, "models/stories260K/stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	w := cpu.NewWorkers(2)
	t.Cleanup(w.Close)
	rt := cpu.NewRuntime(w)
	m, err := modelregistry.Build(ck, rt.Ops())
	if err != nil {
		t.Fatal(err)
	}
	need := attention.Need{Device: "cpu", PageSize: pageSize}
	for _, l := range m.AttentionLayers() {
		if !slices.Contains(need.HeadDims, l.HeadDim) {
			need.HeadDims = append(need.HeadDims, l.HeadDim)
		}
	}
	plan, err := registry.Resolve(attention.Choice{PageSize: pageSize, PageSizeSet: true}, need)
	if err != nil {
		t.Fatal(err)
	}
	spec := m.KVSpec()
	spec.DType = plan.KVDType
	kv, err := kvcache.NewCache(spec, pageSize, 2048, 4, 512)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kv.Pool.Free() })
	attn, err := plan.Build(attention.Options{Device: "cpu", KV: kv, Layers: m.AttentionLayers(), Runtime: rt})
	if err != nil {
		t.Fatal(err)
	}
	return New[*testReq](Config{Runtime: rt, Model: m, Attention: attn, KV: kv, Workers: w}), kv
}

// TestStoriesBatchGolden: two greedy requests decoded together through
// the runner — one from BOS, one from BOS and the first 20 tokens of
// the golden continuation, so the first steps mix a 21-token prefill
// with decodes — each continue karpathy's run.c output token for token
// (golden_greedy.json), and the decode steps are counted.
func TestStoriesBatchGolden(t *testing.T) {
	golden := shared.StoriesGolden(t)
	const skip, n = 20, 64
	for _, pageSize := range []int{1, 16} {
		t.Run(fmt.Sprintf("page%d", pageSize), func(t *testing.T) {
			rn, kv := newStoriesRunner(t, pageSize)
			s := sched.New[*testReq](sched.Config{MaxRunning: 2, MaxPrefillTokens: 4096, KVCacheTokens: 2048}, kv, nil)
			greedy := sample.DefaultParams()
			greedy.Temperature = 0
			var reqs []*testReq
			for _, prompt := range [][]int{{1}, append([]int{1}, golden[:skip]...)} {
				reqs = append(reqs, &testReq{Req: sched.Req{Tokens: prompt, NumPrompt: len(prompt)}, sampler: sample.NewSampler(greedy, prompt)})
			}
			waiting, running := slices.Clone(reqs), []*testReq(nil)
			for steps := 0; len(waiting)+len(running) > 0; steps++ {
				if steps > 2*n {
					t.Fatalf("%d steps and not done", steps)
				}
				plan := s.Schedule(waiting, running)
				waiting, running = plan.Waiting, plan.Running
				chunks := s.Fill(running, nil)
				rows, _, draws := runStep(t, rn, chunks, nil)
				for i, c := range chunks {
					r := c.Req
					r.Computed += c.N
					if rows[i].Sample < 0 {
						continue
					}
					if !r.PromptDone {
						s.PromptDone(r)
					}
					r.Append(draws[i].ID)
					r.sampler.Accept(draws[i].ID)
				}
				running = slices.DeleteFunc(running, func(r *testReq) bool {
					if r.NumOutput() < n {
						return false
					}
					s.Release(r)
					return true
				})
			}
			for i, r := range reqs {
				from := 0
				if i == 1 {
					from = skip
				}
				if got, want := r.Tokens[r.NumPrompt:], golden[from:from+n]; !slices.Equal(got, want) {
					t.Errorf("request %d:\n got %v\nwant %v", i, got, want)
				}
			}
			if c := rn.Counts(); c.DecodeGaps != n-1 || c.GraphReplays+c.GraphCaptures+c.GraphEager != 0 {
				t.Errorf("counts %+v: want a decode gap for each of the %d decode steps, no graph steps on the CPU", c, n-1)
			}
		})
	}
}

// runStep builds, runs and draws one step of chunks (trees: the Verify
// chunks' trees).
func runStep(t *testing.T, rn *Runner[*testReq], chunks []sched.Chunk[*testReq], trees map[*testReq]*spec.Tree) ([]Rows, *StepLogits, []Draw) {
	t.Helper()
	b, rows := rn.Build(chunks, trees, false)
	logits, err := rn.Run(b)
	if err != nil {
		t.Fatal(err)
	}
	sl, draws, err := rn.Tokens(logits, chunks, rows)
	if err != nil {
		t.Fatal(err)
	}
	return rows, sl, draws
}
