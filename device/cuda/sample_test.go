package cuda

import (
	"cmp"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/sample"
	"github.com/gosling-ai/gosling/tensor"
)

// Device sampling against the host sampler's rules. The suites run on
// fakeGPU here (TestFakeSample: the kernel restated in Go, plus the
// ModelOps plumbing) and on a GPU in sample_gpu_test.go.

var sampleSuites = []struct {
	name string
	run  func(*testing.T, opsEnv)
}{
	{"Greedy", testSampleGreedy},
	{"Distribution", testSampleDistribution},
	{"Ties", testSampleTies},
	{"Reproducible", testSampleReproducible},
	{"Errors", testSampleErrors},
	{"Masked", testSampleMasked},
}

func runSampleSuites(t *testing.T, env opsEnv) {
	for _, s := range sampleSuites {
		subtest(t, s.name, func(t *testing.T) { s.run(t, env) })
	}
}

func TestFakeSample(t *testing.T) {
	dev, k, lt, fake := openFakeDevice(t)
	runSampleSuites(t, opsEnv{dev: dev, k: k, lt: lt, fake: fake})
	if err := dev.Close(); err != nil {
		t.Fatal(err)
	}
}

// sampleOnDevice uploads logits ([rows, vocab]) and samples rows.
func sampleOnDevice(t *testing.T, o *ModelOps, logits []float32, nRows, vocab int, rows []SampleRow) []int32 {
	t.Helper()
	o.BeginForward()
	defer o.EndForward()
	d := o.Upload(tensor.From(logits, nRows, vocab))
	ids, err := o.Sample(d, rows)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != len(rows) {
		t.Fatalf("%d ids for %d rows", len(ids), len(rows))
	}
	return ids
}

// hostArgmax is the host sampler's greedy rule.
func hostArgmax(row []float32) int {
	best, v := 0, float32(math.Inf(-1))
	for i, x := range row {
		if x > v {
			best, v = i, x
		}
	}
	return best
}

// Greedy rows (temperature 0, top-k 1, or nothing above -inf) pick the host
// argmax: lowest id on ties, NaN skipped, 0 when every logit is -inf or NaN.
func testSampleGreedy(t *testing.T, env opsEnv) {
	o := env.newOps(t, F32)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, vocab := range []int{1, 7, 1000, 1025, 32000, 128256} {
		if env.fake != nil && vocab > 32000 {
			continue
		}
		const nRows = 9
		logits := randn(rng, nRows*vocab, 3)
		row := func(r int) []float32 { return logits[r*vocab : (r+1)*vocab] }
		// Row 1: a tie for the max, the later copy first in memory order
		// of a warp; row 2: NaNs, one where the max would be; row 3: all
		// -inf; row 4: all NaN; row 5: +inf twice; row 6: values quantised
		// so that many ties exist; row 7: -0 and +0 as the max.
		if vocab > 1 {
			r := row(1)
			r[vocab-1], r[vocab/2] = 100, 100
			r2 := row(2)
			r2[0], r2[vocab-1] = float32(math.NaN()), 50
			for i := 1; i < vocab; i += 3 {
				r2[i] = float32(math.NaN())
			}
		}
		for i := range vocab {
			row(3)[i] = float32(math.Inf(-1))
			row(4)[i] = float32(math.NaN())
			row(6)[i] = float32(math.Round(float64(row(6)[i])))
			row(7)[i] = -float32(math.Abs(float64(row(7)[i]))) - 1
		}
		row(5)[vocab/3], row(5)[vocab-1] = float32(math.Inf(1)), float32(math.Inf(1))
		row(7)[vocab-1] = float32(math.Copysign(0, -1))
		row(7)[vocab/2] = 0
		var rows []SampleRow
		for r := range nRows {
			rows = append(rows, SampleRow{Row: r}, SampleRow{Row: r, Temperature: 0.7, TopK: 1, Seed: uint64(r)})
		}
		// Random rows where nothing is above -inf fall back to the argmax too.
		rows = append(rows, SampleRow{Row: 3, Temperature: 1, TopP: 0.5, Seed: 3}, SampleRow{Row: 4, Temperature: 2, Seed: 4})
		ids := sampleOnDevice(t, o, logits, nRows, vocab, rows)
		for i, sr := range rows {
			if want := hostArgmax(row(sr.Row)); int(ids[i]) != want {
				t.Errorf("vocab %d, %+v: got %d, want %d", vocab, sr, ids[i], want)
			}
		}
		// Temperature 0 alone: past argmaxSplitMin, the split argmax.
		var greedy []SampleRow
		for r := nRows - 1; r >= 0; r-- {
			greedy = append(greedy, SampleRow{Row: r}, SampleRow{Row: r, Temperature: -1})
		}
		ids = sampleOnDevice(t, o, logits, nRows, vocab, greedy)
		for i, sr := range greedy {
			if want := hostArgmax(row(sr.Row)); int(ids[i]) != want {
				t.Errorf("greedy batch, vocab %d, %+v: got %d, want %d", vocab, sr, ids[i], want)
			}
		}
	}
}

