package kvcache

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/gosling-ai/gosling/internal/hugemem"
	"github.com/gosling-ai/gosling/tensor"
)

// Spec is the per-token KV layout of one model.
type Spec struct {
	NumLayers  int
	NumKVHeads int
	HeadDim    int // width of one K head
	HeadDimV   int // width of one V head (may differ from HeadDim)
	// SharedV marks an MLA latent cache: one vector of HeadDim values per
	// token (kv_lora_rank + rope dims) is the key, and its first HeadDimV
	// values are the value. Nothing is stored for V. NumKVHeads must be 1.
	SharedV bool
	// DType is the storage type: F32 (the zero value), BF16 or FP8E4M3.
	DType tensor.DType
	// LayerWindows, when set, gives each layer's sliding window (0 = full
	// attention). With SWATokens > 0, windowed layers live in a smaller
	// region of SWATokens slots that holds only each request's window;
	// see swa.go.
	LayerWindows []int
	SWATokens    int
}

// Windowed reports whether layer i keeps only a window in the SWA region.
func (s Spec) Windowed(i int) bool {
	return s.SWATokens > 0 && i < len(s.LayerWindows) && s.LayerWindows[i] > 0
}

// MaxWindow is the largest window among the windowed layers (0 if none).
func (s Spec) MaxWindow() int {
	w := 0
	for i, lw := range s.LayerWindows {
		if s.Windowed(i) {
			w = max(w, lw)
		}
	}
	return w
}

// KWidth is the number of K values per token per layer.
func (s Spec) KWidth() int { return s.NumKVHeads * s.HeadDim }

// VWidth is the number of V values per token per layer (0 when shared).
func (s Spec) VWidth() int {
	if s.SharedV {
		return 0
	}
	return s.NumKVHeads * s.HeadDimV
}

func (s Spec) elemBytes() int {
	switch s.DType {
	case tensor.BF16:
		return 2
	case tensor.FP8E4M3:
		return 1
	}
	return 4
}

// BytesPerToken is the storage of one token over all layers.
func (s Spec) BytesPerToken() int {
	return s.NumLayers * s.LayerBytesPerToken()
}

// LayerBytesPerToken is the storage of one token in one layer.
func (s Spec) LayerBytesPerToken() int { return (s.KWidth() + s.VWidth()) * s.elemBytes() }

// FullLayers is the number of layers that keep every token.
func (s Spec) FullLayers() int {
	n := 0
	for i := range s.NumLayers {
		if !s.Windowed(i) {
			n++
		}
	}
	return n
}

func (s Spec) validate() error {
	switch {
	case s.NumLayers <= 0 || s.NumKVHeads <= 0 || s.HeadDim <= 0 || s.HeadDimV <= 0:
		return fmt.Errorf("invalid KV spec %+v", s)
	case s.SharedV && (s.NumKVHeads != 1 || s.HeadDimV > s.HeadDim):
		return fmt.Errorf("a shared (MLA) KV cache needs 1 KV head and HeadDimV <= HeadDim, got %+v", s)
	case s.DType != tensor.F32 && s.DType != tensor.BF16 && s.DType != tensor.FP8E4M3:
		return fmt.Errorf("KV cache dtype %v is not supported (use float32, bf16 or fp8_e4m3)", s.DType)
	}
	return nil
}

// Pool stores K and V for every slot of every layer.
//
//	K[layer]: [NumSlots, NumKVHeads*HeadDim]  in Spec.DType
//	V[layer]: [NumSlots, NumKVHeads*HeadDimV] (absent when SharedV)
//
// FP8 values are stored divided by the layer's scale: x ≈ fp8(x/scale)*scale.
//
// The bookkeeping (spec, slots, window pages, scales) is the pool's; the
// storage is one of two stores: host (NewPool), read and written through
// the checked view Host returns, or device (NewDevicePool), which device
// kernels address through Device and which only SlotCopies, MoveSlots and
// Free touch here. Nothing on Pool itself reads or writes K/V values, so
// a device pool cannot reach host code by its type.
type Pool struct {
	Spec     Spec
	NumSlots int
	// Windowed layers address the SWA region: slot s of page p maps to
	// swaPage[p]*pageSize + s%pageSize (see swa.go).
	pageSize int
	swaPage  []int32
	KScale   []float32 // per layer; 1 unless set (FP8 only)
	VScale   []float32
	bytes    int64 // storage of every layer, host or device
	host     *HostPool
	// Device is a device pool's storage; nil for a host pool.
	Device *DeviceStore
}

