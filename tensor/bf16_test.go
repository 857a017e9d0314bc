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
	prev := bf16Fast
	defer func() { bf16Fast = prev }()
	for _, fast := range []bool{false, prev} {
		bf16Fast = fast
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

// BenchmarkBF16Slices converts 768 values (a stories110M KV row), in
// cache, with the Go loops and the assembly.
func BenchmarkBF16Slices(b *testing.B) {
	src := make([]float32, 768)
	for i := range src {
		src[i] = float32(i) / 7
	}
	enc := make([]byte, 2*len(src))
	dst := make([]float32, len(src))
	prev := bf16Fast
	defer func() { bf16Fast = prev }()
	for _, fast := range []bool{false, prev} {
		bf16Fast = fast
		name := "go"
		if fast {
			name = "asm"
		}
		b.Run("encode/"+name, func(b *testing.B) {
			b.SetBytes(int64(4 * len(src)))
			for b.Loop() {
				EncodeBF16(enc, src)
			}
		})
		b.Run("decode/"+name, func(b *testing.B) {
			b.SetBytes(int64(4 * len(src)))
			for b.Loop() {
				DecodeBF16(dst, enc)
			}
		})
	}
}
