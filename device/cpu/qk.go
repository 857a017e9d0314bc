package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/gosling-ai/gosling/tensor"
)

// The GGUF block formats (Q4_0 … Q6_K, IQ4) are served compactly: their
// panels keep the quants at the bits the file has (or a few more) and
// every product is integer, as llama.cpp computes them. Each format is
// rewritten into one of a few panel formats (qkFormat) in which a weight
// is
//
//	w = d·sc·(q − offset) − dmin·m     (IQ4: d·sc·IQ4Values[q])
//
// with q an unsigned 4-, 5- or 6-bit quant, sc and m small integers per
// sub-block of 16 or 32 inputs, and d, dmin f16 per super-block of S
// inputs (256 for the K-quants, 32 for the legacy formats). The mapping
// is exact: Q4_0's d·(q−8) is sc 1, m 8 and dmin d; Q3_K's (q3−4) is q
// 28…35 with offset 32; and so on (qkSource).
//
// The activations are quantised per super-block like llama.cpp's Q8_K
// (d_x = max|x|/127, q_x = round(x/d_x)) with the sums of q_x per 16
// inputs, so that the super-block's integer sums need one float scale:
//
//	Σ w·x ≈ d·d_x·Σ_sub sc·(Σ q·q_x − offset·Σ q_x) − dmin·d_x·Σ_sub m·Σ q_x
//
// Panel layout, per super-block: for each block of 32 inputs
//
//	nibbles  [4 g][4 r][8 j][4 i]: low nibble the quant of row 8r+j,
//	         input 4g+i, high nibble of input 16+4g+i (512 bytes)
//	high     hb = 1: [4 r][8 j][4 i], bits 2g and 2g+1 the fifth bits of
//	         the low and high nibbles' quants of group g (128 bytes);
//	         hb = 2: [2 p][4 r][8 j][4 i], bits 4h…4h+3 the top two bits
//	         of the low then the high nibble's quant of group g = 2p+h
//	         (256 bytes)
//	scales   sub 32: sc[32 rows]; sub 16: sc[32] of inputs 0-15 then
//	         sc[32] of 16-31 (int8 or uint8 as the format says)
//	mins     likewise, uint8, when the format has mins
//
// then d[32 rows] f16 and, with mins, dmin[32] f16. The activation tile
// of mr tokens is, per super-block, [S/4][mr][4] int8 quants, [mr] f32
// d_x, then [S/16][mr] int32 sums of 16 quants.
type qkFormat struct {
	name   string
	super  int  // inputs per super-block: 256 or 32
	hb     int  // bits of the high plane: 0 (4-bit quants), 1 or 2
	sub    int  // inputs per integer scale: 32 or 16
	signed bool // scales are int8 (else uint8)
	mins   bool
	offset int  // subtracted from every quant
	table  bool // quants index tensor.IQ4Values
}

// qkFormats are the panel formats; their index is the kernel tables'.
var qkFormats = [...]qkFormat{
	{name: "q4", super: 256, sub: 32, mins: true},
	{name: "q4", super: 32, sub: 32, mins: true},
	{name: "q5", super: 256, hb: 1, sub: 32, mins: true},
	{name: "q5", super: 32, hb: 1, sub: 32, mins: true},
	{name: "q6", super: 256, hb: 2, sub: 16, signed: true, offset: 32},
	{name: "q4s16", super: 256, sub: 16, mins: true},
	{name: "iq4", super: 256, sub: 32, signed: true, table: true},
	{name: "iq4", super: 32, sub: 32, signed: true, table: true},
}

const numQKFormats = len(qkFormats)

// qkFormatOf is the panel format a block dtype is served in.
var qkFormatOf = map[tensor.DType]int{
	tensor.Q4_K: 0, tensor.Q4_0: 1, tensor.Q4_1: 1, tensor.Q5_K: 2,
	tensor.Q5_0: 3, tensor.Q5_1: 3, tensor.Q6_K: 4, tensor.Q3_K: 4,
	tensor.Q2_K: 5, tensor.IQ4_XS: 6, tensor.IQ4_NL: 7,
}

