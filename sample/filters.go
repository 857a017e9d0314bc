package sample

import (
	"cmp"
	"math"
	"slices"
)

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
		// Ids ascend, so a token that only ties the root never beats it; this
		// one comparison rejects almost every token when n ≪ len(scores).
		if float64(v) <= heap[0].score {
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
