package tensor

import (
	"encoding/binary"
	"math"
)

// Quantizers for the block formats gosling writes (model random, tests):
// plain round-to-nearest with min/max scales, not llama.cpp's searched
// scales, so their error is a little larger than llama-quantize's, while
// every block they write is a valid block of its format.
var quantizers = map[DType]func(src []float32, blk []byte){
	Q4_0:   quantizeQ4_0,
	Q4_K:   quantizeQ4_K,
	Q5_K:   quantizeQ5_K,
	Q6_K:   quantizeQ6_K,
	IQ4_NL: quantizeIQ4_NL,
	IQ4_XS: quantizeIQ4_XS,
	// quant4.go's
	MXFP4:     quantizeMXFP4,
	AWQ4_G32:  quantizeAWQ4,
	AWQ4_G64:  quantizeAWQ4,
	AWQ4_G128: quantizeAWQ4,
}

// CanEncode reports whether EncodeInto writes dtype d.
func CanEncode(d DType) bool {
	switch d {
	case F32, F16, BF16, FP8E4M3, Q8_0:
		return true
	}
	_, ok := quantizers[d]
	return ok
}

func clampInt(v, lo, hi int) int { return min(hi, max(lo, v)) }

// signedMax is the value of largest magnitude in x, with its sign.
func signedMax(x []float32) float32 {
	var m float32
	for _, v := range x {
		if abs32(v) > abs32(m) {
			m = v
		}
	}
	return m
}

func abs32(v float32) float32 { return float32(math.Abs(float64(v))) }

func putF16(b []byte, v float32) float32 {
	h := F32ToF16(v)
	binary.LittleEndian.PutUint16(b, h)
	return F16ToF32(h)
}

func quantizeQ4_0(x []float32, blk []byte) {
	quantizeNibbles(x, blk, -8, func(v float32) byte { return byte(clampInt(nearestInt(v)+8, 0, 15)) })
}

// quantizeNibbles writes a block of 32 as an f16 scale d (the value of
// largest magnitude over top) and nibbles code(x/d), value j in the low
// nibble of byte j, value j+16 in its high nibble.
func quantizeNibbles(x []float32, blk []byte, top float32, code func(float32) byte) {
	d := putF16(blk, signedMax(x)/top)
	var id float32
	if d != 0 {
		id = 1 / d
	}
	for j := range 16 {
		blk[2+j] = code(x[j]*id) | code(x[j+16]*id)<<4
	}
}

// kScales quantises per-sub-block scales and mins (both ≥ 0) to 6 bits
// under f16 super-block scales d and dmin, writing d and dmin to b.
func kScales(scales, mins []float32, b []byte) (d, dmin float32, sc, m [8]byte) {
	var smax, mmax float32
	for j := range scales {
		smax, mmax = max(smax, scales[j]), max(mmax, mins[j])
	}
	d, dmin = putF16(b, smax/63), putF16(b[2:], mmax/63)
	for j := range scales {
		if d != 0 {
			sc[j] = byte(clampInt(nearestInt(scales[j]/d), 0, 63))
		}
		if dmin != 0 {
			m[j] = byte(clampInt(nearestInt(mins[j]/dmin), 0, 63))
		}
	}
	return d, dmin, sc, m
}

// packKScales is KScaleMin's inverse.
func packKScales(sc, m [8]byte, s []byte) {
	clear(s[:12])
	for j := range 8 {
		if j < 4 {
			s[j] |= sc[j]
			s[j+4] |= m[j]
			continue
		}
		s[j+4] = sc[j]&15 | m[j]&15<<4
		s[j-4] |= sc[j] >> 4 << 6
		s[j] |= m[j] >> 4 << 6
	}
}

