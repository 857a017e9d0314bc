package tensor

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"
)

// T is an activation tensor, row-major, outermost dimension first. Shapes
// are written at use sites as [tokens, heads*headDim].
//
// Its storage is opaque: on the CPU, float32 values (HostData, or the
// Host view); on a GPU, the device address of values stored as DType
// (F32, BF16 or F16; DevPtr, or the Device view), whose memory the device
// package that allocated it owns. Host and device tensors are made with
// New, From or Host.T, and Device.T.
type T struct {
	Shape []int
	data  []float32
	dev   uintptr
	DType DType // element type of the device values; host values are always F32
}

// OnDevice reports whether the values live in GPU memory.
func (t T) OnDevice() bool { return t.dev != 0 }

// HostData is t's values in host memory (nil for the zero T). It panics
// when they are in device memory: a host kernel handed a device tensor is
// a programming error, reported with the shape rather than as a nil slice
// read.
func (t T) HostData() []float32 {
	if t.dev != 0 {
		panic(fmt.Sprintf("tensor: host values of a tensor %v in device memory", t.Shape))
	}
	return t.data
}

// DevPtr is the device address of t's values (0 for the zero T). It
// panics when they are in host memory, which a device kernel cannot read.
func (t T) DevPtr() uintptr {
	if t.data != nil {
		panic(fmt.Sprintf("tensor: device address of a tensor %v in host memory", t.Shape))
	}
	return t.dev
}

// Reshape is t over the same storage with another shape of as many
// values; it panics when the counts differ.
func (t T) Reshape(shape ...int) T {
	n := 1
	for _, d := range shape {
		n *= d
	}
	if n != t.NumElements() {
		panic(fmt.Sprintf("tensor: reshape of %v to %v", t.Shape, shape))
	}
	t.Shape = append([]int(nil), shape...)
	return t
}

// NumElements is the product of the shape.
func (t T) NumElements() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// New allocates a zeroed tensor of the given shape.
func New(shape ...int) T {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return T{Shape: append([]int(nil), shape...), data: make([]float32, n)}
}

// From wraps data with a shape; it panics when they disagree, which is a
// programming error, never a user error.
func From(data []float32, shape ...int) T {
	n := 1
	for _, d := range shape {
		n *= d
	}
	if n != len(data) {
		panic(fmt.Sprintf("tensor.From: shape %v needs %d values, have %d", shape, n, len(data)))
	}
	return T{Shape: append([]int(nil), shape...), data: data}
}

// Rows is the product of all dimensions but the last.
func (t T) Rows() int {
	if len(t.Shape) == 0 || t.Shape[len(t.Shape)-1] == 0 {
		return 0
	}
	return t.NumElements() / t.Shape[len(t.Shape)-1]
}

// Cols is the last dimension.
func (t T) Cols() int { return t.Shape[len(t.Shape)-1] }

// Len is how many values t holds, wherever they live: the host values'
// count, the shape's product on a device, 0 for the zero T. With Width it is what a shape check reads (attention.Shaped).
func (t T) Len() int {
	if t.dev != 0 {
		return t.NumElements()
	}
	return len(t.data)
}

// Width is the last dimension, 0 for a tensor without a shape.
func (t T) Width() int { return width(t.Shape) }

// Row returns row i (a view over the last dimension) of a host tensor.
func (t T) Row(i int) []float32 {
	c := t.Cols()
	return t.HostData()[i*c : (i+1)*c]
}

// Weight is a stored tensor in its checkpoint dtype. Shape is row-major in
// PyTorch order (a linear layer is [out, in]); Data is little-endian and may
// alias a read-only memory map, so it must never be written.
//
// A synthetic weight (Synthetic not nil) has generated values and may have
// no Data: DecodeRow, Float32, Validate and Convert handle it as it is, and
// Materialize makes Data for code that reads the bytes. A device may fill
// its copy itself (device/cuda does, on the GPU).
//
// A lazy weight (Lazy not nil, Data nil) is computed from another one row
// by row when read: a weight converted or dequantized at load whose
// consumer keeps only what it makes of it (the CPU's packed panels), so
// that no whole converted copy outlives its packing. DecodeRow, Float32
// and Validate handle it as it is; Materialize makes Data.
type Weight struct {
	Name      string
	DType     DType
	Shape     []int
	Data      []byte
	Synthetic *Synthetic
	// Lazy writes row i's Cols() values, exactly representable in DType
	// (already rounded to it), into dst.
	Lazy func(i int, dst []float32)
}

