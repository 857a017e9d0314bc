//go:build amd64 || arm64

package cuda

// currentG is the address of the calling goroutine's runtime descriptor:
// stable for the goroutine's life and different between live goroutines.
// Device.Do compares it with the device goroutine's to run nested calls
// directly; a thread-id syscall per call showed as about 0.3 ms per
// 8B decode step in a CPU profile.
func currentG() uintptr

const haveCurrentG = true