// quantizeKMin fills a Q4_K (levels 15) or Q5_K (31) block's header and
// returns each value's quant.
func quantizeKMin(x []float32, blk []byte, levels int) (q [256]int) {
	var scales, mins [8]float32
	for j := range 8 {
		sub := x[32*j : 32*j+32]
		lo, hi := float32(0), sub[0]
		for _, v := range sub {
			lo, hi = min(lo, v), max(hi, v)
		}
		scales[j], mins[j] = max(0, hi-lo)/float32(levels), -lo
	}
	d, dmin, sc, m := kScales(scales[:], mins[:], blk)
	packKScales(sc, m, blk[4:16])
	for j := range 8 {
		ds, dm := d*float32(sc[j]), dmin*float32(m[j])
		for l := range 32 {
			if ds != 0 {
				q[32*j+l] = clampInt(nearestInt((x[32*j+l]+dm)/ds), 0, levels)
			}
		}
	}
	return q
}

func quantizeQ4_K(x []float32, blk []byte) {
	q := quantizeKMin(x, blk, 15)
	qs := blk[16:144]
	clear(qs)
	for i := range 256 {
		j, l := i/32, i%32
		qs[32*(j/2)+l] |= byte(q[i] << (4 * (j % 2)))
	}
}

func quantizeQ5_K(x []float32, blk []byte) {
	q := quantizeKMin(x, blk, 31)
	qh, qs := blk[16:48], blk[48:176]
	clear(blk[16:176])
	for i := range 256 {
		j, l := i/32, i%32
		qs[32*(j/2)+l] |= byte(q[i]&15) << (4 * (j % 2))
		qh[l] |= byte(q[i]>>4) << j
	}
}

func quantizeQ6_K(x []float32, blk []byte) {
	var scales [16]float32
	var amax float32
	for i := range 16 {
		scales[i] = signedMax(x[16*i:16*i+16]) / -32
		amax = max(amax, abs32(scales[i]))
	}
	d := putF16(blk[208:], amax/127)
	ql, qh, sc := blk[:128], blk[128:192], blk[192:208]
	clear(blk[:192])
	for i := range 16 {
		s := 0
		if d != 0 {
			s = clampInt(nearestInt(scales[i]/d), -128, 127)
		}
		sc[i] = byte(int8(s))
		ds := d * float32(s)
		for l := range 16 {
			v := 32
			if ds != 0 {
				v = clampInt(nearestInt(x[16*i+l]/ds)+32, 0, 63)
			}
			e := 16*i + l
			c, r := e/128, e%128
			ql[64*c+r%64] |= byte(v&15) << (4 * (r / 64))
			qh[32*c+r%32] |= byte(v>>4) << (2 * (r / 32))
		}
	}
}

// nearestIQ4 is the codebook index nearest to v (in units of the scale).
func nearestIQ4(v float32) byte {
	best, dist := 0, float32(math.Inf(1))
	for i, c := range IQ4Values {
		if e := abs32(v - float32(c)); e < dist {
			best, dist = i, e
		}
	}
	return byte(best)
}

func quantizeIQ4_NL(x []float32, blk []byte) { quantizeNibbles(x, blk, -127, nearestIQ4) }

func quantizeIQ4_XS(x []float32, blk []byte) {
	var scales [8]float32
	var amax float32
	for j := range 8 {
		scales[j] = signedMax(x[32*j:32*j+32]) / -127
		amax = max(amax, abs32(scales[j]))
	}
	d := putF16(blk, amax/31)
	var sh uint16
	clear(blk[4:8])
	for j := range 8 {
		ls := 0
		if d != 0 {
			ls = clampInt(nearestInt(scales[j]/d), -32, 31)
		}
		u := ls + 32
		blk[4+j/2] |= byte(u&15) << (4 * (j % 2))
		sh |= uint16(u>>4) << (2 * j)
		dl := d * float32(ls)
		var id float32
		if dl != 0 {
			id = 1 / dl
		}
		for l := range 16 {
			blk[8+16*j+l] = nearestIQ4(x[32*j+l]*id) | nearestIQ4(x[32*j+l+16]*id)<<4
		}
	}
	binary.LittleEndian.PutUint16(blk[2:], sh)
}
