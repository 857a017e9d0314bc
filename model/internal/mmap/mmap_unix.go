//go:build unix

package mmap

import (
	"os"

	"golang.org/x/sys/unix"
)

func mapFile(f *os.File, size int) ([]byte, func([]byte) error, error) {
	// MAP_SHARED of a PROT_READ mapping costs no copy-on-write bookkeeping
	// and lets several processes serving one model share the page cache.
	data, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, err
	}
	return data, unix.Munmap, nil
}
