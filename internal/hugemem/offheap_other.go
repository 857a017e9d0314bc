//go:build !linux

package hugemem

// Map falls back to the Go heap where the anonymous maps of Linux are not
// used; Unmap leaves the buffer to the collector.
func Map(n int) ([]byte, error) { return Huge(n), nil }

// Unmap does nothing off Linux: Map's buffer is the collector's.
func Unmap([]byte) error { return nil }
