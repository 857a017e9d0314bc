package cuda

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/tensor"
)

// Speculative verification on the device (spec_verify_*) against
// sample.Sampler.Verify's rule. The suites run on fakeGPU here
// (TestFakeSpecVerify: the kernel restated in Go, plus the ModelOps
// plumbing) and on a GPU in sample_gpu_test.go (TestGPUSpecVerify).

var specVerifySuites = []struct {
	name string
	run  func(*testing.T, opsEnv)
}{
	{"Distribution", testSpecVerifyDistribution},
	{"LeafIsSample", testSpecVerifyLeafIsSample},
	{"Greedy", testSpecVerifyGreedy},
	{"Reproducible", testSpecVerifyReproducible},
	{"Errors", testSpecVerifyErrors},
}

func runSpecVerifySuites(t *testing.T, env opsEnv) {
	for _, s := range specVerifySuites {
		subtest(t, s.name, func(t *testing.T) { s.run(t, env) })
	}
}

func TestFakeSpecVerify(t *testing.T) {
	dev, k, lt, fake := openFakeDevice(t)
	runSpecVerifySuites(t, opsEnv{dev: dev, k: k, lt: lt, fake: fake})
	if err := dev.Close(); err != nil {
		t.Fatal(err)
	}
}

// verifyOnDevice uploads logits ([nRows, vocab]) and decides rows.
func verifyOnDevice(t *testing.T, o *ModelOps, logits []float32, nRows, vocab int, rows []VerifyRow) []NodeVerdict {
	t.Helper()
	o.BeginForward()
	defer o.EndForward()
	d := o.Upload(tensor.From(logits, nRows, vocab))
	got, err := o.SpecVerify(d, rows)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(rows) {
		t.Fatalf("%d verdicts for %d rows", len(got), len(rows))
	}
	return got
}

