package asmgen

import "fmt"

// QKFormat is the part of a device/cpu panel format (qk.go there) that
// its kernel's code depends on; device/cpu's tests check that the two
// tables agree.
type QKFormat struct {
	ID     int // index into device/cpu's qkFormats
	Super  int
	HB     int // high-plane bits
	Sub    int
	Signed bool
	Mins   bool
	Offset int
}

// QKFormatsY are the panel formats with an AVX2 kernel (one token).
var QKFormatsY = []QKFormat{
	{ID: 0, Super: 256, HB: 0, Sub: 32, Mins: true},
	{ID: 1, Super: 32, HB: 0, Sub: 32, Mins: true},
	{ID: 2, Super: 256, HB: 1, Sub: 32, Mins: true},
	{ID: 3, Super: 32, HB: 1, Sub: 32, Mins: true},
	{ID: 4, Super: 256, HB: 2, Sub: 16, Signed: true, Offset: 32},
}

func (f QKFormat) blockBytes() int {
	n := 512 + 128*f.HB + 32*32/f.Sub
	if f.Mins {
		n += 32 * 32 / f.Sub
	}
	return n
}

func (f QKFormat) superBytes() int {
	n := f.Super/32*f.blockBytes() + 64
	if f.Mins {
		n += 64
	}
	return n
}

// qkY: AVX2, one token, a panel of format f (layouts in device/cpu/qk.go).
// Per block of 32 inputs and octet r of rows, one 32-byte load holds the
// nibbles of groups g and g+4 (8 rows × 4 inputs); VPMADDUBSW multiplies
// the unsigned quants by the signed activation bytes into 16-bit pair
// sums, which add up in 16 bits while they cannot overflow (4-bit quants:
// eight products, 8·2·15·127 < 2^15; 5-bit: four; 6-bit: two), then
// VPMADDWD by ones widens them. Each sub-block's int32 dot (less
// offset·Σq_x) times its integer scale (VPMULLD) adds into the
// super-block's sums Y0-Y3 (rows 8r…8r+7). At the super-block's end the
// sums, converted, times d·d_x add into c; a second pass over the blocks
// then gathers Σ m·Σq_x and subtracts it times dmin·d_x.
//
// Registers: Y0-Y3 sums; Y4 nibbles; Y5, Y6 low and high quants; Y7 high
// bits; Y8 broadcast activations; Y9, Y10 16-bit sums; Y11, Y13 sub-block
// dots; Y12 the high-bit mask; Y14 16-bit ones; Y15 0x0f bytes. R8 walks
// the panel's blocks, R10 the activation quants, R12 their 16-sums.
func qkY(w *writer, f QKFormat) {
	prologue(w, fmt.Sprintf("gemmQK%dY1", f.ID))
	w.ins("VPBROADCASTD ones16<>(SB), Y14")
	w.ins("VPBROADCASTD nib0f<>(SB), Y15")
	switch f.HB {
	case 1:
		w.ins("VPBROADCASTD bit10<>(SB), Y12")
	case 2:
		w.ins("VPBROADCASTD bits30<>(SB), Y12")
	}
	for r := range 4 {
		w.ins("VPXOR Y%d, Y%d, Y%d", r, r, r)
	}
	w.ins("TESTQ CX, CX")
	w.ins("JEQ done")
	w.line("super:")
	w.ins("MOVQ BX, R8")
	w.ins("MOVQ AX, R10")
	w.ins("LEAQ %d(AX), R12", f.Super+4)
	w.ins("MOVQ $%d, R11", f.Super/32)
	w.line("block:")
	for r := range 4 {
		qkOctet(w, f, r)
	}
	w.ins("ADDQ $%d, R8", f.blockBytes())
	w.ins("ADDQ $32, R10")
	w.ins("ADDQ $8, R12")
	w.ins("DECQ R11")
	w.ins("JNZ block")
	// R8 is at the super-block's d[32], then dmin[32].
	w.ins("VBROADCASTSS %d(AX), Y8", f.Super)
	qkFlush(w, 0, false)
	if f.Mins {
		w.ins("MOVQ BX, R9")
		w.ins("LEAQ %d(AX), R12", f.Super+4)
		w.ins("MOVQ $%d, R11", f.Super/32)
		w.line("mins:")
		w.ins("VPBROADCASTD (R12), Y7")
		w.ins("VPBROADCASTD 4(R12), Y9")
		w.ins("VPADDD Y9, Y7, Y7")
		for r := range 4 {
			w.ins("VPMOVZXBD %d(R9), Y5", 512+128*f.HB+32+8*r)
			w.ins("VPMULLD Y7, Y5, Y5")
			w.ins("VPADDD Y5, Y%d, Y%d", r, r)
		}
		w.ins("ADDQ $%d, R9", f.blockBytes())
		w.ins("ADDQ $8, R12")
		w.ins("DECQ R11")
		w.ins("JNZ mins")
		qkFlush(w, 64, true)
	}
	w.ins("ADDQ $%d, BX", f.superBytes())
	w.ins("ADDQ $%d, AX", f.Super+4+f.Super/4)
	w.ins("DECQ CX")
	w.ins("JNZ super")
	w.line("done:")
	w.ins("VZEROUPPER")
	w.ins("RET")
}