// filteredDist is the distribution the host sampler draws from (package
// sample's pipeline, in float64): the probability of each id.
func filteredDist(row []float32, r SampleRow) map[int]float64 {
	type cand struct {
		id int
		x  float64
		w  float64
	}
	var cands []cand
	m := math.Inf(-1)
	for i, x := range row {
		if x == x {
			cands = append(cands, cand{id: i, x: float64(x)})
			m = max(m, float64(x))
		}
	}
	if r.Temperature <= 0 || r.TopK == 1 || !(m > math.Inf(-1)) {
		return map[int]float64{hostArgmax(row): 1}
	}
	slices.SortStableFunc(cands, func(a, b cand) int {
		if c := cmp.Compare(b.x, a.x); c != 0 {
			return c
		}
		return cmp.Compare(a.id, b.id)
	})
	inf := math.IsInf(m, 1)
	if !inf && r.TopK > 0 && r.TopK < len(row) {
		cands = cands[:min(r.TopK, len(cands))]
	}
	kept := cands[:0]
	for _, c := range cands {
		if inf {
			c.w = 0
			if math.IsInf(c.x, 1) {
				c.w = 1
			}
		} else {
			c.w = math.Exp((c.x - m) / float64(r.Temperature))
		}
		if c.w > 0 {
			kept = append(kept, c)
		}
	}
	cands = kept
	if r.TopP > 0 && r.TopP < 1 {
		total := 0.0
		for _, c := range cands {
			total += c.w
		}
		ahead, n := 0.0, 0
		for n < len(cands) && ahead < float64(r.TopP)*total {
			ahead += cands[n].w
			n++
		}
		cands = cands[:n]
	}
	if r.MinP > 0 {
		cands = slices.DeleteFunc(cands, func(c cand) bool { return c.w < float64(r.MinP) })
	}
	total := 0.0
	for _, c := range cands {
		total += c.w
	}
	out := map[int]float64{}
	for _, c := range cands {
		out[c.id] = c.w / total
	}
	return out
}

// checkDist fails unless every draw is in want's support and the counts
// pass Pearson's chi-square test against want: tokens expected at least 5
// times are bins of their own, the rest are pooled, and the statistic must
// stay below dof + 6·sqrt(2·dof) + 6, far in the tail (a pooled bin
// expected fewer than 5 times is bounded on its own). The draws come from
// fixed seeds, so the check cannot flake.
func checkDist(t *testing.T, what string, draws []int, want map[int]float64) {
	t.Helper()
	n := float64(len(draws))
	counts := map[int]float64{}
	for _, id := range draws {
		if _, ok := want[id]; !ok {
			t.Fatalf("%s: drew %d, outside the filtered support (%d tokens)", what, id, len(want))
		}
		counts[id]++
	}
	x2, bins, pooledE, pooledO := 0.0, 0, 0.0, 0.0
	for id, p := range want {
		e, o := p*n, counts[id]
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
	} else if pooledO > pooledE+5*math.Sqrt(pooledE)+5 {
		t.Errorf("%s: %.0f draws of rare tokens, %.1f expected", what, pooledO, pooledE)
	}
	dof := float64(max(bins-1, 1))
	if limit := dof + 6*math.Sqrt(2*dof) + 6; x2 > limit {
		t.Errorf("%s: chi-square %.1f over %.0f draws, %d bins, limit %.1f", what, x2, n, bins, limit)
	}
}