// blockBytes is the panel bytes of one block of 32 inputs, its d and
// dmin excluded.
func (f *qkFormat) blockBytes() int {
	n := 512 + 128*f.hb + 32*32/f.sub
	if f.mins {
		n += 32 * 32 / f.sub
	}
	return n
}

// superBytes is the panel bytes of one super-block.
func (f *qkFormat) superBytes() int {
	n := f.super/32*f.blockBytes() + 2*panelWidth
	if f.mins {
		n += 2 * panelWidth
	}
	return n
}

// qkTileBytes is the size of an mr-token activation tile over k inputs.
func qkTileBytes(super, mr, k int) int { return k / super * qkSuperTileBytes(super, mr) }

func qkSuperTileBytes(super, mr int) int { return mr * (super + 4 + super/4) }

// qkSuper is one super-block of one row in the panel format's terms.
type qkSuper struct {
	q       [256]uint8 // quant of each input (offset not removed)
	sc, m   [16]int    // per sub-block
	d, dmin uint16     // f16
}

// qkSource rewrites super-block i of a row (blocks of dtype dt) into
// the panel format's terms.
func qkSource(dt tensor.DType, row []byte, i int, s *qkSuper) {
	f16 := func(b []byte) uint16 { return binary.LittleEndian.Uint16(b) }
	bb := tensor.BlockBytes(dt)
	switch dt {
	case tensor.Q4_0, tensor.Q4_1, tensor.Q5_0, tensor.Q5_1, tensor.IQ4_NL:
		blk := row[i*bb : (i+1)*bb]
		s.d, s.sc[0] = f16(blk), 1
		qs, qh := blk[2:18], uint32(0)
		switch dt {
		case tensor.Q4_0:
			s.dmin, s.m[0] = s.d, 8
		case tensor.Q4_1:
			s.dmin, s.m[0], qs = f16(blk[2:])^0x8000, 1, blk[4:20]
		case tensor.Q5_0:
			s.dmin, s.m[0], qh, qs = s.d, 16, binary.LittleEndian.Uint32(blk[2:]), blk[6:22]
		case tensor.Q5_1:
			s.dmin, s.m[0], qh, qs = f16(blk[2:])^0x8000, 1, binary.LittleEndian.Uint32(blk[4:]), blk[8:24]
		}
		for j, q := range qs {
			s.q[j] = q&15 | uint8(qh>>j&1)<<4
			s.q[j+16] = q>>4 | uint8(qh>>(j+16)&1)<<4
		}
		return
	}
	blk := row[i*bb : (i+1)*bb]
	switch dt {
	case tensor.Q4_K, tensor.Q5_K:
		s.d, s.dmin = f16(blk), f16(blk[2:])
		qs := blk[16:144]
		var qh []byte
		if dt == tensor.Q5_K {
			qh, qs = blk[16:48], blk[48:176]
		}
		for j := range 8 {
			sc, m := tensor.KScaleMin(blk[4:16], j)
			s.sc[j], s.m[j] = int(sc), int(m)
			for l := range 32 {
				q := qs[32*(j/2)+l] >> (4 * (j % 2)) & 15
				if qh != nil {
					q |= qh[l] >> j & 1 << 4
				}
				s.q[32*j+l] = q
			}
		}
	case tensor.Q6_K:
		ql, qh, sc := blk[:128], blk[128:192], blk[192:208]
		s.d = f16(blk[208:])
		for j := range 16 {
			s.sc[j] = int(int8(sc[j]))
		}
		for i := range 256 {
			c, r := i/128, i%128
			s.q[i] = ql[64*c+r%64]>>(4*(r/64))&15 | qh[32*c+r%32]>>(2*(r/32))&3<<4
		}
	case tensor.Q3_K:
		hmask, qs, sb := blk[:32], blk[32:96], blk[96:108]
		s.d = f16(blk[108:])
		for j := range 16 {
			lo := sb[j%8] >> (4 * (j / 8)) & 15
			hi := sb[8+j%4] >> (2 * (j / 4)) & 3
			s.sc[j] = int(lo|hi<<4) - 32
		}
		for i := range 256 {
			c, r, l := i/128, i%128/32, i%32
			q := qs[32*c+l]>>(2*r)&3 + 28 // q3 − 4 = q − 32
			if hmask[l]>>(i/32)&1 != 0 {
				q += 4
			}
			s.q[i] = q
		}
	case tensor.Q2_K:
		scales, qs := blk[:16], blk[16:80]
		s.d, s.dmin = f16(blk[80:]), f16(blk[82:])
		for j := range 16 {
			s.sc[j], s.m[j] = int(scales[j]&15), int(scales[j]>>4)
		}
		for i := range 256 {
			c, r, l := i/128, i%128/32, i%32
			s.q[i] = qs[32*c+l] >> (2 * r) & 3
		}
	case tensor.IQ4_XS:
		s.d = f16(blk)
		sh := binary.LittleEndian.Uint16(blk[2:])
		sl, qs := blk[4:8], blk[8:136]
		for j := range 8 {
			s.sc[j] = int(sl[j/2]>>(4*(j%2))&15) | int(sh>>(2*j)&3)<<4 - 32
			for l, q := range qs[16*j : 16*j+16] {
				s.q[32*j+l], s.q[32*j+l+16] = q&15, q>>4
			}
		}
	default:
		panic(fmt.Sprintf("cpu.qkSource: %v is not a block format", dt))
	}
}

