package runner

import (
	"slices"
	"testing"

	"github.com/gosling-ai/gosling/engine/sched"
	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/sample"
	"github.com/gosling-ai/gosling/spec"
)

// TestAcceptTreeGolden verifies a draft tree through the runner on
// stories260K and walks it with AcceptTree, greedy: the tree's first
// child of the root is wrong, so the accepted path (two golden tokens)
// lies at nodes whose K/V must move down to consecutive slots, and its
// last node's one child is wrong again. The walk must emit the two
// accepted drafts and the target's next token, all golden, leave
// Computed at the root plus the path, and give the rejected nodes' pages
// back; the decode steps after it then continue karpathy's run.c output
// token for token, which they do only if the compacted KV is the path's.
func TestAcceptTreeGolden(t *testing.T) {
	golden := shared.StoriesGolden(t)
	const k, after = 12, 16
	for _, pageSize := range []int{1, 16} {
		rn, kv := newStoriesRunner(t, pageSize)
		s := sched.New[*testReq](sched.Config{MaxRunning: 1, MaxPrefillTokens: 4096, KVCacheTokens: 2048}, kv, nil)
		greedy := sample.DefaultParams()
		greedy.Temperature = 0
		prompt := append([]int{1}, golden[:k]...)
		r := &testReq{Req: sched.Req{Tokens: prompt, NumPrompt: len(prompt)}, sampler: sample.NewSampler(greedy, prompt)}
		waiting, running := []*testReq{r}, []*testReq(nil)
		emit := func(d Draw) bool {
			r.Append(d.ID)
			r.sampler.Accept(d.ID)
			return false
		}
		step := func(trees map[*testReq]*spec.Tree) ([]Rows, *StepLogits, []Draw) {
			t.Helper()
			plan := s.Schedule(waiting, running)
			waiting, running = plan.Waiting, plan.Running
			if len(plan.Running) != 1 {
				t.Fatalf("page %d: the request is not running: %+v", pageSize, plan)
			}
			chunks := s.Fill(plan.Running, func(q *testReq) int {
				if tr := trees[q]; tr != nil {
					return tr.Len()
				}
				return 0
			})
			return runStep(t, rn, chunks, trees)
		}
		// Prefill: the prompt's KV, the first token drawn (golden[k]).
		_, _, draws := step(nil)
		r.Computed += len(prompt)
		s.PromptDone(r)
		emit(draws[0])

		wrong := func(tok int) int { return (tok + 7) % 512 }
		tree := spec.NewTree(golden[k])
		tree.Add(0, wrong(golden[k+1]))  // node 1: rejected
		n2 := tree.Add(0, golden[k+1])   // node 2: accepted
		n3 := tree.Add(n2, golden[k+2])  // node 3: accepted
		tree.Add(n3, wrong(golden[k+3])) // node 4: rejected
		base := r.Computed
		if ok, err := s.Reserve(r.Seq, base+tree.Len()); err != nil || !ok {
			t.Fatalf("page %d: no room for the tree: %v", pageSize, err)
		}
		rows, sl, _ := step(map[*testReq]*spec.Tree{r: &tree})
		v, err := rn.AcceptTree(r, &tree, sl, rows[0], emit)
		if err != nil {
			t.Fatal(err)
		}
		if v.Accepted != 2 || v.Finished || !slices.Equal(v.Inputs, []int{rows[0].Input, rows[0].Input + n2, rows[0].Input + n3}) {
			t.Errorf("page %d: verdict %+v, want 2 accepted along inputs %d+{0,%d,%d}", pageSize, v, rows[0].Input, n2, n3)
		}
		if r.Computed != base+3 {
			t.Errorf("page %d: Computed %d after the walk, want %d (root and two drafts)", pageSize, r.Computed, base+3)
		}
		if r.Seq.Len != r.Computed || len(r.Seq.Pages) != (r.Computed+pageSize-1)/pageSize {
			t.Errorf("page %d: the request holds %d slots in %d pages after the walk, want %d", pageSize, r.Seq.Len, len(r.Seq.Pages), r.Computed)
		}
		for r.NumOutput() < 4+after {
			_, _, draws := step(nil)
			r.Computed++
			emit(draws[0])
		}
		if got, want := r.Tokens[r.NumPrompt:], golden[k:k+4+after]; !slices.Equal(got, want) {
			t.Errorf("page %d:\n got %v\nwant %v", pageSize, got, want)
		}
		s.Release(r)
	}
}
