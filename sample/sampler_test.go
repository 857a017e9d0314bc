package sample

import (
	"cmp"
	"fmt"
	"math"
	mathrand "math/rand/v2"
	"slices"
	"testing"
)

var negInf = float32(math.Inf(-1))

func seeded(p Params, seed uint64) Params {
	p.Seed = &seed
	return p
}

func withTemperature(temperature float64) Params {
	p := DefaultParams()
	p.Temperature = temperature
	return p
}

// testLogits has distinct values, a clear argmax (id 1) and no ties.
var testLogits = []float32{1.0, 2.5, 0.3, -1.0, 2.0, 0.0, 1.7, -0.5, 0.9, 2.2}

func TestGreedyIsArgmax(t *testing.T) {
	nan := float32(math.NaN())
	tests := []struct {
		name   string
		logits []float32
		want   int
	}{
		{"single", []float32{3}, 0},
		{"max in middle", []float32{0.1, 5, -2, 4.9}, 1},
		{"max last", []float32{-3, -2, -1}, 2},
		{"tie goes to lowest id", []float32{1, 7, 3, 7, 7}, 1},
		{"NaN is never chosen", []float32{nan, 0.5, nan, 0.2}, 1},
		{"-Inf is never chosen", []float32{negInf, -100, negInf}, 1},
		{"+Inf wins", []float32{1, float32(math.Inf(1)), 2}, 1},
		{"all -Inf falls back to id 0", []float32{negInf, negInf}, 0},
		{"test logits", testLogits, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewSampler(seeded(withTemperature(0), 1), nil)
			for step := range 3 {
				if got := s.Sample(tt.logits); got != tt.want {
					t.Fatalf("step %d: Sample = %d, want %d", step, got, tt.want)
				}
			}
		})
	}
}

func TestSampleDoesNotModifyLogits(t *testing.T) {
	p := seeded(DefaultParams(), 3)
	p.RepetitionPenalty, p.FrequencyPenalty, p.PresencePenalty = 1.3, 0.5, 0.5
	p.TopK, p.TopP, p.MinP, p.Temperature = 5, 0.9, 0.05, 0.7
	logits := slices.Clone(testLogits)
	logits[3] = float32(math.NaN())
	s := NewSampler(p, []int{0, 1, 2})
	s.Accept(4)
	s.Sample(logits)
	for i := range logits {
		if math.Float32bits(logits[i]) != math.Float32bits(testLogits[i]) && i != 3 {
			t.Fatalf("logits[%d] = %v after Sample, want %v", i, logits[i], testLogits[i])
		}
	}
	if !math.IsNaN(float64(logits[3])) {
		t.Fatalf("logits[3] = %v after Sample, want NaN kept", logits[3])
	}
}

func sampleSequence(p Params, logits []float32, steps int) []int {
	s := NewSampler(p, nil)
	out := make([]int, steps)
	for i := range out {
		out[i] = s.Sample(logits)
		s.Accept(out[i])
	}
	return out
}

func TestSeedDeterminism(t *testing.T) {
	flat := make([]float32, 1000)
	configs := map[string]Params{
		"temperature": withTemperature(1),
		"top-k":       {Temperature: 0.9, TopK: 50, TopP: 1, RepetitionPenalty: 1},
		"top-p":       {Temperature: 1.1, TopP: 0.5, RepetitionPenalty: 1},
		"penalties":   {Temperature: 1, TopP: 1, RepetitionPenalty: 1.2, FrequencyPenalty: 0.3},
	}
	for name, p := range configs {
		t.Run(name, func(t *testing.T) {
			first := sampleSequence(seeded(p, 1234), flat, 64)
			again := sampleSequence(seeded(p, 1234), flat, 64)
			if !slices.Equal(first, again) {
				t.Fatalf("same seed gave\n%v\n%v", first, again)
			}
			other := sampleSequence(seeded(p, 1235), flat, 64)
			if slices.Equal(first, other) {
				t.Fatalf("seeds 1234 and 1235 gave the same sequence on a flat distribution: %v", first)
			}
		})
	}
}