// qkFlush adds (or with sub, subtracts) the sums Y0-Y3 times the f16
// scales at R8+off and d_x (Y8) into c, and clears them.
func qkFlush(w *writer, off int, sub bool) {
	for r := range 4 {
		w.ins("VCVTPH2PS %d(R8), Y5", off+16*r)
		w.ins("VMULPS Y8, Y5, Y5")
		w.ins("VCVTDQ2PS Y%d, Y%d", r, r)
		w.ins("VMOVUPS %d(DX), Y6", 32*r)
		if sub {
			w.ins("VFNMADD231PS Y5, Y%d, Y6", r)
		} else {
			w.ins("VFMADD231PS Y5, Y%d, Y6", r)
		}
		w.ins("VMOVUPS Y6, %d(DX)", 32*r)
		w.ins("VPXOR Y%d, Y%d, Y%d", r, r, r)
	}
}

// qkOctet adds one block's products for rows 8r…8r+7 into Yr.
func qkOctet(w *writer, f QKFormat, r int) {
	// The pair sums of how many groups add in 16 bits before widening.
	per := map[int]int{0: 4, 1: 2, 2: 1}[f.HB]
	if f.Sub == 16 {
		per = min(per, 2)
	}
	w.ins("VPXOR Y9, Y9, Y9")
	w.ins("VPXOR Y10, Y10, Y10")
	w.ins("VPXOR Y11, Y11, Y11")
	w.ins("VPXOR Y13, Y13, Y13")
	for g := range 4 {
		w.ins("VMOVDQU %d(R8), Y4", g*128+r*32)
		w.ins("VPAND Y15, Y4, Y5")
		w.ins("VPSRLW $4, Y4, Y6")
		w.ins("VPAND Y15, Y6, Y6")
		switch f.HB {
		case 1:
			// Bits 2g and 2g+1 of the plane to bit 4.
			w.ins("VMOVDQU %d(R8), Y7", 512+r*32)
			qkShiftMask(w, 4-2*g)
			w.ins("VPOR Y4, Y5, Y5")
			w.ins("VMOVDQU %d(R8), Y7", 512+r*32)
			qkShiftMask(w, 3-2*g)
			w.ins("VPOR Y4, Y6, Y6")
		case 2:
			// Bits 4(g%2)… and 4(g%2)+2… of plane g/2 to bits 4-5.
			off := 512 + (g/2)*128 + r*32
			w.ins("VMOVDQU %d(R8), Y7", off)
			qkShiftMask(w, 4-4*(g%2))
			w.ins("VPOR Y4, Y5, Y5")
			w.ins("VMOVDQU %d(R8), Y7", off)
			qkShiftMask(w, 2-4*(g%2))
			w.ins("VPOR Y4, Y6, Y6")
		}
		w.ins("VPBROADCASTD %d(R10), Y8", 4*g)
		w.ins("VPMADDUBSW Y8, Y5, Y5")
		w.ins("VPBROADCASTD %d(R10), Y8", 16+4*g)
		w.ins("VPMADDUBSW Y8, Y6, Y6")
		if f.Sub == 16 {
			w.ins("VPADDW Y5, Y9, Y9")
			w.ins("VPADDW Y6, Y10, Y10")
		} else {
			w.ins("VPADDW Y5, Y9, Y9")
			w.ins("VPADDW Y6, Y9, Y9")
		}
		if (g+1)%per == 0 {
			w.ins("VPMADDWD Y14, Y9, Y9")
			w.ins("VPADDD Y9, Y11, Y11")
			w.ins("VPXOR Y9, Y9, Y9")
			if f.Sub == 16 {
				w.ins("VPMADDWD Y14, Y10, Y10")
				w.ins("VPADDD Y10, Y13, Y13")
				w.ins("VPXOR Y10, Y10, Y10")
			}
		}
	}
	scales := 512 + 128*f.HB
	subs := []string{"Y11"}
	if f.Sub == 16 {
		subs = append(subs, "Y13")
	}
	for h, dot := range subs {
		if f.Offset != 0 {
			w.ins("VPBROADCASTD %d(R12), Y7", 4*h)
			w.ins("VPSLLD $%d, Y7, Y7", log2(f.Offset))
			w.ins("VPSUBD Y7, %s, %s", dot, dot)
		}
		ext := "VPMOVZXBD"
		if f.Signed {
			ext = "VPMOVSXBD"
		}
		w.ins("%s %d(R8), Y5", ext, scales+32*h+8*r)
		w.ins("VPMULLD Y5, %s, %s", dot, dot)
		w.ins("VPADDD %s, Y%d, Y%d", dot, r, r)
	}
}

// qkShiftMask: Y4 = (Y7 shifted left by s, right by −s) & Y12. Shifting
// 16-bit lanes moves bits between the bytes of a lane, but only into
// bits the mask (at most bits 4-5, shifts of at most 4) clears.
func qkShiftMask(w *writer, s int) {
	switch {
	case s > 0:
		w.ins("VPSLLW $%d, Y7, Y4", s)
		w.ins("VPAND Y12, Y4, Y4")
	case s < 0:
		w.ins("VPSRLW $%d, Y7, Y4", -s)
		w.ins("VPAND Y12, Y4, Y4")
	default:
		w.ins("VPAND Y12, Y7, Y4")
	}
}

func log2(n int) int {
	s := 0
	for 1<<s < n {
		s++
	}
	if 1<<s != n {
		panic(fmt.Sprintf("asmgen: offset %d is not a power of two", n))
	}
	return s
}
