package bench

import (
	"crypto/sha256"

	"github.com/gosling-ai/gosling/vision"
)

// SyntheticImage is a w×h image whose pixels depend only on their
// position: gradients with a fine texture, so that resampling has
// edges to work on and every run preprocesses the same pixels.
func SyntheticImage(w, h int) *vision.Image {
	img := &vision.Image{RGB: vision.RGB{W: w, H: h, Pix: make([]uint8, 3*w*h)}}
	for y := range h {
		for x := range w {
			p := img.Pix[3*(y*w+x):]
			p[0] = uint8(255 * x / max(w-1, 1))
			p[1] = uint8(255 * y / max(h-1, 1))
			p[2] = uint8((x*x + 3*y) ^ (x * y))
		}
	}
	img.Hash = sha256.Sum256(img.Pix)
	return img
}