func TestNilSeedIsRandom(t *testing.T) {
	flat := make([]float32, 1000)
	a := sampleSequence(withTemperature(1), flat, 32)
	b := sampleSequence(withTemperature(1), flat, 32)
	if slices.Equal(a, b) {
		t.Fatalf("two unseeded samplers gave the same 32 tokens out of 1000: %v", a)
	}
}

// The n-th Sample uses the n-th uniform whatever the parameters, so a greedy
// step in between does not shift a seeded stream.
func TestOneDrawPerStep(t *testing.T) {
	flat := make([]float32, 1000)
	p := seeded(withTemperature(1), 99)
	want := sampleSequence(p, flat, 3)
	s := NewSampler(p, nil)
	s.Sample(flat)
	s.temperature = 0
	s.Sample(flat)
	s.temperature = 1
	if got := s.Sample(flat); got != want[2] {
		t.Fatalf("third token after a greedy step = %d, want %d", got, want[2])
	}
}

func TestFiltersThatReduceToGreedy(t *testing.T) {
	ties := []float32{0.5, 3, 1, 3, 2}
	tests := []struct {
		name   string
		p      Params
		logits [][]float32
	}{
		{"top-k 1", Params{Temperature: 1.5, TopK: 1, TopP: 1, RepetitionPenalty: 1}, [][]float32{testLogits, ties}},
		{"tiny top-p", Params{Temperature: 1.5, TopP: 1e-9, RepetitionPenalty: 1}, [][]float32{testLogits, ties}},
		{"tiny top-p after top-k", Params{Temperature: 1.5, TopK: 5, TopP: 1e-9, RepetitionPenalty: 1}, [][]float32{testLogits, ties}},
		// Tokens tied with the max pass min-p 1 too, so no ties here.
		{"min-p 1", Params{Temperature: 1.5, MinP: 1, TopP: 1, RepetitionPenalty: 1}, [][]float32{testLogits}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, logits := range tt.logits {
				want := NewSampler(withTemperature(0), nil).Sample(logits)
				s := NewSampler(seeded(tt.p, 5), nil)
				for step := range 200 {
					if got := s.Sample(logits); got != want {
						t.Fatalf("step %d: Sample = %d, want greedy %d", step, got, want)
					}
				}
			}
		})
	}
}

func TestMinPFiltering(t *testing.T) {
	// softmax weights relative to the max: ln(1)=0, ln(0.5), ln(0.2), ln(0.05).
	logits := []float32{0, float32(math.Log(0.5)), float32(math.Log(0.2)), float32(math.Log(0.05))}
	tests := []struct {
		minP float64
		want []int // tokens that may appear
	}{
		{0.6, []int{0}},
		{0.4, []int{0, 1}},
		{0.1, []int{0, 1, 2}},
		{0.01, []int{0, 1, 2, 3}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.minP), func(t *testing.T) {
			p := seeded(Params{Temperature: 1, TopP: 1, MinP: tt.minP, RepetitionPenalty: 1}, 11)
			seen := map[int]bool{}
			s := NewSampler(p, nil)
			for range 4000 {
				seen[s.Sample(logits)] = true
			}
			for id := range logits {
				if seen[id] != slices.Contains(tt.want, id) {
					t.Errorf("token %d seen = %v, want %v (allowed %v)", id, seen[id], !seen[id], tt.want)
				}
			}
		})
	}
}

