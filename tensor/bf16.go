package tensor

import (
	"math"
	"unsafe"
)

// DecodeBF16 converts bfloat16 values (little-endian, two bytes each) to
// float32: dst[i] = src[2i:2i+2]. src must hold 2·len(dst) bytes.
func DecodeBF16(dst []float32, src []byte) {
	src = src[:2*len(dst)]
	n := 0
	if convertAsm && len(dst) >= 16 {
		n = len(dst) &^ 15
		bf16ToF32Asm(unsafe.SliceData(dst), unsafe.SliceData(src), n)
	}
	for i := n; i < len(dst); i++ {
		dst[i] = math.Float32frombits(uint32(src[2*i])<<16 | uint32(src[2*i+1])<<24)
	}
}

// EncodeBF16 converts float32 values to bfloat16 (F32ToBF16: rounding to
// nearest even, NaNs kept quiet NaNs) into dst, two bytes each. dst must
// hold 2·len(src) bytes.
func EncodeBF16(dst []byte, src []float32) {
	dst = dst[:2*len(src)]
	n := 0
	if convertAsm && len(src) >= 16 {
		n = len(src) &^ 15
		f32ToBF16Asm(unsafe.SliceData(dst), unsafe.SliceData(src), n)
	}
	for i := n; i < len(src); i++ {
		h := F32ToBF16(src[i])
		dst[2*i], dst[2*i+1] = byte(h), byte(h>>8)
	}
}
