package hugemem

import (
	"testing"
	"unsafe"
)

// TestArena: buffers are zeroed, 64-byte aligned and disjoint; chunks grow
// from a huge page; large buffers are mapped alone; Free unmaps them all.
func TestArena(t *testing.T) {
	var a Arena
	sizes := []int{1, 100, 64 << 10, 3 << 20, maxArenaChunk, 5, 20 << 20, 1 << 20}
	var bufs [][]byte
	for i, n := range sizes {
		b := a.Alloc(n)
		if len(b) != n || cap(b) != n {
			t.Fatalf("Alloc(%d): len %d cap %d", n, len(b), cap(b))
		}
		if p := uintptr(unsafe.Pointer(unsafe.SliceData(b))); p%64 != 0 {
			t.Errorf("Alloc(%d) at %#x: not 64-byte aligned", n, p)
		}
		for j := range b {
			if b[j] != 0 {
				t.Fatalf("Alloc(%d): byte %d is %d", n, j, b[j])
			}
			b[j] = byte(i + 1)
		}
		bufs = append(bufs, b)
	}
	for i, b := range bufs {
		for j := range b {
			if b[j] != byte(i+1) {
				t.Fatalf("buffer %d byte %d is %d: buffers overlap", i, j, b[j])
			}
		}
	}
	var want int64
	for _, n := range sizes {
		want += int64(n)
	}
	if a.Bytes() != want {
		t.Errorf("Bytes %d, want %d", a.Bytes(), want)
	}
	// Chunks of 2 MiB (the three small buffers) and 4 MiB (3 MiB, then 5
	// bytes); 32 MiB and 20 MiB mapped alone; 1 MiB no longer fits the
	// 4 MiB chunk's tail, so an 8 MiB chunk follows.
	if got := len(a.maps); got != 5 {
		t.Errorf("%d mappings, want 5", got)
	}
	if err := a.Free(); err != nil {
		t.Fatal(err)
	}
	if err := a.Free(); err != nil {
		t.Fatal("second Free:", err)
	}
	defer func() {
		if recover() == nil {
			t.Error("Alloc after Free did not panic")
		}
	}()
	a.Alloc(1)
}
