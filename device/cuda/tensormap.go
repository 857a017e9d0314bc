package cuda

import (
	"fmt"
	"unsafe"

	"github.com/gosling-ai/gosling/tensor"
)

// TensorMap is a CUtensorMap: the opaque 128-byte descriptor (16 words,
// 64-byte aligned in C) through which the tensor memory accelerator
// (cp.async.bulk.tensor) copies boxes of a tensor in global memory into
// shared memory. EncodeTiled makes one on the host; a kernel takes it by
// value as a `const __grid_constant__ CUtensorMap` parameter (Args.TensorMap).
type TensorMap struct{ W [tensorMapWords]uint64 }

const (
	tensorMapWords = 16
	tensorMapAlign = 64 // alignas(64) in cuda.h
	tmapElemBytes  = 2  // the 16-bit dtypes TiledMap takes
)

// Values of the driver's CUtensorMap enums (cuda.h).
const (
	tmapDTypeF16      = 6 // CU_TENSOR_MAP_DATA_TYPE_FLOAT16
	tmapDTypeBF16     = 9 // CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
	tmapInterleaveOff = 0 // CU_TENSOR_MAP_INTERLEAVE_NONE
	tmapSwizzleNone   = 0 // CU_TENSOR_MAP_SWIZZLE_NONE
	tmapSwizzle128B   = 3 // CU_TENSOR_MAP_SWIZZLE_128B
	tmapL2Promote128B = 2 // CU_TENSOR_MAP_L2_PROMOTION_L2_128B
	tmapOOBFillZero   = 0 // CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE: elements outside the tensor read as zero
)

// TiledMap is what cuTensorMapEncodeTiled takes: a tensor of Rank() dims
// at Base, Dims in elements innermost first, Strides in bytes of dims 1
// and up (dim 0 is dense), and the box one copy moves (Box, elements per
// dim, every element stride 1). Swizzle128 lays each box row of 128 bytes
// out in shared memory with its 16-byte chunk c at chunk c ^ (row % 8) of
// the 1024-byte atom: the layout wgmma reads with 128-byte swizzling.
// Coordinates outside Dims read as zero.
type TiledMap struct {
	DType      tensor.DType // BF16 or F16
	Base       DevicePtr
	Dims       []uint64
	Strides    []uint64
	Box        []uint32
	Swizzle128 bool
}

// Rank is the number of dims.
func (m TiledMap) Rank() int { return len(m.Dims) }

// BoxBytes is the bytes one copy writes to shared memory (the transaction
// count a copy completes on its mbarrier, out-of-range elements included).
func (m TiledMap) BoxBytes() int {
	n := tmapElemBytes
	for _, b := range m.Box {
		n *= int(b)
	}
	return n
}

// Validate checks the rules cuTensorMapEncodeTiled documents for the
// cases gosling encodes (no interleave, unit element strides): rank 1 to
// 5; a 16-byte aligned base; dims of 1 to 2^32 elements; strides multiples
// of 16 below 2^40, each spanning at least the dims inside it; box dims of
// 1 to 256 whose inner dim is a multiple of 16 bytes, at most 128 bytes
// when swizzled.
func (m TiledMap) Validate() error {
	r := m.Rank()
	es := tmapElemBytes
	switch {
	case m.DType != tensor.BF16 && m.DType != tensor.F16:
		return fmt.Errorf("tensor map: dtype %v (want BF16 or F16)", m.DType)
	case r < 1 || r > 5:
		return fmt.Errorf("tensor map: rank %d (want 1 to 5)", r)
	case len(m.Strides) != r-1 || len(m.Box) != r:
		return fmt.Errorf("tensor map: %d strides and %d box dims for rank %d", len(m.Strides), len(m.Box), r)
	case m.Base%16 != 0:
		return fmt.Errorf("tensor map: base %#x is not 16-byte aligned", uintptr(m.Base))
	}
	for i, d := range m.Dims {
		if d < 1 || d > 1<<32 {
			return fmt.Errorf("tensor map: dim %d is %d elements (want 1 to 2^32)", i, d)
		}
	}
	inner := m.Dims[0] * uint64(es) // bytes spanned by the dims inside stride i
	for i, s := range m.Strides {
		if s%16 != 0 || s >= 1<<40 {
			return fmt.Errorf("tensor map: stride %d is %d bytes (want a multiple of 16 below 2^40)", i+1, s)
		}
		if s < inner {
			return fmt.Errorf("tensor map: stride %d (%d bytes) is less than the %d bytes of the dims inside it", i+1, s, inner)
		}
		inner = s * m.Dims[i+1]
	}
	for i, b := range m.Box {
		if b < 1 || b > 256 {
			return fmt.Errorf("tensor map: box dim %d is %d (want 1 to 256)", i, b)
		}
	}
	if ib := int(m.Box[0]) * es; ib%16 != 0 || m.Swizzle128 && ib > 128 {
		return fmt.Errorf("tensor map: the box's inner dim is %d bytes (want a multiple of 16, at most 128 swizzled)", ib)
	}
	return nil
}

// EncodeTiled makes the tensor map m describes (cuTensorMapEncodeTiled;
// the encoding is host work, it enqueues nothing).
func EncodeTiled(m TiledMap) (TensorMap, error) {
	if err := m.Validate(); err != nil {
		return TensorMap{}, err
	}
	d, err := loadDriver()
	if err != nil {
		return TensorMap{}, err
	}
	if d.cuTensorMapEncodeTiled == nil {
		return TensorMap{}, fmt.Errorf("tensor map: %s has no cuTensorMapEncodeTiled", LibCUDA)
	}
	dtype := int32(tmapDTypeBF16)
	if m.DType == tensor.F16 {
		dtype = tmapDTypeF16
	}
	swizzle := int32(tmapSwizzleNone)
	if m.Swizzle128 {
		swizzle = tmapSwizzle128B
	}
	r := m.Rank()
	var dims, strides [5]uint64
	var box, estr [5]uint32
	copy(dims[:], m.Dims)
	copy(strides[:], m.Strides)
	copy(box[:], m.Box)
	for i := range r {
		estr[i] = 1
	}
	// The driver writes the map through a CUtensorMap*, 64-byte aligned in C.
	buf := alignedWords(tensorMapWords)
	res := d.cuTensorMapEncodeTiled(unsafe.Pointer(&buf[0]), dtype, uint32(r), uintptr(m.Base), &dims[0], &strides[0], &box[0], &estr[0],
		tmapInterleaveOff, swizzle, tmapL2Promote128B, tmapOOBFillZero)
	if err := check("cuTensorMapEncodeTiled", res); err != nil {
		return TensorMap{}, fmt.Errorf("%w (dims %v, strides %v, box %v)", err, m.Dims, m.Strides, m.Box)
	}
	var tm TensorMap
	copy(tm.W[:], buf)
	return tm, nil
}

// alignedWords is n zeroed words starting at a tensorMapAlign boundary
// (Go's heap does not move objects, so the alignment holds).
func alignedWords(n int) []uint64 {
	buf := make([]uint64, n+tensorMapAlign/8)
	off := int((tensorMapAlign - uintptr(unsafe.Pointer(&buf[0]))%tensorMapAlign) % tensorMapAlign / 8)
	return buf[off : off+n : off+n]
}