// HostPool is a host pool's storage and what reads and writes it: the
// view of a Pool that host attention code takes (Pool.Host).
type HostPool struct {
	p      *Pool // the bookkeeping: spec, window pages, scales
	k, v   [][]byte
	kf, vf [][]float32 // float32 views of k, v when DType is F32
	// mapped is every layer's storage when it lives outside the Go heap
	// (hugemem.Map); Free unmaps it.
	mapped []byte
}

// DeviceStore is a device pool's per-layer storage: K[layer] and
// V[layer] (absent when SharedV) are addresses in device memory, in the
// host store's layout, allocated from mem.
type DeviceStore struct {
	K, V []uintptr
	mem  DeviceMemory
}

// Bytes is the memory the pool's K and V storage takes.
func (p *Pool) Bytes() int64 { return p.bytes }

// DeviceMemory allocates GPU memory for a device pool; kvcache does not
// depend on a GPU package.
type DeviceMemory interface {
	Alloc(bytes int) (uintptr, error)
	Free(ptr uintptr)
}

// NewDevicePool allocates the pool's per-layer storage in device memory.
// Windowed layers are not given a separate region on a GPU yet: the spec
// must have SWATokens == 0.
func NewDevicePool(spec Spec, numSlots, pageSize int, mem DeviceMemory) (*Pool, error) {
	if err := spec.validate(); err != nil {
		return nil, err
	}
	if spec.SWATokens > 0 {
		return nil, fmt.Errorf("a sliding-window region is not supported in GPU memory yet")
	}
	p := &Pool{Spec: spec, NumSlots: numSlots, pageSize: pageSize, Device: &DeviceStore{mem: mem}}
	eb := spec.elemBytes()
	for range spec.NumLayers {
		k, err := mem.Alloc(numSlots * spec.KWidth() * eb)
		if err != nil {
			p.Free()
			return nil, fmt.Errorf("KV cache in GPU memory: %w", err)
		}
		p.Device.K = append(p.Device.K, k)
		if spec.VWidth() > 0 {
			v, err := mem.Alloc(numSlots * spec.VWidth() * eb)
			if err != nil {
				p.Free()
				return nil, fmt.Errorf("KV cache in GPU memory: %w", err)
			}
			p.Device.V = append(p.Device.V, v)
		}
		p.bytes += int64(numSlots * (spec.KWidth() + spec.VWidth()) * eb)
		p.KScale = append(p.KScale, 1)
		p.VScale = append(p.VScale, 1)
	}
	return p, nil
}

// Free releases the pool's storage: a device pool's to the memory it was
// allocated from, a host pool's when it lives outside the Go heap (pools
// on the heap are the collector's). The pool must not be used after; a
// device pool must be freed before its device closes.
func (p *Pool) Free() error {
	if d := p.Device; d != nil {
		for _, ptr := range append(d.K, d.V...) {
			d.mem.Free(ptr)
		}
		d.K, d.V = nil, nil
		return nil
	}
	h := p.host
	if h == nil || h.mapped == nil {
		return nil
	}
	err := hugemem.Unmap(h.mapped)
	*h = HostPool{p: p}
	return err
}

// Host is the pool's host storage, or an error for a device pool, whose
// values host code cannot read.
func (p *Pool) Host() (*HostPool, error) {
	if p.host == nil {
		return nil, fmt.Errorf("kvcache: the KV pool is in device memory; host code reads a host pool")
	}
	return p.host, nil
}

// OnDevice reports whether the pool lives in GPU memory.
func (p *Pool) OnDevice() bool { return p.Device != nil && p.Device.K != nil }

// ElemBytes is the storage size of one value.
func (p *Pool) ElemBytes() int { return p.Spec.elemBytes() }

