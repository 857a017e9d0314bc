//go:build !amd64

package cpu

// detectKernels: only amd64 has assembly kernels so far.
func detectKernels() []*kernelSet { return nil }
