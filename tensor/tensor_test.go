package tensor

import (
	"bytes"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestF16RoundTrip(t *testing.T) {
	for h := range 1 << 16 {
		f := F16ToF32(uint16(h))
		if f != f {
			continue
		}
		if back := F32ToF16(f); back != uint16(h) {
			t.Fatalf("f16 %#04x -> %v -> %#04x", h, f, back)
		}
	}
	if F32ToF16(1.0009765625/2+0.5) != F32ToF16(1) { // halfway rounds to even
		t.Error("halfway case did not round to even")
	}
}

func TestBF16(t *testing.T) {
	for _, f := range []float32{0, 1, -2.5, 3.140625, 0.15625, 65280} {
		if got := BF16ToF32(F32ToBF16(f)); got != f {
			t.Errorf("bf16 round trip of %v gave %v", f, got)
		}
	}
	// 1 + 2^-8 is halfway between bf16 1 and 1+2^-7: ties to even (1).
	if got := BF16ToF32(F32ToBF16(1 + 1.0/256)); got != 1 {
		t.Errorf("tie rounded to %v", got)
	}
}

func TestFP8E4M3(t *testing.T) {
	cases := map[float32]float32{0: 0, 1: 1, 448: 448, 1000: 448, -1000: -448, 0.0625: 0.0625, 1.0625: 1, 1.1875: 1.25, 0.001953125: 0.001953125}
	for in, want := range cases {
		if got := FP8E4M3ToF32(F32ToFP8E4M3(in)); got != want {
			t.Errorf("fp8(%v) = %v, want %v", in, got, want)
		}
	}
	for b := range 256 {
		f := FP8E4M3ToF32(uint8(b))
		if math.IsNaN(float64(f)) {
			continue
		}
		if got := F32ToFP8E4M3(f); FP8E4M3ToF32(got) != f {
			t.Errorf("code %#02x (%v) re-encodes to %#02x", b, f, got)
		}
	}
}

func TestQ8_0Decode(t *testing.T) {
	block := make([]byte, 34)
	h := F32ToF16(0.5)
	block[0], block[1] = byte(h), byte(h>>8)
	for j := range 32 {
		block[2+j] = byte(int8(j - 16))
	}
	w := Weight{Name: "q", DType: Q8_0, Shape: []int{1, 32}, Data: block}
	if err := w.Validate(); err != nil {
		t.Fatal(err)
	}
	got := w.Float32()
	for j, v := range got {
		if v != 0.5*float32(j-16) {
			t.Fatalf("value %d = %v", j, v)
		}
	}
	bad := Weight{Name: "bad", DType: Q8_0, Shape: []int{1, 30}, Data: block}
	if bad.Validate() == nil {
		t.Error("a Q8_0 row of 30 values validated")
	}
}

func TestConvert(t *testing.T) {
	values := make([]float32, 64)
	for i := range values {
		values[i] = float32(i-30) / 7
	}
	w := FromFloat32("w", values, 2, 32)
	for _, to := range []DType{F32, F16, BF16, Q8_0, FP8E4M3} {
		c, err := Convert(w, to)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
		tol := map[DType]float64{F32: 0, F16: 1e-3, BF16: 8e-3, Q8_0: 4.3 / 127 / 2 * 1.01, FP8E4M3: 0.13}[to]
		for i, v := range c.Float32() {
			if d := math.Abs(float64(v - values[i])); d > tol*math.Max(1, math.Abs(float64(values[i]))) {
				t.Errorf("%v: value %d = %v, want %v", to, i, v, values[i])
			}
		}
	}
	if _, err := Convert(FromFloat32("odd", values[:30], 1, 30), Q8_0); err == nil {
		t.Error("Q8_0 conversion of a 30-wide row succeeded")
	}
	for _, name := range []string{"float32", "bf16", "Float16", "q8_0"} {
		if _, err := ParseDType(name); err != nil {
			t.Error(err)
		}
	}
	if _, err := ParseDType("int4"); err == nil {
		t.Error("ParseDType accepted int4")
	}
}

// TestQuantizeRoundTrip quantises smooth and rough rows into each format
// gosling writes and wants them back within the format's step.
func TestQuantizeRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		d   DType
		tol float32 // relative to the row's largest magnitude
	}{
		{Q4_0, 0.15}, {Q4_K, 0.08}, {Q5_K, 0.04}, {Q6_K, 0.02}, {IQ4_NL, 0.1}, {IQ4_XS, 0.1},
		{MXFP4, 0.26}, {AWQ4_G32, 0.14}, {AWQ4_G64, 0.14}, {AWQ4_G128, 0.14},
	} {
		x := make([]float32, 512)
		for i := range x {
			x[i] = float32(math.Sin(float64(i)*0.37)) * float32(1+i%7)
		}
		w, err := Convert(FromFloat32("w", x, 2, 256), tc.d)
		if err != nil {
			t.Fatal(err)
		}
		got := w.Float32()
		for i := range x {
			if e := float32(math.Abs(float64(got[i] - x[i]))); e > tc.tol*7 {
				t.Fatalf("%v value %d: %g, want %g ± %g", tc.d, i, got[i], x[i], tc.tol*7)
			}
		}
	}
	if _, err := Q4_K.RowBytes(100); err == nil || !strings.Contains(err.Error(), "Q4_K row of 100 values") {
		t.Errorf("Q4_K.RowBytes(100): %v", err)
	}
}

// TestLazily: a lazily converted weight reads, row by row and when made
// whole, what Convert stores.
func TestLazily(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const rows, cols = 37, 96
	vals := make([]float32, rows*cols)
	for i := range vals {
		vals[i] = float32(rng.NormFloat64()) * float32(math.Exp(rng.NormFloat64()))
	}
	src := FromFloat32("w", vals, rows, cols)
	for _, to := range []DType{F32, BF16, F16, Q8_0} {
		want, err := Convert(src, to)
		if err != nil {
			t.Fatal(err)
		}
		lazy := Lazily(src, to)
		if err := lazy.Validate(); err != nil {
			t.Fatal(err)
		}
		whole, err := lazy.Materialize()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(whole.Data, want.Data) {
			t.Errorf("%v: Materialize differs from Convert", to)
		}
		got, exp := make([]float32, cols), make([]float32, cols)
		for r := range rows {
			lazy.DecodeRow(r, got)
			want.DecodeRow(r, exp)
			if !slices.Equal(got, exp) {
				t.Fatalf("%v: row %d differs from Convert's", to, r)
			}
		}
		if !slices.Equal(lazy.Float32(), want.Float32()) {
			t.Errorf("%v: Float32 differs from Convert's", to)
		}
	}
}