// NewPool allocates numSlots slots per full layer, and spec.SWATokens
// (rounded up to pages, plus a reserved page) per windowed layer.
func NewPool(spec Spec, numSlots, pageSize int) (*Pool, error) {
	if err := spec.validate(); err != nil {
		return nil, err
	}
	p := &Pool{Spec: spec, NumSlots: numSlots, pageSize: pageSize}
	p.host = &HostPool{p: p}
	if spec.MaxWindow() > 0 {
		p.swaPage = make([]int32, numSlots/pageSize)
	}
	eb := spec.elemBytes()
	// Every layer's K and V, each on a 64-byte boundary.
	sizes := make([]int, 0, 2*spec.NumLayers)
	total := 0
	for l := range spec.NumLayers {
		slots := numSlots
		if spec.Windowed(l) {
			slots = swaPages(spec, pageSize) * pageSize
		}
		for _, width := range []int{spec.KWidth(), spec.VWidth()} {
			sizes = append(sizes, slots*width*eb)
			total += (slots*width*eb + 63) &^ 63
		}
	}
	// A large pool lives outside the Go heap: on the heap, its bytes would
	// let as many bytes of garbage accumulate before each collection
	// (hugemem.Map). Small ones (tests, tiny models) stay on the heap.
	var arena []byte
	if total >= hugemem.PageSize/2 {
		var err error
		if arena, err = hugemem.Map(total); err != nil {
			return nil, fmt.Errorf("KV cache of %d bytes: %w", total, err)
		}
		p.host.mapped = arena
	}
	for l := range spec.NumLayers {
		var kv [2][]byte
		for j := range kv {
			n := sizes[2*l+j]
			if arena != nil {
				kv[j], arena = arena[:n:n], arena[min(len(arena), (n+63)&^63):]
			} else {
				kv[j] = hugemem.Aligned(n)
			}
			// Attention reads each request's rows scattered over the
			// whole layer: with 4 KiB pages nearly every row is a TLB
			// miss. Faulting its pages in now keeps them out of the
			// decode steps that first reach them.
			hugemem.Prefault(kv[j])
		}
		k, v := kv[0], kv[1]
		p.host.k = append(p.host.k, k)
		p.host.v = append(p.host.v, v)
		p.bytes += int64(len(k) + len(v))
		if spec.DType == tensor.F32 {
			p.host.kf = append(p.host.kf, f32View(k))
			p.host.vf = append(p.host.vf, f32View(v))
		}
		p.KScale = append(p.KScale, 1)
		p.VScale = append(p.VScale, 1)
	}
	return p, nil
}

func f32View(b []byte) []float32 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
}

// StoreK writes the K of one token (all KV heads).
func (h *HostPool) StoreK(layer int, slot int32, vals []float32) {
	h.store(h.k[layer], h.kf, layer, h.p.Spec.KWidth(), slot, vals, h.p.KScale[layer])
}

// StoreV writes the V of one token; a shared (MLA) cache has nothing to store.
func (h *HostPool) StoreV(layer int, slot int32, vals []float32) {
	if h.p.Spec.SharedV {
		return
	}
	h.store(h.v[layer], h.vf, layer, h.p.Spec.VWidth(), slot, vals, h.p.VScale[layer])
}

// physical maps a token slot to its row in layer's storage.
func (p *Pool) physical(layer int, slot int32) int32 {
	if p.swaPage == nil || !p.Spec.Windowed(layer) {
		return slot
	}
	ps := int32(p.pageSize)
	return p.swaPage[slot/ps]*ps + slot%ps
}

func (h *HostPool) store(raw []byte, views [][]float32, layer, width int, slot int32, vals []float32, scale float32) {
	slot = h.p.physical(layer, slot)
	vals = vals[:width]
	at := int(slot) * width
	switch h.p.Spec.DType {
	case tensor.F32:
		copy(views[layer][at:at+width], vals)
	case tensor.BF16:
		tensor.EncodeBF16(raw[2*at:], vals)
	case tensor.FP8E4M3:
		tensor.EncodeFP8E4M3(raw[at:], vals, 1/scale)
	}
}

// K returns the keys of n consecutive slots starting at slot, all KV
// heads: [n, KWidth]. For float32 storage it is a view into the pool;
// otherwise it is decoded into scratch (grown as needed) — the caller must
// not write to it either way.
func (h *HostPool) K(layer int, slot int32, n int, scratch *[]float32) []float32 {
	return h.load(h.k[layer], h.kf, layer, h.p.Spec.KWidth(), slot, n, h.p.KScale[layer], h.grown(scratch, n*h.p.Spec.KWidth()))
}

