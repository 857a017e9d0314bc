package kvcache

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/tensor"
)

// TestLargePoolOffHeap: a pool of 64 MB is not on the Go heap (its bytes
// would raise the collector's heap goal), stores and reads like any
// other in every dtype, and Free gives it back; a small pool stays on the
// heap, where Free leaves it to the collector.
func TestLargePoolOffHeap(t *testing.T) {
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16, tensor.FP8E4M3} {
		spec := Spec{NumLayers: 4, NumKVHeads: 2, HeadDim: 64, HeadDimV: 64, DType: dt}
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		before := ms.HeapAlloc
		p, err := NewPool(spec, 64<<20/(2*2*64*4*4), 16) // 64 MB in float32
		if err != nil {
			t.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&ms)
		if grew := int64(ms.HeapAlloc) - int64(before); grew > 1<<20 || p.host.mapped == nil {
			t.Errorf("%v: %d MB pool, heap grew by %d KB (mapped %v)", dt, p.Bytes()>>20, grew>>10, p.host.mapped != nil)
		}
		vals := make([]float32, spec.KWidth())
		for i := range vals {
			vals[i] = float32(i%7) / 4 // exact in every dtype
		}
		last := int32(p.NumSlots - 1)
		h, err := p.Host()
		if err != nil {
			t.Fatal(err)
		}
		for l := range spec.NumLayers {
			h.StoreK(l, last, vals)
			h.StoreV(l, 3, vals)
			var scratch []float32
			if got := h.K(l, last, 1, &scratch); !slices.Equal(got, vals) {
				t.Fatalf("%v layer %d: K read back %v", dt, l, got[:8])
			}
		}
		if err := p.Free(); err != nil || p.host.mapped != nil || p.host.k != nil {
			t.Errorf("%v: Free: %v", dt, err)
		}
	}
	small, err := NewPool(Spec{NumLayers: 1, NumKVHeads: 1, HeadDim: 4, HeadDimV: 4}, 64, 16)
	if err != nil {
		t.Fatal(err)
	}
	if small.host.mapped != nil || small.Free() != nil || small.host.k == nil {
		t.Error("a small pool is mapped, or Free took its heap storage")
	}
}

// byteMemory is device memory simulated in one host buffer: addresses are
// offsets from memBase. CopyDevice fails the test on overlapping ranges,
// which cuMemcpyDtoDAsync leaves undefined.
// It counts what is allocated and not freed; allocations past limit (when
// set) fail, as cuMemAlloc does when the GPU is full.
type byteMemory struct {
	t     *testing.T
	buf   []byte
	live  map[uintptr]bool
	limit int
}

const memBase = 1 << 20

func (m *byteMemory) Alloc(bytes int) (uintptr, error) {
	if m.limit > 0 && len(m.live) >= m.limit {
		return 0, fmt.Errorf("out of memory after %d allocations", m.limit)
	}
	at := len(m.buf)
	m.buf = append(m.buf, make([]byte, bytes)...)
	ptr := uintptr(memBase + at)
	if m.live == nil {
		m.live = map[uintptr]bool{}
	}
	m.live[ptr] = true
	return ptr, nil
}

func (m *byteMemory) Free(ptr uintptr) {
	if !m.live[ptr] {
		m.t.Fatalf("free of %#x, which is not allocated", ptr)
	}
	delete(m.live, ptr)
}

func (m *byteMemory) CopyDevice(copies []DeviceCopy) error {
	for _, c := range copies {
		d, s := int(c.Dst)-memBase, int(c.Src)-memBase
		if d < s+c.Bytes && s < d+c.Bytes {
			m.t.Fatalf("copy of %d bytes from %d to %d overlaps", c.Bytes, s, d)
		}
		copy(m.buf[d:d+c.Bytes], m.buf[s:s+c.Bytes])
	}
	return nil
}

