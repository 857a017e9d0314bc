package tensor

import (
	"math"
	"unsafe"
)

// FP8 E4M3 ("e4m3fn" in PyTorch, the OCP format): 1 sign, 4 exponent bits
// (bias 7), 3 mantissa bits, no infinities, 0x7f/0xff are NaN; the largest
// finite value is 448. Used for KV-cache storage with a per-layer scale.

// FP8E4M3Max is the largest finite E4M3 value.
const FP8E4M3Max = 448

var fp8ToF32Table = func() (t [256]float32) {
	for i := range 256 {
		t[i] = fp8E4M3Decode(uint8(i))
	}
	return t
}()

func fp8E4M3Decode(b uint8) float32 {
	sign := float32(1)
	if b&0x80 != 0 {
		sign = -1
	}
	exp := int(b>>3) & 0xf
	mant := float32(b & 7)
	switch {
	case exp == 0xf && b&7 == 7:
		return float32(math.NaN())
	case exp == 0:
		return sign * mant / 8 * float32(math.Ldexp(1, -6))
	}
	return sign * (1 + mant/8) * float32(math.Ldexp(1, exp-7))
}

// FP8E4M3ToF32 decodes one E4M3 byte.
func FP8E4M3ToF32(b uint8) float32 { return fp8ToF32Table[b] }

// F32ToFP8E4M3 encodes with round-to-nearest-even, saturating to ±448
// (as PyTorch's saturating cast used for KV caches does).
func F32ToFP8E4M3(f float32) uint8 {
	if f != f {
		return 0x7f
	}
	var sign uint8
	if math.Signbit(float64(f)) {
		sign = 0x80
		f = -f
	}
	if f >= FP8E4M3Max {
		return sign | 0x7e
	}
	// Binary search over the 127 non-negative finite codes (monotonic).
	lo, hi := uint8(0), uint8(0x7e)
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if fp8ToF32Table[mid] <= f {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	if lo == 0x7e {
		return sign | lo
	}
	below, above := fp8ToF32Table[lo], fp8ToF32Table[lo+1]
	switch d0, d1 := f-below, above-f; {
	case d1 < d0, d1 == d0 && lo&1 == 1:
		lo++
	}
	return sign | lo
}

// DecodeFP8E4M3 sets dst[i] = FP8E4M3ToF32(src[i])·scale.
func DecodeFP8E4M3(dst []float32, src []byte, scale float32) {
	src = src[:len(dst)]
	n := 0
	if convertAsm && len(dst) >= 8 {
		n = len(dst) &^ 7
		fp8ToF32Asm(unsafe.SliceData(dst), unsafe.SliceData(src), n, scale)
	}
	for i := n; i < len(dst); i++ {
		dst[i] = FP8E4M3ToF32(src[i]) * scale
	}
}

// EncodeFP8E4M3 sets dst[i] = F32ToFP8E4M3(src[i]·inv).
func EncodeFP8E4M3(dst []byte, src []float32, inv float32) {
	dst = dst[:len(src)]
	n := 0
	if convertAsm && len(src) >= 8 {
		n = len(src) &^ 7
		f32ToFP8Asm(unsafe.SliceData(dst), unsafe.SliceData(src), n, inv)
	}
	for i := n; i < len(src); i++ {
		dst[i] = F32ToFP8E4M3(src[i] * inv)
	}
}
