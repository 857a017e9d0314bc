package asmgen

import "fmt"

// I4Groups are the group sizes of device/cpu's I4 panels (i4.go there),
// in its kernel tables' order.
var I4Groups = []int{32, 64, 128}

// MaxMRI4Y is the most tokens an AVX2 I4 kernel takes: its accumulators
// (sets × mr) and five working registers share the sixteen.
const MaxMRI4Y = 6

// i4Y: AVX2, mr tokens of float32 activations, a panel of 4-bit quants
// in groups of group inputs (layout in device/cpu/i4.go: per group, per
// octet of rows, eight zero points, eight f16 scales, then the quants of
// eight inputs per 32 bytes). Per octet (rows 8r…8r+7, one ymm of
// lanes) each input's quants are shifted and masked out of their byte,
// less the zero point in int32, converted to float32 and multiplied by
// the broadcast activation of every token; at the group's end the sums
// are scaled by the rows' scales into c. With one or two tokens, inputs
// alternate between four or two accumulators per token (independent FMA
// chains), summed before the scaling. Y15 holds the nibble mask, Y14 the
// octet's zero points, Y13 the 32 quant bytes (then the scales), Y12 one
// input's values, Y11 the broadcast activation.
func i4Y(w *writer, group, mr int) {
	prologue(w, fmt.Sprintf("gemmI4G%dY%d", group, mr))
	sets := 1
	switch mr {
	case 1:
		sets = 4
	case 2:
		sets = 2
	}
	acc := func(s, t int) string { return fmt.Sprintf("Y%d", s*mr+t) }
	octet := 32 + 4*group
	w.ins("VPBROADCASTD low4<>(SB), Y15")
	w.ins("SHRQ $%d, CX", log2(group))
	w.ins("JEQ done")
	w.line("group:")
	for r := range 4 {
		for s := range sets {
			for t := range mr {
				w.ins("VXORPS %s, %s, %s", acc(s, t), acc(s, t), acc(s, t))
			}
		}
		w.ins("VPMOVZXBD %d(BX), Y14", r*octet)
		w.ins("LEAQ %d(BX), SI", r*octet+32)
		w.ins("MOVQ AX, DI")
		w.ins("MOVQ $%d, R8", group/8)
		w.line("chunk%d:", r)
		w.ins("VMOVDQU (SI), Y13")
		for i := range 8 {
			i4Nibbles(w, i)
			for t := range mr {
				w.ins("VBROADCASTSS %d(DI), Y11", (i*mr+t)*4)
				w.ins("VFMADD231PS Y11, Y12, %s", acc(i%sets, t))
			}
		}
		w.ins("ADDQ $32, SI")
		w.ins("ADDQ $%d, DI", 8*mr*4)
		w.ins("DECQ R8")
		w.ins("JNZ chunk%d", r)
		for t := range mr {
			for s := 1; s < sets; s++ {
				w.ins("VADDPS %s, %s, %s", acc(s, t), acc(0, t), acc(0, t))
			}
		}
		w.ins("VCVTPH2PS %d(BX), Y13", r*octet+16)
		w.ins("MOVQ DX, R10")
		for t := range mr {
			w.ins("VMOVUPS %d(R10), Y12", 32*r)
			w.ins("VFMADD231PS Y13, %s, Y12", acc(0, t))
			w.ins("VMOVUPS Y12, %d(R10)", 32*r)
			if t < mr-1 {
				w.ins("ADDQ R9, R10")
			}
		}
	}
	w.ins("ADDQ $%d, BX", 4*octet)
	w.ins("ADDQ $%d, AX", group*mr*4)
	w.ins("DECQ CX")
	w.ins("JNZ group")
	w.line("done:")
	w.ins("VZEROUPPER")
	w.ins("RET")
}

// widenI4Y: AVX2, the I4 panel's groups (b) written as an F32 panel
// [inputs][32] (dst) of their values s·(q − z), exact in float32: the
// i4Y kernel's conversion, each input's eight rows then scaled and
// stored where the F32 kernels read them. Y10 holds the octet's scales.
func widenI4Y(w *writer, group int) {
	name := fmt.Sprintf("widenI4G%dY", group)
	w.line("")
	w.line("// func %s(dst, b unsafe.Pointer, groups int)", name)
	w.line("TEXT ·%s(SB), NOSPLIT, $0-24", name)
	w.ins("MOVQ dst+0(FP), DI")
	w.ins("MOVQ b+8(FP), BX")
	w.ins("MOVQ groups+16(FP), CX")
	w.ins("VPBROADCASTD low4<>(SB), Y15")
	w.ins("TESTQ CX, CX")
	w.ins("JEQ done")
	octet := 32 + 4*group
	w.line("group:")
	for r := range 4 {
		w.ins("VPMOVZXBD %d(BX), Y14", r*octet)
		w.ins("VCVTPH2PS %d(BX), Y10", r*octet+16)
		w.ins("LEAQ %d(BX), SI", r*octet+32)
		w.ins("LEAQ %d(DI), R10", 32*r)
		w.ins("MOVQ $%d, R8", group/8)
		w.line("chunk%d:", r)
		w.ins("VMOVDQU (SI), Y13")
		for i := range 8 {
			i4Nibbles(w, i)
			w.ins("VMULPS Y10, Y12, Y12")
			w.ins("VMOVUPS Y12, %d(R10)", 128*i)
		}
		w.ins("ADDQ $32, SI")
		w.ins("ADDQ $%d, R10", 8*128)
		w.ins("DECQ R8")
		w.ins("JNZ chunk%d", r)
	}
	w.ins("ADDQ $%d, BX", 4*octet)
	w.ins("ADDQ $%d, DI", group*128)
	w.ins("DECQ CX")
	w.ins("JNZ group")
	w.line("done:")
	w.ins("VZEROUPPER")
	w.ins("RET")
}

// i4Nibbles writes Y12 = float32(q − z) for the i-th nibble of each of
// Y13's eight 32-bit words (the rows of one input), with Y15 the 4-bit
// mask and Y14 the zero points.
func i4Nibbles(w *writer, i int) {
	if sh := 8*(i%4) + 4*(i/4); sh == 0 {
		w.ins("VPAND Y15, Y13, Y12")
	} else {
		w.ins("VPSRLD $%d, Y13, Y12", sh)
		w.ins("VPAND Y15, Y12, Y12")
	}
	w.ins("VPSUBD Y14, Y12, Y12")
	w.ins("VCVTDQ2PS Y12, Y12")
}