// referenceDistribution computes the distribution Sample should draw from,
// the plain way: full softmax, full sort, and each filter renormalizing.
func referenceDistribution(logits []float32, p Params) []float64 {
	probs := make([]float64, len(logits))
	maxLogit := math.Inf(-1)
	for _, l := range logits {
		maxLogit = max(maxLogit, float64(l))
	}
	for i, l := range logits {
		probs[i] = math.Exp((float64(l) - maxLogit) / p.Temperature)
	}
	normalize := func() {
		sum := 0.0
		for _, q := range probs {
			sum += q
		}
		for i := range probs {
			probs[i] /= sum
		}
	}
	normalize()
	order := make([]int, len(probs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(probs[b], probs[a]) })
	if p.TopK > 0 {
		for _, id := range order[min(p.TopK, len(order)):] {
			probs[id] = 0
		}
		normalize()
	}
	if p.TopP < 1 {
		ahead := 0.0
		for _, id := range order {
			if ahead >= p.TopP {
				probs[id] = 0
				continue
			}
			ahead += probs[id]
		}
		normalize()
	}
	if p.MinP > 0 {
		threshold := p.MinP * probs[order[0]]
		for i, q := range probs {
			if q < threshold {
				probs[i] = 0
			}
		}
		normalize()
	}
	return probs
}

// chiSquareCritical approximates the 0.999 quantile of chi-square with dof
// degrees of freedom (Wilson–Hilferty), so a correct sampler fails about once
// in a thousand seeds; the seed here is fixed.
func chiSquareCritical(dof int) float64 {
	k := float64(dof)
	const z = 3.09 // standard normal 0.999 quantile
	h := 2 / (9 * k)
	return k * math.Pow(1-h+z*math.Sqrt(h), 3)
}

func TestSampleFrequenciesMatchDistribution(t *testing.T) {
	tests := []struct {
		name string
		p    Params
	}{
		{"temperature 1", Params{Temperature: 1, TopP: 1, RepetitionPenalty: 1}},
		{"temperature 0.7", Params{Temperature: 0.7, TopP: 1, RepetitionPenalty: 1}},
		{"temperature 2", Params{Temperature: 2, TopP: 1, RepetitionPenalty: 1}},
		{"top-k 4", Params{Temperature: 1.5, TopK: 4, TopP: 1, RepetitionPenalty: 1}},
		{"top-p 0.8", Params{Temperature: 1, TopP: 0.8, RepetitionPenalty: 1}},
		{"min-p 0.3", Params{Temperature: 1, TopP: 1, MinP: 0.3, RepetitionPenalty: 1}},
		{"top-p then min-p", Params{Temperature: 1.2, TopP: 0.9, MinP: 0.2, RepetitionPenalty: 1}},
		{"top-k above vocabulary", Params{Temperature: 1, TopK: 100, TopP: 1, RepetitionPenalty: 1}},
		{"all filters", Params{Temperature: 0.8, TopK: 6, TopP: 0.9, MinP: 0.1, RepetitionPenalty: 1}},
	}
	const draws = 20000
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := referenceDistribution(testLogits, tt.p)
			counts := make([]int, len(testLogits))
			s := NewSampler(seeded(tt.p, 2024), nil)
			for range draws {
				counts[s.Sample(testLogits)]++
			}
			checkChiSquare(t, counts, want, draws)
		})
	}
}

