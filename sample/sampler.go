// Package sample turns one request's logits into its next token, with the
// sampling parameters of the OpenAI, vLLM and SGLang APIs; it also computes
// logprobs and finds stop strings in streamed text.
//
// The pipeline of Sampler.Sample, in order:
//
//  1. Penalties, on the sampler's own copy of the logits: repetition (over
//     prompt and output tokens), then frequency and presence (over output
//     tokens). This is vLLM's and SGLang's order.
//  2. Temperature 0 (or top-k 1): argmax, ties to the lowest id. Done.
//  3. Temperature: logits / T.
//  4. Top-k: keep the k highest logits (ties to the lower id).
//  5. Top-p: on the distribution renormalized after top-k, keep the smallest
//     most-likely prefix whose mass reaches top_p (a token is kept while the
//     mass strictly ahead of it is < top_p).
//  6. Min-p: keep tokens with p >= min_p * p_max.
//  7. Softmax over the survivors in float64, then inverse-CDF with one
//     uniform draw.
//
// Steps 4–6 follow SGLang (top_k_renorm, top_p_renorm, min_p sampling) and
// FlashInfer. vLLM V1 applies min-p before top-k/top-p instead; the two agree
// except when top-p and min-p are both set, where vLLM's top-p sees a
// distribution already cut by min-p.
package sample

import (
	"cmp"
	"math"
	mathrand "math/rand/v2"
	"slices"
)

// Sampler holds one request's RNG and penalty state. It is not safe for
// concurrent use; a request samples one token at a time.
type Sampler struct {
	temperature       float64 // 0: greedy
	topK              int     // 0: disabled
	topP              float64 // 1: disabled
	minP              float64 // 0: disabled
	repetitionPenalty float64 // 1: disabled
	frequencyPenalty  float64
	presencePenalty   float64

	rng *rng

	// penalized lists each distinct token that a penalty may touch: prompt
	// and output tokens when the repetition penalty is on, output tokens
	// otherwise. Sample walks this list instead of the whole vocabulary.
	penalized []penalizedToken
	position  map[int]int // token id → index in penalized

	work  []float32   // [vocab] penalized copy of the caller's logits
	cands []candidate // [≤ vocab] tokens still in the running
}

type penalizedToken struct {
	id          int
	outputCount int // occurrences in the generated output
}

// candidate is a token and its score: a logit until weights are computed,
// then an unnormalized probability.
type candidate struct {
	id    int
	score float64
}

// NewSampler prepares the sampler for one request. It does not validate p
// (call Params.Validate at the API boundary); values Validate rejects fall
// back to "disabled" here so that Sample never produces NaNs.
func NewSampler(p Params, promptIDs []int) *Sampler {
	var seed uint64
	if p.Seed != nil {
		seed = *p.Seed
	} else {
		// math/rand/v2's top-level source is seeded from the OS; only the
		// seed comes from it, never the stream.
		seed = mathrand.Uint64()
	}
	s := &Sampler{
		temperature:       p.Temperature,
		topK:              max(p.TopK, 0),
		topP:              p.TopP,
		minP:              p.MinP,
		repetitionPenalty: p.RepetitionPenalty,
		frequencyPenalty:  p.FrequencyPenalty,
		presencePenalty:   p.PresencePenalty,
		rng:               newRNG(seed),
	}
	switch {
	case math.IsNaN(s.temperature) || math.IsInf(s.temperature, 0):
		s.temperature = 1
	case s.temperature < 0:
		s.temperature = 0
	}
	if !(s.topP > 0 && s.topP < 1) {
		s.topP = 1
	}
	if !(s.minP > 0) {
		s.minP = 0
	}
	s.minP = min(s.minP, 1)
	if !(s.repetitionPenalty > 0) || math.IsInf(s.repetitionPenalty, 1) {
		s.repetitionPenalty = 1
	}
	if math.IsNaN(s.frequencyPenalty) {
		s.frequencyPenalty = 0
	}
	if math.IsNaN(s.presencePenalty) {
		s.presencePenalty = 0
	}
	if s.penaltiesOn() {
		s.position = make(map[int]int)
	}
	if s.repetitionPenalty != 1 {
		for _, id := range promptIDs {
			if id >= 0 {
				s.track(id)
			}
		}
	}
	return s
}

func (s *Sampler) penaltiesOn() bool {
	return s.repetitionPenalty != 1 || s.frequencyPenalty != 0 || s.presencePenalty != 0
}

