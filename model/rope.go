package model

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// RopeTypes are the rope_type values transformers defines ("default" is
// plain RoPE and never reaches RopeScaling). Any other value is refused at
// parse time: a model whose positions are encoded differently would run
// with no error and wrong output.
var RopeTypes = []string{"linear", "dynamic", "yarn", "longrope", "llama3"}

// checkRopeScaling reports a scaling that cannot be computed, naming the
// field (key is "rope_scaling" or "rope_parameters").
func checkRopeScaling(s *RopeScaling, key string) error {
	if !slices.Contains(RopeTypes, s.Type) {
		return fmt.Errorf("%s.rope_type %q is not supported (supported: default, %s)", key, s.Type, strings.Join(RopeTypes, ", "))
	}
	switch {
	case (s.Type == "linear" || s.Type == "dynamic" || s.Type == "llama3") && s.Factor <= 0:
		return fmt.Errorf("%s.factor must be positive for rope_type %s, got %v", key, s.Type, s.Factor)
	case s.Type == "llama3" && (s.OriginalMaxPositionEmbeddings <= 0 || s.HighFreqFactor <= s.LowFreqFactor):
		return fmt.Errorf("%s: llama3 needs original_max_position_embeddings > 0 and high_freq_factor > low_freq_factor", key)
	case s.Type == "longrope" && (len(s.ShortFactor) == 0 || len(s.ShortFactor) != len(s.LongFactor)):
		return fmt.Errorf("%s: longrope needs short_factor and long_factor of equal length, got %d and %d", key, len(s.ShortFactor), len(s.LongFactor))
	}
	return nil
}

// ropeOrigMax is the trained context YaRN and LongRoPE extend:
// original_max_position_embeddings, else max_position_embeddings.
func (c *Config) ropeOrigMax() float64 {
	if s := c.RopeScaling; s != nil && s.OriginalMaxPositionEmbeddings > 0 {
		return float64(s.OriginalMaxPositionEmbeddings)
	}
	return float64(c.MaxPositions)
}

// RopeFactor is the context extension factor; YaRN and LongRoPE configs
// may leave it to be derived from the two context lengths.
func (c *Config) RopeFactor() float64 {
	s := c.RopeScaling
	if s.Factor > 0 {
		return s.Factor
	}
	if orig := c.ropeOrigMax(); orig > 0 && c.MaxPositions > 0 {
		return float64(c.MaxPositions) / orig
	}
	return 1
}

// RopeInvFreq returns the rotary inverse frequencies for rotating dim
// values (dim/2 of them), with the configured scaling applied. They are
// float32, as transformers and llama2.c compute them, so angles round the
// same way as in the references.
func (c *Config) RopeInvFreq(dim int) []float32 {
	return c.ropeInvFreq(c.RopeTheta, dim)
}

// LocalRopeInvFreq is RopeInvFreq for the sliding-window layers of models
// that give them their own base and no scaling (Gemma 3's
// rope_local_base_freq); the global frequencies when they have none.
func (c *Config) LocalRopeInvFreq(dim int) []float32 {
	if c.RopeLocalTheta <= 0 {
		return c.RopeInvFreq(dim)
	}
	return plainInvFreq(c.RopeLocalTheta, dim)
}

func plainInvFreq(base float64, dim int) []float32 {
	inv := make([]float32, dim/2)
	for i := range inv {
		inv[i] = float32(1 / math.Pow(base, float64(2*i)/float64(dim)))
	}
	return inv
}

