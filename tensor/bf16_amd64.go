package tensor

import (
	"os"

	"golang.org/x/sys/cpu"
)

func haveBF16Asm() bool { return cpu.X86.HasAVX2 && os.Getenv("GOSLING_NOASM") == "" }

// bf16ToF32Asm and f32ToBF16Asm convert n values, n a multiple of 16.
//
//go:noescape
func bf16ToF32Asm(dst *float32, src *byte, n int)

//go:noescape
func f32ToBF16Asm(dst *byte, src *float32, n int)
