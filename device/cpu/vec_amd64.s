//go:build amd64

#include "textflag.h"

// Element-wise kernels, AVX2+FMA (used on AVX-512 machines too: they move
// a few kilobytes per call, and Zen 4 splits zmm operations into two ymm
// halves anyway), plus the roofline probes in both widths. Each processes
// n elements, n a multiple of 16; the Go wrappers in vec_amd64.go finish
// the tail. The expf sequence matches expf in kernels_generic.go.

// PREFETCH_ROW_BYTES prefetches into L2 the bytes [offB, offB+bytes) of
// the row at R10; it uses R10 and R11.
#define PREFETCH_ROW_BYTES(bytes) \
	ADDQ offB+32(FP), R10 \
	MOVQ bytes, R11 \
	PREFETCHT1 (R10) \
	ADDQ $64, R10 \
	SUBQ $64, R11 \
	JG -3(PC)

// PREFETCH_ROW_AHEAD prefetches into L2 the bytes [offB, offB+bytes) of
// row x+dist of the row table BX ([]float32 headers), R12 rows left (the
// last row when fewer are left); it uses R9-R11.
#define PREFETCH_ROW_AHEAD(dist, bytes) \
	MOVQ dist, R9 \
	LEAQ -1(R12), R10 \
	CMPQ R9, R10 \
	CMOVQGT R10, R9 \
	IMULQ $24, R9 \
	MOVQ (BX)(R9*1), R10 \
	PREFETCH_ROW_BYTES(bytes)

// PREFETCH_ROW_AHEAD_K is PREFETCH_ROW_AHEAD of row x+dist+k.
#define PREFETCH_ROW_AHEAD_K(dist, k, bytes) \
	MOVQ dist, R9 \
	ADDQ $k, R9 \
	LEAQ -1(R12), R10 \
	CMPQ R9, R10 \
	CMOVQGT R10, R9 \
	IMULQ $24, R9 \
	MOVQ (BX)(R9*1), R10 \
	PREFETCH_ROW_BYTES(bytes)

// PREFETCH_WARM_ROW prefetches into L2 the bytes [offB, offB+bytes) of
// the next row of the warm table (its []float32 header at warm) while
// nwarm > 0, stepping warm on and nwarm down in their argument slots; it
// uses R9-R11.
#define PREFETCH_WARM_ROW(warm, nwarm, bytes) \
	MOVQ nwarm, R9 \
	DECQ R9 \
	JL 12(PC) \
	MOVQ R9, nwarm \
	MOVQ warm, R9 \
	MOVQ (R9), R10 \
	ADDQ $24, R9 \
	MOVQ R9, warm \
	PREFETCH_ROW_BYTES(bytes)

#define VEC8(name, value) \
	DATA name<>+0(SB)/4, value \
	DATA name<>+4(SB)/4, value \
	DATA name<>+8(SB)/4, value \
	DATA name<>+12(SB)/4, value \
	DATA name<>+16(SB)/4, value \
	DATA name<>+20(SB)/4, value \
	DATA name<>+24(SB)/4, value \
	DATA name<>+28(SB)/4, value \
	GLOBL name<>(SB), RODATA|NOPTR, $32

VEC8(explo, $-87.33654)
VEC8(exphi, $88.3762626647949)
VEC8(log2e, $1.44269504088896341)
VEC8(half, $0.5)
VEC8(negc1, $-0.693359375)
VEC8(negc2, $2.12194440e-4)
VEC8(one, $1.0)
VEC8(bias127, $127)
VEC8(expp0, $1.9875691500e-4)
VEC8(expp1, $1.3981999507e-3)
VEC8(expp2, $8.3334519073e-3)
VEC8(expp3, $4.1665795894e-2)
VEC8(expp4, $1.6666665459e-1)
VEC8(expp5, $5.0000001201e-1)

// EXP_CONSTS loads the constants EXPY expects in Y8..Y15.
#define EXP_CONSTS \
	VMOVUPS explo<>(SB), Y8 \
	VMOVUPS exphi<>(SB), Y9 \
	VMOVUPS log2e<>(SB), Y10 \
	VMOVUPS half<>(SB), Y11 \
	VMOVUPS negc1<>(SB), Y12 \
	VMOVUPS negc2<>(SB), Y13 \
	VMOVUPS one<>(SB), Y14 \
	VMOVUPS bias127<>(SB), Y15

// EXPY: Y0 = e^Y0 for 8 lanes; clobbers Y1-Y4. NaN propagates (VMINPS
// returns its second operand when either is NaN).
#define EXPY \
	VCMPPS $1, Y8, Y0, Y3 \
	VMINPS Y0, Y9, Y0 \
	VMOVAPS Y11, Y1 \
	VFMADD231PS Y10, Y0, Y1 \
	VROUNDPS $9, Y1, Y1 \
	VFMADD231PS Y12, Y1, Y0 \
	VFMADD231PS Y13, Y1, Y0 \
	VMOVUPS expp0<>(SB), Y2 \
	VFMADD213PS expp1<>(SB), Y0, Y2 \
	VFMADD213PS expp2<>(SB), Y0, Y2 \
	VFMADD213PS expp3<>(SB), Y0, Y2 \
	VFMADD213PS expp4<>(SB), Y0, Y2 \
	VFMADD213PS expp5<>(SB), Y0, Y2 \
	VMULPS Y0, Y0, Y4 \
	VFMADD213PS Y0, Y4, Y2 \
	VADDPS Y14, Y2, Y2 \
	VCVTTPS2DQ Y1, Y1 \
	VPADDD Y15, Y1, Y1 \
	VPSLLD $23, Y1, Y1 \
	VMULPS Y1, Y2, Y0 \
	VANDNPS Y0, Y3, Y0

// HSUMPS: X0 = sum of Y0's eight lanes (in lane 0).
#define HSUMPS \
	VEXTRACTF128 $1, Y0, X1 \
	VADDPS X1, X0, X0 \
	VMOVHLPS X0, X1, X1 \
	VADDPS X1, X0, X0 \
	VMOVSHDUP X0, X1 \
	VADDSS X1, X0, X0