// fillQK packs row r (panel slot j) of a block-format weight.
func (p *packedWeight) fillQK(w tensor.Weight, r int) {
	f := &qkFormats[p.qk]
	rowBytes, _ := w.DType.RowBytes(p.k)
	row := w.Data[r*rowBytes:][:rowBytes]
	panel, j := p.data[r/panelWidth*p.stride:][:p.stride], r%panelWidth
	rr, jj := j/8, j%8
	var s qkSuper
	sb := f.superBytes()
	for si := range p.k / f.super {
		qkSource(w.DType, row, si, &s)
		dst := panel[si*sb:][:sb]
		for b := range f.super / 32 {
			blk := dst[b*f.blockBytes():]
			q := s.q[32*b : 32*b+32]
			for i := range 4 {
				var h1, h2 [2]byte
				for g := range 4 {
					lo, hi := q[4*g+i], q[16+4*g+i]
					blk[g*128+rr*32+jj*4+i] = lo&15 | hi&15<<4
					h1[0] |= (lo>>4&1)<<(2*g) | (hi>>4&1)<<(2*g+1)
					h2[g/2] |= (lo>>4&3)<<(4*(g%2)) | (hi>>4&3)<<(4*(g%2)+2)
				}
				switch f.hb {
				case 1:
					blk[512+rr*32+jj*4+i] = h1[0]
				case 2:
					blk[512+rr*32+jj*4+i] = h2[0]
					blk[512+128+rr*32+jj*4+i] = h2[1]
				}
			}
			sc := blk[512+128*f.hb:]
			nsub := 32 / f.sub
			for h := range nsub {
				sc[h*32+j] = byte(s.sc[b*nsub+h])
				if f.mins {
					sc[(nsub+h)*32+j] = byte(s.m[b*nsub+h])
				}
			}
		}
		tail := dst[f.super/32*f.blockBytes():]
		binary.LittleEndian.PutUint16(tail[2*j:], s.d)
		if f.mins {
			binary.LittleEndian.PutUint16(tail[64+2*j:], s.dmin)
		}
	}
}

// packQKTile quantises inputs [0, k) of tokens t0 … t0+mr-1 of x (rows
// ldx apart) into dst, in the activation layout of super-blocks of super:
// with the kernel set's quantQKRow when it has one, else goPackQKTile's
// loop, which it matches bit for bit.
func packQKTile(dst []byte, x []float32, ldx, t0, mr, k, super int) {
	dst = dst[:qkTileBytes(super, mr, k)]
	if q := kernels().quantQKRow; q != nil && k >= super {
		_ = x[(t0+mr-1)*ldx+k-1]
		for t := range mr {
			q(&dst[4*t], &x[(t0+t)*ldx], k/super, super, mr)
		}
		return
	}
	goPackQKTile(dst, x, ldx, t0, mr, k, super)
}

