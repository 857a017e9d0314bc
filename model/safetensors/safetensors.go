// Package safetensors reads Hugging Face .safetensors files, single or
// sharded, through a read-only memory map: every tensor.Weight it returns
// aliases the mapping, so opening a model copies no weights.
//
// File layout (https://huggingface.co/docs/safetensors):
//
//	[8 bytes: little-endian uint64 N][N bytes: JSON header][data section]
//
// The header maps each tensor name to {"dtype", "shape", "data_offsets":
// [begin, end]}, offsets relative to the data section; "__metadata__" holds
// free-form strings.
package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/gosling-ai/gosling/model/internal/mmap"
	"github.com/gosling-ai/gosling/tensor"
)

// Supported lists the dtypes a weight may have, in messages' order.
// F8_E4M3 weights are raw: model scales them by their checkpoint's
// quantization_config, and refuses them without one.
const Supported = "F32, F16, BF16, F8_E4M3"

var supportedDTypes = map[string]tensor.DType{"F32": tensor.F32, "F16": tensor.F16, "BF16": tensor.BF16, "F8_E4M3": tensor.FP8E4M3}

// elementBytes is the size of every dtype the format defines, so that the
// offsets of tensors we cannot decode are still checked at open.
var elementBytes = map[string]int{
	"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1,
	"I16": 2, "U16": 2, "F16": 2, "BF16": 2,
	"I32": 4, "U32": 4, "F32": 4,
	"I64": 8, "U64": 8, "F64": 8,
}

// File is one opened .safetensors file. It satisfies model.WeightSource.
type File struct {
	Path string
	// Metadata is the header's "__metadata__" (nil when absent).
	Metadata map[string]string

	m       *mmap.File
	tensors map[string]entry
	names   []string
}

// entry is a validated header record. err is set for a tensor whose dtype
// gosling cannot decode: the file still opens, and only asking for that
// tensor fails, since checkpoints sometimes carry unused integer buffers.
type entry struct {
	weight tensor.Weight
	err    error
	raw    Raw
}

// Raw is a tensor of any dtype the format defines, as stored: its
// safetensors dtype name, shape and bytes (MXFP4 blocks and scales are U8).
type Raw struct {
	DType string
	Shape []int
	Data  []byte
}

type headerEntry struct {
	DType       *string  `json:"dtype"`
	Shape       *[]int64 `json:"shape"`
	DataOffsets *[]int64 `json:"data_offsets"`
}

// Open maps path and validates its header: every tensor's offsets must lie
// inside the data section and span exactly shape × element size bytes.
func Open(path string) (*File, error) {
	m, err := mmap.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open safetensors: %w", err)
	}
	f, err := parse(path, m.Data)
	if err != nil {
		m.Close()
		return nil, err
	}
	f.m = m
	return f, nil
}

func parse(path string, data []byte) (*File, error) {
	size := uint64(len(data))
	if size < 8 {
		return nil, fmt.Errorf("safetensors %s: file is %d bytes, too short for the 8-byte header length; the file is truncated or not safetensors", path, size)
	}
	headerLen := binary.LittleEndian.Uint64(data)
	if headerLen > size-8 {
		return nil, fmt.Errorf("safetensors %s: header length %d exceeds the file size %d; the file is truncated or not safetensors", path, headerLen, size)
	}
	header := data[8 : 8+headerLen]
	body := data[8+headerLen:]

	var raw map[string]json.RawMessage
	if err := json.Unmarshal(header, &raw); err != nil {
		return nil, fmt.Errorf("safetensors %s: header is not valid JSON: %v", path, err)
	}
	f := &File{Path: path, tensors: make(map[string]entry, len(raw))}
	for name, msg := range raw {
		if name == "__metadata__" {
			// Metadata is informational; a producer that wrote non-string
			// values should not make the weights unreadable.
			_ = json.Unmarshal(msg, &f.Metadata)
			continue
		}
		e, err := parseEntry(name, msg, body)
		if err != nil {
			return nil, fmt.Errorf("safetensors %s: %w", path, err)
		}
		if e.err != nil {
			e.err = fmt.Errorf("safetensors %s: %w", path, e.err)
		}
		f.tensors[name] = e
		f.names = append(f.names, name)
	}
	slices.Sort(f.names)
	return f, nil
}