// Lazily is w converted to dtype to on demand (see Weight.Lazy): rows
// decoded from w and rounded to nearest even to to, or quantised to Q8_0
// block by block, as Convert would store them. w must not be synthetic.
func Lazily(w Weight, to DType) Weight {
	rowBytes, _ := to.RowBytes(w.Cols())
	return Weight{Name: w.Name, DType: to, Shape: append([]int(nil), w.Shape...), Lazy: func(i int, dst []float32) {
		w.DecodeRow(i, dst)
		if to != F32 {
			tmp := make([]byte, rowBytes)
			EncodeInto(to, dst[:w.Cols()], tmp)
			DecodeInto(to, tmp, dst[:w.Cols()])
		}
	}}
}

// NumElements is the product of the shape.
func (w Weight) NumElements() int {
	n := 1
	for _, d := range w.Shape {
		n *= d
	}
	return n
}

// Cols is the innermost dimension (the input size of a linear layer).
func (w Weight) Cols() int {
	if len(w.Shape) == 0 {
		return 1
	}
	return w.Shape[len(w.Shape)-1]
}

// Rows is the product of the outer dimensions.
func (w Weight) Rows() int { return w.NumElements() / max(w.Cols(), 1) }

// Validate checks that Data holds exactly the bytes the dtype and shape
// need; a synthetic weight may instead have no Data, and must be F32, F16
// or BF16.
func (w Weight) Validate() error {
	if w.Synthetic != nil {
		if err := syntheticDType(w.DType); err != nil {
			return fmt.Errorf("tensor %s: %w", w.Name, err)
		}
		if w.Data == nil {
			return nil
		}
	}
	want, err := w.DType.RowBytes(w.Cols())
	if err != nil {
		return fmt.Errorf("tensor %s: %w", w.Name, err)
	}
	if w.Data == nil && w.Lazy != nil {
		return nil
	}
	want *= w.Rows()
	if len(w.Data) != want {
		return fmt.Errorf("tensor %s: %v %v needs %d bytes, have %d", w.Name, w.DType, w.Shape, want, len(w.Data))
	}
	return nil
}

// DecodeRow writes row i (over the innermost dimension) as float32 into dst,
// which must have Cols() elements.
func (w Weight) DecodeRow(i int, dst []float32) {
	cols := w.Cols()
	if w.Data == nil && w.Lazy != nil {
		w.Lazy(i, dst[:cols])
		return
	}
	if w.Data == nil && w.Synthetic != nil {
		w.Synthetic.FillFloat32(w.DType, i*cols, dst[:cols])
		return
	}
	rowBytes, _ := w.DType.RowBytes(cols)
	DecodeInto(w.DType, w.Data[i*rowBytes:(i+1)*rowBytes], dst)
}

// Float32 returns all values as float32. For an aligned F32 weight on a
// little-endian machine it returns a view without copying.
func (w Weight) Float32() []float32 {
	n := w.NumElements()
	if n == 0 {
		return nil
	}
	if w.Data == nil && w.Synthetic != nil {
		out := make([]float32, n)
		w.Synthetic.FillFloat32(w.DType, 0, out)
		return out
	}
	if w.Data == nil && w.Lazy != nil {
		out := make([]float32, n)
		for i := range w.Rows() {
			w.Lazy(i, out[i*w.Cols():(i+1)*w.Cols()])
		}
		return out
	}
	if w.DType == F32 && uintptr(unsafe.Pointer(&w.Data[0]))%4 == 0 && nativeLittleEndian {
		return unsafe.Slice((*float32)(unsafe.Pointer(&w.Data[0])), n)
	}
	out := make([]float32, n)
	DecodeInto(w.DType, w.Data, out)
	return out
}

// DecodeInto converts len(dst) values of dtype d from src.
func DecodeInto(d DType, src []byte, dst []float32) {
	switch d {
	case F32:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
	case F16:
		for i := range dst {
			dst[i] = F16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
		}
	case BF16:
		DecodeBF16(dst, src)
	case FP8E4M3:
		DecodeFP8E4M3(dst, src, 1)
	case Q8_0:
		for b := 0; b*Q8_0BlockSize < len(dst); b++ {
			blk := src[b*q8_0BlockBytes:]
			scale := F16ToF32(binary.LittleEndian.Uint16(blk))
			for j := 0; j < Q8_0BlockSize; j++ {
				dst[b*Q8_0BlockSize+j] = scale * float32(int8(blk[2+j]))
			}
		}
	default:
		if !IsBlockQuant(d) {
			panic(fmt.Sprintf("tensor.DecodeInto: unsupported dtype %v", d))
		}
		decodeBlocks(d, src, dst)
	}
}

// FromFloat32 builds an F32 weight that owns a copy of values.
func FromFloat32(name string, values []float32, shape ...int) Weight {
	data := make([]byte, 4*len(values))
	for i, v := range values {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
	}
	return Weight{Name: name, DType: F32, Shape: append([]int(nil), shape...), Data: data}
}

var nativeLittleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()