// TestMoveSlotsOnDevice: the copies SlotCopies plans for a device pool
// leave its bytes as MoveSlot leaves a host pool's, for the moves of
// accepted draft paths (each path's nodes climb the tree: dst base+depth,
// src base+node with node ≥ depth, so a later move may read a slot an
// earlier one wrote), several requests one after another, in each KV
// dtype and for an MLA cache without V; and no copy is planned for
// moves onto themselves.
func TestMoveSlotsOnDevice(t *testing.T) {
	specs := []Spec{
		{NumLayers: 3, NumKVHeads: 2, HeadDim: 4, HeadDimV: 4, DType: tensor.F32},
		{NumLayers: 2, NumKVHeads: 1, HeadDim: 8, HeadDimV: 8, DType: tensor.BF16},
		{NumLayers: 2, NumKVHeads: 1, HeadDim: 8, HeadDimV: 8, DType: tensor.FP8E4M3},
		{NumLayers: 2, NumKVHeads: 1, HeadDim: 6, HeadDimV: 4, SharedV: true, DType: tensor.F32},
	}
	const slots, pageSize = 96, 16
	rng := uint64(1)
	next := func(n int) int { rng = rng*6364136223846793005 + 1442695040888963407; return int(rng>>33) % n }
	for _, spec := range specs {
		host, err := NewPool(spec, slots, pageSize)
		if err != nil {
			t.Fatal(err)
		}
		mem := &byteMemory{t: t}
		dev, err := NewDevicePool(spec, slots, pageSize, mem)
		if err != nil {
			t.Fatal(err)
		}
		// The same distinct bytes in both: slot s of layer l.
		eb := spec.elemBytes()
		for l := range spec.NumLayers {
			for i := range host.host.k[l] {
				host.host.k[l][i] = byte(i*7 + l)
			}
			copy(mem.buf[int(dev.Device.K[l])-memBase:], host.host.k[l])
			if spec.VWidth() > 0 {
				for i := range host.host.v[l] {
					host.host.v[l][i] = byte(i*5 + l + 1)
				}
				copy(mem.buf[int(dev.Device.V[l])-memBase:], host.host.v[l])
			}
		}
		for trial := range 200 {
			var moves []SlotMove
			for base := int32(0); base+16 <= slots; base += int32(16 + next(8)) {
				node := 0
				for depth := 1; depth <= 6; depth++ {
					node += 1 + next(3) // the next node on the path: a higher index
					if node >= 16 {
						break
					}
					moves = append(moves, SlotMove{Dst: base + int32(depth), Src: base + int32(node)})
				}
			}
			if trial%7 == 0 {
				moves = append(moves, SlotMove{Dst: 5, Src: 5})
			}
			if err := host.MoveSlots(moves, nil); err != nil {
				t.Fatal(err)
			}
			if err := dev.MoveSlots(moves, mem); err != nil {
				t.Fatal(err)
			}
			for l := range spec.NumLayers {
				k := mem.buf[int(dev.Device.K[l])-memBase:][:slots*spec.KWidth()*eb]
				if !slices.Equal(k, host.host.k[l]) {
					t.Fatalf("%v trial %d layer %d: device K differs from the host pool after %v", spec.DType, trial, l, moves)
				}
				if spec.VWidth() > 0 {
					v := mem.buf[int(dev.Device.V[l])-memBase:][:slots*spec.VWidth()*eb]
					if !slices.Equal(v, host.host.v[l]) {
						t.Fatalf("%v trial %d layer %d: device V differs from the host pool after %v", spec.DType, trial, l, moves)
					}
				}
			}
		}
		if c := dev.SlotCopies([]SlotMove{{3, 3}}); len(c) != 0 {
			t.Errorf("a move onto itself planned %d copies", len(c))
		}
		// Two adjacent moves whose ranges stay apart are one copy per
		// layer and kind.
		want := spec.NumLayers
		if spec.VWidth() > 0 {
			want *= 2
		}
		if c := dev.SlotCopies([]SlotMove{{1, 8}, {2, 9}}); len(c) != want {
			t.Errorf("moves 8→1, 9→2 planned %d copies, want %d", len(c), want)
		}
		if err := dev.MoveSlots([]SlotMove{{1, 2}}, nil); err == nil {
			t.Errorf("a device pool moved slots without a copier")
		}
	}
}

