package gguf

import (
	"math"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/tensor"
)

// TestBlockFormatsMatchReference decodes testdata/quants.gguf, random
// blocks of every block format with the float32 values gguf-py's reference
// dequantisation gave for them (make_quants.py), and wants every value
// bit for bit.
func TestBlockFormatsMatchReference(t *testing.T) {
	f, err := Open("testdata/quants.gguf")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	checked := 0
	for _, name := range f.Names() {
		if strings.HasSuffix(name, ".f32") {
			continue
		}
		w, err := f.Tensor(name)
		if err != nil {
			t.Fatal(err)
		}
		if w.DType.String() != name {
			t.Errorf("tensor %s loads as %v", name, w.DType)
		}
		ref, err := f.Tensor(name + ".f32")
		if err != nil {
			t.Fatal(err)
		}
		got, want := w.Float32(), ref.Float32()
		bad := 0
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				if bad < 3 {
					t.Errorf("%s value %d (block %d): %g (%#08x), reference %g (%#08x)", name, i, i/tensor.BlockValues(w.DType), got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
				}
				bad++
			}
		}
		if bad > 0 {
			t.Errorf("%s: %d of %d values differ", name, bad, len(want))
		}
		checked++
	}
	if checked != 11 {
		t.Errorf("checked %d formats, want 11", checked)
	}
}