func goPackQKTile(dst []byte, x []float32, ldx, t0, mr, k, super int) {
	stb := qkSuperTileBytes(super, mr)
	for t := range mr {
		row := x[(t0+t)*ldx:][:k]
		for s := range k / super {
			blk := row[s*super : (s+1)*super]
			out := dst[s*stb:]
			d, id := q8Scale(blk)
			bsums := out[super*mr+4*mr:]
			for i := 0; i < super; i += 16 {
				var sum int32
				for l, v := range blk[i : i+16] {
					q := int8(roundAway(v * id))
					sum += int32(q)
					e := i + l
					out[((e/4)*mr+t)*4+e%4] = byte(q)
				}
				binary.LittleEndian.PutUint32(bsums[4*((i/16)*mr+t):], uint32(sum))
			}
			binary.LittleEndian.PutUint32(out[super*mr+4*t:], math.Float32bits(d))
		}
	}
}

// goQKTile computes c[mr][32] += a · panel over nsuper super-blocks of
// panel format fi: the integer form of the kernels, exact in int32 up to
// each super-block's two float scalings.
func goQKTile(fi, mr int, a, b unsafe.Pointer, nsuper int, c unsafe.Pointer, ldc int) {
	f := &qkFormats[fi]
	stb, sb := qkSuperTileBytes(f.super, mr), f.superBytes()
	as := unsafe.Slice((*byte)(a), nsuper*stb)
	bs := unsafe.Slice((*byte)(b), nsuper*sb)
	nsub := 32 / f.sub
	for s := range nsuper {
		at, pt := as[s*stb:][:stb], bs[s*sb:][:sb]
		tail := pt[f.super/32*f.blockBytes():]
		for t := range mr {
			dx := math.Float32frombits(binary.LittleEndian.Uint32(at[f.super*mr+4*t:]))
			bsum := func(i int) int32 {
				return int32(binary.LittleEndian.Uint32(at[f.super*mr+4*mr+4*(i*mr+t):]))
			}
			xq := func(e int) int32 { return int32(int8(at[((e/4)*mr+t)*4+e%4])) }
			ct := cRow(c, t, ldc)
			for j := range panelWidth {
				rr, jj := j/8, j%8
				var isum, msum int32
				for blk := range f.super / 32 {
					pb := pt[blk*f.blockBytes():]
					var dots [2]int32
					for g := range 4 {
						for i := range 4 {
							nib := pb[g*128+rr*32+jj*4+i]
							lo, hi := int32(nib&15), int32(nib>>4)
							switch f.hb {
							case 1:
								h := pb[512+rr*32+jj*4+i]
								lo |= int32(h>>(2*g)&1) << 4
								hi |= int32(h>>(2*g+1)&1) << 4
							case 2:
								h := pb[512+(g/2)*128+rr*32+jj*4+i] >> (4 * (g % 2))
								lo |= int32(h&3) << 4
								hi |= int32(h>>2&3) << 4
							}
							if f.table {
								lo, hi = int32(tensor.IQ4Values[lo]), int32(tensor.IQ4Values[hi])
							}
							dots[0] += lo * xq(32*blk+4*g+i)
							dots[1] += hi * xq(32*blk+16+4*g+i)
						}
					}
					if nsub == 1 {
						dots[0] += dots[1]
					}
					scb := pb[512+128*f.hb:]
					for h := range nsub {
						sum16 := bsum(2*blk + h) // the sums of q_x over the sub-block
						if nsub == 1 {
							sum16 += bsum(2*blk + 1)
						}
						sc := int32(scb[h*32+j])
						if f.signed {
							sc = int32(int8(scb[h*32+j]))
						}
						isum += sc * (dots[h] - int32(f.offset)*sum16)
						if f.mins {
							msum += int32(scb[(nsub+h)*32+j]) * sum16
						}
					}
				}
				d := f16Table[binary.LittleEndian.Uint16(tail[2*j:])]
				v := float32(isum) * (d * dx)
				if f.mins {
					dmin := f16Table[binary.LittleEndian.Uint16(tail[64+2*j:])]
					v -= float32(msum) * (dmin * dx)
				}
				ct[j] += v
			}
		}
	}
}
