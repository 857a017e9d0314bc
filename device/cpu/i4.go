package cpu

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/gosling-ai/gosling/tensor"
)

// I4 panels serve AWQ and GPTQ int4 weights (tensor.AWQ4_G*, both
// repacked into them at load by model/awq.go) compactly against float32
// activations: AWQ and GPTQ are weight-only formats (W4A16), so the
// activations keep their precision, and a product agrees with the same
// weights dequantized to float32 up to float32 rounding. A weight is
//
//	w = s·(q − z)     s f16 and z ≤ 255 per row and group of G inputs
//
// Panel layout, per group of G inputs (G = 32, 64 or 128), per octet r
// of rows (8r…8r+7; 32 + 4G bytes):
//
//	z[8] uint8, 8 bytes of zeros, s[8] f16, then G/8 chunks of 32 bytes:
//	chunk c, bytes 4j…4j+3 for row 8r+j, byte i holding the quant of
//	input 8c+i in its low nibble and of 8c+4+i in its high one
//
// so a kernel reads one octet's group as one stream, its eight rows in
// the lanes of one ymm register (internal/asmgen's i4Y).

// i4Groups are the group sizes with I4 panels; the index is the kernel
// tables'.
var i4Groups = [...]int{32, 64, 128}

const numI4Groups = len(i4Groups)

// i4GroupIndex is the kernel-table index of a group size.
func i4GroupIndex(group int) int {
	for i, g := range i4Groups {
		if g == group {
			return i
		}
	}
	panic(fmt.Sprintf("cpu: no I4 panels for groups of %d", group))
}

// i4OctetBytes and i4GroupBytes are the bytes of one octet's and of all
// four octets' share of a group.
func i4OctetBytes(group int) int { return 32 + 4*group }
func i4GroupBytes(group int) int { return 4 * i4OctetBytes(group) }

// isI4 reports whether d is served in I4 panels.
func isI4(d tensor.DType) bool {
	return d == tensor.AWQ4_G32 || d == tensor.AWQ4_G64 || d == tensor.AWQ4_G128
}

// checkI4 checks that every zero point of w fits the panels' byte.
func checkI4(w tensor.Weight) error {
	bb := tensor.BlockBytes(w.DType)
	for b := 0; b+bb <= len(w.Data); b += bb {
		if z := binary.LittleEndian.Uint16(w.Data[b+2:]); z > 255 {
			return fmt.Errorf("tensor %s: %v block %d has zero point %d (at most 255)", w.Name, w.DType, b/bb, z)
		}
	}
	return nil
}

// fillI4 packs row r of an AWQ4 weight into its panel.
func (p *packedWeight) fillI4(w tensor.Weight, r int) {
	group, bb := tensor.BlockValues(w.DType), tensor.BlockBytes(w.DType)
	row := w.Data[r*(p.k/group)*bb:][:(p.k/group)*bb]
	panel, j := p.data[r/panelWidth*p.stride:][:p.stride], r%panelWidth
	ob, jj := i4OctetBytes(group), j%8
	for g := range p.k / group {
		blk := row[g*bb:][:bb]
		dst := panel[g*i4GroupBytes(group)+j/8*ob:][:ob]
		dst[jj] = byte(binary.LittleEndian.Uint16(blk[2:]))
		copy(dst[16+2*jj:][:2], blk[:2])
		for k := range group {
			q := blk[4+16*(k/32)+k%16] >> (4 * (k % 32 / 16)) & 15
			dst[32+32*(k/8)+4*jj+k%4] |= q << (4 * (k % 8 / 4))
		}
	}
}

