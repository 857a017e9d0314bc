package runner

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/engine/sched"
	"github.com/gosling-ai/gosling/internal/fakedevice"
	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/sample"
	"github.com/gosling-ai/gosling/spec"
	"github.com/gosling-ai/gosling/tensor"
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

// TestAcceptTreeDeviceVerdictsDistribution: walking a tree through
// per-node verdicts decided each on its own (fakedevice's SpecVerify: the
// host's Verify with a sampler seeded by the node's seed and step alone,
// as the device's spec_verify kernel decides), and walking it on the host
// (Verify node after node from the request's own sampler), both emit
// token sequences with the target's law: at each node the next token
// from the node's distribution, the walk going on into the drafted child
// of that token and stopping at a token not drafted (chi-square over the
// sequences, many seeds). Every node is counted as device- or
// host-decided, and the KV bookkeeping holds trial after trial.
func TestAcceptTreeDeviceVerdictsDistribution(t *testing.T) {
	const vocab, base, trials = 6, 5, 12000
	tree := spec.NewTree(0)
	a := tree.Add(0, 1) // node 1
	b := tree.Add(0, 4) // node 2
	c := tree.Add(a, 2) // node 3
	tree.Add(a, 5)      // node 4
	tree.Add(b, 3)      // node 5
	tree.Add(c, 0)      // node 6
	logits := tensor.New(tree.Len(), vocab)
	for n := range tree.Len() {
		for i := range vocab {
			logits.Row(n)[i] = float32(1.4 * math.Sin(float64(3*n+2*i+1)))
		}
	}
	host := tensor.Host{Shape: logits.Shape, Data: logits.HostData()}
	kv, err := kvcache.NewCache(kvcache.Spec{NumLayers: 1, NumKVHeads: 1, HeadDim: 2, HeadDimV: 2}, 1, 64, 1, 64)
	if err != nil {
		t.Fatal(err)
	}
	rn := New[*testReq](Config{KV: kv})
	seq, ok := kv.NewSeq()
	if !ok {
		t.Fatal("no sequence row")
	}
	for _, tc := range []struct {
		name string
		temp float64
		topK int
	}{{"temperature 1", 1, 0}, {"temperature 0.8, top-k 4", 0.8, 4}} {
		// dist is a node's filtered distribution: softmax(x/T) over the
		// top-k (no ties among these logits).
		dist := func(n int) []float64 {
			row := logits.Row(n)
			order := make([]int, vocab)
			for i := range order {
				order[i] = i
			}
			slices.SortFunc(order, func(x, y int) int { return cmp.Compare(row[y], row[x]) })
			if tc.topK > 0 {
				order = order[:tc.topK]
			}
			p, z := make([]float64, vocab), 0.0
			for _, i := range order {
				p[i] = math.Exp(float64(row[i]-row[order[0]]) / tc.temp)
				z += p[i]
			}
			for i := range p {
				p[i] /= z
			}
			return p
		}
		// want: the target's law of the emitted sequences.
		want := map[string]float64{}
		var walk func(node int, prefix string, pr float64)
		walk = func(node int, prefix string, pr float64) {
			for tok, p := range dist(node) {
				if p == 0 {
					continue
				}
				seq := fmt.Sprintf("%s%d", prefix, tok)
				if ch := tree.Child(node, tok); ch >= 0 {
					walk(ch, seq+" ", pr*p)
				} else {
					want[seq] += pr * p
				}
			}
		}
		walk(0, "", 1)
		for _, mode := range []string{"device", "host"} {
			counts := map[string]int{}
			for trial := range trials {
				seed := uint64(1000*trial + 7)
				p := sample.Params{Temperature: tc.temp, TopK: tc.topK, TopP: 1, RepetitionPenalty: 1, Seed: &seed}
				r := &testReq{Req: sched.Req{Tokens: make([]int, base+1), NumPrompt: base + 1, Seq: seq, Computed: base},
					sampler: sample.NewSampler(p, nil)}
				if ok, err := kv.Grow(seq, base+tree.Len()); !ok || err != nil {
					t.Fatalf("trial %d: no room for the tree: %v", trial, err)
				}
				rows := Rows{First: 0, Score: tree.Len(), Step: r.NumOutput(), Tree: &tree}
				sl := &StepLogits{Host: host}
				if mode == "device" {
					f := fakedevice.New()
					u := []logitUse[*testReq]{{r: r, sampleRow: -1, scoreRow: 0, scoreN: tree.Len(), step: rows.Step, tree: &tree}}
					if sl, err = placeDeviceLogits(f, f.Put(logits), u, make([]rowMask, 1)); err != nil {
						t.Fatal(err)
					}
					if f.Copies != 0 || len(f.Checked) != 1 {
						t.Fatalf("%d copies, %d verify calls: want the nodes verified on the device alone", f.Copies, len(f.Checked))
					}
				}
				var emitted []string
				v, err := rn.AcceptTree(r, &tree, sl, rows, func(d Draw) bool {
					emitted = append(emitted, fmt.Sprint(d.ID))
					return false
				})
				if err != nil {
					t.Fatal(err)
				}
				nodes := v.HostNodes
				if mode == "device" {
					nodes = v.DeviceNodes
				}
				if len(emitted) != v.Accepted+1 || nodes != len(emitted) || v.DeviceNodes+v.HostNodes != nodes {
					t.Fatalf("%s: emitted %v with verdict %+v", mode, emitted, v)
				}
				if r.Computed != base+1+v.Accepted || seq.Len != r.Computed {
					t.Fatalf("%s: Computed %d, %d slots after accepting %d", mode, r.Computed, seq.Len, v.Accepted)
				}
				counts[strings.Join(emitted, " ")]++
			}
			checkSeqChiSquare(t, tc.name+", "+mode, counts, want, trials)
		}
	}
	if c := rn.Counts(); c.DeviceVerifiedNodes == 0 || c.HostVerifiedNodes == 0 {
		t.Errorf("counts %+v: want nodes verified both ways", c)
	}
}

// checkSeqChiSquare fails unless every sequence drawn has probability in
// want and the counts pass Pearson's chi-square test: sequences expected at
// least 5 times are bins of their own, the rest one pooled bin, and the
// statistic stays below dof + 6·sqrt(2·dof) + 6, far in the tail (fixed
// seeds: it cannot flake).
func checkSeqChiSquare(t *testing.T, what string, counts map[string]int, want map[string]float64, n int) {
	t.Helper()
	for s := range counts {
		if want[s] == 0 {
			t.Fatalf("%s: drew %q, which the target never emits", what, s)
		}
	}
	x2, bins, pooledE, pooledO := 0.0, 0, 0.0, 0.0
	for s, p := range want {
		e, o := p*float64(n), float64(counts[s])
		if e < 5 {
			pooledE, pooledO = pooledE+e, pooledO+o
			continue
		}
		x2 += (o - e) * (o - e) / e
		bins++
	}
	if pooledE >= 5 {
		x2 += (pooledO - pooledE) * (pooledO - pooledE) / pooledE
		bins++
	}
	dof := float64(max(bins-1, 1))
	limit := dof + 6*math.Sqrt(2*dof) + 6
	t.Logf("%s: chi-square %.1f over %d sequences in %d bins (limit %.1f)", what, x2, len(want), bins, limit)
	if bins < 5 || x2 > limit {
		t.Errorf("%s: chi-square %.1f over %d bins, limit %.1f", what, x2, bins, limit)
	}
}