// byProbability is want's support, most likely first (ties by id).
func byProbability(want map[int]float64) []int {
	ids := make([]int, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b int) int {
		if c := cmp.Compare(want[b], want[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	return ids
}

// checkRate fails unless hits of n trials are within six standard
// deviations (and one count) of the rate q.
func checkRate(t *testing.T, what string, hits, n int, q float64) {
	t.Helper()
	if n == 0 {
		return
	}
	e := q * float64(n)
	if d := math.Abs(float64(hits) - e); d > 6*math.Sqrt(e*(1-q))+1 {
		t.Errorf("%s: %d of %d, expected %.1f (rate %.4f)", what, hits, n, e, q)
	}
}

// Over many steps the emitted tokens follow the filtered distribution p
// whatever was drafted; draft j, reached when every draft before it was
// rejected, is accepted at the rate p_j / (1 - Σ_{i<j} p_i) (child 0 at
// p_0); a token the filters drop is never accepted; and the draws after
// every draft was rejected follow p renormalised over the tokens not
// drafted.
func testSpecVerifyDistribution(t *testing.T, env opsEnv) {
	o := env.newOps(t, F32)
	rng := rand.New(rand.NewPCG(11, 12))
	type vcase struct {
		vocab, draws int
	}
	vocabs := []vcase{{50, 20000}, {1000, 20000}, {128256, 4000}}
	if env.fake != nil {
		vocabs = []vcase{{50, 12000}, {1000, 3000}}
	}
	for _, vc := range vocabs {
		vocab := vc.vocab
		logits := distLogits(rng, vocab)
		if vocab <= 50 {
			logits = randn(rng, vocab, 1)
		}
		for ci, c := range distCases(vocab) {
			if vocab > 1000 && c.TopK == 0 && c.TopP == 0 && c.MinP == 0 {
				continue // tens of thousands of tokens: too many for the bound
			}
			want := filteredDist(logits, c)
			order := byProbability(want)
			dropped := -1 // a token the filters drop, when one is
			for i := range vocab {
				if _, ok := want[i]; !ok {
					dropped = i
					break
				}
			}
			draftSets := map[string][]int32{
				"none":          nil,
				"the argmax":    {int32(order[0])},
				"second, first": {int32(order[min(1, len(order)-1)]), int32(order[0])},
			}
			if len(order) >= 3 {
				draftSets["third, second, first"] = []int32{int32(order[2]), int32(order[1]), int32(order[0])}
			}
			if dropped >= 0 {
				draftSets["dropped, first"] = []int32{int32(dropped), int32(order[0])}
			}
			if len(order) <= 8 {
				all := make([]int32, len(order)) // every kept token drafted
				for i, id := range order {
					all[i] = int32(id)
				}
				draftSets["everything kept"] = all
			}
			if vocab > 1000 {
				// 128K-wide rows: each verdict is dozens of passes.
				for name := range draftSets {
					if name != "second, first" && name != "dropped, first" {
						delete(draftSets, name)
					}
				}
			}
			for name, drafts := range draftSets {
				what := fmt.Sprintf("vocab %d %+v drafts %s %v", vocab, c, name, drafts)
				rows := make([]VerifyRow, vc.draws)
				for i := range rows {
					rows[i] = VerifyRow{SampleRow: c, Drafts: drafts}
					rows[i].Seed, rows[i].Step = uint64(100+ci), uint64(i)
				}
				got := verifyOnDevice(t, o, logits, 1, vocab, rows)
				tokens := make([]int, len(got))
				reached := make([]int, len(drafts)) // trials that tried draft j
				accepted := make([]int, len(drafts))
				var residual []int
				for i, v := range got {
					tokens[i] = int(v.Token)
					switch {
					case v.Child >= int32(len(drafts)) || v.Child < -1:
						t.Fatalf("%s: child %d", what, v.Child)
					case v.Child >= 0 && drafts[v.Child] != v.Token:
						t.Fatalf("%s: accepted draft %d (%d) but emitted %d", what, v.Child, drafts[v.Child], v.Token)
					case v.Child < 0 && slices.Contains(drafts, v.Token):
						t.Fatalf("%s: every draft rejected but emitted the drafted %d", what, v.Token)
					}
					last := int(v.Child)
					if v.Child < 0 {
						last = len(drafts) - 1
						residual = append(residual, int(v.Token))
					} else {
						accepted[v.Child]++
					}
					for j := 0; j <= last; j++ {
						reached[j]++
					}
				}
				checkDist(t, what, tokens, want)
				left := 1.0 // the mass of the drafts not yet tried
				for j, d := range drafts {
					pj := want[int(d)]
					if pj == 0 && accepted[j] > 0 {
						t.Errorf("%s: draft %d (%d), which the filters drop, was accepted %d times", what, j, d, accepted[j])
					}
					if left > 1e-9 {
						checkRate(t, fmt.Sprintf("%s: draft %d", what, j), accepted[j], reached[j], min(1, pj/left))
					}
					left -= pj
				}
				// The residual: p less the drafts, renormalised.
				res := map[int]float64{}
				total := 0.0
				for id, p := range want {
					if !slices.Contains(drafts, int32(id)) {
						res[id] = p
						total += p
					}
				}
				if total < 1e-6 {
					if len(residual) > 0 {
						t.Errorf("%s: %d residual draws with nothing left to draw", what, len(residual))
					}
					continue
				}
				for id := range res {
					res[id] /= total
				}
				if len(residual) >= 200 {
					checkDist(t, what+" residual", residual, res)
				}
			}
		}
	}
}

// A node with no drafts draws exactly Sample's token for its seed and
// step (the same filters, the same race), and so does the residual draw
// of a node whose drafts the filters drop.
func testSpecVerifyLeafIsSample(t *testing.T, env opsEnv) {
	o := env.newOps(t, F32)
	rng := rand.New(rand.NewPCG(13, 14))
	const vocab, nRows = 3000, 3
	logits := make([]float32, 0, nRows*vocab)
	for range nRows {
		logits = append(logits, distLogits(rng, vocab)...)
	}
	var sampleRows []SampleRow
	var leaves, dropped []VerifyRow
	for step := range 40 {
		for ci, c := range distCases(vocab) {
			c.Row, c.Seed, c.Step = (step+ci)%nRows, 5, uint64(step)
			sampleRows = append(sampleRows, c)
			leaves = append(leaves, VerifyRow{SampleRow: c})
			if c.TopK > 0 && c.TopK < 100 {
				// The row's worst tokens: outside every top-k set.
				worst := make([]int32, 0, 3)
				for id, x := range logits[c.Row*vocab : (c.Row+1)*vocab] {
					if x < -4 && len(worst) < 3 {
						worst = append(worst, int32(id))
					}
				}
				dropped = append(dropped, VerifyRow{SampleRow: c, Drafts: worst})
			}
		}
	}
	ids := sampleOnDevice(t, o, logits, nRows, vocab, sampleRows)
	got := verifyOnDevice(t, o, logits, nRows, vocab, leaves)
	for i, v := range got {
		if v.Child != -1 || v.Token != ids[i] {
			t.Fatalf("%+v: verdict %+v, Sample drew %d", leaves[i].SampleRow, v, ids[i])
		}
	}
	if len(dropped) == 0 {
		t.Fatal("no row drafted dropped tokens")
	}
	var plain []SampleRow
	for _, r := range dropped {
		if len(r.Drafts) == 0 {
			t.Fatalf("row %d has no token below -4", r.Row)
		}
		plain = append(plain, r.SampleRow)
	}
	ids = sampleOnDevice(t, o, logits, nRows, vocab, plain)
	for i, v := range verifyOnDevice(t, o, logits, nRows, vocab, dropped) {
		if v.Child != -1 || v.Token != ids[i] {
			t.Fatalf("%+v drafting %v: verdict %+v, Sample drew %d", dropped[i].SampleRow, dropped[i].Drafts, v, ids[i])
		}
	}
}

// Greedy rows (temperature 0, top-k 1) emit the host argmax and accept
// the child that drafted it, whatever its place.
func testSpecVerifyGreedy(t *testing.T, env opsEnv) {
	o := env.newOps(t, F32)
	rng := rand.New(rand.NewPCG(15, 16))
	for _, vocab := range []int{7, 1000, 32000} {
		const nRows = 4
		logits := randn(rng, nRows*vocab, 2)
		logits[vocab+vocab/2], logits[vocab+vocab-1] = 50, 50 // a tie in row 1: the lower id
		var rows []VerifyRow
		var want []NodeVerdict
		for r := range nRows {
			best := int32(hostArgmax(logits[r*vocab : (r+1)*vocab]))
			other := (best + 1) % int32(vocab)
			for _, c := range []SampleRow{{Row: r}, {Row: r, Temperature: 0.9, TopK: 1, Seed: 3}} {
				rows = append(rows,
					VerifyRow{SampleRow: c, Drafts: []int32{other, best}},
					VerifyRow{SampleRow: c, Drafts: []int32{best}},
					VerifyRow{SampleRow: c, Drafts: []int32{other}},
					VerifyRow{SampleRow: c})
				want = append(want, NodeVerdict{Child: 1, Token: best}, NodeVerdict{Child: 0, Token: best},
					NodeVerdict{Child: -1, Token: best}, NodeVerdict{Child: -1, Token: best})
			}
		}
		got := verifyOnDevice(t, o, logits, nRows, vocab, rows)
		for i := range rows {
			if got[i] != want[i] {
				t.Errorf("vocab %d, %+v: verdict %+v, want %+v", vocab, rows[i], got[i], want[i])
			}
		}
	}
}

// A (seed, step) pair names one verdict whatever the batch and the row's
// place in it; another seed changes many.
func testSpecVerifyReproducible(t *testing.T, env opsEnv) {
	o := env.newOps(t, F32)
	rng := rand.New(rand.NewPCG(17, 18))
	const vocab, nRows = 2000, 2
	logits := make([]float32, 0, nRows*vocab)
	for range nRows {
		logits = append(logits, distLogits(rng, vocab)...)
	}
	c := SampleRow{Temperature: 1.3, TopK: 50, TopP: 0.95, Seed: 42}
	var rows []VerifyRow
	for step := range 48 {
		for r := range nRows {
			sr := c
			sr.Row, sr.Step = r, uint64(step)
			row := logits[r*vocab : (r+1)*vocab]
			best := hostArgmax(row)
			rows = append(rows, VerifyRow{SampleRow: sr, Drafts: []int32{int32(best), int32((best + 1 + step) % vocab)}})
		}
	}
	first := verifyOnDevice(t, o, logits, nRows, vocab, rows)
	rev := slices.Clone(rows)
	slices.Reverse(rev)
	for _, r := range rows {
		r.Seed = 24
		rev = append(rev, r)
	}
	second := verifyOnDevice(t, o, logits, nRows, vocab, rev)
	differ := 0
	for i := range rows {
		if first[i] != second[len(rows)-1-i] {
			t.Fatalf("row %+v: %+v, then %+v", rows[i], first[i], second[len(rows)-1-i])
		}
		if first[i] != second[len(rows)+i] {
			differ++
		}
	}
	if differ < len(rows)/8 {
		t.Errorf("another seed changed %d of %d verdicts", differ, len(rows))
	}
}

func testSpecVerifyErrors(t *testing.T, env opsEnv) {
	o := env.newOps(t, F32)
	o.BeginForward()
	defer o.EndForward()
	d := o.Upload(tensor.From(make([]float32, 6), 2, 3))
	nine := make([]int32, 9)
	for _, tc := range []struct {
		x    tensor.T
		rows []VerifyRow
		want string
	}{
		{d, []VerifyRow{{SampleRow: SampleRow{Row: 2}}}, "outside [0, 2)"},
		{d, []VerifyRow{{SampleRow: SampleRow{Mask: []uint64{1}}}}, "token mask"},
		{d, []VerifyRow{{Drafts: nine}}, "9 drafts"},
		{d, []VerifyRow{{Drafts: []int32{3}}}, "token 3, outside [0, 3)"},
		{d, []VerifyRow{{Drafts: []int32{-1}}}, "token -1"},
		{tensor.From(make([]float32, 6), 2, 3), []VerifyRow{{}}, "not a device tensor"},
		{tensor.Device{Shape: []int{6}, Ptr: d.DevPtr(), DType: F32}.T(), []VerifyRow{{}}, "shape"},
	} {
		if _, err := o.SpecVerify(tc.x, tc.rows); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %+v: err %v, want one containing %q", tc.x.Shape, tc.rows, err, tc.want)
		}
	}
	if got, err := o.SpecVerify(d, nil); err != nil || len(got) != 0 {
		t.Errorf("no rows: %v, %v", got, err)
	}
}

// The verify block: packSampleRows's parameters, then each row's drafts
// padded to verifyDrafts with -1.
func TestPackVerifyRows(t *testing.T) {
	rows := []VerifyRow{
		{SampleRow: SampleRow{Row: 1, Temperature: 0.5, TopK: 4, Seed: 7, Step: 9}, Drafts: []int32{5, 2}},
		{SampleRow: SampleRow{Row: 0}},
		{SampleRow: SampleRow{Row: 1, Temperature: 1}, Drafts: []int32{0, 1, 2, 3, 4, 5, 6, 7}},
	}
	got, err := packVerifyRows(rows, 2, 10)
	if err != nil {
		t.Fatal(err)
	}
	plain := []SampleRow{rows[0].SampleRow, rows[1].SampleRow, rows[2].SampleRow}
	want, _, err := packSampleRows(plain, 2, 10)
	if err != nil {
		t.Fatal(err)
	}
	want = append(want,
		5, 2, -1, -1, -1, -1, -1, -1,
		-1, -1, -1, -1, -1, -1, -1, -1,
		0, 1, 2, 3, 4, 5, 6, 7)
	if !slices.Equal(got, want) {
		t.Errorf("packed\n%v\nwant\n%v", got, want)
	}
	if verifyDrafts != 8 {
		t.Errorf("verifyDrafts %d: the layout above assumes 8", verifyDrafts)
	}
}
