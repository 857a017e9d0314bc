//go:build !amd64

package tensor

func haveBF16Asm() bool { return false }

func bf16ToF32Asm(dst *float32, src *byte, n int) { panic("unreachable") }

func f32ToBF16Asm(dst *byte, src *float32, n int) { panic("unreachable") }