func TestPenaltyMath(t *testing.T) {
	logits := []float32{2, -1, 0.5, 3, -0.5}
	tests := []struct {
		name   string
		p      Params
		prompt []int
		output []int
		want   []float32
	}{
		{
			// id 0, prompt only: 2/2 = 1.
			// id 1, output twice: -1·2 = -2, then -2 - 0.5·2 - 0.25 = -3.25.
			// id 2, output once: 0.5/2 = 0.25, then 0.25 - 0.5 - 0.25 = -0.5.
			// id 4, prompt and output once: -0.5·2 = -1, then -1 - 0.5 - 0.25 = -1.75.
			name:   "all three",
			p:      Params{RepetitionPenalty: 2, FrequencyPenalty: 0.5, PresencePenalty: 0.25},
			prompt: []int{0, 0, 4},
			output: []int{1, 2, 1, 4},
			want:   []float32{1, -3.25, -0.5, 3, -1.75},
		},
		{
			// Frequency and presence ignore the prompt.
			name:   "frequency and presence",
			p:      Params{RepetitionPenalty: 1, FrequencyPenalty: 1, PresencePenalty: 0.5},
			prompt: []int{0, 3},
			output: []int{3, 3, 3},
			want:   []float32{2, -1, 0.5, -0.5, -0.5},
		},
		{
			// A penalty below 1 favors repeats: 3/0.5 = 6, -1·0.5 = -0.5.
			name:   "repetition below one",
			p:      Params{RepetitionPenalty: 0.5},
			prompt: []int{3},
			output: []int{1},
			want:   []float32{2, -0.5, 0.5, 6, -0.5},
		},
		{
			// Negative penalties encourage repeats: 0.5 + 0.5·2 + 1 = 2.5.
			name:   "negative frequency and presence",
			p:      Params{RepetitionPenalty: 1, FrequencyPenalty: -0.5, PresencePenalty: -1},
			output: []int{2, 2},
			want:   []float32{2, -1, 2.5, 3, -0.5},
		},
		{
			name:   "ids outside the vocabulary are ignored",
			p:      Params{RepetitionPenalty: 2, FrequencyPenalty: 1},
			prompt: []int{99, -1},
			output: []int{1000, -3},
			want:   logits,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.p.TopP = 1
			s := NewSampler(tt.p, tt.prompt)
			for _, id := range tt.output {
				s.Accept(id)
			}
			got := s.penalize(logits)
			for i := range tt.want {
				if math.Abs(float64(got[i]-tt.want[i])) > 1e-6 {
					t.Fatalf("penalized logits = %v, want %v", got, tt.want)
				}
			}
		})
	}
}

func TestPenaltiesChangeGreedyChoice(t *testing.T) {
	logits := []float32{5, 4.9, 1}
	p := withTemperature(0)
	p.PresencePenalty = 0.5
	s := NewSampler(p, nil)
	if got := s.Sample(logits); got != 0 {
		t.Fatalf("first token = %d, want 0", got)
	}
	s.Accept(0)
	if got := s.Sample(logits); got != 1 {
		t.Fatalf("after a presence penalty on 0, token = %d, want 1", got)
	}
}

// The bucketed nucleus must keep exactly the tokens a full sort keeps.
func TestNucleusBucketsMatchFullSort(t *testing.T) {
	source := mathrand.New(mathrand.NewPCG(1, 2))
	for trial := range 200 {
		vocab := 1 + source.IntN(3000)
		scale := []float64{0.01, 1, 3, 30}[trial%4]
		topP := []float64{0.05, 0.5, 0.9, 0.999, 0.999999}[trial%5]
		cands := make([]candidate, vocab)
		for i := range cands {
			cands[i] = candidate{id: i, score: source.NormFloat64() * scale}
			if trial%7 == 0 {
				cands[i].score = math.Round(cands[i].score) // many ties
			}
		}
		maxScore := slices.MaxFunc(cands, func(a, b candidate) int { return cmp.Compare(a.score, b.score) }).score
		for i := range cands {
			cands[i].score = math.Exp(cands[i].score - maxScore)
		}
		full := slices.Clone(cands)
		slices.SortFunc(full, compareCandidates)
		want := nucleus(full, topP, true)
		got := nucleus(cands, topP, false)
		if !slices.Equal(got, want) {
			t.Fatalf("trial %d (vocab %d, scale %v, top-p %v): bucketed nucleus keeps %d tokens, full sort %d",
				trial, vocab, scale, topP, len(got), len(want))
		}
	}
}

