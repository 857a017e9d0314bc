//go:build !unix

package mmap

import (
	"io"
	"os"
)

// mapFile reads the file onto the heap where there is no Unix mmap; the
// weights then cost their size in RAM, but every loader works unchanged.
func mapFile(f *os.File, size int) ([]byte, func([]byte) error, error) {
	data := make([]byte, size)
	if _, err := io.ReadFull(f, data); err != nil {
		return nil, nil, err
	}
	return data, func([]byte) error { return nil }, nil
}
