package gguf

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"math"
	"os"

	"github.com/gosling-ai/gosling/tensor"
)

// KV is one metadata entry to write. Values are uint32, int32, float32,
// bool, string, or []string, []float32, []int32, []bool.
type KV struct {
	Key   string
	Value any
}

// WriteTensor is one tensor to write: Shape in PyTorch order (outermost
// first; Write stores it reversed, as ne), Data in the dtype's layout.
// Load, when set, makes the bytes only when they are written, so that a
// large file is written one tensor in memory at a time.
type WriteTensor struct {
	Name  string
	DType tensor.DType
	Shape []int
	Data  []byte
	Load  func() []byte
}

// size is the tensor's byte count in its dtype.
func (t WriteTensor) size() (int, error) {
	if len(t.Shape) == 0 {
		return 0, fmt.Errorf("tensor %s has no dimensions", t.Name)
	}
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	cols := t.Shape[len(t.Shape)-1]
	rb, err := t.DType.RowBytes(cols)
	if err != nil {
		return 0, fmt.Errorf("tensor %s: %w", t.Name, err)
	}
	return rb * (n / max(cols, 1)), nil
}

// GGMLTypeOf is the ggml type id of a dtype gosling can store.
func GGMLTypeOf(d tensor.DType) (GGMLType, bool) {
	switch d {
	case tensor.F32:
		return GGMLF32, true
	case tensor.F16:
		return GGMLF16, true
	case tensor.BF16:
		return GGMLBF16, true
	case tensor.Q8_0:
		return GGMLQ8_0, true
	}
	for t, bd := range blockTypes {
		if bd == d {
			return t, true
		}
	}
	return 0, false
}

// Write writes a GGUF v3 file: metadata in the given order (general.alignment
// is DefaultAlignment unless md sets it), then the tensors, each at an
// aligned offset.
func Write(path string, md []KV, tensors []WriteTensor) error {
	align := uint64(DefaultAlignment)
	for _, e := range md {
		if e.Key == "general.alignment" {
			a, ok := e.Value.(uint32)
			if !ok || a == 0 || a&(a-1) != 0 {
				return fmt.Errorf("write gguf %s: general.alignment %v must be a uint32 power of two", path, e.Value)
			}
			align = uint64(a)
		}
	}
	types := make([]GGMLType, len(tensors))
	sizes := make([]int, len(tensors))
	for i, t := range tensors {
		typ, ok := GGMLTypeOf(t.DType)
		if !ok {
			return fmt.Errorf("write gguf %s: tensor %s: dtype %v has no ggml type", path, t.Name, t.DType)
		}
		n, err := t.size()
		if err != nil {
			return fmt.Errorf("write gguf %s: %w", path, err)
		}
		if t.Load == nil && len(t.Data) != n {
			return fmt.Errorf("write gguf %s: tensor %s: %d bytes for %v %v, want %d", path, t.Name, len(t.Data), t.DType, t.Shape, n)
		}
		types[i], sizes[i] = typ, n
	}

	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write gguf: %w", err)
	}
	w := &countingWriter{w: bufio.NewWriterSize(f, 1<<20)}
	w.raw([]byte("GGUF"))
	w.le(uint32(3))
	w.le(uint64(len(tensors)))
	w.le(uint64(len(md)))
	for _, e := range md {
		w.str(e.Key)
		if err := w.value(e.Value); err != nil {
			f.Close()
			return fmt.Errorf("write gguf %s: metadata %s: %w", path, e.Key, err)
		}
	}
	offset := uint64(0)
	for i, t := range tensors {
		w.str(t.Name)
		w.le(uint32(len(t.Shape)))
		for d := len(t.Shape) - 1; d >= 0; d-- {
			w.le(uint64(t.Shape[d]))
		}
		w.le(uint32(types[i]))
		w.le(offset)
		offset += alignUp(uint64(sizes[i]), align)
	}
	pad := func() {
		for w.n%align != 0 {
			w.raw([]byte{0})
		}
	}
	pad()
	// A tensor's Load runs while the one before it is written, so that
	// making a large file's tensors (model random) and writing them
	// overlap; at most two loaded tensors are held.
	loaded := make([]chan []byte, len(tensors)+1)
	start := func(i int) {
		if i < len(tensors) && tensors[i].Load != nil {
			ch := make(chan []byte, 1)
			loaded[i] = ch
			go func() { ch <- tensors[i].Load() }()
		}
	}
	start(0)
	for i, t := range tensors {
		start(i + 1)
		data := t.Data
		if loaded[i] != nil {
			data = <-loaded[i]
		}
		if len(data) != sizes[i] {
			f.Close()
			return fmt.Errorf("write gguf %s: tensor %s: made %d bytes, want %d", path, t.Name, len(data), sizes[i])
		}
		w.raw(data)
		pad()
	}
	if err := w.w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("write gguf %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write gguf %s: %w", path, err)
	}
	return nil
}

// countingWriter tracks the offset, for the alignment padding.
type countingWriter struct {
	w *bufio.Writer
	n uint64
}

func (c *countingWriter) raw(p []byte) {
	n, _ := c.w.Write(p) // a write error surfaces at Flush
	c.n += uint64(n)
}

func (c *countingWriter) le(v any) {
	var b [8]byte
	switch x := v.(type) {
	case uint32:
		binary.LittleEndian.PutUint32(b[:], x)
		c.raw(b[:4])
	case uint64:
		binary.LittleEndian.PutUint64(b[:], x)
		c.raw(b[:8])
	}
}

func (c *countingWriter) str(s string) {
	c.le(uint64(len(s)))
	c.raw([]byte(s))
}

// value writes a metadata value's type tag and the value.
func (c *countingWriter) value(v any) error {
	f32 := func(x float32) { c.le(math.Float32bits(x)) }
	boolByte := func(x bool) {
		if x {
			c.raw([]byte{1})
		} else {
			c.raw([]byte{0})
		}
	}
	switch x := v.(type) {
	case uint32:
		c.le(uint32(TypeUint32))
		c.le(x)
	case int32:
		c.le(uint32(TypeInt32))
		c.le(uint32(x))
	case float32:
		c.le(uint32(TypeFloat32))
		f32(x)
	case bool:
		c.le(uint32(TypeBool))
		boolByte(x)
	case string:
		c.le(uint32(TypeString))
		c.str(x)
	case []string:
		c.array(TypeString, len(x))
		for _, s := range x {
			c.str(s)
		}
	case []float32:
		c.array(TypeFloat32, len(x))
		for _, f := range x {
			f32(f)
		}
	case []int32:
		c.array(TypeInt32, len(x))
		for _, i := range x {
			c.le(uint32(i))
		}
	case []bool:
		c.array(TypeBool, len(x))
		for _, b := range x {
			boolByte(b)
		}
	default:
		return fmt.Errorf("value of type %T cannot be written", v)
	}
	return nil
}

func (c *countingWriter) array(elem ValueType, n int) {
	c.le(uint32(TypeArray))
	c.le(uint32(elem))
	c.le(uint64(n))
}