// distCases are filter settings over one logits row of vocab values.
func distCases(vocab int) []SampleRow {
	return []SampleRow{
		{Temperature: 1},
		{Temperature: 0.6, TopK: 5},
		{Temperature: 1.3, TopP: 0.8},
		{Temperature: 1, MinP: 0.05},
		{Temperature: 0.9, TopK: 40, TopP: 0.9},
		{Temperature: 1, TopK: 20, TopP: 0.7, MinP: 0.1},
		{Temperature: 2, TopK: vocab + 5, TopP: 0.95},
	}
}

// distLogits is a peaked row: a few strong tokens over a Gaussian floor,
// so that every filter cuts somewhere inside the distribution.
func distLogits(rng *rand.Rand, vocab int) []float32 {
	row := randn(rng, vocab, 1.5)
	for i := range 30 {
		row[rng.IntN(vocab)] = 6 - float32(i)*0.2
	}
	return row
}

// The empirical distribution of many draws (one per step) matches the
// host's filtered distribution, and the host sampler agrees with it too.
func testSampleDistribution(t *testing.T, env opsEnv) {
	o := env.newOps(t, F32)
	rng := rand.New(rand.NewPCG(3, 4))
	vocabs, draws := []int{50, 1000, 128256}, 40000
	if env.fake != nil {
		vocabs = []int{50, 1000}
	}
	for _, vocab := range vocabs {
		switch {
		case vocab > 1000:
			draws = 10000 // 128K-wide rows: each draw is dozens of passes
		case env.fake != nil && vocab > 50:
			draws = 4000 // the fake is a slow GPU
		}
		logits := distLogits(rng, vocab)
		if vocab <= 50 {
			logits = randn(rng, vocab, 1) // the temperature-only case keeps them all
		}
		for _, c := range distCases(vocab) {
			if vocab > 1000 && c.TopK == 0 && c.TopP == 0 && c.MinP == 0 {
				continue // tens of thousands of tokens: too many for the bound
			}
			what := fmt.Sprintf("vocab %d %+v", vocab, c)
			want := filteredDist(logits, c)
			rows := make([]SampleRow, draws)
			for i := range rows {
				rows[i] = c
				rows[i].Seed, rows[i].Step = 77, uint64(i)
			}
			ids := sampleOnDevice(t, o, logits, 1, vocab, rows)
			got := make([]int, len(ids))
			for i, id := range ids {
				got[i] = int(id)
			}
			checkDist(t, "device "+what, got, want)
			if env.fake == nil || vocab > 50 {
				continue
			}
			// The reference is the host sampler's distribution.
			seed := uint64(5)
			s := sample.NewSampler(sample.Params{Temperature: float64(c.Temperature), TopK: c.TopK, TopP: float64(c.TopP),
				MinP: float64(c.MinP), RepetitionPenalty: 1, Seed: &seed}, nil)
			host := make([]int, 20000)
			for i := range host {
				host[i] = s.Sample(logits)
			}
			checkDist(t, "host "+what, host, want)
		}
	}
}