func TestTopNSelection(t *testing.T) {
	source := mathrand.New(mathrand.NewPCG(3, 4))
	scores := make([]float32, 5000)
	for i := range scores {
		scores[i] = float32(source.IntN(200)) // many ties
	}
	for _, n := range []int{1, 2, 10, 100, 4999, 5000, 6000} {
		got := topN(nil, scores, n)
		all := make([]candidate, len(scores))
		for i, v := range scores {
			all[i] = candidate{id: i, score: float64(v)}
		}
		slices.SortFunc(all, compareCandidates)
		if want := all[:min(n, len(all))]; !slices.Equal(got, want) {
			t.Fatalf("topN(%d) differs from a full sort", n)
		}
	}
}

func TestSampleWithVocabularyChange(t *testing.T) {
	s := NewSampler(seeded(withTemperature(1), 8), nil)
	for _, vocab := range []int{10, 1000, 5, 1000} {
		logits := make([]float32, vocab)
		if id := s.Sample(logits); id < 0 || id >= vocab {
			t.Fatalf("vocab %d: Sample = %d", vocab, id)
		}
	}
}

func TestSampleAllNegativeInfinity(t *testing.T) {
	logits := []float32{negInf, negInf, negInf}
	for _, topK := range []int{0, 2} {
		s := NewSampler(seeded(Params{Temperature: 1, TopK: topK, TopP: 0.9, RepetitionPenalty: 1}, 1), nil)
		if got := s.Sample(logits); got != 0 {
			t.Fatalf("top-k %d: Sample over all -Inf = %d, want 0", topK, got)
		}
	}
}

func TestSamplePositiveInfinity(t *testing.T) {
	inf := float32(math.Inf(1))
	logits := []float32{1, inf, 2, inf}
	s := NewSampler(seeded(withTemperature(1), 1), nil)
	seen := map[int]int{}
	for range 1000 {
		seen[s.Sample(logits)]++
	}
	if len(seen) != 2 || seen[1] == 0 || seen[3] == 0 {
		t.Fatalf("draws with two +Inf logits = %v, want only tokens 1 and 3", seen)
	}
}

const benchVocab = 128 * 1024

func benchLogits() []float32 {
	source := mathrand.New(mathrand.NewPCG(5, 6))
	logits := make([]float32, benchVocab)
	for i := range logits {
		logits[i] = float32(source.NormFloat64() * 3)
	}
	return logits
}

func BenchmarkSample(b *testing.B) {
	logits := benchLogits()
	configs := []struct {
		name string
		p    Params
	}{
		{"greedy", withTemperature(0)},
		{"temperature", withTemperature(0.8)},
		{"top-k=50", Params{Temperature: 0.8, TopK: 50, TopP: 1, RepetitionPenalty: 1}},
		{"top-p=0.9", Params{Temperature: 0.8, TopP: 0.9, RepetitionPenalty: 1}},
		{"min-p=0.05", Params{Temperature: 0.8, TopP: 1, MinP: 0.05, RepetitionPenalty: 1}},
		{"top-k=50,top-p=0.9,min-p=0.05", Params{Temperature: 0.8, TopK: 50, TopP: 0.9, MinP: 0.05, RepetitionPenalty: 1}},
		{"penalties,top-p=0.9", Params{Temperature: 0.8, TopP: 0.9, RepetitionPenalty: 1.1, FrequencyPenalty: 0.2, PresencePenalty: 0.2}},
	}
	prompt := make([]int, 2000)
	for i := range prompt {
		prompt[i] = i * 37 % benchVocab
	}
	for _, c := range configs {
		b.Run(c.name, func(b *testing.B) {
			s := NewSampler(seeded(c.p, 1), prompt)
			for i := range 500 {
				s.Accept(i * 101 % benchVocab)
			}
			for b.Loop() {
				s.Sample(logits)
			}
		})
	}
}

