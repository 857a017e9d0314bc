package tensor

import (
	"os"

	"golang.org/x/sys/cpu"
)

func haveConvertAsm() bool { return cpu.X86.HasAVX2 && os.Getenv("GOSLING_NOASM") == "" }

// bf16ToF32Asm and f32ToBF16Asm convert n values, n a multiple of 16.
//
//go:noescape
func bf16ToF32Asm(dst *float32, src *byte, n int)

//go:noescape
func f32ToBF16Asm(dst *byte, src *float32, n int)

// fp8ToF32Asm and f32ToFP8Asm convert n values, n a multiple of 8,
// scaling as DecodeFP8E4M3 and EncodeFP8E4M3 do.
//
//go:noescape
func fp8ToF32Asm(dst *float32, src *byte, n int, scale float32)

//go:noescape
func f32ToFP8Asm(dst *byte, src *float32, n int, inv float32)
