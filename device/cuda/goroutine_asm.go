//go:build amd64 || arm64

package cuda

// currentG is the address of the calling goroutine's runtime descriptor:
// stable for the goroutine's life and different between live goroutines.
// Device.Do compares it with the device goroutine's to run nested calls
// directly; a thread-id syscall per call cost about a millisecond per
// decode step.
func currentG() uintptr

const haveCurrentG = true
