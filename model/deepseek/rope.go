package deepseek

import (
	"math"

	"github.com/gosling-ai/gosling/model"
)

// ropeParams returns the rotary inverse frequencies for the dim rope values
// of each head, the factor YaRN multiplies cos and sin by, and the mscale
// whose square multiplies the softmax scale (DeepSeek's mscale_all_dim
// correction; 1 without YaRN).
func ropeParams(cfg *model.Config, dim int) (invFreq []float32, ropeFactor float32, mscale float64) {
	s := cfg.RopeScaling
	if s == nil || (s.Type != "yarn" && s.Type != "deepseek_yarn") {
		return cfg.RopeInvFreq(dim), 1, 1
	}
	orig := float64(s.OriginalMaxPositionEmbeddings)
	if orig <= 0 {
		orig = float64(cfg.MaxPositions)
	}
	factor := s.Factor
	if factor <= 0 && orig > 0 {
		factor = float64(cfg.MaxPositions) / orig
	}
	invFreq = yarnInvFreq(cfg.RopeTheta, dim, factor, s.BetaFast, s.BetaSlow, orig)
	attn := yarnMScale(factor, 1)
	if s.MScale != 0 && s.MScaleAllDim != 0 {
		attn = yarnMScale(factor, s.MScale) / yarnMScale(factor, s.MScaleAllDim)
	}
	mscale = 1
	if s.MScaleAllDim != 0 {
		mscale = yarnMScale(factor, s.MScaleAllDim)
	}
	return invFreq, float32(attn), mscale
}

// yarnMScale is YaRN's attention temperature correction 0.1·m·ln(s) + 1.
func yarnMScale(scale, m float64) float64 {
	if scale <= 1 {
		return 1
	}
	return 0.1*m*math.Log(scale) + 1
}

// yarnInvFreq blends interpolated (divided by factor) and original
// frequencies: dimensions that rotate more than betaFast times over the
// original context keep their frequency, those under betaSlow are
// interpolated, and a linear ramp joins the two.
func yarnInvFreq(base float64, dim int, factor, betaFast, betaSlow, origMaxPos float64) []float32 {
	if betaFast == 0 {
		betaFast = 32
	}
	if betaSlow == 0 {
		betaSlow = 1
	}
	correctionDim := func(rotations float64) float64 {
		return float64(dim) * math.Log(origMaxPos/(rotations*2*math.Pi)) / (2 * math.Log(base))
	}
	low := max(math.Floor(correctionDim(betaFast)), 0)
	high := min(math.Ceil(correctionDim(betaSlow)), float64(dim-1))
	if low == high {
		high += 0.001 // as the reference does, to avoid dividing by zero
	}
	half := dim / 2
	inv := make([]float32, half)
	for i := range half {
		posFreq := math.Pow(base, float64(2*i)/float64(dim))
		extrapolation := 1 - min(max((float64(i)-low)/(high-low), 0), 1)
		inv[i] = float32(1/(factor*posFreq)*(1-extrapolation) + 1/posFreq*extrapolation)
	}
	return inv
}
