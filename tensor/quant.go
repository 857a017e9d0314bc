package tensor

import (
	"encoding/binary"
	"math"
)

// GGUF block formats beyond Q8_0, decoded exactly as ggml defines them
// (ggml-common.h's block structs, ggml-quants.c's dequantize_row_*). A
// row is whole blocks; every block starts with or ends in f16 scales and
// packs its quants in bit planes. The K-quants group 256 values in a
// super-block of 8 sub-blocks of 32 (Q4_K, Q5_K) or 16 of 16 (Q2_K,
// Q3_K, Q6_K) whose small integer scales multiply one f16 scale.
//
// Products are rounded to float32 one at a time ((d·sc)·q − dmin·m, never
// fused), so every value is the one ggml's reference computes without
// contraction into FMAs.

type blockFormat struct {
	name   string
	values int // per block
	bytes  int // per block
	decode func(blk []byte, dst []float32)
}

var blockFormats = map[DType]blockFormat{
	Q4_0:   {"Q4_0", 32, 18, decodeQ4_0},
	Q4_1:   {"Q4_1", 32, 20, decodeQ4_1},
	Q5_0:   {"Q5_0", 32, 22, decodeQ5_0},
	Q5_1:   {"Q5_1", 32, 24, decodeQ5_1},
	Q2_K:   {"Q2_K", 256, 84, decodeQ2_K},
	Q3_K:   {"Q3_K", 256, 110, decodeQ3_K},
	Q4_K:   {"Q4_K", 256, 144, decodeQ4_K},
	Q5_K:   {"Q5_K", 256, 176, decodeQ5_K},
	Q6_K:   {"Q6_K", 256, 210, decodeQ6_K},
	IQ4_NL: {"IQ4_NL", 32, 18, decodeIQ4_NL},
	IQ4_XS: {"IQ4_XS", 256, 136, decodeIQ4_XS},
	// quant4.go's
	MXFP4:     {"MXFP4", 32, 17, decodeMXFP4},
	AWQ4_G32:  {"AWQ4_G32", 32, 4 + 16, decodeAWQ4},
	AWQ4_G64:  {"AWQ4_G64", 64, 4 + 32, decodeAWQ4},
	AWQ4_G128: {"AWQ4_G128", 128, 4 + 64, decodeAWQ4},
}

// BlockValues is the number of values one block of a block format holds
// (1 for the element-wise dtypes).
func BlockValues(d DType) int {
	if d == Q8_0 {
		return Q8_0BlockSize
	}
	if f, ok := blockFormats[d]; ok {
		return f.values
	}
	return 1
}

// BlockBytes is the size of one block of a block format.
func BlockBytes(d DType) int {
	n, _ := d.RowBytes(BlockValues(d))
	return n
}

// IsBlockQuant reports whether d is one of the block formats this file
// and quant4.go decode (Q8_0 excluded: it has its own paths everywhere).
func IsBlockQuant(d DType) bool {
	_, ok := blockFormats[d]
	return ok
}

// decodeBlocks dequantises whole blocks of a block format.
func decodeBlocks(d DType, src []byte, dst []float32) {
	f := blockFormats[d]
	for b := 0; b*f.values < len(dst); b++ {
		f.decode(src[b*f.bytes:(b+1)*f.bytes], dst[b*f.values:(b+1)*f.values])
	}
}

func f16At(b []byte) float32 { return F16ToF32(binary.LittleEndian.Uint16(b)) }

// mul rounds a product to float32, so that it is never fused with a
// following addition.
func mul(a, b float32) float32 { return float32(a * b) }

// Q4_0: f16 d | 16 bytes: byte j holds value j (low nibble) and j+16
// (high); value = d·(q−8).
func decodeQ4_0(blk []byte, dst []float32) {
	d := f16At(blk)
	for j, q := range blk[2:18] {
		dst[j] = d * float32(int(q&15)-8)
		dst[j+16] = d * float32(int(q>>4)-8)
	}
}

