package tensor

import (
	"math"
	"testing"
)

func TestQuantizeFP8Row(t *testing.T) {
	for _, tc := range []struct {
		x     []float32
		scale float32
		q     []float32 // decoded quants
	}{
		// max|x| maps to 448; 1.5 lands on an e4m3 value, 1.6 rounds to 1.625.
		{[]float32{896, -448, 3, 3.2, 0, -0.003}, 2, []float32{448, -224, 1.5, 1.625, 0, -0.001953125}},
		{[]float32{0, 0, 0}, 0, []float32{0, 0, 0}},
		// Nine values take the vector path for the first eight.
		{[]float32{1, 2, 3, 4, 5, 6, 7, 8, 448}, 1, []float32{1, 2, 3, 4, 5, 6, 7, 8, 448}},
	} {
		q := make([]byte, len(tc.x))
		if s := QuantizeFP8Row(q, tc.x); s != tc.scale {
			t.Errorf("%v: scale %g, want %g", tc.x, s, tc.scale)
		}
		for i, b := range q {
			if got := FP8E4M3ToF32(b); got != tc.q[i] {
				t.Errorf("%v: quant %d = %g, want %g", tc.x, i, got, tc.q[i])
			}
		}
	}
}

// TestScaledFP8Widen: every element is its quant times its block's scale,
// for blocks that do not divide the shape.
func TestScaledFP8Widen(t *testing.T) {
	const rows, cols = 5, 7
	s := ScaledFP8{Q: Weight{Name: "w", DType: FP8E4M3, Shape: []int{rows, cols}, Data: make([]byte, rows*cols)},
		Scales: []float32{1, 2, 3, 4, 5, 6, 7, 8, 9}, BlockRows: 2, BlockCols: 3}
	for i := range s.Q.Data {
		s.Q.Data[i] = F32ToFP8E4M3(float32(i%13) - 6)
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	got := s.Widen(F32).Float32()
	for r := range rows {
		for c := range cols {
			want := FP8E4M3ToF32(s.Q.Data[r*cols+c]) * s.Scales[(r/2)*3+c/3]
			if got[r*cols+c] != want {
				t.Fatalf("(%d, %d) = %g, want %g", r, c, got[r*cols+c], want)
			}
		}
	}
	s.Scales = s.Scales[:8]
	if err := s.Validate(); err == nil {
		t.Error("8 scales for 9 blocks validated")
	}
	if math.IsNaN(float64(QuantizeFP8Row(make([]byte, 2), []float32{float32(math.NaN()), 1}))) == false {
		t.Error("a NaN row has a finite scale")
	}
}
