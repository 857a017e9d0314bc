package tensor

import (
	"encoding/binary"
	"math"
)

// The 4-bit formats of safetensors checkpoints, in host forms a device
// can keep compact (device/cuda uploads their blocks as they are here;
// device/cpu repacks AWQ4 into its I4 panels, MXFP4 into bfloat16).
//
// MXFP4 is ggml's block_mxfp4: byte 0 the E8M0 scale e, then 16 bytes of
// 4-bit E2M1 codes, value j in the low nibble of byte j and value j+16 in
// its high one; value = E2M1Values[q]·2^(e−127). Checkpoints' MXFP4
// experts (GPT-OSS) are repacked into it at load.
//
// AWQ4_G<n> is one AWQ group of n inputs (n = 32, 64, 128) of one output
// row: f16 scale s | u16 zero point z | n/2 bytes of 4-bit quants, the
// values of each run of 32 (32c…32c+31) in bytes 16c…16c+15, value 32c+j
// in the low nibble of byte 16c+j and 32c+16+j in its high one; value =
// s·(q − z). AutoAWQ's int32-packed qweight, qzeros and scales are
// repacked into it at load (model/awq.go). s·(q−z) has at most 15
// significant bits, so every value is exact in float32 however it is
// computed (s·q − s·z included).

// E2M1Values are the 4-bit E2M1 codes' values (codes 8-15 the negatives
// of 0-7).
var E2M1Values = [16]float32{0, 0.5, 1, 1.5, 2, 3, 4, 6, -0, -0.5, -1, -1.5, -2, -3, -4, -6}

// E8M0 is the power of two 2^(e−127) an E8M0 scale byte stands for (255,
// NaN in the format, is read as 2^128 = +Inf).
func E8M0(e byte) float32 { return float32(math.Ldexp(1, int(e)-127)) }

func decodeMXFP4(blk []byte, dst []float32) {
	scale := E8M0(blk[0])
	for j, q := range blk[1:17] {
		dst[j] = E2M1Values[q&15] * scale
		dst[j+16] = E2M1Values[q>>4] * scale
	}
}

// quantizeMXFP4 writes a block as the OCP MX format does: the scale
// 2^(floor(log2(amax)) − 2) puts the largest value in E2M1's top binade
// (4…6), and each value takes the nearest code.
func quantizeMXFP4(x []float32, blk []byte) {
	var amax float64
	for _, v := range x {
		amax = max(amax, math.Abs(float64(v)))
	}
	e := -127
	if amax > 0 {
		e = clampInt(int(math.Floor(math.Log2(amax)))-2, -127, 127)
	}
	blk[0] = byte(e + 127)
	inv := math.Ldexp(1, -e)
	code := func(v float32) byte {
		x, best, c := float64(v)*inv, math.Inf(1), byte(0)
		for i, q := range E2M1Values {
			if d := math.Abs(x - float64(q)); d < best {
				best, c = d, byte(i)
			}
		}
		return c
	}
	for j := range 16 {
		blk[1+j] = code(x[j]) | code(x[j+16])<<4
	}
}

// awqGroup is the group size of an AWQ4 format.
func awqGroup(d DType) int {
	switch d {
	case AWQ4_G32:
		return 32
	case AWQ4_G64:
		return 64
	case AWQ4_G128:
		return 128
	}
	return 0
}

// AWQ4Format is the AWQ4 dtype of a group size; ok is false for a size
// without one.
func AWQ4Format(group int) (DType, bool) {
	for _, d := range []DType{AWQ4_G32, AWQ4_G64, AWQ4_G128} {
		if awqGroup(d) == group {
			return d, true
		}
	}
	return 0, false
}

// decodeAWQ4 dequantises one group (len(dst) values).
func decodeAWQ4(blk []byte, dst []float32) {
	s := f16At(blk)
	z := int(binary.LittleEndian.Uint16(blk[2:]))
	for c := 0; 32*c < len(dst); c++ {
		for j, q := range blk[4+16*c : 4+16*c+16] {
			dst[32*c+j] = s * float32(int(q&15)-z)
			dst[32*c+16+j] = s * float32(int(q>>4)-z)
		}
	}
}

// quantizeAWQ4 writes one group as AutoAWQ quantises it: asymmetric
// min-max, s = (max − min)/15 (at least 1e-5), z = round(−min/s) in
// [0, 15], q = round(x/s) + z in [0, 15].
func quantizeAWQ4(x []float32, blk []byte) {
	lo, hi := x[0], x[0]
	for _, v := range x {
		lo, hi = min(lo, v), max(hi, v)
	}
	s := putF16(blk, max((hi-lo)/15, 1e-5))
	z := clampInt(-nearestInt(lo/s), 0, 15)
	binary.LittleEndian.PutUint16(blk[2:], uint16(z))
	q := func(v float32) byte { return byte(clampInt(nearestInt(v/s)+z, 0, 15)) }
	for c := 0; 32*c < len(x); c++ {
		for j := range 16 {
			blk[4+16*c+j] = q(x[32*c+j]) | q(x[32*c+16+j])<<4
		}
	}
}