// Q4_1: f16 d | f16 m | nibbles as Q4_0; value = d·q + m.
func decodeQ4_1(blk []byte, dst []float32) {
	d, m := f16At(blk), f16At(blk[2:])
	for j, q := range blk[4:20] {
		dst[j] = mul(d, float32(q&15)) + m
		dst[j+16] = mul(d, float32(q>>4)) + m
	}
}

// Q5_0: f16 d | u32 qh (bit j: fifth bit of value j) | nibbles as Q4_0;
// value = d·(q−16).
func decodeQ5_0(blk []byte, dst []float32) {
	d := f16At(blk)
	qh := binary.LittleEndian.Uint32(blk[2:])
	for j, q := range blk[6:22] {
		lo := int(q&15) | int(qh>>j&1)<<4
		hi := int(q>>4) | int(qh>>(j+16)&1)<<4
		dst[j] = d * float32(lo-16)
		dst[j+16] = d * float32(hi-16)
	}
}

// Q5_1: f16 d | f16 m | u32 qh | nibbles; value = d·q + m.
func decodeQ5_1(blk []byte, dst []float32) {
	d, m := f16At(blk), f16At(blk[2:])
	qh := binary.LittleEndian.Uint32(blk[4:])
	for j, q := range blk[8:24] {
		lo := q&15 | byte(qh>>j&1)<<4
		hi := q>>4 | byte(qh>>(j+16)&1)<<4
		dst[j] = mul(d, float32(lo)) + m
		dst[j+16] = mul(d, float32(hi)) + m
	}
}

// Q2_K: scales[16] (low nibble scale, high nibble min, per 16 values) |
// qs[64] | f16 d | f16 dmin. Value i = 128c + 32s + l takes bits 2s..2s+1
// of qs[32c+l]; value = (d·sc)·q − dmin·m.
func decodeQ2_K(blk []byte, dst []float32) {
	scales, qs := blk[:16], blk[16:80]
	d, dmin := f16At(blk[80:]), f16At(blk[82:])
	for i := range 256 {
		c, s, l := i/128, i%128/32, i%32
		q := qs[32*c+l] >> (2 * s) & 3
		sc := scales[i/16]
		dst[i] = mul(mul(d, float32(sc&15)), float32(q)) - mul(dmin, float32(sc>>4))
	}
}

// Q3_K: hmask[32] | qs[64] | scales[12] | f16 d. Value i = 128c + 32s + l
// takes bits 2s..2s+1 of qs[32c+l] as its low bits, and bit i/32 of
// hmask[l] clear subtracts 4. The 16 six-bit scales (offset by 32) are
// low nibbles of bytes 0-7, then their high nibbles, with two high bits
// each from bytes 8-11 (scale 4s+b: bits 2s of byte 8+b); value =
// (d·sc)·q.
func decodeQ3_K(blk []byte, dst []float32) {
	hmask, qs, sb := blk[:32], blk[32:96], blk[96:108]
	d := f16At(blk[108:])
	var dl [16]float32
	for i := range 16 {
		lo := sb[i%8] >> (4 * (i / 8)) & 15
		hi := sb[8+i%4] >> (2 * (i / 4)) & 3
		dl[i] = mul(d, float32(int(lo|hi<<4)-32))
	}
	for i := range 256 {
		c, s, l := i/128, i%128/32, i%32
		q := int(qs[32*c+l] >> (2 * s) & 3)
		if hmask[l]>>(i/32)&1 == 0 {
			q -= 4
		}
		dst[i] = mul(dl[i/16], float32(q))
	}
}

// KScaleMin unpacks the eight 6-bit scales and mins of Q4_K and Q5_K from
// their 12 bytes: j < 4 in the low six bits of bytes j (scale) and 4+j
// (min); j ≥ 4 in the nibbles of byte 8+j−4 with two high bits from the
// top of bytes j−4 (scale) and j (min).
func KScaleMin(s []byte, j int) (sc, m byte) {
	if j < 4 {
		return s[j] & 63, s[j+4] & 63
	}
	return s[j+4]&15 | s[j-4]>>6<<4, s[j+4]>>4 | s[j]>>6<<4
}

