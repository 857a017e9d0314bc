//go:build amd64

#include "textflag.h"

DATA fp8x7f<>+0(SB)/4, $0x0000007f
GLOBL fp8x7f<>(SB), RODATA|NOPTR, $4
DATA fp8x80<>+0(SB)/4, $0x00000080
GLOBL fp8x80<>(SB), RODATA|NOPTR, $4
DATA fp8two120<>+0(SB)/4, $0x7b800000
GLOBL fp8two120<>(SB), RODATA|NOPTR, $4
DATA fp8nan<>+0(SB)/4, $0x7fc00000
GLOBL fp8nan<>(SB), RODATA|NOPTR, $4

// func fp8ToF32Asm(dst *float32, src *byte, n int, scale float32): 8
// values a loop. A code's low seven bits shifted to a float32's exponent
// and mantissa (bit 20 up) are its value times 2^-120, subnormals
// included; times 2^120 (exact), the sign, NaN for 0x7f/0xff, times
// scale (the one rounding, as FP8E4M3ToF32(b)·scale).
TEXT ·fp8ToF32Asm(SB), NOSPLIT, $0-28
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS scale+24(FP), Y15
	SHRQ $3, CX
	JEQ fp8dec_done
	VPBROADCASTD fp8x7f<>(SB), Y8
	VPBROADCASTD fp8x80<>(SB), Y9
	VPBROADCASTD fp8two120<>(SB), Y10
	VPBROADCASTD fp8nan<>(SB), Y11
fp8dec_loop:
	VPMOVZXBD 0(SI), Y0
	VPAND Y8, Y0, Y1
	VPAND Y9, Y0, Y2
	VPSLLD $24, Y2, Y2
	VPCMPEQD Y8, Y1, Y3
	VPSLLD $20, Y1, Y1
	VMULPS Y10, Y1, Y1
	VPOR Y2, Y1, Y1
	VPBLENDVB Y3, Y11, Y1, Y1
	VMULPS Y15, Y1, Y1
	VMOVUPS Y1, 0(DI)
	ADDQ $8, SI
	ADDQ $32, DI
	DECQ CX
	JNZ fp8dec_loop
fp8dec_done:
	VZEROUPPER
	RET

DATA fp8abs<>+0(SB)/4, $0x7fffffff
GLOBL fp8abs<>(SB), RODATA|NOPTR, $4
DATA fp8inf<>+0(SB)/4, $0x7f800000
GLOBL fp8inf<>(SB), RODATA|NOPTR, $4
DATA fp8max<>+0(SB)/4, $0x43e00000
GLOBL fp8max<>(SB), RODATA|NOPTR, $4
DATA fp8minnorm<>+0(SB)/4, $0x3c800000
GLOBL fp8minnorm<>(SB), RODATA|NOPTR, $4
DATA fp8round<>+0(SB)/4, $0x0007ffff
GLOBL fp8round<>(SB), RODATA|NOPTR, $4
DATA fp8one<>+0(SB)/4, $0x00000001
GLOBL fp8one<>(SB), RODATA|NOPTR, $4
DATA fp8rebias<>+0(SB)/4, $960
GLOBL fp8rebias<>(SB), RODATA|NOPTR, $4
DATA fp8x512<>+0(SB)/4, $0x44000000
GLOBL fp8x512<>(SB), RODATA|NOPTR, $4
DATA fp8two23<>+0(SB)/4, $0x4b000000
GLOBL fp8two23<>(SB), RODATA|NOPTR, $4
DATA fp8x7e<>+0(SB)/4, $0x0000007e
GLOBL fp8x7e<>(SB), RODATA|NOPTR, $4

// func f32ToFP8Asm(dst *byte, src *float32, n int, inv float32): 8 values
// a loop, each times inv, then as F32ToFP8E4M3 (round to nearest even,
// saturating to ±448, NaN to 0x7f):
//   - normal (|x| ≥ 2^-6): the float32 rounded to three mantissa bits
//     (b + 0x7ffff + (b>>20 & 1)), its bits from 20 up, the exponent
//     rebiased (−120·8);
//   - subnormal: |x|·2^9 rounded to an integer by adding 2^23;
// then 0x7e where |x| ≥ 448, the sign, 0x7f for NaN; packed to bytes.
TEXT ·f32ToFP8Asm(SB), NOSPLIT, $0-28
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS inv+24(FP), Y15
	SHRQ $3, CX
	JEQ fp8enc_done
	VPBROADCASTD fp8abs<>(SB), Y8
	VPBROADCASTD fp8inf<>(SB), Y9
	VPBROADCASTD fp8max<>(SB), Y10
	VPBROADCASTD fp8minnorm<>(SB), Y11
	VPBROADCASTD fp8round<>(SB), Y12
	VPBROADCASTD fp8one<>(SB), Y13
	VPBROADCASTD fp8rebias<>(SB), Y14
fp8enc_loop:
	VMULPS 0(SI), Y15, Y0
	VPAND Y8, Y0, Y1              // |x| bits
	VPSRLD $24, Y0, Y2
	VPBROADCASTD fp8x80<>(SB), Y3
	VPAND Y3, Y2, Y2              // sign, as bit 7
	// normal: ((a + 0x7ffff + (a>>20 & 1)) >> 20) - 960
	VPSRLD $20, Y1, Y4
	VPAND Y13, Y4, Y4
	VPADDD Y12, Y1, Y5
	VPADDD Y4, Y5, Y5
	VPSRLD $20, Y5, Y5
	VPSUBD Y14, Y5, Y5
	// subnormal: bits(|x|·512 + 2^23) - bits(2^23)
	VPBROADCASTD fp8x512<>(SB), Y6
	VPBROADCASTD fp8two23<>(SB), Y7
	VMULPS Y6, Y1, Y4
	VADDPS Y7, Y4, Y4
	VPSUBD Y7, Y4, Y4
	VCMPPS $1, Y11, Y1, Y6        // |x| < 2^-6
	VPBLENDVB Y6, Y4, Y5, Y5
	VCMPPS $13, Y10, Y1, Y6       // |x| ≥ 448 (false for NaN)
	VPBROADCASTD fp8x7e<>(SB), Y7
	VPBLENDVB Y6, Y7, Y5, Y5
	VPOR Y2, Y5, Y5
	VPCMPGTD Y9, Y1, Y6           // NaN
	VPBROADCASTD fp8x7f<>(SB), Y7
	VPBLENDVB Y6, Y7, Y5, Y5
	VPACKUSDW Y5, Y5, Y5
	VPACKUSWB Y5, Y5, Y5
	VEXTRACTI128 $1, Y5, X6
	VMOVD X5, 0(DI)
	VMOVD X6, 4(DI)
	ADDQ $32, SI
	ADDQ $8, DI
	DECQ CX
	JNZ fp8enc_loop
fp8enc_done:
	VZEROUPPER
	RET
