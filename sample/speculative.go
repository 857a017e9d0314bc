package sample

// Verify decides one node of a speculative draft tree: given the target
// model's logits at the node and the tokens drafted as the node's children
// (in the drafter's order), it returns the index in drafts of the child
// that is accepted, or -1 and the token to emit instead (the "bonus"
// token, drawn from what is left of the target's distribution).
//
// The drafts are deterministic proposals (their draft probability is one),
// as in SGLang's tree_speculative_sampling_target_only with zero draft
// probabilities and SpecInfer's multi-round rejection: child i is accepted
// with probability p_i / (1 − Σ_{j<i} p_j), where p is the distribution
// Sample draws from (penalties, temperature, top-k, top-p, min-p), and a
// rejected child's mass is removed before the next is tried. The telescoping
// product makes every token's chance of being emitted exactly p, the
// target's distribution, whatever was drafted.
//
// Greedy requests (temperature 0, top-k 1) get Sample's token, the argmax
// with ties to the lowest id, so greedy output is the same with and
// without speculation. Verify takes one number from the RNG per child
// tried plus one for a residual draw (greedy: exactly one, as Sample).
func (s *Sampler) Verify(logits []float32, drafts []int) (accepted, token int) {
	if len(logits) == 0 {
		panic("sample: Verify called with empty logits")
	}
	scores, best, greedy := s.score(logits)
	if greedy {
		s.rng.Float64() // Sample's one draw per step
		for i, d := range drafts {
			if d == best {
				return i, best
			}
		}
		return -1, best
	}
	cands := s.filter(scores, float64(scores[best]))
	total := 0.0
	for _, c := range cands {
		total += c.score
	}
	lastKept := -1 // the last draft tried that had mass
	for i, d := range drafts {
		at := -1
		for k, c := range cands {
			if c.id == d {
				at = k
				break
			}
		}
		u := s.rng.Float64()
		if at < 0 {
			continue // probability 0: always rejected
		}
		w := cands[at].score
		lastKept = i
		if u*total < w {
			return i, d
		}
		total -= w
		cands[at].score = 0
	}
	left := cands[:0]
	for _, c := range cands {
		if c.score > 0 {
			left = append(left, c)
		}
	}
	if len(left) == 0 {
		// Every kept token was drafted and rejected, which only rounding
		// can cause (the last one tried held all the mass left, and
		// u·total < w then holds for every u < 1): accept that one.
		return lastKept, drafts[lastKept]
	}
	return -1, inverseCDF(left, s.rng.Float64())
}