// KInto is K decoding into dst (at least n·KWidth values) when the
// storage is not float32; float32 storage still returns a view.
func (h *HostPool) KInto(layer int, slot int32, n int, dst []float32) []float32 {
	return h.load(h.k[layer], h.kf, layer, h.p.Spec.KWidth(), slot, n, h.p.KScale[layer], dst)
}

// V returns the values of n consecutive slots: [n, VWidth], or for a
// shared (MLA) cache the keys [n, KWidth] whose first HeadDimV values of
// each row are the value.
func (h *HostPool) V(layer int, slot int32, n int, scratch *[]float32) []float32 {
	if h.p.Spec.SharedV {
		return h.K(layer, slot, n, scratch)
	}
	return h.load(h.v[layer], h.vf, layer, h.p.Spec.VWidth(), slot, n, h.p.VScale[layer], h.grown(scratch, n*h.p.Spec.VWidth()))
}

// VInto is V decoding into dst (at least n·VRowWidth values) when the
// storage is not float32.
func (h *HostPool) VInto(layer int, slot int32, n int, dst []float32) []float32 {
	if h.p.Spec.SharedV {
		return h.KInto(layer, slot, n, dst)
	}
	return h.load(h.v[layer], h.vf, layer, h.p.Spec.VWidth(), slot, n, h.p.VScale[layer], dst)
}

// KBF16 is the bfloat16 storage of the keys of n consecutive slots from
// slot, read in place: [n, KWidth] values of two bytes (little-endian),
// a view the caller must not write. It is nil unless the pool stores
// bfloat16: the attention kernels that widen rows in registers
// (cpu.DotRowsHeadsBF16) read it instead of KInto's float32 copy.
func (h *HostPool) KBF16(layer int, slot int32, n int) []byte {
	return h.rawBF16(h.k[layer], layer, h.p.Spec.KWidth(), slot, n)
}

// VBF16 is VInto's rows as KBF16 gives K's: [n, VRowWidth] bfloat16
// values in place, or nil unless the pool stores bfloat16.
func (h *HostPool) VBF16(layer int, slot int32, n int) []byte {
	if h.p.Spec.SharedV {
		return h.KBF16(layer, slot, n)
	}
	return h.rawBF16(h.v[layer], layer, h.p.Spec.VWidth(), slot, n)
}

func (h *HostPool) rawBF16(raw []byte, layer, width int, slot int32, n int) []byte {
	if h.p.Spec.DType != tensor.BF16 {
		return nil
	}
	at := int(h.p.physical(layer, slot)) * width // a run of n tokens stays within one page
	return raw[2*at : 2*(at+n*width)]
}

// grown is *scratch with room for n values, grown when short; nil for
// float32 storage, which load returns as views.
func (h *HostPool) grown(scratch *[]float32, n int) []float32 {
	if h.p.Spec.DType == tensor.F32 {
		return nil
	}
	if cap(*scratch) < n {
		*scratch = make([]float32, n)
	}
	return (*scratch)[:n]
}

// VRowWidth is the row stride of what V returns.
func (p *Pool) VRowWidth() int {
	if p.Spec.SharedV {
		return p.Spec.KWidth()
	}
	return p.Spec.VWidth()
}

func (h *HostPool) load(raw []byte, views [][]float32, layer, width int, slot int32, n int, scale float32, dst []float32) []float32 {
	slot = h.p.physical(layer, slot) // a run of n tokens stays within one page
	at, count := int(slot)*width, n*width
	if h.p.Spec.DType == tensor.F32 {
		return views[layer][at : at+count]
	}
	out := dst[:count]
	switch h.p.Spec.DType {
	case tensor.BF16:
		tensor.DecodeBF16(out, raw[2*at:])
	case tensor.FP8E4M3:
		tensor.DecodeFP8E4M3(out, raw[at:], scale)
	}
	return out
}

