package asmgen

import "fmt"

// QKFormatsZ are the panel formats with an AVX-512 VNNI one-token
// kernel (qk1Z): all of them.
var QKFormatsZ = QKFormatsY

// qk1Z: AVX-512 VNNI, one token (decode), a panel of format f (layouts
// in device/cpu/qk.go). A zmm load of a group's nibbles is 16 rows × 4
// inputs, one row per 32-bit lane, which is VPDPBUSD's shape: the
// unsigned quants times four signed activation bytes (a broadcast
// memory operand) add into the row's int32 lane, with no 16-bit stage
// and no widening. Each block of 32 inputs takes four chains of sums
// (rows 0-15 and 16-31, low and high nibbles: inputs 0-15 and 16-31 of
// the block, the two sub-blocks of 16-input formats), then one VPMULLD
// by the sub-block's integer scale per chain (two, the chains summed
// first, with 32-input sub-blocks) into the super-block's int32 sums.
// The mins' Σ m·Σq_x gather in the same walk (qk1Y walks the block
// twice). The super-block's sums, converted, times d·d_x (and dmin·d_x)
// add into float accumulators that c receives once, at the end.
//
// Without a high plane the high nibble is not shifted down: VPDPBUSD
// takes the byte with its low nibble cleared, 16·q, and the chain is
// shifted right by 4 at the block's end, exactly (every term is a
// multiple of 16; |Σ| ≤ 16·16·15·127 fits easily).
//
// A codebook format (IQ4) looks its quants up with VPSHUFB in a table of
// the values plus 128, unsigned bytes as VPDPBUSD wants them (1…241),
// and takes 128·Σq_x of the block off its sums.
//
// Registers: Z0, Z1 the super-block's int32 sums (rows 0-15, 16-31); Z2,
// Z3 its mins' sums; Z4-Z7 the block's chains (Z4+2n+h: nibble n, rows
// h); Z8, Z9 the super-block's float sums, Z10, Z11 the mins' (all four
// added into c at the end); Z12-Z19 temporaries; Z20, Z21 a pair of
// groups' high planes; Z30 the high-bit mask, Z31 the nibble mask. R8
// walks the panel's blocks, R10 the activation quants, R12 their
// 16-sums, R11 counts the blocks.
//
// The run form (gemmQK…Z1R, run true) computes c = a · panel for a run
// of panels (its last argument, in ldc's place), consecutive in memory
// as a packed weight keeps them, c's 32 values per panel one after
// another: one call, and the stores straight into the output, for a
// task's panels (gemm's per-panel scratch, clearing and copy gone), the
// prefetches running on from one panel into the next. R13 keeps the
// super-block count, R14 the activations, R9 counts the panels.
func qk1Z(w *writer, f QKFormat, run bool) {
	if f.Table && (f.HB != 0 || f.Sub != 32 || f.Mins || f.Offset != 0) {
		panic(fmt.Sprintf("asmgen: QK format %d: a codebook only of 4-bit quants in sub-blocks of 32", f.ID))
	}
	if f.Offset != 0 && f.Sub != 16 {
		panic(fmt.Sprintf("asmgen: QK format %d: an offset needs 16-input sub-blocks", f.ID))
	}
	if run {
		name := fmt.Sprintf("gemmQK%dZ1R", f.ID)
		w.line("")
		w.line("// func %s(a, b unsafe.Pointer, k int, c unsafe.Pointer, panels int)", name)
		w.line("TEXT ·%s(SB), NOSPLIT, $0-40", name)
		w.ins("MOVQ a+0(FP), AX")
		w.ins("MOVQ b+8(FP), BX")
		w.ins("MOVQ k+16(FP), CX")
		w.ins("MOVQ c+24(FP), DX")
		w.ins("MOVQ panels+32(FP), R9")
	} else {
		prologue(w, fmt.Sprintf("gemmQK%dZ1", f.ID))
	}
	w.ins("VPBROADCASTD nib0f<>(SB), Z31")
	switch {
	case f.Table:
		w.ins("VBROADCASTI32X4 iq4biased<>(SB), Z30")
	case f.HB == 1:
		w.ins("VPBROADCASTD bit10<>(SB), Z30")
	case f.HB == 2:
		w.ins("VPBROADCASTD bits30<>(SB), Z30")
	}
	if run {
		w.ins("TESTQ R9, R9")
		w.ins("JEQ end")
		w.ins("MOVQ CX, R13")
		w.ins("MOVQ AX, R14")
		w.line("panel:")
		w.ins("MOVQ R13, CX")
		w.ins("MOVQ R14, AX")
	}
	for _, z := range []string{"Z8", "Z9", "Z10", "Z11"} {
		w.ins("VPXORD %s, %s, %s", z, z, z)
	}
	w.ins("TESTQ CX, CX")
	w.ins("JEQ done")
	nb := f.Super / 32
	scales := 512 + 128*f.HB
	mins := scales + 32*32/f.Sub
	chain := func(n, h int) string { return fmt.Sprintf("Z%d", 4+2*n+h) }
	acc := func(h int) string { return fmt.Sprintf("Z%d", h) }
	macc := func(h int) string { return fmt.Sprintf("Z%d", 2+h) }
	ext := "VPMOVZXBD"
	if f.Signed {
		ext = "VPMOVSXBD"
	}
	w.line("super:")
	for _, z := range []string{"Z0", "Z1", "Z2", "Z3"} {
		w.ins("VPXORD %s, %s, %s", z, z, z)
	}
	w.ins("MOVQ BX, R8")
	w.ins("MOVQ AX, R10")
	w.ins("LEAQ %d(AX), R12", f.Super+4)
	w.ins("MOVQ $%d, R11", nb)
	w.line("block:")
	for n := range 2 {
		for h := range 2 {
			w.ins("VPXORD %s, %s, %s", chain(n, h), chain(n, h), chain(n, h))
		}
	}
	for g := range 4 {
		for h := range 2 {
			nib, lo, hi, t := "Z12", fmt.Sprintf("Z%d", 13+3*h), fmt.Sprintf("Z%d", 14+3*h), "Z18"
			w.ins("VMOVDQU32 %d(R8), %s", g*128+64*h, nib)
			w.ins("VPANDD %s, %s, %s", "Z31", nib, lo)
			if f.HB == 0 && !f.Table {
				w.ins("VPANDND %s, Z31, %s", nib, hi) // 16·q
			} else {
				w.ins("VPSRLW $4, %s, %s", nib, hi)
				w.ins("VPANDD Z31, %s, %s", hi, hi)
			}
			hp := fmt.Sprintf("Z%d", 20+h)
			switch f.HB {
			case 1:
				// Bits 2g and 2g+1 of the plane byte: the fifth bits.
				if g == 0 {
					w.ins("VMOVDQU32 %d(R8), %s", 512+64*h, hp)
				}
				qkHighBitsZ(w, hp, 4-2*g, lo, t)
				qkHighBitsZ(w, hp, 3-2*g, hi, t)
			case 2:
				// Bits 4(g%2)… of pair g/2's plane byte: two low, two high.
				if g%2 == 0 {
					w.ins("VMOVDQU32 %d(R8), %s", 512+(g/2)*128+64*h, hp)
				}
				qkHighBitsZ(w, hp, 4-4*(g%2), lo, t)
				qkHighBitsZ(w, hp, 2-4*(g%2), hi, t)
			}
			if f.Table {
				w.ins("VPSHUFB %s, Z30, %s", lo, lo)
				w.ins("VPSHUFB %s, Z30, %s", hi, hi)
			}
			w.ins("VPDPBUSD.BCST %d(R10), %s, %s", 4*g, lo, chain(0, h))
			w.ins("VPDPBUSD.BCST %d(R10), %s, %s", 16+4*g, hi, chain(1, h))
		}
	}
	if f.HB == 0 && !f.Table {
		for h := range 2 {
			w.ins("VPSRAD $4, %s, %s", chain(1, h), chain(1, h))
		}
	}
	if f.Table {
		// chain −= 128·Σq_x of the block (the table's bias).
		w.ins("VPBROADCASTD (R12), Z12")
		w.ins("VPADDD.BCST 4(R12), Z12, Z12")
		w.ins("VPSLLD $7, Z12, Z12")
		for h := range 2 {
			w.ins("VPSUBD Z12, %s, %s", chain(0, h), chain(0, h))
		}
	}
	if f.Offset != 0 {
		// chain −= offset·Σq_x of its sub-block (nibble n: 16-sum n).
		for n := range 2 {
			w.ins("VPBROADCASTD %d(R12), Z12", 4*n)
			w.ins("VPSLLD $%d, Z12, Z12", log2(f.Offset))
			for h := range 2 {
				w.ins("VPSUBD Z12, %s, %s", chain(n, h), chain(n, h))
			}
		}
	}
	for h := range 2 {
		if f.Sub == 32 {
			w.ins("VPADDD %s, %s, %s", chain(1, h), chain(0, h), chain(0, h))
			w.ins("%s %d(R8), Z12", ext, scales+16*h)
			w.ins("VPMULLD Z12, %s, %s", chain(0, h), chain(0, h))
			w.ins("VPADDD %s, %s, %s", chain(0, h), acc(h), acc(h))
			continue
		}
		for n := range 2 {
			w.ins("%s %d(R8), Z12", ext, scales+32*n+16*h)
			w.ins("VPMULLD Z12, %s, %s", chain(n, h), chain(n, h))
			w.ins("VPADDD %s, %s, %s", chain(n, h), acc(h), acc(h))
		}
	}
	if f.Mins {
		if f.Sub == 32 {
			w.ins("VPBROADCASTD (R12), Z12")
			w.ins("VPADDD.BCST 4(R12), Z12, Z12")
			for h := range 2 {
				w.ins("VPMOVZXBD %d(R8), Z13", mins+16*h)
				w.ins("VPMULLD Z12, Z13, Z13")
				w.ins("VPADDD Z13, %s, %s", macc(h), macc(h))
			}
		} else {
			for n := range 2 {
				w.ins("VPBROADCASTD %d(R12), Z12", 4*n)
				for h := range 2 {
					w.ins("VPMOVZXBD %d(R8), Z13", mins+32*n+16*h)
					w.ins("VPMULLD Z12, Z13, Z13")
					w.ins("VPADDD Z13, %s, %s", macc(h), macc(h))
				}
			}
		}
	}
	for off := 0; off < f.blockBytes(); off += 64 {
		w.ins("PREFETCHT0 %d(R8)", qkPrefetchZ(f)+off)
	}
	w.ins("ADDQ $%d, R8", f.blockBytes())
	w.ins("ADDQ $32, R10")
	w.ins("ADDQ $8, R12")
	w.ins("DECQ R11")
	w.ins("JNZ block")
	// R8 is at the super-block's d[32], then dmin[32]; d_x follows the
	// super-block's quants.
	w.ins("VBROADCASTSS %d(AX), Z12", f.Super)
	for h := range 2 {
		w.ins("VCVTPH2PS %d(R8), Z13", 32*h)
		w.ins("VMULPS Z12, Z13, Z13")
		w.ins("VCVTDQ2PS %s, %s", acc(h), acc(h))
		w.ins("VFMADD231PS Z13, %s, Z%d", acc(h), 8+h)
		if f.Mins {
			w.ins("VCVTPH2PS %d(R8), Z14", 64+32*h)
			w.ins("VMULPS Z12, Z14, Z14")
			w.ins("VCVTDQ2PS %s, %s", macc(h), macc(h))
			w.ins("VFMADD231PS Z14, %s, Z%d", macc(h), 10+h)
		}
	}
	w.ins("ADDQ $%d, BX", f.superBytes())
	w.ins("ADDQ $%d, AX", f.Super+4+f.Super/16*4)
	w.ins("DECQ CX")
	w.ins("JNZ super")
	w.line("done:")
	for h := range 2 {
		if f.Mins {
			w.ins("VSUBPS Z%d, Z%d, Z%d", 10+h, 8+h, 8+h)
		}
		if !run {
			w.ins("VADDPS %d(DX), Z%d, Z%d", 64*h, 8+h, 8+h)
		}
		w.ins("VMOVUPS Z%d, %d(DX)", 8+h, 64*h)
	}
	if run {
		// BX is at the next panel: a panel is its super-blocks.
		w.ins("ADDQ $128, DX")
		w.ins("DECQ R9")
		w.ins("JNZ panel")
		w.line("end:")
	}
	w.ins("VZEROUPPER")
	w.ins("RET")
}

