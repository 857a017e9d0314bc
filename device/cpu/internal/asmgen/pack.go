package asmgen

import "fmt"

// packZ: AVX-512 (VL) activation packing for a float tile of mr tokens
// (device/cpu/pack.go): dst[i][t] = x[t][i], eight inputs i at a time.
// The tile's rows are read eight floats each (one ymm per token) and
// transposed in registers: tokens 0-7 as an 8×8 block (unpack, shuffle,
// lane permute), tokens 8-11 as a 4×8 block whose columns are the halves
// of four registers. Each input's mr values are then one store (two with
// more than eight tokens), masked to the tile's height. Tokens past mr in
// a block read the last token's row again, so no read leaves the tile.
//
// Token t's row is base[t%4] + (t/4)·4·ldx: four base registers (tokens
// 0-3) and a scaled index address the twelve rows.
//
//	func packF32Z<mr>(dst, x unsafe.Pointer, ldxB, groups int)
//
// x is token 0's first input, ldxB the bytes between tokens' rows; groups
// counts the eights of inputs.
func packZ(w *writer, mr int) {
	name := fmt.Sprintf("packF32Z%d", mr)
	w.line("")
	w.line("// func %s(dst, x unsafe.Pointer, ldxB, groups int)", name)
	w.line("TEXT ·%s(SB), NOSPLIT, $0-32", name)
	w.ins("MOVQ dst+0(FP), DX")
	w.ins("MOVQ x+8(FP), R8")
	w.ins("MOVQ ldxB+16(FP), R9")
	w.ins("MOVQ groups+24(FP), CX")
	bases := []string{"R8", "R12", "R13", "R10"}
	for b := 1; b < min(mr, 3); b++ {
		w.ins("LEAQ (R8)(R9*%d), %s", b, bases[b])
	}
	if mr >= 4 {
		// R10 = row 3 = row 0 + 3·ldx (no ×3 scale: row 1 + 2·ldx).
		w.ins("LEAQ (R12)(R9*2), R10")
	}
	row := func(t int) string {
		t = min(t, mr-1)
		switch t / 4 {
		case 0:
			return fmt.Sprintf("(%s)", bases[t%4])
		case 1:
			return fmt.Sprintf("(%s)(R9*4)", bases[t%4])
		}
		return fmt.Sprintf("(%s)(R9*8)", bases[t%4])
	}
	lo, hi := min(mr, 8), max(0, mr-8)
	if mr <= 4 {
		lo, hi = 0, mr // one 4-token block, tokens 0-3
	}
	if lo > 0 && lo < 8 {
		w.ins("MOVL $%d, AX", 1<<lo-1)
		w.ins("KMOVW AX, K1")
	}
	if hi > 0 && hi < 4 {
		w.ins("MOVL $%d, AX", 1<<hi-1)
		w.ins("KMOVW AX, K2")
	}
	w.line("loop:")
	w.ins("TESTQ CX, CX")
	w.ins("JZ done")
	stride := 4 * mr
	if lo > 0 {
		// 8×8: Y0-Y7 rows, Y8-Y15 pairs, Y16-Y23 quads, Y24-Y31 columns.
		for t := range 8 {
			w.ins("VMOVUPS %s, Y%d", row(t), t)
		}
		for p := range 4 {
			w.ins("VUNPCKLPS Y%d, Y%d, Y%d", 2*p+1, 2*p, 8+2*p)
			w.ins("VUNPCKHPS Y%d, Y%d, Y%d", 2*p+1, 2*p, 9+2*p)
		}
		for h := range 2 { // tokens 0-3, then 4-7
			a, b := 8+4*h, 10+4*h
			w.ins("VSHUFPS $0x44, Y%d, Y%d, Y%d", b, a, 16+4*h)
			w.ins("VSHUFPS $0xEE, Y%d, Y%d, Y%d", b, a, 17+4*h)
			w.ins("VSHUFPS $0x44, Y%d, Y%d, Y%d", b+1, a+1, 18+4*h)
			w.ins("VSHUFPS $0xEE, Y%d, Y%d, Y%d", b+1, a+1, 19+4*h)
		}
		for j := range 4 { // low lanes, then high lanes, of the two quads
			w.ins("VSHUFF32X4 $0, Y%d, Y%d, Y%d", 20+j, 16+j, 24+j)
			w.ins("VSHUFF32X4 $3, Y%d, Y%d, Y%d", 20+j, 16+j, 28+j)
		}
		for j := range 8 {
			if lo < 8 {
				w.ins("VMOVUPS Y%d, K1, %d(DX)", 24+j, j*stride)
			} else {
				w.ins("VMOVUPS Y%d, %d(DX)", 24+j, j*stride)
			}
		}
	}
	if hi > 0 {
		// 4×8: Y0-Y3 rows, Y8-Y11 pairs, Y16-Y19 columns j | j+4.
		t0 := 8
		if lo == 0 {
			t0 = 0
		}
		for t := range 4 {
			w.ins("VMOVUPS %s, Y%d", row(t0+t), t)
		}
		w.ins("VUNPCKLPS Y1, Y0, Y8")
		w.ins("VUNPCKHPS Y1, Y0, Y9")
		w.ins("VUNPCKLPS Y3, Y2, Y10")
		w.ins("VUNPCKHPS Y3, Y2, Y11")
		w.ins("VSHUFPS $0x44, Y10, Y8, Y16")
		w.ins("VSHUFPS $0xEE, Y10, Y8, Y17")
		w.ins("VSHUFPS $0x44, Y11, Y9, Y18")
		w.ins("VSHUFPS $0xEE, Y11, Y9, Y19")
		for j := range 4 {
			w.ins("VEXTRACTF32X4 $1, Y%d, X%d", 16+j, 20+j)
		}
		for j := range 8 {
			reg := 16 + j // the low half of Y16+j, or its extracted high half
			if j >= 4 {
				reg = 20 + j - 4
			}
			if hi < 4 {
				w.ins("VMOVUPS X%d, K2, %d(DX)", reg, j*stride+4*t0)
			} else {
				w.ins("VMOVUPS X%d, %d(DX)", reg, j*stride+4*t0)
			}
		}
	}
	for b := range min(mr, 4) {
		w.ins("ADDQ $32, %s", bases[b])
	}
	w.ins("ADDQ $%d, DX", 8*stride)
	w.ins("DECQ CX")
	w.ins("JMP loop")
	w.line("done:")
	w.ins("VZEROUPPER")
	w.ins("RET")
}