// Exact ties at a filter's cut keep the lowest ids, as the host does.
func testSampleTies(t *testing.T, env opsEnv) {
	o := env.newOps(t, F32)
	const vocab = 300
	logits := make([]float32, vocab)
	for i := range logits {
		logits[i] = -5
	}
	// Ten tokens tied at 2 (ids spread out, the highest first in memory
	// is irrelevant: order is by id), one at 3.
	tied := []int{7, 40, 41, 99, 150, 151, 152, 200, 260, 299}
	for _, id := range tied {
		logits[id] = 2
	}
	logits[123] = 3
	cases := []struct {
		c    SampleRow
		want []int
	}{
		{SampleRow{Temperature: 1, TopK: 4}, []int{123, 7, 40, 41}},
		{SampleRow{Temperature: 1, TopK: 1 + len(tied)}, append([]int{123}, tied...)},
		// Weights 1 and e^-1 ≈ 0.368 each: mass 1 + 10·0.368 = 4.68 (the
		// -5 floor adds 289·e^-8 ≈ 0.097). Top-p 0.5 needs 2.39: 1 + 4 ties.
		{SampleRow{Temperature: 1, TopP: 0.5}, []int{123, 7, 40, 41, 99}},
		// Top-k 6 first: mass 1 + 5·0.368 = 2.84, top-p needs 1.42.
		{SampleRow{Temperature: 1, TopK: 6, TopP: 0.5}, []int{123, 7, 40}},
		{SampleRow{Temperature: 1, TopK: 3, TopP: 0.99}, []int{123, 7, 40}},
		{SampleRow{Temperature: 1, MinP: 0.3}, append([]int{123}, tied...)},
		{SampleRow{Temperature: 1, MinP: 0.5}, []int{123}},
	}
	for _, tc := range cases {
		want := filteredDist(logits, tc.c)
		if len(want) != len(tc.want) {
			t.Fatalf("%+v: the reference keeps %d tokens, the test expects %d", tc.c, len(want), len(tc.want))
		}
		for _, id := range tc.want {
			if _, ok := want[id]; !ok {
				t.Fatalf("%+v: the reference drops %d", tc.c, id)
			}
		}
		rows := make([]SampleRow, 2000)
		for i := range rows {
			rows[i] = tc.c
			rows[i].Seed, rows[i].Step = 9, uint64(i)
		}
		ids := sampleOnDevice(t, o, logits, 1, vocab, rows)
		seen := map[int]bool{}
		for _, id := range ids {
			if _, ok := want[int(id)]; !ok {
				t.Fatalf("%+v: drew %d, not among %v", tc.c, id, tc.want)
			}
			seen[int(id)] = true
		}
		if len(seen) != len(tc.want) {
			t.Errorf("%+v: 2000 draws saw %d of the %d kept tokens", tc.c, len(seen), len(tc.want))
		}
	}
	// All +inf tokens share the mass equally; top-p keeps the first of them.
	inf := make([]float32, vocab)
	for _, id := range []int{5, 50, 250} {
		inf[id] = float32(math.Inf(1))
	}
	for _, c := range []SampleRow{{Temperature: 1, TopK: 1000}, {Temperature: 1, TopK: 2}, {Temperature: 0.5, TopP: 0.4}} {
		rows := make([]SampleRow, 600)
		for i := range rows {
			rows[i] = c
			rows[i].Step = uint64(i)
		}
		got := map[int32]int{}
		for _, id := range sampleOnDevice(t, o, inf, 1, vocab, rows) {
			got[id]++
		}
		want := filteredDist(inf, c)
		if len(got) != len(want) {
			t.Errorf("+inf logits, %+v: drew %v, want the support of %v", c, got, want)
		}
		for id := range got {
			if _, ok := want[int(id)]; !ok {
				t.Errorf("+inf logits, %+v: drew %d", c, id)
			}
		}
	}
}

// A (seed, step) pair names one draw, whatever the batch and the row; other
// seeds and steps draw differently.
func testSampleReproducible(t *testing.T, env opsEnv) {
	o := env.newOps(t, F32)
	rng := rand.New(rand.NewPCG(5, 6))
	const vocab, nRows = 2000, 3
	logits := make([]float32, 0, nRows*vocab)
	for range nRows {
		logits = append(logits, distLogits(rng, vocab)...)
	}
	c := SampleRow{Temperature: 1.5, TopK: 100, TopP: 0.95}
	var rows []SampleRow
	for step := range 64 {
		for r := range nRows {
			sr := c
			sr.Row, sr.Seed, sr.Step = r, 1234, uint64(step)
			rows = append(rows, sr)
		}
	}
	first := sampleOnDevice(t, o, logits, nRows, vocab, rows)
	// Reversed, and each row once more with another seed.
	rev := slices.Clone(rows)
	slices.Reverse(rev)
	for _, sr := range rows {
		sr.Seed = 4321
		rev = append(rev, sr)
	}
	second := sampleOnDevice(t, o, logits, nRows, vocab, rev)
	differ, distinct := 0, map[int32]bool{}
	for i := range rows {
		if first[i] != second[len(rows)-1-i] {
			t.Fatalf("row %+v drew %d, then %d", rows[i], first[i], second[len(rows)-1-i])
		}
		if first[i] != second[len(rows)+i] {
			differ++
		}
		if rows[i].Row == 0 {
			distinct[first[i]] = true
		}
	}
	if differ < len(rows)/4 || len(distinct) < 4 {
		t.Errorf("another seed changed %d of %d draws; 64 steps drew %d distinct tokens", differ, len(rows), len(distinct))
	}
}

