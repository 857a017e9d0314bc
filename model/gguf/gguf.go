// Package gguf reads GGUF v2/v3 files (llama.cpp's checkpoint format)
// through a read-only memory map.
//
// File layout, all little-endian:
//
//	magic "GGUF" | version u32 | tensor count u64 | metadata count u64
//	metadata: key (string) | value type u32 | value
//	tensor infos: name (string) | n_dims u32 | ne[n_dims] u64 | ggml type u32 | offset u64
//	padding to general.alignment (default 32)
//	data section: each tensor at its offset, relative to the section start
//
// Strings are a u64 length and UTF-8 bytes. ne[0] is the innermost
// (contiguous) dimension, so a PyTorch [out, in] weight has ne = [in, out].
package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/gosling-ai/gosling/model/internal/mmap"
	"github.com/gosling-ai/gosling/tensor"
)

// DefaultAlignment is the data alignment when general.alignment is absent.
const DefaultAlignment = 32

// maxDims is GGML_MAX_DIMS: no ggml tensor has more dimensions.
const maxDims = 4

// TensorInfo describes one tensor as the file stores it.
type TensorInfo struct {
	Name   string
	Dims   []uint64 // ne, innermost first (GGUF order)
	Type   GGMLType
	Offset uint64 // from the start of the data section
}

// Shape is the PyTorch-order shape: Dims reversed.
func (t TensorInfo) Shape() []int {
	shape := make([]int, len(t.Dims))
	for i, d := range t.Dims {
		shape[len(t.Dims)-1-i] = int(d)
	}
	return shape
}

// File is an opened GGUF file. It satisfies model.WeightSource with GGUF
// tensor names; HFView presents the same tensors under Hugging Face names.
type File struct {
	Path    string
	Version uint32
	// Metadata holds every key-value pair. Values are uint8, int8, uint16,
	// int16, uint32, int32, uint64, int64, float32, float64, bool, string,
	// or []any of those (arrays may nest).
	Metadata  map[string]any
	Tensors   []TensorInfo // in file order
	Alignment int
	// DataOffset is where the data section starts in the file.
	DataOffset int64

	m      *mmap.File
	byName map[string]int
	names  []string
}

// Open maps path and parses its header. Every tensor of a supported type
// is checked to lie inside the file; other types fail only when asked for.
func Open(path string) (*File, error) {
	m, err := mmap.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open gguf: %w", err)
	}
	f, err := parse(path, m.Data)
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("gguf %s: %w", path, err)
	}
	f.m = m
	return f, nil
}

