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
//  4. Top-k: keep the k highest logits; exactly k, a tie at the k-th place
//     going to the lower id (vLLM keeps every token tied with the k-th).
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
	"math"
	mathrand "math/rand/v2"
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

	seed uint64
	rng  *rng

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

// NewSampler prepares the sampler for one request; promptIDs feed the
// repetition penalty. It does not validate p (call Params.Validate at the API
// boundary); values Validate rejects fall back to their neutral value here
// (temperature 1, top-p 1, min-p 0, repetition penalty 1; a negative
// temperature means greedy), so Sample never computes with NaNs.
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
		seed:              seed,
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

// Settings are a sampler's parameters after NewSampler's normalisation,
// for a sampler that runs elsewhere (on a GPU).
type Settings struct {
	Temperature float64 // 0: greedy
	TopK        int     // 0: off
	TopP        float64 // 1: off
	MinP        float64 // 0: off
	// Seed is Params.Seed, or the random seed NewSampler drew for it.
	Seed uint64
	// Penalties reports a repetition, frequency or presence penalty, which
	// need the sampler's own token counts.
	Penalties bool
}

// Settings returns the normalised parameters.
func (s *Sampler) Settings() Settings {
	return Settings{
		Temperature: s.temperature, TopK: s.topK, TopP: s.topP, MinP: s.minP,
		Seed: s.seed, Penalties: s.penaltiesOn(),
	}
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
	scores, best, greedy := s.score(logits)
	if greedy {
		return best
	}
	return inverseCDF(s.filter(scores, float64(scores[best])), uniform)
}

// score is step 1 and 2 of the pipeline: the penalized scores, their
// argmax, and whether that argmax is the answer (greedy).
func (s *Sampler) score(logits []float32) (scores []float32, best int, greedy bool) {
	scores = logits
	if len(s.penalized) > 0 {
		scores = s.penalize(logits)
	}
	best = argmax(scores)
	maxLogit := float64(scores[best])
	return scores, best, s.temperature == 0 || s.topK == 1 || !(maxLogit > math.Inf(-1))
}

// filter is steps 3–6 of the pipeline: the tokens that can be drawn, each
// with its unnormalized probability (in s.cands).
func (s *Sampler) filter(scores []float32, maxLogit float64) []candidate {
	if cap(s.cands) < len(scores) {
		s.cands = make([]candidate, 0, len(scores))
	}
	cands, sorted := s.weigh(scores, maxLogit)
	if s.topP < 1 {
		cands = nucleus(cands, s.topP, sorted)
	}
	if s.minP > 0 {
		cands = keepAboveMinP(cands, s.minP)
	}
	return cands
}

// penalize copies logits into the sampler's scratch buffer and applies the
// penalties there.
func (s *Sampler) penalize(logits []float32) []float32 {
	if cap(s.work) < len(logits) {
		s.work = make([]float32, len(logits))
	}
	work := s.work[:len(logits)]
	copy(work, logits)
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

// underflowExponent is below log(smallest subnormal float64) ≈ -744.4, so
// exp of anything smaller is exactly 0.
const underflowExponent = -750

// weigh returns the tokens that can still be drawn after top-k, each with
// its unnormalized probability exp((logit - maxLogit) / T); the largest
// weight is 1. sorted reports whether they come best-first (see better).
//
// Without top-k it skips, before calling exp, the tokens whose weight is
// exactly 0 and, when min-p is the only filter left, those min-p will drop:
// exp dominates this function, and most of a vocabulary is far below the max.
func (s *Sampler) weigh(scores []float32, maxLogit float64) (cands []candidate, sorted bool) {
	cands = s.cands[:0]
	if math.IsInf(maxLogit, 1) {
		// The limit of softmax: the +Inf tokens share all the mass.
		for id, logit := range scores {
			if math.IsInf(float64(logit), 1) {
				cands = append(cands, candidate{id: id, score: 1})
			}
		}
		return cands, true // equal weights in id order
	}
	inverseTemperature := 1 / s.temperature
	if s.topK > 0 && s.topK < len(scores) {
		selected := topN(cands, scores, s.topK)
		kept := selected[:0]
		for _, c := range selected {
			if w := math.Exp((c.score - maxLogit) * inverseTemperature); w > 0 {
				kept = append(kept, candidate{id: c.id, score: w})
			}
		}
		return kept, true
	}
	floor := float64(underflowExponent)
	if s.minP > 0 && s.topP == 1 {
		// Superset of min-p's cut w >= minP; keepAboveMinP makes it exact.
		floor = max(floor, math.Log(s.minP)-1e-9)
	}
	for id, logit := range scores {
		if x := (float64(logit) - maxLogit) * inverseTemperature; x >= floor { // false for NaN and -Inf
			cands = append(cands, candidate{id: id, score: math.Exp(x)})
		}
	}
	return cands, false
}

// argmax returns the index of the largest value, the lowest index on ties,
// skipping NaN; 0 if nothing is above -Inf.
func argmax(scores []float32) int {
	best, bestScore := 0, float32(math.Inf(-1))
	for i, v := range scores {
		if v > bestScore {
			best, bestScore = i, v
		}
	}
	return best
}

// Argmax is the greedy draw from scores: the highest, the lowest id on
// ties (as Sample at temperature 0).
func Argmax(scores []float32) int { return argmax(scores) }