// SetScales sets a layer's FP8 scales (ignored for other dtypes). Scales
// must be positive and finite.
func (p *Pool) SetScales(layer int, kScale, vScale float32) error {
	for _, s := range []float32{kScale, vScale} {
		if !(s > 0) || math.IsInf(float64(s), 0) {
			return fmt.Errorf("layer %d: KV scale %v must be positive and finite", layer, s)
		}
	}
	p.KScale[layer], p.VScale[layer] = kScale, vScale
	return nil
}

// SlotMove is one MoveSlot: slot Src's K and V copied to slot Dst.
type SlotMove struct{ Dst, Src int32 }

// DeviceCopy is one copy of Bytes bytes within device memory.
type DeviceCopy struct {
	Dst, Src uintptr
	Bytes    int
}

// DeviceCopier copies within device memory, each copy after the one
// before it has finished writing (one stream): what a device pool's
// MoveSlots needs of its runtime.
type DeviceCopier interface {
	CopyDevice(copies []DeviceCopy) error
}

// MoveSlots applies moves in order, as MoveSlot one after another: on a
// host pool by copying, on a device pool through dev (nil for a host
// pool). Later moves may read slots earlier ones wrote.
func (p *Pool) MoveSlots(moves []SlotMove, dev DeviceCopier) error {
	if h := p.host; h != nil {
		for _, m := range moves {
			h.MoveSlot(m.Dst, m.Src)
		}
		return nil
	}
	if dev == nil {
		return fmt.Errorf("kvcache: moving slots of a device pool needs its runtime's copies")
	}
	if copies := p.SlotCopies(moves); len(copies) > 0 {
		return dev.CopyDevice(copies)
	}
	return nil
}

// SlotCopies are the device copies that apply moves in order to a device
// pool: per run of moves, each layer's K rows, then its V rows. A run is
// consecutive moves of consecutive slots (dst, src; dst+1, src+1; …)
// whose source and destination ranges do not overlap, so that one copy
// reads nothing it writes; moves onto themselves copy nothing.
func (p *Pool) SlotCopies(moves []SlotMove) []DeviceCopy {
	type run struct{ dst, src, n int32 }
	var runs []run
	for _, m := range moves {
		if m.Dst == m.Src {
			continue
		}
		if k := len(runs) - 1; k >= 0 {
			r := &runs[k]
			// Grown by one, the ranges [dst, dst+n] and [src, src+n]
			// must stay apart.
			if m.Dst == r.dst+r.n && m.Src == r.src+r.n && (r.dst+r.n < r.src || r.src+r.n < r.dst) {
				r.n++
				continue
			}
		}
		runs = append(runs, run{m.Dst, m.Src, 1})
	}
	eb := p.Spec.elemBytes()
	kw, vw := p.Spec.KWidth()*eb, p.Spec.VWidth()*eb
	var out []DeviceCopy
	for _, r := range runs {
		d := p.Device
		for l := range d.K {
			out = append(out, DeviceCopy{Dst: d.K[l] + uintptr(int(r.dst)*kw), Src: d.K[l] + uintptr(int(r.src)*kw), Bytes: int(r.n) * kw})
			if vw > 0 && l < len(d.V) {
				out = append(out, DeviceCopy{Dst: d.V[l] + uintptr(int(r.dst)*vw), Src: d.V[l] + uintptr(int(r.src)*vw), Bytes: int(r.n) * vw})
			}
		}
	}
	return out
}

// MoveSlot copies the K and V of slot src to slot dst in every layer, as
// stored (no re-encoding). Speculative decoding uses it to compact an
// accepted draft path into consecutive slots; a device pool moves through
// Pool.MoveSlots.
func (h *HostPool) MoveSlot(dst, src int32) {
	if dst == src {
		return
	}
	p := h.p
	eb := p.Spec.elemBytes()
	kw, vw := p.Spec.KWidth()*eb, p.Spec.VWidth()*eb
	for l := range p.Spec.NumLayers {
		d, s := int(p.physical(l, dst)), int(p.physical(l, src))
		copy(h.k[l][d*kw:(d+1)*kw], h.k[l][s*kw:(s+1)*kw])
		if vw > 0 && len(h.v[l]) > 0 {
			copy(h.v[l][d*vw:(d+1)*vw], h.v[l][s*vw:(s+1)*vw])
		}
	}
}