func parse(path string, data []byte) (*File, error) {
	r := &reader{data: data}
	magic := r.bytes(4, "magic")
	if r.err != nil {
		return nil, r.err
	}
	if string(magic) != "GGUF" {
		return nil, fmt.Errorf("bad magic %q, want \"GGUF\"; this is not a GGUF file", magic)
	}
	version := r.u32("version")
	if r.err != nil {
		return nil, r.err
	}
	switch {
	case version == 1:
		return nil, fmt.Errorf("GGUF version 1 is not supported (only 2 and 3); re-convert the model with a current llama.cpp")
	case version != 2 && version != 3:
		if swapped := (version>>24 | version>>8&0xff00); swapped == 2 || swapped == 3 {
			return nil, fmt.Errorf("GGUF version %d: this is a big-endian GGUF file; only little-endian files are supported", version)
		}
		return nil, fmt.Errorf("unsupported GGUF version %d (supported: 2, 3)", version)
	}
	tensorCount := r.u64("tensor count")
	kvCount := r.u64("metadata count")
	if r.err != nil {
		return nil, r.err
	}
	// Each metadata entry needs at least 12 bytes (key length + type) and
	// each tensor info at least 24; larger counts are a corrupt header, and
	// rejecting them here keeps allocations bounded by the file size.
	if kvCount > uint64(r.remaining())/12 {
		return nil, fmt.Errorf("metadata count %d cannot fit in the file; the file is truncated or corrupt", kvCount)
	}
	if tensorCount > uint64(r.remaining())/24 {
		return nil, fmt.Errorf("tensor count %d cannot fit in the file; the file is truncated or corrupt", tensorCount)
	}

	f := &File{
		Path:      path,
		Version:   version,
		Metadata:  make(map[string]any, kvCount),
		Alignment: DefaultAlignment,
		byName:    make(map[string]int, tensorCount),
	}
	for i := uint64(0); i < kvCount; i++ {
		key := r.str("metadata key")
		if r.err == nil && !printableKey(key) {
			// Keys are ASCII names (general.architecture); other bytes mean
			// a corrupt file, and must not reach a terminal as they are.
			return nil, fmt.Errorf("metadata key %d, %q, is not an ASCII name: the file is corrupt", i, key)
		}
		typ := r.u32("type of " + key)
		value := r.value(ValueType(typ), key, 0)
		if r.err != nil {
			return nil, r.err
		}
		if _, dup := f.Metadata[key]; dup {
			return nil, fmt.Errorf("metadata key %s appears twice", key)
		}
		f.Metadata[key] = value
	}
	if v, ok := f.Metadata["general.alignment"]; ok {
		a, isInt := asInt(v)
		if !isInt || a <= 0 || a&(a-1) != 0 {
			return nil, fmt.Errorf("general.alignment %v must be a positive power of two", v)
		}
		f.Alignment = int(a)
	}

	for i := uint64(0); i < tensorCount; i++ {
		var t TensorInfo
		t.Name = r.str("tensor name")
		nDims := r.u32("n_dims of " + t.Name)
		if r.err != nil {
			return nil, r.err
		}
		if nDims > maxDims {
			return nil, fmt.Errorf("tensor %s has %d dimensions, at most %d are allowed", t.Name, nDims, maxDims)
		}
		t.Dims = make([]uint64, nDims)
		for d := range t.Dims {
			t.Dims[d] = r.u64("dims of " + t.Name)
		}
		t.Type = GGMLType(r.u32("type of " + t.Name))
		t.Offset = r.u64("offset of " + t.Name)
		if r.err != nil {
			return nil, r.err
		}
		if _, dup := f.byName[t.Name]; dup {
			return nil, fmt.Errorf("tensor %s appears twice", t.Name)
		}
		f.byName[t.Name] = len(f.Tensors)
		f.Tensors = append(f.Tensors, t)
		f.names = append(f.names, t.Name)
	}
	slices.Sort(f.names)

	dataStart := alignUp(uint64(r.pos), uint64(f.Alignment))
	if dataStart > uint64(len(data)) {
		if tensorCount == 0 {
			dataStart = uint64(len(data)) // a metadata-only file may omit the padding
		} else {
			return nil, fmt.Errorf("file ends at byte %d, before its data section at %d; the file is truncated", len(data), dataStart)
		}
	}
	f.DataOffset = int64(dataStart)
	for _, t := range f.Tensors {
		if !t.Type.supported() {
			continue // reported by Tensor, so unused tensors do not block a load
		}
		if _, err := f.span(t, data); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// span checks that a tensor of a supported type lies inside the data
// section and returns its bytes.
func (f *File) span(t TensorInfo, data []byte) ([]byte, error) {
	dtype, ok := t.Type.dtype()
	if !ok {
		return nil, fmt.Errorf("tensor %s has ggml type %v, supported: %s", t.Name, t.Type, Supported)
	}
	section := uint64(len(data)) - uint64(f.DataOffset)
	count := uint64(1)
	for _, d := range t.Dims {
		// Every supported type takes more than two bits per value, so a
		// count beyond four per byte of the section is corrupt; checking
		// here prevents overflow.
		if d != 0 && count > 4*section/d {
			return nil, fmt.Errorf("tensor %s: dims %v are too large for the %d-byte data section; the file is truncated or corrupt", t.Name, t.Dims, section)
		}
		count *= d
	}
	cols := uint64(1)
	if len(t.Dims) > 0 {
		cols = t.Dims[0]
	}
	rowBytes, err := dtype.RowBytes(int(cols))
	if err != nil {
		return nil, fmt.Errorf("tensor %s: %w", t.Name, err)
	}
	size := uint64(rowBytes) * (count / max(cols, 1))
	if t.Offset > section || size > section-t.Offset {
		return nil, fmt.Errorf("tensor %s: %d bytes at data offset %d reach beyond the %d-byte data section; the file is truncated", t.Name, size, t.Offset, section)
	}
	start := uint64(f.DataOffset) + t.Offset
	end := start + size
	return data[start:end:end], nil
}

// Info returns the stored description of a tensor.
func (f *File) Info(name string) (TensorInfo, bool) {
	i, ok := f.byName[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.Tensors[i], true
}

// Tensor returns the named tensor (GGUF name) with its Shape in PyTorch
// order; Data aliases the memory map.
func (f *File) Tensor(name string) (tensor.Weight, error) {
	t, ok := f.Info(name)
	if !ok {
		return tensor.Weight{}, fmt.Errorf("tensor %s not found in %s", name, f.Path)
	}
	if f.m == nil {
		return tensor.Weight{}, fmt.Errorf("tensor %s: %s is closed", name, f.Path)
	}
	data, err := f.span(t, f.m.Data)
	if err != nil {
		return tensor.Weight{}, fmt.Errorf("gguf %s: %w", f.Path, err)
	}
	dtype, _ := t.Type.dtype()
	return tensor.Weight{Name: name, DType: dtype, Shape: t.Shape(), Data: data}, nil
}

// Has reports whether the file holds the named tensor (GGUF name).
func (f *File) Has(name string) bool {
	_, ok := f.byName[name]
	return ok
}

// Names lists every tensor (GGUF names), sorted.
func (f *File) Names() []string { return slices.Clone(f.names) }

// Architecture is general.architecture ("llama", "qwen3", ...), or "".
func (f *File) Architecture() string {
	s, _ := String(f.Metadata, "general.architecture")
	return s
}

// Close unmaps the file; weights obtained before become invalid.
func (f *File) Close() error {
	if f.m == nil {
		return nil
	}
	err := f.m.Close()
	f.m = nil
	if err != nil {
		return fmt.Errorf("close %s: %w", f.Path, err)
	}
	return nil
}

func alignUp(n, a uint64) uint64 { return (n + a - 1) / a * a }

// reader decodes little-endian values and remembers the first overrun, so
// that parsing reads straight through and checks once per record.
type reader struct {
	data []byte
	pos  int
	err  error
}

func (r *reader) remaining() int { return len(r.data) - r.pos }

func (r *reader) bytes(n uint64, what string) []byte {
	if r.err != nil {
		return nil
	}
	if n > uint64(r.remaining()) {
		r.err = fmt.Errorf("file ends at byte %d while reading %s (%d bytes needed at %d); the file is truncated", len(r.data), what, n, r.pos)
		return nil
	}
	b := r.data[r.pos : r.pos+int(n)]
	r.pos += int(n)
	return b
}

func (r *reader) u8(what string) uint8 {
	if b := r.bytes(1, what); b != nil {
		return b[0]
	}
	return 0
}

func (r *reader) u16(what string) uint16 {
	if b := r.bytes(2, what); b != nil {
		return binary.LittleEndian.Uint16(b)
	}
	return 0
}

func (r *reader) u32(what string) uint32 {
	if b := r.bytes(4, what); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (r *reader) u64(what string) uint64 {
	if b := r.bytes(8, what); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

func printableKey(key string) bool {
	for i := range len(key) {
		if key[i] < 0x20 || key[i] > 0x7e {
			return false
		}
	}
	return true
}

func (r *reader) str(what string) string {
	n := r.u64(what + " length")
	return string(r.bytes(n, what))
}

// maxNesting bounds arrays of arrays; real files nest at most once.
const maxNesting = 8

func (r *reader) value(t ValueType, key string, depth int) any {
	switch t {
	case TypeUint8:
		return r.u8(key)
	case TypeInt8:
		return int8(r.u8(key))
	case TypeUint16:
		return r.u16(key)
	case TypeInt16:
		return int16(r.u16(key))
	case TypeUint32:
		return r.u32(key)
	case TypeInt32:
		return int32(r.u32(key))
	case TypeFloat32:
		return math.Float32frombits(r.u32(key))
	case TypeBool:
		b := r.u8(key)
		if r.err == nil && b > 1 {
			r.err = fmt.Errorf("metadata %s: bool value %d is neither 0 nor 1", key, b)
		}
		return b == 1
	case TypeString:
		return r.str(key)
	case TypeUint64:
		return r.u64(key)
	case TypeInt64:
		return int64(r.u64(key))
	case TypeFloat64:
		return math.Float64frombits(r.u64(key))
	case TypeArray:
		elem := ValueType(r.u32(key + " element type"))
		n := r.u64(key + " length")
		if r.err != nil {
			return nil
		}
		if depth >= maxNesting {
			r.err = fmt.Errorf("metadata %s: arrays nest deeper than %d", key, maxNesting)
			return nil
		}
		// Every element takes at least one byte, so a count beyond the rest
		// of the file is corrupt; checking first bounds the allocation.
		if n > uint64(r.remaining()) {
			r.err = fmt.Errorf("metadata %s: array of %d elements cannot fit in the rest of the file; the file is truncated", key, n)
			return nil
		}
		out := make([]any, n)
		for i := range out {
			out[i] = r.value(elem, key, depth+1)
			if r.err != nil {
				return nil
			}
		}
		return out
	}
	if r.err == nil {
		r.err = fmt.Errorf("metadata %s has unknown value type %d", key, t)
	}
	return nil
}
