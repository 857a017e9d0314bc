package vision

import (
	"fmt"
	"slices"

	"github.com/gosling-ai/gosling/model/safetensors"
)

// ReadPixelValues reads a processor's stored output: the "pixel_values"
// tensor of a safetensors file (as the reference models carry), with the
// image's patch grid (image_grid_thw; zero for fixed-size processors).
func ReadPixelValues(path string, grid [3]int) (*Pixels, error) {
	f, err := safetensors.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	w, err := f.Tensor("pixel_values")
	if err != nil {
		return nil, err
	}
	if w.Rows() == 0 {
		return nil, fmt.Errorf("%s: pixel_values is empty", path)
	}
	// Copied: Float32 may alias the memory map, which Close unmaps.
	return &Pixels{Data: slices.Clone(w.Float32()), Shape: slices.Clone(w.Shape), Grid: grid}, nil
}