func testSampleErrors(t *testing.T, env opsEnv) {
	o := env.newOps(t, F32)
	o.BeginForward()
	defer o.EndForward()
	d := o.Upload(tensor.From(make([]float32, 6), 2, 3))
	for _, tc := range []struct {
		x    tensor.T
		rows []SampleRow
		want string
	}{
		{d, []SampleRow{{Row: 2}}, "outside [0, 2)"},
		{d, []SampleRow{{Row: -1}}, "outside"},
		{tensor.From(make([]float32, 6), 2, 3), []SampleRow{{}}, "not a device tensor"},
		{tensor.Device{Shape: []int{6}, Ptr: d.DevPtr(), DType: F32}.T(), []SampleRow{{}}, "shape"},
	} {
		if _, err := o.Sample(tc.x, tc.rows); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %+v: err %v, want one containing %q", tc.x.Shape, tc.rows, err, tc.want)
		}
	}
	if ids, err := o.Sample(d, nil); err != nil || len(ids) != 0 {
		t.Errorf("no rows: %v, %v", ids, err)
	}
}

func TestPackSampleRows(t *testing.T) {
	f := func(v float32) int32 { return int32(math.Float32bits(v)) }
	u := func(v uint32) int32 { return int32(v) }
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	rows := []SampleRow{
		{Row: 3, Temperature: 0.5, TopK: 40, TopP: 0.9, MinP: 0.1, Seed: 0x1122334455667788, Step: 0x99aabbccddeeff00},
		{Row: 0, Temperature: nan, TopK: -3, TopP: 0, MinP: nan},
		{Row: 1, Temperature: -1, TopP: 1.5, MinP: 2},
		{Row: 2, Temperature: inf, TopP: nan, MinP: -1},
	}
	got, maskWords, err := packSampleRows(rows, 4, 100)
	if err != nil {
		t.Fatal(err)
	}
	want := []int32{
		3, f(0.5), 40, f(0.9), f(0.1), 0x55667788, 0x11223344, u(0xddeeff00), u(0x99aabbcc), -1,
		0, f(1), 0, f(1), 0, 0, 0, 0, 0, -1,
		1, 0, 0, f(1), f(1), 0, 0, 0, 0, -1,
		2, f(1), 0, f(1), 0, 0, 0, 0, 0, -1,
	}
	if !slices.Equal(got, want) || maskWords != 0 {
		t.Errorf("packed\n%v (%d mask words)\nwant\n%v (none)", got, maskWords, want)
	}
	// Token masks: uint64 words split low half first, a short mask padded
	// with forbidden words, a long one cut at the vocabulary; indices in
	// row order, unmasked rows -1.
	rows[1].Mask = []uint64{0x8000000000000001}                             // ids 0 and 63
	rows[3].Mask = []uint64{0x00000002_00000004, 1, 0xffff, 0xffff, 0xffff} // ids 2, 33, 64
	got, maskWords, err = packSampleRows(rows, 4, 70)
	if err != nil {
		t.Fatal(err)
	}
	want[10+9], want[30+9] = 0, 1
	want = append(want, 1, u(0x80000000), 0, 4, 2, 1)
	if !slices.Equal(got, want) || maskWords != 3 {
		t.Errorf("packed with masks\n%v (%d mask words)\nwant\n%v (3)", got, maskWords, want)
	}
	if _, _, err := packSampleRows([]SampleRow{{Row: 4}}, 4, 10); err == nil {
		t.Error("row 4 of 4 was accepted")
	}
}