// Q4_K: f16 d | f16 dmin | scales[12] | qs[128]. Value i = 64c + 32s + l
// is nibble s of qs[32c+l], in sub-block i/32; value = (d·sc)·q − dmin·m.
func decodeQ4_K(blk []byte, dst []float32) {
	d, dmin := f16At(blk), f16At(blk[2:])
	qs := blk[16:144]
	for j := range 8 {
		sc, m := KScaleMin(blk[4:16], j)
		ds, dm := mul(d, float32(sc)), mul(dmin, float32(m))
		c, s := j/2, j%2
		for l := range 32 {
			dst[32*j+l] = mul(ds, float32(qs[32*c+l]>>(4*s)&15)) - dm
		}
	}
}

// Q5_K: f16 d | f16 dmin | scales[12] | qh[32] | qs[128]: Q4_K's nibbles
// with bit i/32 of qh[i%32] as value i's fifth bit.
func decodeQ5_K(blk []byte, dst []float32) {
	d, dmin := f16At(blk), f16At(blk[2:])
	qh, qs := blk[16:48], blk[48:176]
	for j := range 8 {
		sc, m := KScaleMin(blk[4:16], j)
		ds, dm := mul(d, float32(sc)), mul(dmin, float32(m))
		c, s := j/2, j%2
		for l := range 32 {
			q := qs[32*c+l]>>(4*s)&15 | qh[l]>>j&1<<4
			dst[32*j+l] = mul(ds, float32(q)) - dm
		}
	}
}

// Q6_K: ql[128] | qh[64] | int8 scales[16] | f16 d. Value i = 128c + r
// takes nibble r/64 of ql[64c + r%64] and bits 2(r/32%4)… of qh[32c +
// r%32] as its high two; value = (d·sc)·(q−32), sc per 16 values.
func decodeQ6_K(blk []byte, dst []float32) {
	ql, qh, sc := blk[:128], blk[128:192], blk[192:208]
	d := f16At(blk[208:])
	for i := range 256 {
		c, r := i/128, i%128
		lo := ql[64*c+r%64] >> (4 * (r / 64)) & 15
		hi := qh[32*c+r%32] >> (2 * (r / 32)) & 3
		dst[i] = mul(mul(d, float32(int8(sc[i/16]))), float32(int(lo|hi<<4)-32))
	}
}

// IQ4Values is the non-linear codebook of IQ4_NL and IQ4_XS: a 4-bit
// quant q stands for IQ4Values[q] times the block scale.
var IQ4Values = [16]int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

// IQ4_NL: f16 d | nibbles as Q4_0; value = d·IQ4Values[q].
func decodeIQ4_NL(blk []byte, dst []float32) {
	d := f16At(blk)
	for j, q := range blk[2:18] {
		dst[j] = d * float32(IQ4Values[q&15])
		dst[j+16] = d * float32(IQ4Values[q>>4])
	}
}

// IQ4_XS: f16 d | u16 scales_h | scales_l[4] | qs[128]. Sub-block j's
// 6-bit scale (offset by 32) is nibble j%2 of scales_l[j/2] with bits
// 2j… of scales_h on top; its 32 values are qs[16j…16j+15] low nibbles
// then high; value = (d·sc)·IQ4Values[q].
func decodeIQ4_XS(blk []byte, dst []float32) {
	d := f16At(blk)
	sh := binary.LittleEndian.Uint16(blk[2:])
	sl, qs := blk[4:8], blk[8:136]
	for j := range 8 {
		ls := int(sl[j/2]>>(4*(j%2))&15) | int(sh>>(2*j)&3)<<4
		dl := mul(d, float32(ls-32))
		for l, q := range qs[16*j : 16*j+16] {
			dst[32*j+l] = mul(dl, float32(IQ4Values[q&15]))
			dst[32*j+l+16] = mul(dl, float32(IQ4Values[q>>4]))
		}
	}
}

// nearestInt rounds half away from zero, as ggml's quantizers do.
func nearestInt(v float32) int { return int(math.Round(float64(v))) }
