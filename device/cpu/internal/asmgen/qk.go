package asmgen

import (
	"fmt"
	"strings"
)

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
	Table  bool // quants index tensor.IQ4Values
}

// QKFormatsY are the panel formats with AVX2 kernels (1…MaxMRQKY tokens).
var QKFormatsY = []QKFormat{
	{ID: 0, Super: 256, HB: 0, Sub: 32, Mins: true},
	{ID: 1, Super: 32, HB: 0, Sub: 32, Mins: true},
	{ID: 2, Super: 256, HB: 1, Sub: 32, Mins: true},
	{ID: 3, Super: 32, HB: 1, Sub: 32, Mins: true},
	{ID: 4, Super: 256, HB: 2, Sub: 16, Signed: true, Offset: 32},
	{ID: 5, Super: 256, HB: 0, Sub: 16, Mins: true},
	{ID: 6, Super: 256, HB: 0, Sub: 32, Signed: true, Table: true},
	{ID: 7, Super: 32, HB: 0, Sub: 32, Signed: true, Table: true},
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

// MaxMRQKY is the most tokens an AVX2 QK kernel takes: the tall
// kernels keep two registers per token (an int32 and a 16-bit sum).
const MaxMRQKY = 4

// qkY: AVX2, mr tokens, a panel of format f (layouts in device/cpu/qk.go).
// The panel's rows are taken an octet r (rows 8r…8r+7, one ymm of int32
// lanes) at a time; per octet the kernel walks the super-block's blocks,
// so each 32-byte load of nibbles (8 rows × 4 inputs, groups g and g+4)
// is split into quants once and multiplied by every token's activations:
// VPMADDUBSW of the unsigned quants by a broadcast of four signed
// activation bytes gives 16-bit pair sums per row. Those add up in 16
// bits while they cannot overflow (4-bit quants: all eight of a block,
// 8·2·15·127 < 2^15; 5-bit: four) and are then widened and scaled in one
// VPMADDWD by the sub-block's integer scale, each row's scale in both
// halves of its 32-bit lane (VPSHUFB of the eight scale bytes, then a
// shift that sign- or zero-extends). With 16-input sub-blocks every
// product is widened at once, by its own sub-block's scale. An offset
// (6-bit quants: 32) is taken off as offset·scale·Σq_x per sub-block.
// Codebook formats (IQ4) look their quants up with VPSHUFB as signed
// values; VPMADDUBSW takes the values' magnitudes and the activations
// with the values' signs (VPSIGNB), and every product is widened at once
// (two products of 127 fill 16 bits).
// After the octet's blocks the int32 sums, converted, times d·d_x add
// into c; with mins, a second walk gathers Σ m·Σq_x and subtracts it
// times dmin·d_x.
//
// Registers: the int32 sums Y0…, then the 16-bit sums; from Y15 down the
// nibble mask, the high-bit mask, the scales, the low and high quants,
// the broadcast activations, a product and a high-plane temporary. R8
// walks the panel's blocks, R10 the activation quants, R12 their 16-sums;
// R13 is 3·ldc.
func qkY(w *writer, f QKFormat, mr int) {
	wide16 := f.Sub == 32 // 16-bit sums per token
	acc := func(t int) string { return fmt.Sprintf("Y%d", t) }
	a16 := func(t int) string { return fmt.Sprintf("Y%d", mr+t) }
	used := mr
	if wide16 {
		used = 2 * mr
	}
	const mask, hmask, sc0, sc1, lo, hi, bx, p = "Y15", "Y14", "Y13", "Y12", "Y11", "Y10", "Y9", "Y8"
	ht, free := "Y12", 8 // the high-plane temporary takes sc1's place
	if f.Sub == 16 && f.HB > 0 {
		ht, free = "Y7", 7
	}
	// Codebook formats: the codebook in hmask's place; the signed values
	// in sc1 and ht, the quants' magnitudes in lo and hi.
	const table, vlo, vhi = "Y14", "Y12", "Y7"
	if f.Table {
		wide16, used, free = false, mr, 7
	}
	if used > free {
		panic(fmt.Sprintf("asmgen: QK format %d with %d tokens needs %d sum registers", f.ID, mr, used))
	}
	qkStart(w, f, mr)
	w.ins("LEAQ (R9)(R9*2), R13")
	w.ins("TESTQ CX, CX")
	w.ins("JEQ done")
	nb := f.Super / 32
	sums := f.Super*mr + 4*mr // the 16-sums, after quants and d_x
	w.line("super:")
	// The octets as a loop, so that a kernel's code is one octet's: DI =
	// 4r, and (DI*8), (DI*2) and (DI*4) reach an octet's nibbles (32r),
	// scale bytes (8r) and f16 scales (16r); SI is c's columns 32r.
	w.ins("XORQ DI, DI")
	w.ins("MOVQ DX, SI")
	w.line("octet:")
	{
		// The dot walk.
		qkWalk(w, mr, acc, sums, nb, "dot")
		scales := 512 + 128*f.HB
		qkScaleVec(w, f, qkAt(scales, 2), sc0)
		if f.Sub == 16 {
			qkScaleVec(w, f, qkAt(scales+32, 2), sc1)
		}
		per := map[int]int{0: 4, 1: 2}[f.HB] // groups summed in 16 bits
		for g := range 4 {
			qkUnpack(w, f, g, func(off int) string { return qkAt(off, 8) }, ht, "")
			for t := range mr {
				for half, q := range []string{lo, hi} {
					w.ins("VPBROADCASTD %d(R10), %s", ((4*half+g)*mr+t)*4, bx)
					if f.Table {
						w.ins("VPSIGNB %s, %s, %s", []string{vlo, vhi}[half], bx, bx)
					}
					if !wide16 {
						sc := sc0
						if f.Sub == 16 {
							sc = []string{sc0, sc1}[half]
						}
						w.ins("VPMADDUBSW %s, %s, %s", bx, q, p)
						w.ins("VPMADDWD %s, %s, %s", sc, p, p)
						w.ins("VPADDD %s, %s, %s", p, acc(t), acc(t))
						continue
					}
					if g%per == 0 && half == 0 {
						w.ins("VPMADDUBSW %s, %s, %s", bx, q, a16(t))
						continue
					}
					w.ins("VPMADDUBSW %s, %s, %s", bx, q, p)
					w.ins("VPADDW %s, %s, %s", p, a16(t), a16(t))
				}
				if wide16 && (g+1)%per == 0 {
					w.ins("VPMADDWD %s, %s, %s", sc0, a16(t), p)
					w.ins("VPADDD %s, %s, %s", p, acc(t), acc(t))
				}
			}
		}
		if f.Offset != 0 {
			// acc −= offset·sc·Σq_x per sub-block (sc as int32 in lo, hi).
			subs := 32 / f.Sub
			for h, reg := range []string{lo, hi}[:subs] {
				ext := "VPMOVZXBD"
				if f.Signed {
					ext = "VPMOVSXBD"
				}
				w.ins("%s %s, %s", ext, qkAt(scales+32*h, 2), reg)
			}
			for t := range mr {
				for h, reg := range []string{lo, hi}[:subs] {
					w.ins("VPBROADCASTD %d(R12), %s", 4*(h*mr+t), bx)
					w.ins("VPSLLD $%d, %s, %s", log2(f.Offset), bx, bx)
					w.ins("VPMULLD %s, %s, %s", reg, bx, bx)
					w.ins("VPSUBD %s, %s, %s", bx, acc(t), acc(t))
				}
			}
		}
		w.ins("ADDQ $%d, R8", f.blockBytes())
		w.ins("ADDQ $%d, R10", 32*mr)
		w.ins("ADDQ $%d, R12", 8*mr)
		w.ins("DECQ R11")
		w.ins("JNZ dot")
		// R8 is at the super-block's d[32], then dmin[32].
		qkFlushTall(w, mr, qkAt(0, 4), false, acc, lo, bx, p, f.Super)
	}
	if f.Mins {
		w.ins("MOVQ BX, R8")
		w.ins("LEAQ %d(AX), R12", sums)
		w.ins("MOVQ $%d, R11", nb)
		w.line("mins:")
		minsOff := 512 + 128*f.HB + 32*32/f.Sub
		if f.Sub == 32 {
			w.ins("VPMOVZXBD %s, %s", qkAt(minsOff, 2), lo)
			for t := range mr {
				w.ins("VPBROADCASTD %d(R12), %s", 4*t, bx)
				w.ins("VPBROADCASTD %d(R12), %s", 4*(mr+t), p)
				w.ins("VPADDD %s, %s, %s", p, bx, bx)
				w.ins("VPMULLD %s, %s, %s", lo, bx, bx)
				w.ins("VPADDD %s, %s, %s", bx, acc(t), acc(t))
			}
		} else {
			w.ins("VPMOVZXBD %s, %s", qkAt(minsOff, 2), lo)
			w.ins("VPMOVZXBD %s, %s", qkAt(minsOff+32, 2), hi)
			for t := range mr {
				for h, reg := range []string{lo, hi} {
					w.ins("VPBROADCASTD %d(R12), %s", 4*(h*mr+t), bx)
					w.ins("VPMULLD %s, %s, %s", reg, bx, bx)
					w.ins("VPADDD %s, %s, %s", bx, acc(t), acc(t))
				}
			}
		}
		w.ins("ADDQ $%d, R8", f.blockBytes())
		w.ins("ADDQ $%d, R12", 8*mr)
		w.ins("DECQ R11")
		w.ins("JNZ mins")
		qkFlushTall(w, mr, qkAt(64, 4), true, acc, lo, bx, p, f.Super)
	}
	w.ins("ADDQ $4, DI")
	w.ins("ADDQ $32, SI")
	w.ins("CMPQ DI, $16")
	w.ins("JNE octet")
	w.ins("ADDQ $%d, BX", f.superBytes())
	w.ins("ADDQ $%d, AX", f.Super*mr+4*mr+f.Super/16*4*mr)
	w.ins("DECQ CX")
	w.ins("JNZ super")
	w.line("done:")
	w.ins("VZEROUPPER")
	w.ins("RET")
}

// qkStart checks that format f's kernel can be written, starts the
// function of an mr-token tile and loads the constants: the nibble mask
// in Y15, the high-bit mask or the codebook in Y14.
func qkStart(w *writer, f QKFormat, mr int) {
	if f.Table && (f.HB != 0 || f.Sub != 32 || f.Mins || f.Offset != 0) {
		panic(fmt.Sprintf("asmgen: QK format %d: a codebook only of 4-bit quants in sub-blocks of 32", f.ID))
	}
	if f.Offset != 0 && f.Sub != 16 {
		panic(fmt.Sprintf("asmgen: QK format %d: an offset needs 16-input sub-blocks", f.ID))
	}
	prologue(w, fmt.Sprintf("gemmQK%dY%d", f.ID, mr))
	w.ins("VPBROADCASTD nib0f<>(SB), Y15")
	switch {
	case f.Table:
		w.ins("VBROADCASTI128 iq4values<>(SB), Y14")
	case f.HB == 1:
		w.ins("VPBROADCASTD bit10<>(SB), Y14")
	case f.HB == 2:
		w.ins("VPBROADCASTD bits30<>(SB), Y14")
	}
}

// qkUnpack splits group g's 32 bytes of nibbles (8 rows × 4 inputs) into
// the low (Y11) and high (Y10) quants, their high-plane bits ORed in
// (ht a temporary); a codebook format leaves the values' magnitudes
// there for VPMADDUBSW and the signed values in Y12 and Y7, whose signs
// each token's activations take. at maps an offset in the block to the
// octet's operand.
//
// With two high-plane bits (a byte per pair of groups) and hp a free
// register, the pair's plane is loaded into hp once, at the even group.
func qkUnpack(w *writer, f QKFormat, g int, at func(off int) string, ht, hp string) {
	const mask, hmask, lo, hi, vlo, vhi = "Y15", "Y14", "Y11", "Y10", "Y12", "Y7"
	w.ins("VMOVDQU %s, %s", at(g*128), hi)
	w.ins("VPAND %s, %s, %s", hi, mask, lo)
	w.ins("VPSRLW $4, %s, %s", hi, hi)
	w.ins("VPAND %s, %s, %s", mask, hi, hi)
	switch f.HB {
	case 1:
		qkHighBits(w, at(512), 4-2*g, lo, ht, hmask)
		qkHighBits(w, at(512), 3-2*g, hi, ht, hmask)
	case 2:
		off := at(512 + (g/2)*128)
		if hp != "" {
			if g%2 == 0 {
				w.ins("VMOVDQU %s, %s", off, hp)
			}
			off = hp
		}
		qkHighBits(w, off, 4-4*(g%2), lo, ht, hmask)
		qkHighBits(w, off, 2-4*(g%2), hi, ht, hmask)
	}
	if f.Table {
		w.ins("VPSHUFB %s, %s, %s", lo, hmask, vlo)
		w.ins("VPSHUFB %s, %s, %s", hi, hmask, vhi)
		w.ins("VPABSB %s, %s", vlo, lo)
		w.ins("VPABSB %s, %s", vhi, hi)
	}
}

// qkWalk clears n sums and starts a walk over the super-block's nb
// blocks at label: R8 at its first block, R10 at the activation quants,
// R12 at their 16-sums (sums bytes on), R11 the count.
func qkWalk(w *writer, n int, acc func(int) string, sums, nb int, label string) {
	for i := range n {
		w.ins("VPXOR %s, %s, %s", acc(i), acc(i), acc(i))
	}
	w.ins("MOVQ BX, R8")
	w.ins("MOVQ AX, R10")
	w.ins("LEAQ %d(AX), R12", sums)
	w.ins("MOVQ $%d, R11", nb)
	w.line("%s:", label)
}

// qkScaleVec loads the eight scale bytes at off(R8) (rows 8r…8r+7) into
// dst as 16-bit words, each row's scale in both words of its lane.
func qkScaleVec(w *writer, f QKFormat, at string, dst string) {
	w.ins("VPBROADCASTQ %s, %s", at, dst)
	if f.Signed {
		w.ins("VPSHUFB scaledup<>(SB), %s, %s", dst, dst)
		w.ins("VPSRAW $8, %s, %s", dst, dst)
		return
	}
	w.ins("VPSHUFB scalezx<>(SB), %s, %s", dst, dst)
}

// qkHighBits ORs the high-plane bits at at (a memory operand or a
// register), shifted left by s (right by −s) and masked, into q.
func qkHighBits(w *writer, at string, s int, q, tmp, hmask string) {
	src := at
	if s != 0 && !strings.HasPrefix(at, "Y") {
		w.ins("VMOVDQU %s, %s", at, tmp)
		src = tmp
	}
	switch {
	case s == 0:
		w.ins("VPAND %s, %s, %s", at, hmask, tmp)
	case s > 0:
		w.ins("VPSLLW $%d, %s, %s", s, src, tmp)
		w.ins("VPAND %s, %s, %s", hmask, tmp, tmp)
	default:
		w.ins("VPSRLW $%d, %s, %s", -s, src, tmp)
		w.ins("VPAND %s, %s, %s", hmask, tmp, tmp)
	}
	w.ins("VPOR %s, %s, %s", tmp, q, q)
}

// qkFlushTall adds (sub: subtracts) each token's int32 sums, converted,
// times the f16 scales at soff(R8) and the token's d_x into its row of c
// at coff bytes; the sums are left cleared.
func qkFlushTall(w *writer, mr int, at string, sub bool, acc func(int) string, sc, dx, cv string, super int) {
	w.ins("VCVTPH2PS %s, %s", at, sc)
	for t := range mr {
		w.ins("VBROADCASTSS %d(AX), %s", super*mr+4*t, dx)
		w.ins("VMULPS %s, %s, %s", sc, dx, dx)
		w.ins("VCVTDQ2PS %s, %s", acc(t), acc(t))
		row := []string{"(SI)", "(SI)(R9*1)", "(SI)(R9*2)", "(SI)(R13*1)"}[t]
		w.ins("VMOVUPS %s, %s", row, cv)
		if sub {
			w.ins("VFNMADD231PS %s, %s, %s", dx, acc(t), cv)
		} else {
			w.ins("VFMADD231PS %s, %s, %s", dx, acc(t), cv)
		}
		w.ins("VMOVUPS %s, %s", cv, row)
		w.ins("VPXOR %s, %s, %s", acc(t), acc(t), acc(t))
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

// qkAt is off(R8) plus the octet's share of a region whose rows of 32
// are scale·4 bytes each (DI = 4r): the nibbles (8), the scale bytes (2),
// the f16 scales (4).
func qkAt(off, scale int) string { return fmt.Sprintf("%d(R8)(DI*%d)", off, scale) }

// qk1Y: AVX2, one token (decode), a panel of format f. qkY's arithmetic
// with its loops turned inside out: per block, the four octets one after
// another (4-bit formats: group by group, qk1Shared), each into its own
// int32 sums (Y0…Y3), so the panel is read block by block in address
// order (qkY walks a super-block once per octet, a quarter of each
// block's lines at a time), and the mins take one walk per super-block
// for all 32 rows instead of one per octet.
//
// Registers: the octets' sums Y0…Y3, the 16-bit sums Y4 (and Y5 with
// 16-input sub-blocks: one per half), a pair of groups' high plane Y6;
// qkY's mask, high-bit mask or codebook, scales, quants, activation,
// product and high-plane temporary from Y15 down.
func qk1Y(w *writer, f QKFormat) {
	wide16 := f.Sub == 32 && !f.Table
	acc := func(r int) string { return fmt.Sprintf("Y%d", r) }
	const a16 = "Y4"
	const mask, hmask, sc0, sc1, lo, hi, bx, p = "Y15", "Y14", "Y13", "Y12", "Y11", "Y10", "Y9", "Y8"
	ht := "Y12"
	if f.Sub == 16 && f.HB > 0 {
		ht = "Y7"
	}
	const vlo, vhi = "Y12", "Y7"
	at := func(off int) string { return fmt.Sprintf("%d(R8)", off) }
	qkStart(w, f, 1)
	w.ins("TESTQ CX, CX")
	w.ins("JEQ done")
	nb := f.Super / 32
	sums := f.Super + 4 // the 16-sums, after quants and d_x
	scales := 512 + 128*f.HB
	w.line("super:")
	qkWalk(w, 4, acc, sums, nb, "block")
	per := map[int]int{0: 4, 1: 2}[f.HB] // groups summed in 16 bits
	octets := 4                          // written one after another, each its own walk of the block
	if f.HB == 0 && f.Sub == 32 && !f.Table {
		qk1Shared(w, at, scales)
		octets = 0
	}
	for r := range octets {
		qkScaleVec(w, f, at(scales+8*r), sc0)
		if f.Sub == 16 {
			qkScaleVec(w, f, at(scales+32+8*r), sc1)
		}
		for g := range 4 {
			qkUnpack(w, f, g, func(off int) string { return at(off + 32*r) }, ht, "Y6")
			for half, q := range []string{lo, hi} {
				w.ins("VPBROADCASTD %d(R10), %s", (4*half+g)*4, bx)
				if f.Table {
					w.ins("VPSIGNB %s, %s, %s", []string{vlo, vhi}[half], bx, bx)
				}
				if f.Sub == 16 {
					// Groups g and g+1 of a half are one sub-block: two
					// products of quants up to 63 sum in 16 bits.
					s16 := []string{"Y4", "Y5"}[half]
					if g%2 == 0 {
						w.ins("VPMADDUBSW %s, %s, %s", bx, q, s16)
						continue
					}
					w.ins("VPMADDUBSW %s, %s, %s", bx, q, p)
					w.ins("VPADDW %s, %s, %s", p, s16, s16)
					w.ins("VPMADDWD %s, %s, %s", []string{sc0, sc1}[half], s16, p)
					w.ins("VPADDD %s, %s, %s", p, acc(r), acc(r))
					continue
				}
				if !wide16 {
					w.ins("VPMADDUBSW %s, %s, %s", bx, q, p)
					w.ins("VPMADDWD %s, %s, %s", sc0, p, p)
					w.ins("VPADDD %s, %s, %s", p, acc(r), acc(r))
					continue
				}
				if g%per == 0 && half == 0 {
					w.ins("VPMADDUBSW %s, %s, %s", bx, q, a16)
					continue
				}
				w.ins("VPMADDUBSW %s, %s, %s", bx, q, p)
				w.ins("VPADDW %s, %s, %s", p, a16, a16)
			}
			if wide16 && (g+1)%per == 0 {
				w.ins("VPMADDWD %s, %s, %s", sc0, a16, p)
				w.ins("VPADDD %s, %s, %s", p, acc(r), acc(r))
			}
		}
	}
	qk1NextBlock(w, f, true, "block")
	if f.Offset != 0 {
		// acc −= offset·sc·Σq_x per sub-block, for all 32 rows a block.
		ext := "VPMOVZXBD"
		if f.Signed {
			ext = "VPMOVSXBD"
		}
		w.ins("MOVQ BX, R8")
		w.ins("LEAQ %d(AX), R12", sums)
		w.ins("MOVQ $%d, R11", nb)
		w.line("offset:")
		for h := range 2 {
			w.ins("VPBROADCASTD %d(R12), %s", 4*h, bx)
			w.ins("VPSLLD $%d, %s, %s", log2(f.Offset), bx, bx)
			for r := range 4 {
				w.ins("%s %s, %s", ext, at(scales+32*h+8*r), lo)
				w.ins("VPMULLD %s, %s, %s", bx, lo, lo)
				w.ins("VPSUBD %s, %s, %s", lo, acc(r), acc(r))
			}
		}
		qk1NextBlock(w, f, false, "offset")
	}
	// R8 is at the super-block's d[32], then dmin[32].
	qk1Flush(w, 0, false, acc, lo, bx, p, f.Super)
	if f.Mins {
		w.ins("MOVQ BX, R8")
		w.ins("LEAQ %d(AX), R12", sums)
		w.ins("MOVQ $%d, R11", nb)
		w.line("mins:")
		minsOff := scales + 32*32/f.Sub
		if f.Sub == 32 {
			w.ins("VPBROADCASTD (R12), %s", bx)
			w.ins("VPBROADCASTD 4(R12), %s", p)
			w.ins("VPADDD %s, %s, %s", p, bx, bx)
			for r := range 4 {
				w.ins("VPMOVZXBD %s, %s", at(minsOff+8*r), lo)
				w.ins("VPMULLD %s, %s, %s", bx, lo, lo)
				w.ins("VPADDD %s, %s, %s", lo, acc(r), acc(r))
			}
		} else {
			for h := range 2 {
				w.ins("VPBROADCASTD %d(R12), %s", 4*h, bx)
				for r := range 4 {
					w.ins("VPMOVZXBD %s, %s", at(minsOff+32*h+8*r), lo)
					w.ins("VPMULLD %s, %s, %s", bx, lo, lo)
					w.ins("VPADDD %s, %s, %s", lo, acc(r), acc(r))
				}
			}
		}
		qk1NextBlock(w, f, false, "mins")
		qk1Flush(w, 64, true, acc, lo, bx, p, f.Super)
	}
	w.ins("ADDQ $%d, BX", f.superBytes())
	w.ins("ADDQ $%d, AX", f.Super+4+f.Super/16*4)
	w.ins("DECQ CX")
	w.ins("JNZ super")
	w.line("done:")
	w.ins("VZEROUPPER")
	w.ins("RET")
}

// qk1Shared is qk1Y's block for 4-bit quants in sub-blocks of 32 (Q4_K,
// Q4_0, Q4_1): group by group, each of the group's two activation
// broadcasts (Y9, Y12) serves all four octets, whose 16-bit sums
// (Y4…Y7) take the whole block before one VPMADDWD each by its scales;
// the nibbles are then read in address order, 128 bytes a group.
func qk1Shared(w *writer, at func(off int) string, scales int) {
	const mask, sc, lo, hi, xlo, xhi, p = "Y15", "Y13", "Y11", "Y10", "Y9", "Y12", "Y8"
	acc := func(r int) string { return fmt.Sprintf("Y%d", r) }
	a16 := func(r int) string { return fmt.Sprintf("Y%d", 4+r) }
	for g := range 4 {
		w.ins("VPBROADCASTD %d(R10), %s", 4*g, xlo)
		w.ins("VPBROADCASTD %d(R10), %s", 16+4*g, xhi)
		for r := range 4 {
			w.ins("VMOVDQU %s, %s", at(g*128+32*r), hi)
			w.ins("VPAND %s, %s, %s", hi, mask, lo)
			w.ins("VPSRLW $4, %s, %s", hi, hi)
			w.ins("VPAND %s, %s, %s", mask, hi, hi)
			if g == 0 {
				w.ins("VPMADDUBSW %s, %s, %s", xlo, lo, a16(r))
			} else {
				w.ins("VPMADDUBSW %s, %s, %s", xlo, lo, p)
				w.ins("VPADDW %s, %s, %s", p, a16(r), a16(r))
			}
			w.ins("VPMADDUBSW %s, %s, %s", xhi, hi, p)
			w.ins("VPADDW %s, %s, %s", p, a16(r), a16(r))
		}
	}
	for r := range 4 {
		qkScaleVec(w, QKFormat{}, at(scales+8*r), sc)
		w.ins("VPMADDWD %s, %s, %s", sc, a16(r), p)
		w.ins("VPADDD %s, %s, %s", p, acc(r), acc(r))
	}
}

// qk1NextBlock steps R8 to the next block, R12 to its 16-sums (and R10
// to its activations) and loops to label while R11 counts down.
func qk1NextBlock(w *writer, f QKFormat, quants bool, label string) {
	w.ins("ADDQ $%d, R8", f.blockBytes())
	if quants {
		w.ins("ADDQ $32, R10")
	}
	w.ins("ADDQ $8, R12")
	w.ins("DECQ R11")
	w.ins("JNZ %s", label)
}

// qk1Flush adds (sub: subtracts) each octet's int32 sums, converted,
// times its f16 scales at soff(R8) and the token's d_x into c's columns
// 8r…8r+7; the sums are left cleared.
func qk1Flush(w *writer, soff int, sub bool, acc func(int) string, sc, dx, cv string, super int) {
	w.ins("VBROADCASTSS %d(AX), %s", super, dx)
	for r := range 4 {
		w.ins("VCVTPH2PS %d(R8), %s", soff+16*r, sc)
		w.ins("VMULPS %s, %s, %s", sc, dx, sc)
		w.ins("VCVTDQ2PS %s, %s", acc(r), acc(r))
		w.ins("VMOVUPS %d(DX), %s", 32*r, cv)
		if sub {
			w.ins("VFNMADD231PS %s, %s, %s", sc, acc(r), cv)
		} else {
			w.ins("VFMADD231PS %s, %s, %s", sc, acc(r), cv)
		}
		w.ins("VMOVUPS %s, %d(DX)", cv, 32*r)
		w.ins("VPXOR %s, %s, %s", acc(r), acc(r), acc(r))
	}
}
