// Package mmap maps checkpoint files read-only into memory, so that weights
// are paged in by the kernel on first touch and shared between processes
// instead of being copied onto the Go heap.
package mmap

import (
	"fmt"
	"os"
)

// File is a read-only view of a whole file. Data must never be written:
// on Unix it is a PROT_READ mapping and a write faults.
type File struct {
	Path string
	Data []byte

	release func([]byte) error
}

// Open maps path. An empty file yields a File with no Data (mapping zero
// bytes is an error on every Unix), which callers report as too short.
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close() // the mapping outlives the descriptor
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if info.IsDir() {
		return nil, fmt.Errorf("%s is a directory", path)
	}
	size := info.Size()
	if size == 0 {
		return &File{Path: path}, nil
	}
	if int64(int(size)) != size {
		return nil, fmt.Errorf("%s: %d bytes do not fit in the address space", path, size)
	}
	data, release, err := mapFile(f, int(size))
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", path, err)
	}
	return &File{Path: path, Data: data, release: release}, nil
}

// Close unmaps the file; slices of Data become invalid. Closing twice is a
// no-op.
func (m *File) Close() error {
	if m == nil || m.release == nil {
		return nil
	}
	data, release := m.Data, m.release
	m.Data, m.release = nil, nil
	return release(data)
}
