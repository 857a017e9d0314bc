//go:build !amd64 && !arm64

package cuda

func currentG() uintptr { return 0 }

const haveCurrentG = false // Device.Do compares thread ids instead
