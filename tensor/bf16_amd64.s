//go:build amd64

#include "textflag.h"

// func bf16ToF32Asm(dst *float32, src *byte, n int): 16 values a loop,
// each widened to 32 bits and shifted into the top half.
TEXT ·bf16ToF32Asm(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX
	JEQ bf16dec_done
bf16dec_loop:
	VPMOVZXWD 0(SI), Y0
	VPMOVZXWD 16(SI), Y1
	VPSLLD $16, Y0, Y0
	VPSLLD $16, Y1, Y1
	VMOVDQU Y0, 0(DI)
	VMOVDQU Y1, 32(DI)
	ADDQ $32, SI
	ADDQ $64, DI
	DECQ CX
	JNZ bf16dec_loop
bf16dec_done:
	VZEROUPPER
	RET

DATA bf16round<>+0(SB)/4, $0x00007fff
GLOBL bf16round<>(SB), RODATA|NOPTR, $4
DATA bf16one<>+0(SB)/4, $0x00000001
GLOBL bf16one<>(SB), RODATA|NOPTR, $4
DATA bf16abs<>+0(SB)/4, $0x7fffffff
GLOBL bf16abs<>(SB), RODATA|NOPTR, $4
DATA bf16inf<>+0(SB)/4, $0x7f800000
GLOBL bf16inf<>(SB), RODATA|NOPTR, $4
DATA bf16quiet<>+0(SB)/4, $0x00000040
GLOBL bf16quiet<>(SB), RODATA|NOPTR, $4

// func f32ToBF16Asm(dst *byte, src *float32, n int): 16 values a loop, as
// F32ToBF16: b + 0x7fff + (b>>16 & 1), the top half (round to nearest
// even), except NaNs (|b| > inf), which keep their top half with the
// quiet bit set; the halves are packed to 16 bits (VPACKUSDW works per
// 128-bit lane, VPERMQ puts the lanes back in order).
TEXT ·f32ToBF16Asm(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX
	JEQ bf16enc_done
	VPBROADCASTD bf16round<>(SB), Y8
	VPBROADCASTD bf16one<>(SB), Y9
	VPBROADCASTD bf16abs<>(SB), Y10
	VPBROADCASTD bf16inf<>(SB), Y11
	VPBROADCASTD bf16quiet<>(SB), Y12
bf16enc_loop:
	VMOVDQU 0(SI), Y0
	VMOVDQU 32(SI), Y1
	// rounded: (b + 0x7fff + (b>>16 & 1)) >> 16
	VPSRLD $16, Y0, Y2
	VPSRLD $16, Y1, Y3
	VPAND Y9, Y2, Y4
	VPAND Y9, Y3, Y5
	VPADDD Y8, Y0, Y6
	VPADDD Y8, Y1, Y7
	VPADDD Y4, Y6, Y6
	VPADDD Y5, Y7, Y7
	VPSRLD $16, Y6, Y6
	VPSRLD $16, Y7, Y7
	// NaN: (b>>16) | 0x40 where |b| > inf
	VPOR Y12, Y2, Y2
	VPOR Y12, Y3, Y3
	VPAND Y10, Y0, Y4
	VPAND Y10, Y1, Y5
	VPCMPGTD Y11, Y4, Y4
	VPCMPGTD Y11, Y5, Y5
	VPBLENDVB Y4, Y2, Y6, Y6
	VPBLENDVB Y5, Y3, Y7, Y7
	VPACKUSDW Y7, Y6, Y6
	VPERMQ $0xD8, Y6, Y6
	VMOVDQU Y6, 0(DI)
	ADDQ $64, SI
	ADDQ $32, DI
	DECQ CX
	JNZ bf16enc_loop
bf16enc_done:
	VZEROUPPER
	RET