func parseEntry(name string, msg json.RawMessage, body []byte) (entry, error) {
	var h headerEntry
	dec := json.NewDecoder(bytes.NewReader(msg))
	if err := dec.Decode(&h); err != nil {
		return entry{}, fmt.Errorf("tensor %s: header entry is malformed: %v", name, err)
	}
	if h.DType == nil || h.Shape == nil || h.DataOffsets == nil {
		return entry{}, fmt.Errorf("tensor %s: header entry needs dtype, shape and data_offsets", name)
	}
	offsets := *h.DataOffsets
	if len(offsets) != 2 || offsets[0] < 0 || offsets[1] < offsets[0] {
		return entry{}, fmt.Errorf("tensor %s: data_offsets %v must be [begin, end] with 0 <= begin <= end", name, offsets)
	}
	begin, end := offsets[0], offsets[1]
	if uint64(end) > uint64(len(body)) {
		return entry{}, fmt.Errorf("tensor %s: data_offsets [%d, %d] reach beyond the %d-byte data section; the file is truncated", name, begin, end, len(body))
	}

	shape := make([]int, len(*h.Shape))
	count := int64(1)
	for i, d := range *h.Shape {
		// The data section bounds every honest count, so overflow can only
		// come from a corrupt header; checking against it keeps products small.
		if d < 0 || (d > 0 && count > int64(len(body))/d) {
			return entry{}, fmt.Errorf("tensor %s: shape %v is invalid for a %d-byte data section", name, *h.Shape, len(body))
		}
		count *= d
		shape[i] = int(d)
	}

	dtypeName := *h.DType
	if elemSize, known := elementBytes[dtypeName]; known && count*int64(elemSize) != end-begin {
		return entry{}, fmt.Errorf("tensor %s: %s %v needs %d bytes but data_offsets [%d, %d] span %d", name, dtypeName, shape, count*int64(elemSize), begin, end, end-begin)
	}
	raw := Raw{DType: dtypeName, Shape: shape, Data: body[begin:end:end]}
	dtype, ok := supportedDTypes[dtypeName]
	if !ok {
		return entry{err: fmt.Errorf("unsupported dtype %s in tensor %s, supported: %s", dtypeName, name, Supported), raw: raw}, nil
	}
	// The full slice expression caps capacity so that no append through a
	// Weight can reach the next tensor.
	w := tensor.Weight{Name: name, DType: dtype, Shape: shape, Data: body[begin:end:end]}
	if err := w.Validate(); err != nil {
		return entry{}, err
	}
	return entry{weight: w, raw: raw}, nil
}

// Tensor returns the named tensor; its Data aliases the memory map.
func (f *File) Tensor(name string) (tensor.Weight, error) {
	e, ok := f.tensors[name]
	if !ok {
		return tensor.Weight{}, fmt.Errorf("tensor %s not found in %s", name, f.Path)
	}
	if e.err != nil {
		return tensor.Weight{}, e.err
	}
	if f.m == nil {
		return tensor.Weight{}, fmt.Errorf("tensor %s: %s is closed", name, f.Path)
	}
	return e.weight, nil
}

// Raw returns the named tensor as stored, whatever its dtype; Data
// aliases the memory map.
func (f *File) Raw(name string) (Raw, error) {
	e, ok := f.tensors[name]
	if !ok {
		return Raw{}, fmt.Errorf("tensor %s not found in %s", name, f.Path)
	}
	if f.m == nil {
		return Raw{}, fmt.Errorf("tensor %s: %s is closed", name, f.Path)
	}
	return e.raw, nil
}

// Has reports whether the file holds the named tensor (whatever its dtype).
func (f *File) Has(name string) bool {
	_, ok := f.tensors[name]
	return ok
}

// Names lists every tensor, sorted.
func (f *File) Names() []string { return slices.Clone(f.names) }

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

// describe names a source for "not found" messages: one file, or a set.
func describe(paths []string) string {
	if len(paths) == 1 {
		return paths[0]
	}
	return fmt.Sprintf("%d shards (%s)", len(paths), strings.Join(paths, ", "))
}
