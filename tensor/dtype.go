// Package tensor holds the two data types every layer of gosling passes
// around: host activations (T, always float32) and stored weights (Weight,
// in whatever dtype the checkpoint uses, often aliasing a memory map).
package tensor

import (
	"fmt"
	"math"
)

// DType is the element type of stored data.
type DType uint8

const (
	F32 DType = iota
	F16
	BF16
	// Q8_0 is GGUF's block format: blocks of 32 values, each block an f16
	// scale followed by 32 int8 quants (34 bytes); value = scale * quant.
	Q8_0
	// FP8E4M3 is OCP 8-bit float (e4m3fn); see fp8.go.
	FP8E4M3
	// The other GGUF block formats (quant.go): llama.cpp's legacy
	// blocks of 32, its K-quants in super-blocks of 256, and the
	// non-linear IQ4 codebooks.
	Q4_0
	Q4_1
	Q5_0
	Q5_1
	Q2_K
	Q3_K
	Q4_K
	Q5_K
	Q6_K
	IQ4_NL
	IQ4_XS
	// MXFP4 and the AWQ4 formats are the host forms of safetensors
	// checkpoints' 4-bit weights (quant4.go), which a device may keep
	// compact.
	MXFP4
	AWQ4_G32
	AWQ4_G64
	AWQ4_G128
)

// lastDType is the highest DType.
const lastDType = AWQ4_G128

// Q8_0BlockSize is the number of values per Q8_0 block.
const Q8_0BlockSize = 32

const q8_0BlockBytes = 2 + Q8_0BlockSize

func (d DType) String() string {
	switch d {
	case F32:
		return "F32"
	case F16:
		return "F16"
	case BF16:
		return "BF16"
	case Q8_0:
		return "Q8_0"
	case FP8E4M3:
		return "FP8_E4M3"
	}
	if f, ok := blockFormats[d]; ok {
		return f.name
	}
	return fmt.Sprintf("DType(%d)", uint8(d))
}

// MarshalText names the dtype in JSON, which would otherwise print a
// []DType as base64 bytes.
func (d DType) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText reads a name MarshalText writes.
func (d *DType) UnmarshalText(b []byte) error {
	for x := F32; x <= lastDType; x++ {
		if x.String() == string(b) {
			*d = x
			return nil
		}
	}
	return fmt.Errorf("unknown dtype %q", b)
}

// RowBytes is the size in bytes of n consecutive values of dtype d, or an
// error when n cannot be stored (Q8_0 needs whole blocks).
func (d DType) RowBytes(n int) (int, error) {
	switch d {
	case F32:
		return 4 * n, nil
	case F16, BF16:
		return 2 * n, nil
	case FP8E4M3:
		return n, nil
	case Q8_0:
		if n%Q8_0BlockSize != 0 {
			return 0, fmt.Errorf("Q8_0 row of %d values is not a multiple of %d", n, Q8_0BlockSize)
		}
		return n / Q8_0BlockSize * q8_0BlockBytes, nil
	}
	if f, ok := blockFormats[d]; ok {
		if n%f.values != 0 {
			return 0, fmt.Errorf("%s row of %d values is not a multiple of its block of %d", f.name, n, f.values)
		}
		return n / f.values * f.bytes, nil
	}
	return 0, fmt.Errorf("unknown dtype %v", d)
}

// F16ToF32 converts an IEEE half-precision value.
func F16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0 && mant == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: normalise
		e := uint32(127 - 15 + 1)
		for mant&0x400 == 0 {
			mant <<= 1
			e--
		}
		mant &= 0x3ff
		return math.Float32frombits(sign | e<<23 | mant<<13)
	case exp == 0x1f:
		return math.Float32frombits(sign | 0xff<<23 | mant<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

// F32ToF16 converts to IEEE half precision, rounding to nearest even.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23&0xff) - 127 + 15
	mant := b & 0x7fffff
	if b&0x7fffffff > 0x7f800000 { // NaN
		return sign | 0x7e00
	}
	if exp >= 0x1f {
		return sign | 0x7c00
	}
	if exp <= 0 {
		if exp < -10 {
			return sign
		}
		mant |= 0x800000
		shift := uint32(14 - exp)
		half := uint32(1) << (shift - 1)
		rounded := mant >> shift
		rem := mant & (1<<shift - 1)
		if rem > half || (rem == half && rounded&1 == 1) {
			rounded++
		}
		return sign | uint16(rounded)
	}
	rounded := uint32(exp)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && rounded&1 == 1) {
		rounded++ // may carry into the exponent, which is the correct result
	}
	return sign | uint16(rounded)
}

// BF16ToF32 converts a bfloat16 value (the top half of a float32).
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F32ToBF16 converts to bfloat16, rounding to nearest even.
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}