// maskedCopy is row with -Inf wherever mask (bit id%64 of word id/64)
// forbids the id: what the host's constrained sampler draws from.
func maskedCopy(row []float32, mask []uint64) []float32 {
	out := slices.Clone(row)
	for i := range out {
		if i/64 >= len(mask) || mask[i/64]>>(i%64)&1 == 0 {
			out[i] = float32(math.Inf(-1))
		}
	}
	return out
}

// randomMask allows each id with probability p, and always at least one.
func randomMask(rng *rand.Rand, vocab int, p float64) []uint64 {
	m := make([]uint64, (vocab+63)/64)
	for i := range vocab {
		if rng.Float64() < p {
			m[i/64] |= 1 << (i % 64)
		}
	}
	id := rng.IntN(vocab)
	m[id/64] |= 1 << (id % 64)
	return m
}

func allowed(mask []uint64, id int32) bool {
	return id >= 0 && int(id/64) < len(mask) && mask[id/64]>>(id%64)&1 != 0
}

// Rows with token masks (structured output) against the host's constrained
// sampler, which draws from the row with the forbidden logits at -Inf:
// greedy rows pick exactly its token (the one-block kernel and, past
// argmaxSplitMin, the split argmax), random rows only ever draw allowed
// tokens and, over many steps, from the host's filtered distribution of
// the masked row; unmasked rows in the same batch are unaffected.
func testSampleMasked(t *testing.T, env opsEnv) {
	o := env.newOps(t, F32)
	rng := rand.New(rand.NewPCG(7, 8))
	vocabs := []int{5, 100, 1000, 4097, 32000, 151936}
	if env.fake != nil {
		vocabs = vocabs[:5]
	}
	hostGreedy := sample.NewSampler(sample.Params{Temperature: 0, RepetitionPenalty: 1}, nil)
	for _, vocab := range vocabs {
		const nRows = 6
		logits := make([]float32, 0, nRows*vocab)
		for range nRows {
			logits = append(logits, distLogits(rng, vocab)...)
		}
		row := func(r int) []float32 { return logits[r*vocab : (r+1)*vocab] }
		// Masks from dense to a single token, one that forbids the row's
		// unmasked argmax, and one shorter than the vocabulary.
		var masks [][]uint64
		for _, p := range []float64{0.5, 0.05, 0.001, 0} {
			masks = append(masks, randomMask(rng, vocab, p))
		}
		noTop := randomMask(rng, vocab, 0.3)
		top := hostArgmax(row(1))
		noTop[top/64] &^= 1 << (top % 64)
		if vocab > 1 && slices.Equal(noTop, make([]uint64, len(noTop))) {
			other := (top + 1) % vocab
			noTop[other/64] |= 1 << (other % 64)
		}
		masks = append(masks, noTop, randomMask(rng, vocab, 0.5)[:max(1, (vocab+63)/64/2)])

		var rows []SampleRow
		for i, m := range masks {
			r := i % nRows
			if i == len(masks)-2 {
				r = 1
			}
			rows = append(rows, SampleRow{Row: r, Mask: m}, SampleRow{Row: r, Temperature: 0.8, TopK: 1, Seed: 3, Mask: m})
		}
		rows = append(rows, SampleRow{Row: 1}, SampleRow{Row: 2})
		check := func(what string, rows []SampleRow) {
			ids := sampleOnDevice(t, o, logits, nRows, vocab, rows)
			for i, sr := range rows {
				src := row(sr.Row)
				if sr.Mask != nil {
					src = maskedCopy(src, sr.Mask)
					if !allowed(sr.Mask, ids[i]) {
						t.Errorf("%s, vocab %d, row %d: drew %d, which its mask forbids", what, vocab, i, ids[i])
					}
				}
				if want := hostGreedy.Sample(src); int(ids[i]) != want {
					t.Errorf("%s, vocab %d, row %d (%d allowed): got %d, the host sampler %d", what, vocab, i, popcount(sr.Mask), ids[i], want)
				}
			}
		}
		check("greedy and top-k 1", rows)
		// Temperature 0 alone: the split argmax past argmaxSplitMin.
		var greedyRows []SampleRow
		for _, sr := range rows {
			if sr.Temperature == 0 {
				greedyRows = append(greedyRows, sr)
			}
		}
		check("greedy batch", greedyRows)

		// Random rows: always allowed, whatever the filters.
		var random []SampleRow
		for step := range 40 {
			for i, m := range masks {
				c := distCases(vocab)[(step+i)%len(distCases(vocab))]
				c.Row, c.Mask, c.Seed, c.Step = i%nRows, m, 11, uint64(step)
				random = append(random, c)
			}
			random = append(random, SampleRow{Row: step % nRows, Temperature: 1, Seed: 11, Step: uint64(step)})
		}
		ids := sampleOnDevice(t, o, logits, nRows, vocab, random)
		for i, sr := range random {
			if sr.Mask != nil && !allowed(sr.Mask, ids[i]) {
				t.Fatalf("vocab %d, %+v: drew %d, which its mask forbids", vocab, sr, ids[i])
			}
		}
		// Unmasked rows drew what they draw with no masked row beside them.
		var plain []SampleRow
		var plainIDs []int32
		for i, sr := range random {
			if sr.Mask == nil {
				plain, plainIDs = append(plain, sr), append(plainIDs, ids[i])
			}
		}
		if alone := sampleOnDevice(t, o, logits, nRows, vocab, plain); !slices.Equal(alone, plainIDs) {
			t.Errorf("vocab %d: unmasked rows drew %v beside masked ones, %v alone", vocab, plainIDs, alone)
		}
	}

	// The distribution of a masked row is the host's over the masked row.
	vocab, draws := 1000, 8000
	if env.fake != nil {
		draws = 3000
	}
	logits := distLogits(rng, vocab)
	mask := randomMask(rng, vocab, 0.2)
	masked := maskedCopy(logits, mask)
	for _, c := range []SampleRow{{Temperature: 1}, {Temperature: 0.7, TopK: 10}, {Temperature: 1.2, TopP: 0.8}, {Temperature: 1, MinP: 0.05}} {
		rows := make([]SampleRow, draws)
		for i := range rows {
			rows[i] = c
			rows[i].Mask, rows[i].Seed, rows[i].Step = mask, 21, uint64(i)
		}
		got := make([]int, draws)
		for i, id := range sampleOnDevice(t, o, logits, 1, vocab, rows) {
			got[i] = int(id)
		}
		checkDist(t, fmt.Sprintf("masked %+v", c), got, filteredDist(masked, c))
	}
}