func TestNucleusBoundary(t *testing.T) {
	// Weights 1, 0.5, 0.5 are probabilities 0.5, 0.25, 0.25.
	tests := []struct {
		topP float64
		want int // tokens kept
	}{
		{0.25, 1},
		{0.5, 1}, // the first token's mass reaches top_p exactly: vLLM keeps it alone
		{0.5000001, 2},
		{0.75, 2},
		{0.76, 3},
	}
	for _, tt := range tests {
		for _, sorted := range []bool{true, false} {
			cands := []candidate{{0, 1}, {1, 0.5}, {2, 0.5}}
			if got := len(nucleus(cands, tt.topP, sorted)); got != tt.want {
				t.Errorf("top-p %v (sorted %v): kept %d tokens, want %d", tt.topP, sorted, got, tt.want)
			}
		}
	}
}

// Settings reports the normalised parameters, the seed the sampler uses
// (given or drawn) and whether penalties are on.
func TestSettings(t *testing.T) {
	seed := uint64(42)
	p := DefaultParams()
	p.Temperature, p.TopK, p.TopP, p.MinP, p.Seed = 0.7, 40, 0.9, 0.05, &seed
	got := NewSampler(p, nil).Settings()
	want := Settings{Temperature: 0.7, TopK: 40, TopP: 0.9, MinP: 0.05, Seed: 42}
	if got != want {
		t.Errorf("Settings() = %+v, want %+v", got, want)
	}
	bad := Params{Temperature: math.NaN(), TopK: -1, TopP: 2, MinP: -1, RepetitionPenalty: 1}
	if got, want := NewSampler(bad, nil).Settings(), (Settings{Temperature: 1, TopP: 1}); got.Temperature != want.Temperature ||
		got.TopK != 0 || got.TopP != 1 || got.MinP != 0 || got.Penalties {
		t.Errorf("normalised Settings() = %+v, want %+v and a drawn seed", got, want)
	}
	// A drawn seed is the sampler's stream: a sampler seeded with it draws the same.
	a := NewSampler(DefaultParams(), nil)
	drawn := a.Settings().Seed
	pb := DefaultParams()
	pb.Seed = &drawn
	b := NewSampler(pb, nil)
	logits := []float32{0.1, 0.5, 0.3, 0.2, 0.9, 0.4}
	for range 20 {
		if x, y := a.Sample(logits), b.Sample(logits); x != y {
			t.Fatalf("the drawn seed %d does not name the sampler's stream: %d vs %d", drawn, x, y)
		}
	}
	for _, pen := range []func(*Params){
		func(p *Params) { p.RepetitionPenalty = 1.1 },
		func(p *Params) { p.FrequencyPenalty = 0.5 },
		func(p *Params) { p.PresencePenalty = -0.5 },
	} {
		p := DefaultParams()
		pen(&p)
		if !NewSampler(p, []int{1, 2}).Settings().Penalties {
			t.Errorf("%+v: Penalties false", p)
		}
	}
}

// TestVerifyFrequenciesMatchDistribution: speculative verification emits
// each token with the target's probability whatever was drafted — likely
// tokens, unlikely ones, tokens the filters drop, none — like Sample.
func TestVerifyFrequenciesMatchDistribution(t *testing.T) {
	params := []struct {
		name string
		p    Params
	}{
		{"temperature 1", Params{Temperature: 1, TopP: 1, RepetitionPenalty: 1}},
		{"temperature 0.7", Params{Temperature: 0.7, TopP: 1, RepetitionPenalty: 1}},
		{"top-k 4", Params{Temperature: 1.5, TopK: 4, TopP: 1, RepetitionPenalty: 1}},
		{"all filters", Params{Temperature: 0.8, TopK: 6, TopP: 0.9, MinP: 0.1, RepetitionPenalty: 1}},
	}
	order := make([]int, len(testLogits)) // ids by logit, best first
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(testLogits[b], testLogits[a]) })
	worst := order[len(order)-1]
	drafts := map[string][]int{
		"none":            nil,
		"the argmax":      {order[0]},
		"second, first":   {order[1], order[0]},
		"unlikely first":  {worst, order[2], order[0]},
		"three best":      {order[0], order[1], order[2]},
		"everything kept": order,
	}
	const draws = 20000
	for _, tt := range params {
		for name, d := range drafts {
			t.Run(tt.name+"/"+name, func(t *testing.T) {
				want := referenceDistribution(testLogits, tt.p)
				counts := make([]int, len(testLogits))
				s := NewSampler(seeded(tt.p, 77), nil)
				for range draws {
					i, tok := s.Verify(testLogits, d)
					if i >= 0 && d[i] != tok {
						t.Fatalf("accepted draft %d (%d) but returned token %d", i, d[i], tok)
					}
					if i < 0 && slices.Contains(d, tok) {
						t.Fatalf("rejected every draft but returned drafted token %d", tok)
					}
					counts[tok]++
				}
				checkChiSquare(t, counts, want, draws)
			})
		}
	}
}

