package tensor

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestBF16Slices converts random and special values both ways, with the
// assembly (where this CPU has it) and the Go loops, against the scalar
// F32ToBF16 and BF16ToF32, at lengths around the kernels' 16.
func TestBF16Slices(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	special := []float32{0, float32(math.Copysign(0, -1)), 1, -1, float32(math.Inf(1)), float32(math.Inf(-1)),
		float32(math.NaN()), math.Float32frombits(0x7f800001), math.Float32frombits(0xffc00001), // NaNs, signalling and quiet
		math.Float32frombits(0x3f808000), math.Float32frombits(0x3f818000), // ties: to even down, to even up
		math.Float32frombits(0x00000001), math.Float32frombits(0x007fffff), // subnormals
		math.Float32frombits(0x7f7fffff), // rounds up to infinity
	}
	prev := convertAsm
	defer func() { convertAsm = prev }()
	for _, fast := range []bool{false, prev} {
		convertAsm = fast
		for _, n := range []int{0, 1, 15, 16, 17, 33, 64, 1000} {
			src := make([]float32, n)
			for i := range src {
				if i < len(special) && n >= len(special) {
					src[i] = special[i]
				} else {
					src[i] = math.Float32frombits(rng.Uint32())
				}
			}
			enc := make([]byte, 2*n)
			EncodeBF16(enc, src)
			for i, v := range src {
				if got, want := uint16(enc[2*i])|uint16(enc[2*i+1])<<8, F32ToBF16(v); got != want {
					t.Fatalf("asm=%v n=%d: EncodeBF16 of %#08x = %#04x, want %#04x", fast, n, math.Float32bits(v), got, want)
				}
			}
			dec := make([]float32, n)
			DecodeBF16(dec, enc)
			for i := range dec {
				h := uint16(enc[2*i]) | uint16(enc[2*i+1])<<8
				if math.Float32bits(dec[i]) != math.Float32bits(BF16ToF32(h)) {
					t.Fatalf("asm=%v n=%d: DecodeBF16 of %#04x = %v", fast, n, h, dec[i])
				}
			}
		}
	}
}

// BenchmarkConvertSlices converts 768 values (a stories110M KV row) to
// and from bf16 and FP8 E4M3, in cache, with the Go loops and the
// assembly: GB/s of float32.
func BenchmarkConvertSlices(b *testing.B) {
	src := make([]float32, 768)
	for i := range src {
		src[i] = float32(i) / 7
	}
	enc := make([]byte, 2*len(src))
	dst := make([]float32, len(src))
	prev := convertAsm
	defer func() { convertAsm = prev }()
	for _, fast := range []bool{false, prev} {
		convertAsm = fast
		name := "go"
		if fast {
			name = "asm"
		}
		for op, fn := range map[string]func(){
			"bf16/encode": func() { EncodeBF16(enc, src) },
			"bf16/decode": func() { DecodeBF16(dst, enc) },
			"fp8/encode":  func() { EncodeFP8E4M3(enc, src, 0.5) },
			"fp8/decode":  func() { DecodeFP8E4M3(dst, enc[:len(dst)], 2) },
		} {
			b.Run(op+"/"+name, func(b *testing.B) {
				b.SetBytes(int64(4 * len(src)))
				for b.Loop() {
					fn()
				}
			})
		}
	}
}

// TestFP8Slices encodes and decodes FP8 E4M3 slices with a scale, with the
// assembly and the Go loops, against the scalar F32ToFP8E4M3 and
// FP8E4M3ToF32: every code, random floats over the whole range and
// around E4M3's (subnormals, rounding ties, the 448 saturation), NaNs,
// infinities and signed zeros.
func TestFP8Slices(t *testing.T) {
	rng := rand.New(rand.NewPCG(43, 44))
	var src []float32
	for c := range 256 { // every code's value, and the midpoints to the next
		v := FP8E4M3ToF32(uint8(c))
		src = append(src, v, math.Float32frombits(math.Float32bits(v)+1), math.Float32frombits(math.Float32bits(v)-1))
		if c&0x7f < 0x7e {
			mid := (v + FP8E4M3ToF32(uint8(c+1))) / 2
			src = append(src, mid, math.Nextafter32(mid, 0), math.Nextafter32(mid, 1000))
		}
	}
	src = append(src, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), float32(math.Copysign(0, -1)),
		448, 449, 463.99, 464, 1e30, -1e30, 1e-30, math.SmallestNonzeroFloat32)
	for range 100000 {
		src = append(src, math.Float32frombits(rng.Uint32()))
		src = append(src, float32(rng.NormFloat64()*float64([]float32{0.001, 0.1, 10, 300}[rng.IntN(4)])))
	}
	prev := convertAsm
	defer func() { convertAsm = prev }()
	for _, fast := range []bool{false, prev} {
		convertAsm = fast
		for _, scale := range []float32{1, 0.37} {
			for _, n := range []int{0, 7, 8, 9, len(src)} {
				in := src[:n]
				enc := make([]byte, n)
				EncodeFP8E4M3(enc, in, 1/scale)
				for i, v := range in {
					if want := F32ToFP8E4M3(v * (1 / scale)); enc[i] != want {
						t.Fatalf("asm=%v scale=%v: EncodeFP8E4M3 of %v (%#08x) = %#02x, want %#02x", fast, scale, v, math.Float32bits(v), enc[i], want)
					}
				}
				dec := make([]float32, n)
				DecodeFP8E4M3(dec, enc, scale)
				for i, b := range enc {
					want := FP8E4M3ToF32(b) * scale
					if got := dec[i]; math.Float32bits(got) != math.Float32bits(want) && !(got != got && want != want) {
						t.Fatalf("asm=%v scale=%v: DecodeFP8E4M3 of %#02x = %v, want %v", fast, scale, b, got, want)
					}
				}
			}
		}
	}
}