// track returns the index of id in s.penalized, adding it if new. id >= 0.
func (s *Sampler) track(id int) int {
	if i, ok := s.position[id]; ok {
		return i
	}
	s.position[id] = len(s.penalized)
	s.penalized = append(s.penalized, penalizedToken{id: id})
	return len(s.penalized) - 1
}

// Accept records a generated token (for penalties).
func (s *Sampler) Accept(id int) {
	if !s.penaltiesOn() || id < 0 {
		return
	}
	s.penalized[s.track(id)].outputCount++
}

// Sample picks the next token from raw logits ([vocab]), applying penalties,
// temperature, top-k, top-p and min-p in the order of the package comment. It
// does not modify logits. NaN logits count as -Inf; if no token has a logit
// above -Inf, Sample returns the lowest id.
//
// Every call takes exactly one number from the RNG, greedy or not, so step n
// of a seeded request always uses the n-th number of the seed's stream.
func (s *Sampler) Sample(logits []float32) int {
	if len(logits) == 0 {
		panic("sample: Sample called with empty logits")
	}
	uniform := s.rng.Float64()
	work := s.penalize(logits)
	if s.temperature == 0 || s.topK == 1 {
		return argmax(work)
	}

	var cands []candidate
	sorted := false
	if s.topK > 0 && s.topK < len(work) {
		cands = topN(s.cands[:0], work, s.topK)
		sorted = true
	} else {
		cands = s.cands[:0]
		for id, logit := range work {
			if logit != float32(math.Inf(-1)) {
				cands = append(cands, candidate{id: id, score: float64(logit)})
			}
		}
	}
	cands = s.toWeights(cands)
	if len(cands) == 0 {
		return argmax(work)
	}
	if s.topP < 1 {
		cands = nucleus(cands, s.topP, sorted)
	}
	if s.minP > 0 {
		cands = keepAboveMinP(cands, s.minP)
	}
	return inverseCDF(cands, uniform)
}

// penalize copies logits into the sampler's scratch buffer, turning NaN into
// -Inf, and applies the penalties there.
func (s *Sampler) penalize(logits []float32) []float32 {
	if cap(s.work) < len(logits) {
		s.work = make([]float32, len(logits))
		s.cands = make([]candidate, 0, len(logits))
	}
	work := s.work[:len(logits)]
	for i, logit := range logits {
		if logit != logit {
			logit = float32(math.Inf(-1))
		}
		work[i] = logit
	}
	for _, t := range s.penalized {
		if t.id >= len(work) {
			continue // an id the model's vocabulary does not have
		}
		logit := float64(work[t.id])
		if s.repetitionPenalty != 1 {
			// HF/vLLM: dividing a positive logit and multiplying a negative
			// one both make the token less likely.
			if logit > 0 {
				logit /= s.repetitionPenalty
			} else {
				logit *= s.repetitionPenalty
			}
		}
		if t.outputCount > 0 {
			logit -= s.frequencyPenalty*float64(t.outputCount) + s.presencePenalty
		}
		work[t.id] = float32(logit)
	}
	return work
}

// toWeights replaces each logit score by exp((logit - max) / T), the
// unnormalized probability, and drops tokens whose weight underflows to 0
// (they could never be drawn). Order is kept. The largest weight is 1.
func (s *Sampler) toWeights(cands []candidate) []candidate {
	maxLogit := math.Inf(-1)
	for _, c := range cands {
		maxLogit = max(maxLogit, c.score)
	}
	kept := cands[:0]
	for _, c := range cands {
		var w float64
		switch {
		case math.IsInf(maxLogit, 1):
			// The limit of softmax: the +Inf tokens share all the mass.
			if math.IsInf(c.score, 1) {
				w = 1
			}
		default:
			w = math.Exp((c.score - maxLogit) / s.temperature)
		}
		if w > 0 {
			kept = append(kept, candidate{id: c.id, score: w})
		}
	}
	return kept
}

// argmax returns the index of the largest value, the lowest index on ties.
// work holds no NaN.
func argmax(work []float32) int {
	best := 0
	for i, v := range work {
		if v > work[best] {
			best = i
		}
	}
	return best
}

// better orders candidates by score descending, then id ascending. NaN
// scores rank below every number (cmp.Compare's order).
func better(a, b candidate) bool {
	if order := cmp.Compare(a.score, b.score); order != 0 {
		return order > 0
	}
	return a.id < b.id
}

func compareCandidates(a, b candidate) int {
	switch {
	case better(a, b):
		return -1
	case better(b, a):
		return 1
	}
	return 0
}