// TestVerifyTreeJointDistribution walks a two-level draft tree as the
// engine does (accept a child, verify its children with its own logits;
// after a rejection the next token comes from a fresh step) and checks the
// joint distribution of the first two tokens against p(a)·p(b|a).
func TestVerifyTreeJointDistribution(t *testing.T) {
	const vocab = 6
	root := []float32{1.2, 0.3, 0.9, -0.5, 0.1, 0.6}
	next := func(a int) []float32 { // the target's logits after token a
		l := make([]float32, vocab)
		for i := range l {
			l[i] = float32(math.Sin(float64(3*a+i))) * 1.5
		}
		return l
	}
	// Root drafts 0 then 2; under 0 the drafts are 4, 1; under 2, 5.
	rootDrafts := []int{0, 2}
	childDrafts := map[int][]int{0: {4, 1}, 2: {5}}
	p := Params{Temperature: 1, TopP: 1, RepetitionPenalty: 1}
	s := NewSampler(seeded(p, 5), nil)
	const draws = 40000
	counts := make([]int, vocab*vocab)
	for range draws {
		i, a := s.Verify(root, rootDrafts)
		var b int
		if i >= 0 {
			_, b = s.Verify(next(a), childDrafts[a])
		} else {
			b = s.Sample(next(a))
		}
		counts[a*vocab+b]++
	}
	want := make([]float64, vocab*vocab)
	pa := referenceDistribution(root, p)
	for a := range vocab {
		pb := referenceDistribution(next(a), p)
		for b := range vocab {
			want[a*vocab+b] = pa[a] * pb[b]
		}
	}
	checkChiSquare(t, counts, want, draws)
}

func TestVerifyGreedy(t *testing.T) {
	s := NewSampler(Params{Temperature: 0, TopP: 1, RepetitionPenalty: 1}, nil)
	best := argmax(testLogits)
	if i, tok := s.Verify(testLogits, []int{best + 1, best}); i != 1 || tok != best {
		t.Fatalf("Verify = %d, %d; want draft 1, token %d", i, tok, best)
	}
	if i, tok := s.Verify(testLogits, []int{best + 1}); i != -1 || tok != best {
		t.Fatalf("Verify = %d, %d; want rejection and token %d", i, tok, best)
	}
}

func checkChiSquare(t *testing.T, counts []int, want []float64, draws int) {
	t.Helper()
	chi2, categories := 0.0, 0
	for id, q := range want {
		if q == 0 {
			if counts[id] != 0 {
				t.Fatalf("token %d has probability 0 but was drawn %d times", id, counts[id])
			}
			continue
		}
		expected := q * float64(draws)
		diff := float64(counts[id]) - expected
		chi2 += diff * diff / expected
		categories++
	}
	if categories < 2 {
		t.Fatalf("reference keeps %d tokens; the test needs at least 2", categories)
	}
	limit := chiSquareCritical(categories - 1)
	t.Logf("chi-square %.2f over %d categories (limit %.1f)", chi2, categories, limit)
	if chi2 > limit {
		t.Errorf("chi-square = %.1f over %d categories, limit %.1f\ncounts %v\nwant   %v", chi2, categories, limit, counts, want)
	}
}
