package sample

import "math"

// TokenLogprob is one token and its log-probability.
type TokenLogprob struct {
	ID      int
	Logprob float32
}

// LogSoftmax writes the log-probabilities of logits into out[:len(logits)]:
// (logit - max) - log Σ exp(logit - max), accumulated in float64 so that a
// 150K vocabulary of float32 logits loses no precision in the sum.
//
// NaN and -Inf logits get -Inf. If some logits are +Inf they share all the
// mass (the limit of softmax). If no logit is above -Inf there is no
// distribution, and every output is -Inf. out may be logits itself.
func LogSoftmax(logits []float32, out []float32) {
	if len(out) < len(logits) {
		panic("sample: LogSoftmax output shorter than logits")
	}
	out = out[:len(logits)]
	negInf := float32(math.Inf(-1))

	maxLogit := math.Inf(-1)
	for _, logit := range logits {
		if float64(logit) > maxLogit { // false for NaN
			maxLogit = float64(logit)
		}
	}
	switch {
	case math.IsInf(maxLogit, -1):
		for i := range out {
			out[i] = negInf
		}
		return
	case math.IsInf(maxLogit, 1):
		infinite := 0
		for _, logit := range logits {
			if math.IsInf(float64(logit), 1) {
				infinite++
			}
		}
		share := float32(-math.Log(float64(infinite)))
		for i, logit := range logits {
			out[i] = negInf
			if math.IsInf(float64(logit), 1) {
				out[i] = share
			}
		}
		return
	}

	sum := 0.0
	for _, logit := range logits {
		if logit == logit {
			sum += math.Exp(float64(logit) - maxLogit)
		}
	}
	// (logit - max) - log(sum), not logit - (max + log(sum)): near 3e38 the
	// float64 spacing is far wider than log(sum), which would be lost.
	logSum := math.Log(sum)
	for i, logit := range logits {
		if logit != logit {
			out[i] = negInf
			continue
		}
		out[i] = float32((float64(logit) - maxLogit) - logSum)
	}
}

// TopN returns the n most likely tokens of logprobs, most likely first, ties
// to the lower id; fewer when logprobs is shorter than n, none when n <= 0.
// It selects with a size-n heap, so n = 20 over 150K tokens sorts nothing big.
func TopN(logprobs []float32, n int) []TokenLogprob {
	if n <= 0 || len(logprobs) == 0 {
		return nil
	}
	best := topN(make([]candidate, 0, min(n, len(logprobs))), logprobs, n)
	result := make([]TokenLogprob, len(best))
	for i, c := range best {
		result[i] = TokenLogprob{ID: c.id, Logprob: float32(c.score)}
	}
	return result
}
