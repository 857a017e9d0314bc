package cpu

import (
	"math"

	"github.com/gosling-ai/gosling/model"
)

// Rope applies rotary position embeddings to heads of width HeadDim.
type Rope struct {
	HeadDim     int
	Interleaved bool      // rotate adjacent pairs instead of halves
	InvFreq     []float32 // [HeadDim/2]
}

// NewRope computes the inverse frequencies, applying llama3 or linear
// scaling when configured. They are float32, as both transformers and
// llama2.c compute them, so angles round the same way.
func NewRope(headDim int, theta float64, scaling *model.RopeScaling, interleaved bool) *Rope {
	half := headDim / 2
	inv := make([]float32, half)
	for i := range half {
		inv[i] = float32(1 / math.Pow(theta, float64(2*i)/float64(headDim)))
	}
	if scaling != nil {
		switch scaling.Type {
		case "linear":
			for i := range inv {
				inv[i] /= float32(scaling.Factor)
			}
		case "llama3":
			// Frequencies with long wavelengths are divided by the factor,
			// short ones kept, and the band between interpolated smoothly.
			lowWavelen := float64(scaling.OriginalMaxPositionEmbeddings) / scaling.LowFreqFactor
			highWavelen := float64(scaling.OriginalMaxPositionEmbeddings) / scaling.HighFreqFactor
			for i, f := range inv {
				wavelen := 2 * math.Pi / float64(f)
				switch {
				case wavelen < highWavelen:
				case wavelen > lowWavelen:
					inv[i] = f / float32(scaling.Factor)
				default:
					smooth := (float64(scaling.OriginalMaxPositionEmbeddings)/wavelen - scaling.LowFreqFactor) / (scaling.HighFreqFactor - scaling.LowFreqFactor)
					inv[i] = float32((1-smooth)*float64(f)/scaling.Factor + smooth*float64(f))
				}
			}
		}
	}
	return &Rope{HeadDim: headDim, Interleaved: interleaved, InvFreq: inv}
}

// Apply rotates every head of every row of x in place.
//
//	x: [T, heads*HeadDim], positions: [T]
func (r *Rope) Apply(x []float32, rowWidth int, positions []int32) {
	half := r.HeadDim / 2
	cos := make([]float32, half)
	sin := make([]float32, half)
	for t, pos := range positions {
		for i, f := range r.InvFreq {
			angle := float32(pos) * f
			cos[i] = float32(math.Cos(float64(angle)))
			sin[i] = float32(math.Sin(float64(angle)))
		}
		row := x[t*rowWidth : (t+1)*rowWidth]
		for h := 0; h+r.HeadDim <= rowWidth; h += r.HeadDim {
			head := row[h : h+r.HeadDim]
			for i := range half {
				var a, b *float32
				if r.Interleaved {
					a, b = &head[2*i], &head[2*i+1]
				} else {
					a, b = &head[i], &head[i+half]
				}
				x0, x1 := *a, *b
				*a = x0*cos[i] - x1*sin[i]
				*b = x0*sin[i] + x1*cos[i]
			}
		}
	}
}