// TestDevicePoolFree: Free gives every layer's K and V back to the
// memory the pool came from, once, and the pool is then off the device;
// a pool whose allocation fails part-way gives back what it had.
func TestDevicePoolFree(t *testing.T) {
	spec := Spec{NumLayers: 3, NumKVHeads: 2, HeadDim: 4, HeadDimV: 4}
	mem := &byteMemory{t: t}
	p, err := NewDevicePool(spec, 64, 16, mem)
	if err != nil {
		t.Fatal(err)
	}
	if len(mem.live) != 2*spec.NumLayers || !p.OnDevice() {
		t.Fatalf("%d allocations live, on device %v; want %d, true", len(mem.live), p.OnDevice(), 2*spec.NumLayers)
	}
	if h, err := p.Host(); h != nil || err == nil || !strings.Contains(err.Error(), "device memory") {
		t.Errorf("Host of a device pool: %v, %v", h, err)
	}
	if err := p.Free(); err != nil || len(mem.live) != 0 || p.OnDevice() {
		t.Errorf("after Free: err %v, %d allocations live, on device %v", err, len(mem.live), p.OnDevice())
	}
	short := &byteMemory{t: t, limit: 3}
	if _, err := NewDevicePool(spec, 64, 16, short); err == nil || len(short.live) != 0 {
		t.Errorf("allocation failing after 3 of 6: err %v, %d allocations left live", err, len(short.live))
	}
}

// TestRawBF16Rows: KBF16 and VBF16 are the stored bfloat16 rows of a run
// of slots, in place (KInto's values, widened), and nil for other dtypes.
func TestRawBF16Rows(t *testing.T) {
	spec := Spec{NumLayers: 2, NumKVHeads: 2, HeadDim: 8, HeadDimV: 4, DType: tensor.BF16}
	p, err := NewPool(spec, 32, 8)
	if err != nil {
		t.Fatal(err)
	}
	h, err := p.Host()
	if err != nil {
		t.Fatal(err)
	}
	k, v := make([]float32, spec.KWidth()), make([]float32, spec.VWidth())
	for slot := range int32(32) {
		for l := range 2 {
			for i := range k {
				k[i] = float32(int(slot)*100+l*10+i) / 7
			}
			for i := range v {
				v[i] = -float32(int(slot)*100+l*10+i) / 3
			}
			h.StoreK(l, slot, k)
			h.StoreV(l, slot, v)
		}
	}
	const slot, n = 9, 5
	for l := range 2 {
		for _, c := range []struct {
			name string
			raw  []byte
			want []float32
		}{
			{"K", h.KBF16(l, slot, n), h.KInto(l, slot, n, make([]float32, n*spec.KWidth()))},
			{"V", h.VBF16(l, slot, n), h.VInto(l, slot, n, make([]float32, n*spec.VWidth()))},
		} {
			if len(c.raw) != 2*len(c.want) {
				t.Fatalf("layer %d %s: %d bytes, want %d", l, c.name, len(c.raw), 2*len(c.want))
			}
			got := make([]float32, len(c.want))
			tensor.DecodeBF16(got, c.raw)
			for i := range got {
				if got[i] != c.want[i] {
					t.Fatalf("layer %d %s[%d]: %v, want %v", l, c.name, i, got[i], c.want[i])
				}
			}
		}
	}
	for _, dt := range []tensor.DType{tensor.F32, tensor.FP8E4M3} {
		spec.DType = dt
		p, err := NewPool(spec, 32, 8)
		if err != nil {
			t.Fatal(err)
		}
		h, _ := p.Host()
		if h.KBF16(0, 0, 1) != nil || h.VBF16(0, 0, 1) != nil {
			t.Fatalf("%v pool: raw bf16 rows not nil", dt)
		}
	}
}
