//go:build !amd64

package tensor

func haveConvertAsm() bool { return false }

func bf16ToF32Asm(dst *float32, src *byte, n int) { panic("unreachable") }

func f32ToBF16Asm(dst *byte, src *float32, n int) { panic("unreachable") }

func fp8ToF32Asm(dst *float32, src *byte, n int, scale float32) { panic("unreachable") }

func f32ToFP8Asm(dst *byte, src *float32, n int, inv float32) { panic("unreachable") }
