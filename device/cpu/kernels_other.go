//go:build !amd64

package cpu

// detectKernels: only amd64 has assembly kernels so far.
func detectKernels() []*kernelSet { return nil }

// asmDot is never called here (no set has asmDot).
func asmDot(a, b *float32, n int) float32 { panic("cpu: no assembly dot on this architecture") }