func (c *Config) ropeInvFreq(base float64, dim int) []float32 {
	inv := plainInvFreq(base, dim)
	s := c.RopeScaling
	if s == nil {
		return inv
	}
	switch s.Type {
	case "linear":
		for i := range inv {
			inv[i] /= float32(s.Factor)
		}
	case "llama3":
		// Long wavelengths are divided by the factor, short ones kept, and
		// the band between interpolated smoothly.
		orig := float64(s.OriginalMaxPositionEmbeddings)
		lowWavelen, highWavelen := orig/s.LowFreqFactor, orig/s.HighFreqFactor
		for i, f := range inv {
			wavelen := 2 * math.Pi / float64(f)
			switch {
			case wavelen < highWavelen:
			case wavelen > lowWavelen:
				inv[i] = f / float32(s.Factor)
			default:
				smooth := (orig/wavelen - s.LowFreqFactor) / (s.HighFreqFactor - s.LowFreqFactor)
				inv[i] = float32((1-smooth)*float64(f)/s.Factor + smooth*float64(f))
			}
		}
	case "yarn":
		return YarnInvFreq(base, dim, c.RopeFactor(), s.BetaFast, s.BetaSlow, c.ropeOrigMax(), !s.NoTruncate)
	case "longrope":
		// transformers picks the factors by the current sequence length:
		// short_factor up to original_max_position_embeddings, long_factor
		// beyond. A paged cache keeps keys rotated once, so one set must
		// serve every length: long_factor when the model is run past its
		// original context (max_position_embeddings beyond it, the
		// engine's default context length), as Phi-3's long-context
		// checkpoints are meant to be.
		ext := s.ShortFactor
		if float64(c.MaxPositions) > c.ropeOrigMax() {
			ext = s.LongFactor
		}
		for i := range inv {
			inv[i] = float32(1 / (ext[min(i, len(ext)-1)] * math.Pow(base, float64(2*i)/float64(dim))))
		}
		// "dynamic" (NTK) changes the base only for sequences longer than
		// max_position_embeddings, the engine's default context length:
		// within it the frequencies are the plain ones.
	}
	return inv
}

// RopeAttentionFactor is what YaRN and LongRoPE multiply cos and sin by
// (1 for the other types). Scaling both q and k by it scales their scores
// by its square, which a model folds into the attention scale.
func (c *Config) RopeAttentionFactor() float64 {
	s := c.RopeScaling
	if s == nil || (s.Type != "yarn" && s.Type != "longrope") {
		return 1
	}
	if s.AttentionFactor > 0 {
		return s.AttentionFactor
	}
	factor := c.RopeFactor()
	if s.Type == "longrope" {
		if factor <= 1 {
			return 1
		}
		return math.Sqrt(1 + math.Log(factor)/math.Log(c.ropeOrigMax()))
	}
	if s.MScale != 0 && s.MScaleAllDim != 0 {
		return YarnMScale(factor, s.MScale) / YarnMScale(factor, s.MScaleAllDim)
	}
	return YarnMScale(factor, 1)
}

// YarnMScale is YaRN's attention temperature correction 0.1·m·ln(s) + 1.
func YarnMScale(scale, m float64) float64 {
	if scale <= 1 {
		return 1
	}
	return 0.1*m*math.Log(scale) + 1
}

// YarnInvFreq blends interpolated (divided by factor) and original
// frequencies: dimensions that rotate more than betaFast times over the
// original context keep their frequency, those under betaSlow are
// interpolated, and a linear ramp joins the two. truncate rounds the
// ramp's ends outward to whole dimensions (transformers' default; GPT-OSS
// turns it off).
func YarnInvFreq(base float64, dim int, factor, betaFast, betaSlow, origMaxPos float64, truncate bool) []float32 {
	if betaFast == 0 {
		betaFast = 32
	}
	if betaSlow == 0 {
		betaSlow = 1
	}
	correctionDim := func(rotations float64) float64 {
		return float64(dim) * math.Log(origMaxPos/(rotations*2*math.Pi)) / (2 * math.Log(base))
	}
	low, high := correctionDim(betaFast), correctionDim(betaSlow)
	if truncate {
		low, high = math.Floor(low), math.Ceil(high)
	}
	low, high = max(low, 0), min(high, float64(dim-1))
	if low == high {
		high += 0.001 // as the reference does, to avoid dividing by zero
	}
	half := dim / 2
	inv := make([]float32, half)
	for i := range half {
		// float32 like the reference's ramp and frequencies.
		posFreq := float32(math.Pow(base, float64(2*i)/float64(dim)))
		ramp := min(max(float32((float64(i)-low)/(high-low)), 0), 1)
		extrapolation := 1 - ramp
		inv[i] = 1/(float32(factor)*posFreq)*(1-extrapolation) + 1/posFreq*extrapolation
	}
	return inv
}
