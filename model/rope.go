package model

import "math"

// RopeInvFreq returns the rotary inverse frequencies for rotating dim
// values (dim/2 of them), with the configured scaling applied. They are
// float32, as transformers and llama2.c compute them, so angles round the
// same way as in the references.
func (c *Config) RopeInvFreq(dim int) []float32 {
	half := dim / 2
	inv := make([]float32, half)
	for i := range half {
		inv[i] = float32(1 / math.Pow(c.RopeTheta, float64(2*i)/float64(dim)))
	}
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
	}
	return inv
}