// goI4Tile computes c[mr][32] += a · panel over k inputs (whole groups)
// of an I4 panel in groups of group, a the [k][mr] float32 tile.
func goI4Tile(group, mr int, a, b unsafe.Pointer, k int, c unsafe.Pointer, ldc int) {
	gb, ob := i4GroupBytes(group), i4OctetBytes(group)
	as := unsafe.Slice((*float32)(a), k*mr)
	bs := unsafe.Slice((*byte)(b), k/group*gb)
	for g := range k / group {
		x := as[g*group*mr:][:group*mr]
		for r := range 4 {
			oct := bs[g*gb+r*ob:][:ob]
			for t := range mr {
				ct := cRow(c, t, ldc)
				for jj := range 8 {
					z := int32(oct[jj])
					var acc float32
					for ch := range group / 8 {
						lane := oct[32+32*ch+4*jj:][:4]
						for i := range 8 {
							q := int32(lane[i%4] >> (4 * (i / 4)) & 15)
							acc += x[(8*ch+i)*mr+t] * float32(q-z)
						}
					}
					ct[8*r+jj] += f16Table[binary.LittleEndian.Uint16(oct[16+2*jj:])] * acc
				}
			}
		}
	}
}

// i4WideBlock is the inputs of an I4 panel widened at a time for several
// tiles: 64 KiB of float32, which stays in L2 while every tile passes.
const i4WideBlock = 512

// execI4 runs one I4 panel against the tiles into scratch. One tile (a
// decode) goes through the set's I4 kernel (else the Go one), kb inputs
// at a time: each quant is converted once either way. Several tiles (a
// prefill, a batch's decode: tiles no higher than the F32 kernels take,
// forwardGroup) would convert every quant once per tile; the panel is
// widened instead, i4WideBlock inputs at a time, to the exact float32
// weights in an F32 panel, which the F32 kernels multiply by every tile.
func (g *gemm) execI4(s *workerScratch, pw *packedWeight, tl []tile, panel unsafe.Pointer, kb int, scratch []float32) {
	group := i4Groups[pw.qk]
	if len(tl) > 1 {
		kb = i4WideBlock
		if cap(s.wide) < kb*panelWidth {
			s.wide = make([]float32, kb*panelWidth)
		}
	}
	for k0 := 0; k0 < g.k; k0 += kb {
		kn := min(kb, g.k-k0)
		b := unsafe.Add(panel, k0/group*i4GroupBytes(group))
		if len(tl) > 1 {
			wide := s.wide[:kn*panelWidth]
			if wk := g.ks.widenI4[pw.qk]; wk != nil {
				wk(unsafe.Pointer(&wide[0]), b, kn/group)
			} else {
				widenI4(wide, unsafe.Slice((*byte)(b), kn/group*i4GroupBytes(group)), group)
			}
			b = unsafe.Pointer(&wide[0])
		}
		off := 0
		for _, tile := range tl {
			kernel := g.ks.i4[pw.qk][tile.mr]
			if len(tl) > 1 {
				kernel = g.ks.float[kindF32][tile.mr]
			} else if kernel == nil {
				kernel = goKernels.i4[pw.qk][tile.mr]
			}
			kernel(unsafe.Pointer(&g.aF32[tile.off+k0*tile.mr]), b, kn, unsafe.Pointer(&scratch[off]), 4*panelWidth)
			off += tile.mr * panelWidth
		}
	}
}

// widenI4 writes the I4 panel bytes b (whole groups of group inputs) as
// an F32 panel [inputs][32] of their values s·(q − z), exact in float32.
func widenI4(dst []float32, b []byte, group int) {
	gb, ob := i4GroupBytes(group), i4OctetBytes(group)
	for g := range len(b) / gb {
		for r := range 4 {
			oct := b[g*gb+r*ob:][:ob]
			for jj := range 8 {
				s, z := f16Table[binary.LittleEndian.Uint16(oct[16+2*jj:])], int32(oct[jj])
				for ch := range group / 8 {
					lane := oct[32+32*ch+4*jj:][:4]
					out := dst[(g*group+8*ch)*panelWidth+8*r+jj:]
					for i := range 8 {
						out[i*panelWidth] = s * float32(int32(lane[i%4]>>(4*(i/4))&15)-z)
					}
				}
			}
		}
	}
}
