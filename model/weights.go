package model

import (
	"fmt"
	"slices"

	"github.com/gosling-ai/gosling/tensor"
)

// Expect fetches a tensor and checks its shape, so that a checkpoint that
// does not match its config fails at load with the tensor named, not later
// with an index out of range.
func Expect(ws WeightSource, name string, shape ...int) (tensor.Weight, error) {
	w, err := ws.Tensor(name)
	if err != nil {
		return tensor.Weight{}, err
	}
	if !slices.Equal(w.Shape, shape) {
		return tensor.Weight{}, fmt.Errorf("tensor %s has shape %v, the config implies %v", name, w.Shape, shape)
	}
	return w, nil
}