// func sumSquaresY(x *float32, n int) float64
TEXT ·sumSquaresY(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1
	VXORPD Y2, Y2, Y2
	VXORPD Y3, Y3, Y3
	SHRQ $4, CX
	JEQ sumsq_done
sumsq_loop:
	VCVTPS2PD 0(SI), Y4
	VCVTPS2PD 16(SI), Y5
	VCVTPS2PD 32(SI), Y6
	VCVTPS2PD 48(SI), Y7
	VFMADD231PD Y4, Y4, Y0
	VFMADD231PD Y5, Y5, Y1
	VFMADD231PD Y6, Y6, Y2
	VFMADD231PD Y7, Y7, Y3
	ADDQ $64, SI
	DECQ CX
	JNZ sumsq_loop
sumsq_done:
	VADDPD Y1, Y0, Y0
	VADDPD Y3, Y2, Y2
	VADDPD Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPD X1, X0, X0
	VPERMILPD $1, X0, X1
	VADDSD X1, X0, X0
	MOVSD X0, ret+16(FP)
	VZEROUPPER
	RET

// func scaleMulY(out, x, w *float32, s float32, n int)
TEXT ·scaleMulY(SB), NOSPLIT, $0-40
	MOVQ out+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ w+16(FP), DX
	VBROADCASTSS s+24(FP), Y0
	MOVQ n+32(FP), CX
	SHRQ $4, CX
	JEQ scalemul_done
scalemul_loop:
	VMULPS 0(SI), Y0, Y1
	VMULPS 32(SI), Y0, Y2
	VMULPS 0(DX), Y1, Y1
	VMULPS 32(DX), Y2, Y2
	VMOVUPS Y1, 0(DI)
	VMOVUPS Y2, 32(DI)
	ADDQ $64, SI
	ADDQ $64, DX
	ADDQ $64, DI
	DECQ CX
	JNZ scalemul_loop
scalemul_done:
	VZEROUPPER
	RET

// func siluMulY(gate, up *float32, n int)
TEXT ·siluMulY(SB), NOSPLIT, $0-24
	MOVQ gate+0(FP), DI
	MOVQ up+8(FP), SI
	MOVQ n+16(FP), CX
	EXP_CONSTS
	VXORPS Y6, Y6, Y6
	SHRQ $3, CX
	JEQ silu_done
silu_loop:
	VMOVUPS 0(DI), Y5
	VSUBPS Y5, Y6, Y0
	EXPY
	VADDPS Y14, Y0, Y0
	VDIVPS Y0, Y5, Y5
	VMULPS 0(SI), Y5, Y5
	VMOVUPS Y5, 0(DI)
	ADDQ $32, DI
	ADDQ $32, SI
	DECQ CX
	JNZ silu_loop
silu_done:
	VZEROUPPER
	RET

// func expY(dst, src *float32, n int)
TEXT ·expY(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	EXP_CONSTS
	SHRQ $3, CX
	JEQ exp_done
exp_loop:
	VMOVUPS 0(SI), Y0
	EXPY
	VMOVUPS Y0, 0(DI)
	ADDQ $32, DI
	ADDQ $32, SI
	DECQ CX
	JNZ exp_loop
exp_done:
	VZEROUPPER
	RET

// func expSubSumY(x *float32, n int, m float32) float32
TEXT ·expSubSumY(SB), NOSPLIT, $0-28
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS m+16(FP), Y6
	EXP_CONSTS
	VXORPS Y7, Y7, Y7
	SHRQ $3, CX
	JEQ expsub_done
expsub_loop:
	VMOVUPS 0(SI), Y0
	VSUBPS Y6, Y0, Y0
	EXPY
	VMOVUPS Y0, 0(SI)
	VADDPS Y0, Y7, Y7
	ADDQ $32, SI
	DECQ CX
	JNZ expsub_loop
expsub_done:
	VMOVAPS Y7, Y0
	HSUMPS
	MOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// func addY(dst, src *float32, n int)
TEXT ·addY(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX
	JEQ add_done
add_loop:
	VMOVUPS 0(DI), Y0
	VMOVUPS 32(DI), Y1
	VADDPS 0(SI), Y0, Y0
	VADDPS 32(SI), Y1, Y1
	VMOVUPS Y0, 0(DI)
	VMOVUPS Y1, 32(DI)
	ADDQ $64, DI
	ADDQ $64, SI
	DECQ CX
	JNZ add_loop
add_done:
	VZEROUPPER
	RET

// func axpyY(dst *float32, a float32, x *float32, n int)
TEXT ·axpyY(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	VBROADCASTSS a+8(FP), Y2
	MOVQ x+16(FP), SI
	MOVQ n+24(FP), CX
	SHRQ $4, CX
	JEQ axpy_done
axpy_loop:
	VMOVUPS 0(DI), Y0
	VMOVUPS 32(DI), Y1
	VFMADD231PS 0(SI), Y2, Y0
	VFMADD231PS 32(SI), Y2, Y1
	VMOVUPS Y0, 0(DI)
	VMOVUPS Y1, 32(DI)
	ADDQ $64, DI
	ADDQ $64, SI
	DECQ CX
	JNZ axpy_loop
axpy_done:
	VZEROUPPER
	RET

// func dotY(a, b *float32, n int) float32
TEXT ·dotY(SB), NOSPLIT, $0-28
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), DI
	MOVQ n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	SHRQ $4, CX
	JEQ dot_done
dot_loop:
	VMOVUPS 0(SI), Y2
	VMOVUPS 32(SI), Y3
	VFMADD231PS 0(DI), Y2, Y0
	VFMADD231PS 32(DI), Y3, Y1
	ADDQ $64, SI
	ADDQ $64, DI
	DECQ CX
	JNZ dot_loop
dot_done:
	VADDPS Y1, Y0, Y0
	HSUMPS
	MOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// func maxY(x *float32, n int) float32 (n >= 16)
TEXT ·maxY(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VMOVUPS 0(SI), Y0
	VMOVUPS 32(SI), Y1
	ADDQ $64, SI
	SHRQ $4, CX
	DECQ CX
	JEQ max_done
max_loop:
	VMAXPS 0(SI), Y0, Y0
	VMAXPS 32(SI), Y1, Y1
	ADDQ $64, SI
	DECQ CX
	JNZ max_loop
max_done:
	VMAXPS Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VMAXPS X1, X0, X0
	VMOVHLPS X0, X1, X1
	VMAXPS X1, X0, X0
	VMOVSHDUP X0, X1
	VMAXSS X1, X0, X0
	MOVSS X0, ret+16(FP)
	VZEROUPPER
	RET

// func streamReadY(p *byte, n int) float32: reads n bytes (a multiple of
// 256) as float32 and sums them; the roofline's bandwidth probe.
TEXT ·streamReadY(SB), NOSPLIT, $0-20
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	SHRQ $8, CX
	JEQ streamy_done
streamy_loop:
	VADDPS 0(SI), Y0, Y0
	VADDPS 32(SI), Y1, Y1
	VADDPS 64(SI), Y2, Y2
	VADDPS 96(SI), Y3, Y3
	VADDPS 128(SI), Y0, Y0
	VADDPS 160(SI), Y1, Y1
	VADDPS 192(SI), Y2, Y2
	VADDPS 224(SI), Y3, Y3
	ADDQ $256, SI
	DECQ CX
	JNZ streamy_loop
streamy_done:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	HSUMPS
	MOVSS X0, ret+16(FP)
	VZEROUPPER
	RET

// func streamReadZ(p *byte, n int) float32
TEXT ·streamReadZ(SB), NOSPLIT, $0-20
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	SHRQ $8, CX
	JEQ streamz_done
streamz_loop:
	VADDPS 0(SI), Z0, Z0
	VADDPS 64(SI), Z1, Z1
	VADDPS 128(SI), Z2, Z2
	VADDPS 192(SI), Z3, Z3
	ADDQ $256, SI
	DECQ CX
	JNZ streamz_loop
streamz_done:
	VADDPS Z1, Z0, Z0
	VADDPS Z3, Z2, Z2
	VADDPS Z2, Z0, Z0
	VEXTRACTF32X8 $1, Z0, Y1
	VADDPS Y1, Y0, Y0
	HSUMPS
	MOVSS X0, ret+16(FP)
	VZEROUPPER
	RET

// func fmaLoopY(iters int) float32: 12 independent FMA chains of 8 lanes.
TEXT ·fmaLoopY(SB), NOSPLIT, $0-12
	MOVQ iters+0(FP), CX
	VMOVUPS half<>(SB), Y12
	VMOVUPS one<>(SB), Y13
	VMOVAPS Y13, Y0
	VMOVAPS Y13, Y1
	VMOVAPS Y13, Y2
	VMOVAPS Y13, Y3
	VMOVAPS Y13, Y4
	VMOVAPS Y13, Y5
	VMOVAPS Y13, Y6
	VMOVAPS Y13, Y7
	VMOVAPS Y13, Y8
	VMOVAPS Y13, Y9
	VMOVAPS Y13, Y10
	VMOVAPS Y13, Y11
	TESTQ CX, CX
	JEQ fmay_done
fmay_loop:
	VFMADD213PS Y12, Y12, Y0
	VFMADD213PS Y12, Y12, Y1
	VFMADD213PS Y12, Y12, Y2
	VFMADD213PS Y12, Y12, Y3
	VFMADD213PS Y12, Y12, Y4
	VFMADD213PS Y12, Y12, Y5
	VFMADD213PS Y12, Y12, Y6
	VFMADD213PS Y12, Y12, Y7
	VFMADD213PS Y12, Y12, Y8
	VFMADD213PS Y12, Y12, Y9
	VFMADD213PS Y12, Y12, Y10
	VFMADD213PS Y12, Y12, Y11
	DECQ CX
	JNZ fmay_loop
fmay_done:
	VADDPS Y1, Y0, Y0
	VADDPS Y11, Y0, Y0
	HSUMPS
	MOVSS X0, ret+8(FP)
	VZEROUPPER
	RET

// func fmaLoopZ(iters int) float32: 12 independent FMA chains of 16 lanes.
TEXT ·fmaLoopZ(SB), NOSPLIT, $0-12
	MOVQ iters+0(FP), CX
	VBROADCASTSS half<>(SB), Z12
	VBROADCASTSS one<>(SB), Z13
	VMOVAPS Z13, Z0
	VMOVAPS Z13, Z1
	VMOVAPS Z13, Z2
	VMOVAPS Z13, Z3
	VMOVAPS Z13, Z4
	VMOVAPS Z13, Z5
	VMOVAPS Z13, Z6
	VMOVAPS Z13, Z7
	VMOVAPS Z13, Z8
	VMOVAPS Z13, Z9
	VMOVAPS Z13, Z10
	VMOVAPS Z13, Z11
	TESTQ CX, CX
	JEQ fmaz_done
fmaz_loop:
	VFMADD213PS Z12, Z12, Z0
	VFMADD213PS Z12, Z12, Z1
	VFMADD213PS Z12, Z12, Z2
	VFMADD213PS Z12, Z12, Z3
	VFMADD213PS Z12, Z12, Z4
	VFMADD213PS Z12, Z12, Z5
	VFMADD213PS Z12, Z12, Z6
	VFMADD213PS Z12, Z12, Z7
	VFMADD213PS Z12, Z12, Z8
	VFMADD213PS Z12, Z12, Z9
	VFMADD213PS Z12, Z12, Z10
	VFMADD213PS Z12, Z12, Z11
	DECQ CX
	JNZ fmaz_loop
fmaz_done:
	VADDPS Z1, Z0, Z0
	VADDPS Z11, Z0, Z0
	VEXTRACTF32X8 $1, Z0, Y1
	VADDPS Y1, Y0, Y0
	HSUMPS
	MOVSS X0, ret+8(FP)
	VZEROUPPER
	RET

// func dotRowsY(s, q *float32, rows *[]float32, nrows, off, d int):
// s[x] = Σ q[i]·rows[x][off+i] over i < d (a multiple of 8), four rows per
// pass over q. rows is the slice array; the caller checked every length.
TEXT ·dotRowsY(SB), NOSPLIT, $0-48
	MOVQ s+0(FP), DI
	MOVQ q+8(FP), SI
	MOVQ rows+16(FP), BX
	MOVQ nrows+24(FP), R12
	MOVQ off+32(FP), R13
	SHLQ $2, R13
	MOVQ d+40(FP), R14
	SHLQ $2, R14
dotrows_four:
	CMPQ R12, $4
	JLT dotrows_one
	MOVQ 0(BX), R8
	MOVQ 24(BX), R9
	MOVQ 48(BX), R10
	MOVQ 72(BX), R11
	ADDQ R13, R8
	ADDQ R13, R9
	ADDQ R13, R10
	ADDQ R13, R11
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	XORQ AX, AX
dotrows_four_loop:
	VMOVUPS (SI)(AX*1), Y4
	VFMADD231PS (R8)(AX*1), Y4, Y0
	VFMADD231PS (R9)(AX*1), Y4, Y1
	VFMADD231PS (R10)(AX*1), Y4, Y2
	VFMADD231PS (R11)(AX*1), Y4, Y3
	ADDQ $32, AX
	CMPQ AX, R14
	JLT dotrows_four_loop
	VHADDPS Y1, Y0, Y0
	VHADDPS Y3, Y2, Y2
	VHADDPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VMOVUPS X0, (DI)
	ADDQ $16, DI
	ADDQ $96, BX
	SUBQ $4, R12
	JMP dotrows_four
dotrows_one:
	TESTQ R12, R12
	JEQ dotrows_done
	MOVQ 0(BX), R8
	ADDQ R13, R8
	VXORPS Y0, Y0, Y0
	XORQ AX, AX
dotrows_one_loop:
	VMOVUPS (SI)(AX*1), Y4
	VFMADD231PS (R8)(AX*1), Y4, Y0
	ADDQ $32, AX
	CMPQ AX, R14
	JLT dotrows_one_loop
	HSUMPS
	MOVSS X0, (DI)
	ADDQ $4, DI
	ADDQ $24, BX
	DECQ R12
	JMP dotrows_one
dotrows_done:
	VZEROUPPER
	RET

// func accRowsY(y, p *float32, rows *[]float32, nrows, off, d int):
// y[i] += Σ_x p[x]·rows[x][off+i] over i < d (a multiple of 8), y loaded
// and stored once per four rows; single rows with p = 0 are skipped.
TEXT ·accRowsY(SB), NOSPLIT, $0-48
	MOVQ y+0(FP), DI
	MOVQ p+8(FP), DX
	MOVQ rows+16(FP), BX
	MOVQ nrows+24(FP), R12
	MOVQ off+32(FP), R13
	SHLQ $2, R13
	MOVQ d+40(FP), R14
	SHLQ $2, R14
	VXORPS X8, X8, X8
accrows_four:
	CMPQ R12, $4
	JLT accrows_one
	MOVQ 0(BX), R8
	MOVQ 24(BX), R9
	MOVQ 48(BX), R10
	MOVQ 72(BX), R11
	ADDQ R13, R8
	ADDQ R13, R9
	ADDQ R13, R10
	ADDQ R13, R11
	VBROADCASTSS 0(DX), Y4
	VBROADCASTSS 4(DX), Y5
	VBROADCASTSS 8(DX), Y6
	VBROADCASTSS 12(DX), Y7
	XORQ AX, AX
accrows_four_loop:
	VMOVUPS (DI)(AX*1), Y0
	VFMADD231PS (R8)(AX*1), Y4, Y0
	VFMADD231PS (R9)(AX*1), Y5, Y0
	VFMADD231PS (R10)(AX*1), Y6, Y0
	VFMADD231PS (R11)(AX*1), Y7, Y0
	VMOVUPS Y0, (DI)(AX*1)
	ADDQ $32, AX
	CMPQ AX, R14
	JLT accrows_four_loop
	ADDQ $16, DX
	ADDQ $96, BX
	SUBQ $4, R12
	JMP accrows_four
accrows_one:
	TESTQ R12, R12
	JEQ accrows_done
	MOVSS 0(DX), X4
	UCOMISS X8, X4
	JEQ accrows_next
	MOVQ 0(BX), R8
	ADDQ R13, R8
	VBROADCASTSS 0(DX), Y4
	XORQ AX, AX
accrows_one_loop:
	VMOVUPS (DI)(AX*1), Y0
	VFMADD231PS (R8)(AX*1), Y4, Y0
	VMOVUPS Y0, (DI)(AX*1)
	ADDQ $32, AX
	CMPQ AX, R14
	JLT accrows_one_loop
accrows_next:
	ADDQ $4, DX
	ADDQ $24, BX
	DECQ R12
	JMP accrows_one
accrows_done:
	VZEROUPPER
	RET


// func dotRowsHeadsY(s, q *float32, rows *[]float32, nrows, offB, dB, heads, group, sStrideB, pfDist, pfB int, warm *[]float32, nwarm int):
// for h < heads and x < nrows, s[h·sStride + x] = Σ_i q[h·d+i]·rows[x][off
// + (h/group)·d + i], d a multiple of 8; the byte arguments are offsets
// and lengths times 4. One row at a time, front to back through every
// head: a row's heads lie side by side, so the row is one sequential
// stream, which the hardware prefetchers follow at full bandwidth (four
// rows read side by side, as four streams, measured about half of it on
// Zen 4). Each head's lanes are summed as ((l0+l1)+(l2+l3)) +
// ((l4+l5)+(l6+l7)). Before each row, the pfB bytes from offB of row
// x+pfDist (the last row near the end) are prefetched into L2, so the
// row's read overlaps the arithmetic of the rows before it; so are those
// of the next of the nwarm rows of warm (DotRowsHeads).
TEXT ·dotRowsHeadsY(SB), NOSPLIT, $0-104
	MOVQ s+0(FP), DI
	MOVQ rows+16(FP), BX
	MOVQ nrows+24(FP), R12
	MOVQ dB+40(FP), R14
dotheads_row:
	TESTQ R12, R12
	JZ dotheads_done
	PREFETCH_ROW_AHEAD(pfDist+72(FP), pfB+80(FP))
	MOVQ 0(BX), R8
	ADDQ offB+32(FP), R8
	MOVQ q+8(FP), SI
	MOVQ DI, DX
	MOVQ heads+48(FP), CX
	MOVQ group+56(FP), R13
dotheads_head:
	VXORPS Y0, Y0, Y0
	XORQ AX, AX
dotheads_loop:
	VMOVUPS (SI)(AX*1), Y4
	VFMADD231PS (R8)(AX*1), Y4, Y0
	ADDQ $32, AX
	CMPQ AX, R14
	JLT dotheads_loop
	VHADDPS Y0, Y0, Y0
	VHADDPS Y0, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDSS X1, X0, X0
	VMOVSS X0, (DX)
	ADDQ sStrideB+64(FP), DX
	ADDQ R14, SI
	DECQ R13
	JNZ dotheads_samekv
	ADDQ R14, R8
	MOVQ group+56(FP), R13
dotheads_samekv:
	DECQ CX
	JNZ dotheads_head
	ADDQ $4, DI
	ADDQ $24, BX
	DECQ R12
	JMP dotheads_row
dotheads_done:
	VZEROUPPER
	RET

// func accRowsHeadsY(y, p *float32, rows *[]float32, nrows, offB, dB, heads, group, yStrideB, pStrideB, pfDist, pfB int, warm *[]float32, nwarm int):
// for h < heads, y[h·yStride + i] += Σ_x p[h·pStride + x]·rows[x][off +
// (h/group)·d + i] over x < nrows and i < d (a multiple of 8), adding the
// rows in order; one row at a time, front to back through every head,
// prefetching pfDist rows ahead and the warm rows, as dotRowsHeadsY.
TEXT ·accRowsHeadsY(SB), NOSPLIT, $0-112
	MOVQ p+8(FP), DX
	MOVQ rows+16(FP), BX
	MOVQ nrows+24(FP), R12
	MOVQ dB+40(FP), R14
accheads_row:
	TESTQ R12, R12
	JZ accheads_done
	PREFETCH_ROW_AHEAD(pfDist+80(FP), pfB+88(FP))
	MOVQ 0(BX), R8
	ADDQ offB+32(FP), R8
	MOVQ y+0(FP), DI
	MOVQ DX, R15
	MOVQ heads+48(FP), CX
	MOVQ group+56(FP), R13
accheads_head:
	VBROADCASTSS 0(R15), Y4
	XORQ AX, AX
accheads_loop:
	VMOVUPS (DI)(AX*1), Y0
	VFMADD231PS (R8)(AX*1), Y4, Y0
	VMOVUPS Y0, (DI)(AX*1)
	ADDQ $32, AX
	CMPQ AX, R14
	JLT accheads_loop
	ADDQ yStrideB+64(FP), DI
	ADDQ pStrideB+72(FP), R15
	DECQ R13
	JNZ accheads_samekv
	ADDQ R14, R8
	MOVQ group+56(FP), R13
accheads_samekv:
	DECQ CX
	JNZ accheads_head
	ADDQ $4, DX
	ADDQ $24, BX
	DECQ R12
	JMP accheads_row
accheads_done:
	VZEROUPPER
	RET

// func dotRowsHeadsBF16Y(s, q *float32, rows *[]byte, nrows, offB, dB, heads, group, sStrideB, pfDist, pfB int):
// dotRowsHeadsY over rows of bfloat16 (two bytes a value; offB, dB and
// pfB count row bytes, d a multiple of 8): each 8 values are widened in
// registers (zero-extend to 32 bits, shift left 16: exact), and summed in
// the same order as dotRowsHeadsY, so the scores are bit for bit those of
// the rows decoded to float32 first.
TEXT ·dotRowsHeadsBF16Y(SB), NOSPLIT, $0-88
	MOVQ s+0(FP), DI
	MOVQ rows+16(FP), BX
	MOVQ nrows+24(FP), R12
	MOVQ dB+40(FP), R14
dotheadsbf_row:
	TESTQ R12, R12
	JZ dotheadsbf_done
	PREFETCH_ROW_AHEAD(pfDist+72(FP), pfB+80(FP))
	MOVQ 0(BX), R8
	ADDQ offB+32(FP), R8
	MOVQ q+8(FP), SI
	MOVQ DI, DX
	MOVQ heads+48(FP), CX
	MOVQ group+56(FP), R13
dotheadsbf_head:
	VXORPS Y0, Y0, Y0
	XORQ AX, AX
dotheadsbf_loop:
	VPMOVZXWD (R8)(AX*1), Y5
	VPSLLD $16, Y5, Y5
	VMOVUPS (SI)(AX*2), Y4
	VFMADD231PS Y5, Y4, Y0
	ADDQ $16, AX
	CMPQ AX, R14
	JLT dotheadsbf_loop
	VHADDPS Y0, Y0, Y0
	VHADDPS Y0, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDSS X1, X0, X0
	VMOVSS X0, (DX)
	ADDQ sStrideB+64(FP), DX
	LEAQ (SI)(R14*2), SI
	DECQ R13
	JNZ dotheadsbf_samekv
	ADDQ R14, R8
	MOVQ group+56(FP), R13
dotheadsbf_samekv:
	DECQ CX
	JNZ dotheadsbf_head
	ADDQ $4, DI
	ADDQ $24, BX
	DECQ R12
	JMP dotheadsbf_row
dotheadsbf_done:
	VZEROUPPER
	RET

// func accRowsHeadsBF16Y(y, p *float32, rows *[]byte, nrows, offB, dB, heads, group, yStrideB, pStrideB, pfDist, pfB int):
// accRowsHeadsY over rows of bfloat16, widened in registers as
// dotRowsHeadsBF16Y (offB, dB and pfB count row bytes), adding in the
// same order as accRowsHeadsY.
TEXT ·accRowsHeadsBF16Y(SB), NOSPLIT, $0-96
	MOVQ p+8(FP), DX
	MOVQ rows+16(FP), BX
	MOVQ nrows+24(FP), R12
	MOVQ dB+40(FP), R14
accheadsbf_row:
	TESTQ R12, R12
	JZ accheadsbf_done
	PREFETCH_ROW_AHEAD(pfDist+80(FP), pfB+88(FP))
	MOVQ 0(BX), R8
	ADDQ offB+32(FP), R8
	MOVQ y+0(FP), DI
	MOVQ DX, R15
	MOVQ heads+48(FP), CX
	MOVQ group+56(FP), R13
accheadsbf_head:
	VBROADCASTSS 0(R15), Y4
	XORQ AX, AX
accheadsbf_loop:
	VPMOVZXWD (R8)(AX*1), Y5
	VPSLLD $16, Y5, Y5
	VMOVUPS (DI)(AX*2), Y0
	VFMADD231PS Y5, Y4, Y0
	VMOVUPS Y0, (DI)(AX*2)
	ADDQ $16, AX
	CMPQ AX, R14
	JLT accheadsbf_loop
	ADDQ yStrideB+64(FP), DI
	ADDQ pStrideB+72(FP), R15
	DECQ R13
	JNZ accheadsbf_samekv
	ADDQ R14, R8
	MOVQ group+56(FP), R13
accheadsbf_samekv:
	DECQ CX
	JNZ accheadsbf_head
	ADDQ $4, DX
	ADDQ $24, BX
	DECQ R12
	JMP accheadsbf_row
accheadsbf_done:
	VZEROUPPER
	RET

// func dotRowsHeadsBF16Y4(s, q *float32, rows *[]byte, nrows, offB, dB, heads, group, sStrideB, pfDist, pfB int):
// dotRowsHeadsBF16Y over four rows at a time (nrows a multiple of 4):
// each head's four dot products are four independent chains (one was a
// chain of d/8 dependent FMAs, then a reduction, per row and head), and
// their four reductions share three VHADDPS that add the same pairs in
// the same order, so every score is bit for bit dotRowsHeadsBF16Y's.
TEXT ·dotRowsHeadsBF16Y4(SB), NOSPLIT, $0-88
	MOVQ s+0(FP), DI
	MOVQ rows+16(FP), BX
	MOVQ nrows+24(FP), R12
	MOVQ dB+40(FP), R14
dot4bf_row:
	TESTQ R12, R12
	JZ dot4bf_done
	PREFETCH_ROW_AHEAD_K(pfDist+72(FP), 0, pfB+80(FP))
	PREFETCH_ROW_AHEAD_K(pfDist+72(FP), 1, pfB+80(FP))
	PREFETCH_ROW_AHEAD_K(pfDist+72(FP), 2, pfB+80(FP))
	PREFETCH_ROW_AHEAD_K(pfDist+72(FP), 3, pfB+80(FP))
	MOVQ offB+32(FP), AX
	MOVQ 0(BX), R8
	MOVQ 24(BX), R9
	MOVQ 48(BX), R10
	MOVQ 72(BX), R11
	ADDQ AX, R8
	ADDQ AX, R9
	ADDQ AX, R10
	ADDQ AX, R11
	MOVQ q+8(FP), SI
	MOVQ DI, DX
	MOVQ heads+48(FP), CX
	MOVQ group+56(FP), R13
dot4bf_head:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	XORQ AX, AX
dot4bf_loop:
	VMOVUPS (SI)(AX*2), Y4
	VPMOVZXWD (R8)(AX*1), Y5
	VPMOVZXWD (R9)(AX*1), Y6
	VPMOVZXWD (R10)(AX*1), Y7
	VPMOVZXWD (R11)(AX*1), Y8
	VPSLLD $16, Y5, Y5
	VPSLLD $16, Y6, Y6
	VPSLLD $16, Y7, Y7
	VPSLLD $16, Y8, Y8
	VFMADD231PS Y5, Y4, Y0
	VFMADD231PS Y6, Y4, Y1
	VFMADD231PS Y7, Y4, Y2
	VFMADD231PS Y8, Y4, Y3
	ADDQ $16, AX
	CMPQ AX, R14
	JLT dot4bf_loop
	// [a0+a1, a2+a3, b0+b1, b2+b3 | a4+a5, a6+a7, b4+b5, b6+b7], the same
	// for c and d, then [a0123, b0123, c0123, d0123 | a4567, ...]: the
	// pairs VHADDPS Y0, Y0, Y0 twice adds for one row.
	VHADDPS Y1, Y0, Y0
	VHADDPS Y3, Y2, Y2
	VHADDPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VMOVUPS X0, (DX)
	ADDQ sStrideB+64(FP), DX
	LEAQ (SI)(R14*2), SI
	DECQ R13
	JNZ dot4bf_samekv
	ADDQ R14, R8
	ADDQ R14, R9
	ADDQ R14, R10
	ADDQ R14, R11
	MOVQ group+56(FP), R13
dot4bf_samekv:
	DECQ CX
	JNZ dot4bf_head
	ADDQ $16, DI
	ADDQ $96, BX
	SUBQ $4, R12
	JMP dot4bf_row
dot4bf_done:
	VZEROUPPER
	RET

// func accRowsHeadsBF16Y4(y, p *float32, rows *[]byte, nrows, offB, dB, heads, group, yStrideB, pStrideB, pfDist, pfB int):
// accRowsHeadsBF16Y over four rows at a time (nrows a multiple of 4):
// each 8 values of y are loaded and stored once for the four rows, not
// once a row, and take the four rows' products in row order, as four
// calls of one row would, so y is bit for bit accRowsHeadsBF16Y's.
TEXT ·accRowsHeadsBF16Y4(SB), NOSPLIT, $0-96
	MOVQ p+8(FP), DX
	MOVQ rows+16(FP), BX
	MOVQ nrows+24(FP), R12
	MOVQ dB+40(FP), R14
acc4bf_row:
	TESTQ R12, R12
	JZ acc4bf_done
	PREFETCH_ROW_AHEAD_K(pfDist+80(FP), 0, pfB+88(FP))
	PREFETCH_ROW_AHEAD_K(pfDist+80(FP), 1, pfB+88(FP))
	PREFETCH_ROW_AHEAD_K(pfDist+80(FP), 2, pfB+88(FP))
	PREFETCH_ROW_AHEAD_K(pfDist+80(FP), 3, pfB+88(FP))
	MOVQ offB+32(FP), AX
	MOVQ 0(BX), R8
	MOVQ 24(BX), R9
	MOVQ 48(BX), R10
	MOVQ 72(BX), R11
	ADDQ AX, R8
	ADDQ AX, R9
	ADDQ AX, R10
	ADDQ AX, R11
	MOVQ y+0(FP), DI
	MOVQ DX, R15
	MOVQ heads+48(FP), CX
	MOVQ group+56(FP), R13
acc4bf_head:
	VBROADCASTSS 0(R15), Y4
	VBROADCASTSS 4(R15), Y6
	VBROADCASTSS 8(R15), Y7
	VBROADCASTSS 12(R15), Y8
	XORQ AX, AX
acc4bf_loop:
	VPMOVZXWD (R8)(AX*1), Y5
	VPMOVZXWD (R9)(AX*1), Y9
	VPMOVZXWD (R10)(AX*1), Y10
	VPMOVZXWD (R11)(AX*1), Y11
	VPSLLD $16, Y5, Y5
	VPSLLD $16, Y9, Y9
	VPSLLD $16, Y10, Y10
	VPSLLD $16, Y11, Y11
	VMOVUPS (DI)(AX*2), Y0
	VFMADD231PS Y5, Y4, Y0
	VFMADD231PS Y9, Y6, Y0
	VFMADD231PS Y10, Y7, Y0
	VFMADD231PS Y11, Y8, Y0
	VMOVUPS Y0, (DI)(AX*2)
	ADDQ $16, AX
	CMPQ AX, R14
	JLT acc4bf_loop
	ADDQ yStrideB+64(FP), DI
	ADDQ pStrideB+72(FP), R15
	DECQ R13
	JNZ acc4bf_samekv
	ADDQ R14, R8
	ADDQ R14, R9
	ADDQ R14, R10
	ADDQ R14, R11
	MOVQ group+56(FP), R13
acc4bf_samekv:
	DECQ CX
	JNZ acc4bf_head
	ADDQ $16, DX
	ADDQ $96, BX
	SUBQ $4, R12
	JMP acc4bf_row
acc4bf_done:
	VZEROUPPER
	RET

// func ropeHalvesY(row, cos, sin *float32, half, heads int): for each of
// heads heads of 2·half values (half a multiple of 8) and i < half,
// (x[i], x[i+half]) ← (x[i]·cos[i] − x[i+half]·sin[i], x[i]·sin[i] +
// x[i+half]·cos[i]).
TEXT ·ropeHalvesY(SB), NOSPLIT, $0-40
	MOVQ row+0(FP), DI
	MOVQ half+24(FP), R9
	SHLQ $2, R9
	MOVQ heads+32(FP), R8
ropehalves_head:
	MOVQ cos+8(FP), SI
	MOVQ sin+16(FP), DX
	LEAQ (DI)(R9*1), BX
	XORQ AX, AX
ropehalves_loop:
	VMOVUPS (DI)(AX*1), Y0
	VMOVUPS (BX)(AX*1), Y1
	VMOVUPS (SI)(AX*1), Y2
	VMOVUPS (DX)(AX*1), Y3
	VMULPS Y3, Y1, Y4
	VFMSUB231PS Y2, Y0, Y4
	VMULPS Y3, Y0, Y5
	VFMADD231PS Y2, Y1, Y5
	VMOVUPS Y4, (DI)(AX*1)
	VMOVUPS Y5, (BX)(AX*1)
	ADDQ $32, AX
	CMPQ AX, R9
	JLT ropehalves_loop
	LEAQ (DI)(R9*2), DI
	DECQ R8
	JNZ ropehalves_head
	VZEROUPPER
	RET

// func ropePairsY(row, cos2, sin2 *float32, headDim, heads int): for each
// of heads heads of headDim values (a multiple of 8) and pair i,
// (x[2i], x[2i+1]) ← (x[2i]·c − x[2i+1]·s, x[2i]·s + x[2i+1]·c), c and s
// the pair's cos and sin, which cos2 and sin2 hold twice (at 2i and
// 2i+1): a multiply by the swapped pairs, then one FMADDSUB, which
// subtracts in the even lanes and adds in the odd.
TEXT ·ropePairsY(SB), NOSPLIT, $0-40
	MOVQ row+0(FP), DI
	MOVQ headDim+24(FP), R9
	SHLQ $2, R9
	MOVQ heads+32(FP), R8
ropepairs_head:
	MOVQ cos2+8(FP), SI
	MOVQ sin2+16(FP), DX
	XORQ AX, AX
ropepairs_loop:
	VMOVUPS (DI)(AX*1), Y0
	VPERMILPS $0xB1, Y0, Y1
	VMULPS (DX)(AX*1), Y1, Y1
	VMOVUPS (SI)(AX*1), Y2
	VFMADDSUB231PS Y2, Y0, Y1
	VMOVUPS Y1, (DI)(AX*1)
	ADDQ $32, AX
	CMPQ AX, R9
	JLT ropepairs_loop
	ADDQ R9, DI
	DECQ R8
	JNZ ropepairs_head
	VZEROUPPER
	RET

// ROUND_AWAY_Y(x, q) rounds x half away from zero into q as int32, cut to
// its low byte, and adds q's bytes as signed values into Y9 (quantQ8RowY;
// Y8 scratch).
#define ROUND_AWAY_Y(x, q) \
	VROUNDPS $3, x, q \
	VSUBPS q, x, Y8 \
	VANDPS Y15, Y8, Y8 \
	VCMPPS $13, Y13, Y8, Y8 \
	VANDPS Y14, x, x \
	VORPS Y12, x, x \
	VANDPS Y8, x, x \
	VADDPS x, q, q \
	VCVTTPS2DQ q, q \
	VPAND q8lowbyte<>(SB), q, q \
	VPSLLD $24, q, Y8 \
	VPSRAD $24, Y8, Y8 \
	VPADDD Y8, Y9, Y9

// STORE_DWORDS_STRIDED(x) stores x's four dwords at R12, R12+R8, … (R12
// left at the last).
#define STORE_DWORDS_STRIDED(x) \
	VMOVD x, (R12) \
	ADDQ R8, R12 \
	VPEXTRD $1, x, (R12) \
	ADDQ R8, R12 \
	VPEXTRD $2, x, (R12) \
	ADDQ R8, R12 \
	VPEXTRD $3, x, (R12)

// func quantQ8RowZ(dst *byte, x *float32, blocks, mr int): one token's
// activations quantised as packQ8Tile's Go loop does, block of 32 by
// block (d = max|x|/127, q = x·(1/d) rounded half away from zero, as C's
// roundf; 1/d taken as 0 when d is 0), into a tile of mr tokens whose
// block is [8][mr][4] quants, [mr] float32 d, [mr] int32 −128·Σq; dst
// points at this token's first group. Only AVX-512F instructions.
// Z20 |x| mask, Z21 sign bit, Z22 0.5, Z23 1.0, X24 127.0, X15 zero.
TEXT ·quantQ8RowZ(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ blocks+16(FP), CX
	MOVQ mr+24(FP), BX
	LEAQ 0(BX*4), R8       // a group's stride: 4·mr bytes
	MOVQ R8, R9
	SHLQ $3, R9            // d: 32·mr
	LEAQ (R9)(R8*1), R10   // −128·Σq: 36·mr
	LEAQ (R10)(R8*1), R11  // a block: 40·mr
	MOVL $0x7fffffff, DX
	VPBROADCASTD DX, Z20
	MOVL $0x80000000, DX
	VPBROADCASTD DX, Z21
	MOVL $0x3f000000, DX
	VPBROADCASTD DX, Z22
	MOVL $0x3f800000, DX
	VPBROADCASTD DX, Z23
	MOVL $0x42fe0000, DX
	VMOVD DX, X24
	VPXORD Z15, Z15, Z15
	TESTQ CX, CX
	JEQ q8row_done
q8row_block:
	VMOVUPS (SI), Z0
	VMOVUPS 64(SI), Z1
	VPANDD Z20, Z0, Z2
	VPANDD Z20, Z1, Z3
	VMAXPS Z3, Z2, Z2
	VEXTRACTF64X4 $1, Z2, Y3
	VMAXPS Y3, Y2, Y2
	VEXTRACTF128 $1, Y2, X3
	VMAXPS X3, X2, X2
	VPERMILPS $0x4e, X2, X3
	VMAXPS X3, X2, X2
	VPERMILPS $0xb1, X2, X3
	VMAXPS X3, X2, X2      // amax
	VDIVSS X24, X2, X4     // d
	VDIVSS X4, X23, X5     // 1/d
	VCMPSS $4, X15, X4, X6 // d ≠ 0
	VANDPS X6, X5, X5
	VBROADCASTSS X5, Z5
	VMULPS Z5, Z0, Z0
	VMULPS Z5, Z1, Z1
	VRNDSCALEPS $3, Z0, Z6 // toward zero
	VRNDSCALEPS $3, Z1, Z7
	VSUBPS Z6, Z0, Z8      // the fraction, exact
	VSUBPS Z7, Z1, Z9
	VPANDD Z20, Z8, Z8
	VPANDD Z20, Z9, Z9
	VCMPPS $13, Z22, Z8, K1 // |fraction| ≥ 0.5: one further from zero
	VCMPPS $13, Z22, Z9, K2
	VPANDD Z21, Z0, Z10
	VPANDD Z21, Z1, Z11
	VPORD Z23, Z10, Z10    // ±1
	VPORD Z23, Z11, Z11
	VADDPS Z10, Z6, K1, Z6
	VADDPS Z11, Z7, K2, Z7
	VCVTTPS2DQ Z6, Z6
	VCVTTPS2DQ Z7, Z7
	VPMOVDB Z6, X6
	VPMOVDB Z7, X7
	VPMOVSXBD X6, Z16      // Σq over the stored bytes (as Go's int8 conversion
	VPMOVSXBD X7, Z17      // keeps only the low byte of an infinite 1/d's result)
	VPADDD Z17, Z16, Z12
	VEXTRACTI64X4 $1, Z12, Y13
	VPADDD Y13, Y12, Y12
	VEXTRACTI128 $1, Y12, X13
	VPADDD X13, X12, X12
	VPSHUFD $0x4e, X12, X13
	VPADDD X13, X12, X12
	VPSHUFD $0xb1, X12, X13
	VPADDD X13, X12, X12   // Σq
	CMPQ BX, $1
	JNE q8row_strided
	VMOVDQU X6, (DI)
	VMOVDQU X7, 16(DI)
	JMP q8row_scales
q8row_strided:
	MOVQ DI, R12
	STORE_DWORDS_STRIDED(X6)
	ADDQ R8, R12
	STORE_DWORDS_STRIDED(X7)
q8row_scales:
	VMOVSS X4, (DI)(R9*1)
	VPSLLD $7, X12, X12
	VPSUBD X12, X15, X12
	VMOVD X12, (DI)(R10*1)
	ADDQ $128, SI
	ADDQ R11, DI
	DECQ CX
	JNZ q8row_block
q8row_done:
	VZEROUPPER
	RET

VEC8(q8absmask, $0x7fffffff)
VEC8(q8signbit, $0x80000000)
VEC8(q8lowbyte, $0xff)
VEC8(q8max, $127.0)
DATA q8order<>+0(SB)/4, $0
DATA q8order<>+4(SB)/4, $4
DATA q8order<>+8(SB)/4, $1
DATA q8order<>+12(SB)/4, $5
DATA q8order<>+16(SB)/4, $2
DATA q8order<>+20(SB)/4, $6
DATA q8order<>+24(SB)/4, $3
DATA q8order<>+28(SB)/4, $7
GLOBL q8order<>(SB), RODATA|NOPTR, $32

// func quantQ8RowY(dst *byte, x *float32, blocks, mr int): quantQ8RowZ
// in AVX2. The packs saturate, so each int32 is first cut to its low
// byte (what Go's int8 conversion keeps), then packed unsigned and put
// back in order (the packs interleave the two 128-bit lanes). Y15 |x|
// mask, Y14 sign bit, Y13 0.5, Y12 1.0, Y10 the byte order, X11 d.
TEXT ·quantQ8RowY(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ blocks+16(FP), CX
	MOVQ mr+24(FP), BX
	LEAQ 0(BX*4), R8
	MOVQ R8, R9
	SHLQ $3, R9
	LEAQ (R9)(R8*1), R10
	LEAQ (R10)(R8*1), R11
	VMOVDQU q8absmask<>(SB), Y15
	VMOVDQU q8signbit<>(SB), Y14
	VMOVUPS half<>(SB), Y13
	VMOVUPS one<>(SB), Y12
	VMOVDQU q8order<>(SB), Y10
	TESTQ CX, CX
	JEQ q8rowy_done
q8rowy_block:
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS 64(SI), Y2
	VMOVUPS 96(SI), Y3
	VANDPS Y15, Y0, Y4
	VANDPS Y15, Y1, Y5
	VANDPS Y15, Y2, Y6
	VANDPS Y15, Y3, Y7
	VMAXPS Y5, Y4, Y4
	VMAXPS Y7, Y6, Y6
	VMAXPS Y6, Y4, Y4
	VEXTRACTF128 $1, Y4, X5
	VMAXPS X5, X4, X4
	VPERMILPS $0x4e, X4, X5
	VMAXPS X5, X4, X4
	VPERMILPS $0xb1, X4, X5
	VMAXPS X5, X4, X4      // amax
	VDIVSS q8max<>(SB), X4, X11 // d
	VDIVSS X11, X12, X5    // 1/d
	VXORPS X6, X6, X6
	VCMPSS $4, X6, X11, X6 // d ≠ 0
	VANDPS X6, X5, X5
	VBROADCASTSS X5, Y5
	VMULPS Y5, Y0, Y0
	VMULPS Y5, Y1, Y1
	VMULPS Y5, Y2, Y2
	VMULPS Y5, Y3, Y3
	VXORPS Y9, Y9, Y9
	ROUND_AWAY_Y(Y0, Y4)
	ROUND_AWAY_Y(Y1, Y5)
	ROUND_AWAY_Y(Y2, Y6)
	ROUND_AWAY_Y(Y3, Y7)
	VEXTRACTI128 $1, Y9, X8
	VPADDD X8, X9, X9
	VPSHUFD $0x4e, X9, X8
	VPADDD X8, X9, X9
	VPSHUFD $0xb1, X9, X8
	VPADDD X8, X9, X9      // Σq
	VPACKSSDW Y5, Y4, Y4
	VPACKSSDW Y7, Y6, Y6
	VPACKUSWB Y6, Y4, Y4
	VPERMD Y4, Y10, Y4
	CMPQ BX, $1
	JNE q8rowy_strided
	VMOVDQU Y4, (DI)
	JMP q8rowy_scales
q8rowy_strided:
	MOVQ DI, R12
	VEXTRACTI128 $1, Y4, X5
	STORE_DWORDS_STRIDED(X4)
	ADDQ R8, R12
	STORE_DWORDS_STRIDED(X5)
q8rowy_scales:
	VMOVSS X11, (DI)(R9*1)
	VPSLLD $7, X9, X9
	VXORPS X8, X8, X8
	VPSUBD X9, X8, X9
	VMOVD X9, (DI)(R10*1)
	ADDQ $128, SI
	ADDQ R11, DI
	DECQ CX
	JNZ q8rowy_block
q8rowy_done:
	VZEROUPPER
	RET

// ROUND_AWAY_LOW_Y(x, q) is ROUND_AWAY_Y without the sum: q holds the
// rounded int32s cut to their low byte (Y8 scratch).
#define ROUND_AWAY_LOW_Y(x, q) \
	VROUNDPS $3, x, q \
	VSUBPS q, x, Y8 \
	VANDPS Y15, Y8, Y8 \
	VCMPPS $13, Y13, Y8, Y8 \
	VANDPS Y14, x, x \
	VORPS Y12, x, x \
	VANDPS Y8, x, x \
	VADDPS x, q, q \
	VCVTTPS2DQ q, q \
	VPAND q8lowbyte<>(SB), q, q

// HSUM_SIGNED_BYTES_Y(a, b, sy, sx) sets the low dword of sx (sy's low
// half) to the sum of a's and b's dwords read as signed bytes (their low
// bytes) (Y8 scratch).
#define HSUM_SIGNED_BYTES_Y(a, b, sy, sx) \
	VPSLLD $24, a, sy \
	VPSRAD $24, sy, sy \
	VPSLLD $24, b, Y8 \
	VPSRAD $24, Y8, Y8 \
	VPADDD Y8, sy, sy \
	VEXTRACTI128 $1, sy, X8 \
	VPADDD X8, sx, sx \
	VPSHUFD $0x4e, sx, X8 \
	VPADDD X8, sx, sx \
	VPSHUFD $0xb1, sx, X8 \
	VPADDD X8, sx, sx

// func quantQKRowY(dst *byte, x *float32, supers, super, mr int): one
// token's activations quantised as packQKTile's Go loop does, super-block
// by super-block (super a multiple of 32; d = max|x|/127, q = x·(1/d)
// rounded half away from zero, 1/d taken as 0 when d is 0), into a tile
// of mr tokens whose super-block is [super/4][mr][4] quants, [mr] float32
// d, [super/16][mr] int32 sums of 16 quants; dst points at this token's
// first group. Y15 |x| mask, Y14 sign bit, Y13 0.5, Y12 1.0, Y10 the
// byte order, X11 d, Y9 1/d; R8 a group's stride (4·mr), R9 the quants'
// bytes (super·mr), R11 the tile's super-block.
TEXT ·quantQKRowY(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ supers+16(FP), CX
	MOVQ super+24(FP), DX
	MOVQ mr+32(FP), BX
	LEAQ 0(BX*4), R8
	MOVQ DX, R9
	IMULQ BX, R9
	MOVQ DX, R11
	SHRQ $2, R11
	ADDQ $4, R11
	ADDQ DX, R11
	IMULQ BX, R11
	VMOVDQU q8absmask<>(SB), Y15
	VMOVDQU q8signbit<>(SB), Y14
	VMOVUPS half<>(SB), Y13
	VMOVUPS one<>(SB), Y12
	VMOVDQU q8order<>(SB), Y10
	TESTQ CX, CX
	JEQ qkrow_done
qkrow_super:
	// amax over the super-block.
	VXORPS Y4, Y4, Y4
	MOVQ SI, AX
	MOVQ DX, R10
qkrow_max:
	VANDPS (AX), Y15, Y0
	VANDPS 32(AX), Y15, Y1
	VANDPS 64(AX), Y15, Y2
	VANDPS 96(AX), Y15, Y3
	VMAXPS Y1, Y0, Y0
	VMAXPS Y3, Y2, Y2
	VMAXPS Y2, Y0, Y0
	VMAXPS Y0, Y4, Y4
	ADDQ $128, AX
	SUBQ $32, R10
	JNZ qkrow_max
	VEXTRACTF128 $1, Y4, X5
	VMAXPS X5, X4, X4
	VPERMILPS $0x4e, X4, X5
	VMAXPS X5, X4, X4
	VPERMILPS $0xb1, X4, X5
	VMAXPS X5, X4, X4      // amax
	VDIVSS q8max<>(SB), X4, X11 // d
	VDIVSS X11, X12, X5    // 1/d
	VXORPS X6, X6, X6
	VCMPSS $4, X6, X11, X6 // d ≠ 0
	VANDPS X6, X5, X5
	VMOVSS X11, (DI)(R9*1)
	LEAQ (DI)(R9*1), R13
	ADDQ R8, R13           // the sums
	MOVQ DI, R12
	MOVQ DX, R10
	VBROADCASTSS X5, Y9
qkrow_chunk:
	VMULPS (SI), Y9, Y0
	VMULPS 32(SI), Y9, Y1
	VMULPS 64(SI), Y9, Y2
	VMULPS 96(SI), Y9, Y3
	ROUND_AWAY_LOW_Y(Y0, Y4)
	ROUND_AWAY_LOW_Y(Y1, Y5)
	ROUND_AWAY_LOW_Y(Y2, Y6)
	ROUND_AWAY_LOW_Y(Y3, Y7)
	HSUM_SIGNED_BYTES_Y(Y4, Y5, Y0, X0)
	VMOVD X0, (R13)
	ADDQ R8, R13
	HSUM_SIGNED_BYTES_Y(Y6, Y7, Y0, X0)
	VMOVD X0, (R13)
	ADDQ R8, R13
	VPACKSSDW Y5, Y4, Y4
	VPACKSSDW Y7, Y6, Y6
	VPACKUSWB Y6, Y4, Y4
	VPERMD Y4, Y10, Y4
	CMPQ BX, $1
	JNE qkrow_strided
	VMOVDQU Y4, (R12)
	ADDQ $32, R12
	JMP qkrow_next
qkrow_strided:
	VEXTRACTI128 $1, Y4, X6
	STORE_DWORDS_STRIDED(X4)
	ADDQ R8, R12
	STORE_DWORDS_STRIDED(X6)
	ADDQ R8, R12
qkrow_next:
	ADDQ $128, SI
	SUBQ $32, R10
	JNZ qkrow_chunk
	ADDQ R11, DI
	DECQ CX
	JNZ qkrow_super
qkrow_done:
	VZEROUPPER
	RET