// qkPrefetchZ is how far ahead of its block qk1Z prefetches the panel
// (into L1: a task's panels are one run of memory, so past the panel's
// end is the next one). Left to the hardware prefetchers one core read
// a stories110M-shaped step's Q4_K products at 400-500 best tok/s and
// Q6_K at 220-305; 8 blocks ahead 465-576 and 329-376 in the same
// rounds (BenchmarkDecodeStep serial, on a busy machine); 4-8 KiB
// ahead were alike, within the noise.
func qkPrefetchZ(f QKFormat) int { return 8 * f.blockBytes() }

// qkHighBitsZ ORs the high-plane bits of hp, shifted left by s (right
// by −s) and masked by Z30, into q (t a temporary).
func qkHighBitsZ(w *writer, hp string, s int, q, t string) {
	src := hp
	switch {
	case s > 0:
		w.ins("VPSLLW $%d, %s, %s", s, hp, t)
		src = t
	case s < 0:
		w.ins("VPSRLW $%d, %s, %s", -s, hp, t)
		src = t
	}
	// q |= src & Z30: VPTERNLOGD's truth table of (q, src, mask) is
	// 0xF0 | (0xCC & 0xAA).
	w.ins("VPTERNLOGD $0xf8, Z30, %s, %s", src, q)
}