func popcount(m []uint64) int {
	n := 0
	for _, w := range m {
		n += bits.OnesCount64(w)
	}
	return n
}

// Philox4x32-10's known-answer vectors (Random123's kat_vectors), and the
// ordered key's order.
func TestSampleHelpers(t *testing.T) {
	for _, tc := range []struct {
		c      [4]uint32
		k0, k1 uint32
		want   [4]uint32
	}{
		{[4]uint32{}, 0, 0, [4]uint32{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
		{[4]uint32{^uint32(0), ^uint32(0), ^uint32(0), ^uint32(0)}, ^uint32(0), ^uint32(0), [4]uint32{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
		{[4]uint32{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, 0xa4093822, 0x299f31d0, [4]uint32{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
	} {
		if got := philox4x32x10(tc.c, tc.k0, tc.k1); got != tc.want {
			t.Errorf("philox(%x, %x %x) = %x, want %x", tc.c, tc.k0, tc.k1, got, tc.want)
		}
	}
	vals := []float32{float32(math.Inf(-1)), -math.MaxFloat32, -1, -math.SmallestNonzeroFloat32, 0, math.SmallestNonzeroFloat32, 1, math.MaxFloat32, float32(math.Inf(1))}
	for i, v := range vals {
		if keyFloat(orderedKey(v)) != v {
			t.Errorf("key of %v does not invert", v)
		}
		if i > 0 && orderedKey(vals[i-1]) >= orderedKey(v) {
			t.Errorf("key(%v) >= key(%v)", vals[i-1], v)
		}
	}
	if orderedKey(float32(math.Copysign(0, -1))) != orderedKey(0) {
		t.Error("-0 and +0 have different keys")
	}
}