// topN writes into dst[:0] the n best entries of scores (see better), sorted
// best first. It keeps a min-heap of the n best so far, O(len · log n): with
// n ≪ vocabulary most tokens are rejected by one comparison with the root.
func topN(dst []candidate, scores []float32, n int) []candidate {
	heap := dst[:0]
	n = min(n, len(scores))
	for id, v := range scores {
		c := candidate{id: id, score: float64(v)}
		if len(heap) < n {
			heap = append(heap, c)
			siftUp(heap, len(heap)-1)
			continue
		}
		if better(c, heap[0]) {
			heap[0] = c
			siftDown(heap, 0)
		}
	}
	slices.SortFunc(heap, compareCandidates)
	return heap
}

// The heap keeps its worst candidate at the root.
func siftUp(heap []candidate, i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if !better(heap[parent], heap[i]) {
			return
		}
		heap[parent], heap[i] = heap[i], heap[parent]
		i = parent
	}
}

func siftDown(heap []candidate, i int) {
	for {
		worst := i
		for _, child := range [2]int{2*i + 1, 2*i + 2} {
			if child < len(heap) && better(heap[worst], heap[child]) {
				worst = child
			}
		}
		if worst == i {
			return
		}
		heap[i], heap[worst] = heap[worst], heap[i]
		i = worst
	}
}

// nucleus keeps the smallest most-likely prefix of cands whose weight reaches
// topP of the total; a token is kept while the weight strictly ahead of it is
// below that. cands holds weights; sorted says it is already best-first.
//
// Unsorted (no top-k), a full sort of a 150K vocabulary would dominate the
// step, so the nucleus is first bounded by weight buckets: bucket b holds the
// weights in (2^-(b+1), 2^-b] (weights are ≤ 1), so the tokens of buckets
// 0..b are exactly the tokens above a threshold, a best-first prefix. Only
// the buckets needed to reach topP are sorted; usually a few hundred tokens.
func nucleus(cands []candidate, topP float64, sorted bool) []candidate {
	total := 0.0
	for _, c := range cands {
		total += c.score
	}
	target := topP * total
	if !sorted {
		prefix := boundNucleus(cands, target)
		slices.SortFunc(cands[:prefix], compareCandidates)
		if cut, ok := cutNucleus(cands[:prefix], target); ok {
			return cands[:cut]
		}
		// Summation order left the bucket bound a hair short; sort it all.
		slices.SortFunc(cands, compareCandidates)
	}
	cut, _ := cutNucleus(cands, target)
	return cands[:cut]
}

// cutNucleus returns how many best-first candidates to keep for target mass,
// and whether the mass ahead of the first dropped token reached target.
func cutNucleus(cands []candidate, target float64) (int, bool) {
	ahead := 0.0
	for i, c := range cands {
		if ahead >= target {
			return i, true
		}
		ahead += c.score
	}
	return len(cands), ahead >= target
}

const weightBuckets = 64

// weightBucket is floor(-log2(w)) for w in (0, 1], clamped to the last bucket,
// read from the float64 exponent bits.
func weightBucket(w float64) int {
	b := 1023 - int(math.Float64bits(w)>>52&0x7ff)
	return min(max(b, 0), weightBuckets-1)
}

// boundNucleus moves to the front of cands every token of the fewest top
// buckets whose mass reaches target, and returns how many it moved.
func boundNucleus(cands []candidate, target float64) int {
	var mass [weightBuckets]float64
	for _, c := range cands {
		mass[weightBucket(c.score)] += c.score
	}
	last, cum := weightBuckets-1, 0.0
	for b := range mass {
		cum += mass[b]
		if cum >= target {
			last = b
			break
		}
	}
	front := 0
	for i, c := range cands {
		if weightBucket(c.score) <= last {
			cands[front], cands[i] = cands[i], cands[front]
			front++
		}
	}
	return front
}

// keepAboveMinP keeps, in order, the candidates with weight >= minP times the
// largest weight. The ratio is the same before and after normalization.
func keepAboveMinP(cands []candidate, minP float64) []candidate {
	largest := 0.0
	for _, c := range cands {
		largest = max(largest, c.score)
	}
	threshold := minP * largest
	kept := cands[:0]
	for _, c := range cands {
		if c.score >= threshold {
			kept = append(kept, c)
		}
	}
	return kept
}

// inverseCDF draws from the distribution cands' weights define, normalized
// in float64, with the uniform u in [0, 1). cands is not empty.
func inverseCDF(cands []candidate, u float64) int {
	total := 0.0
	for _, c := range cands {
		total += c.score
	}
	target := u * total
	acc := 0.0
	for _, c := range cands {
		acc += c.score
		if target < acc {
			return c.id
		}
	}
	// Rounding put target at the very end of the last bucket.
	return cands[len(cands)-1].id
}
