package safetensors

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
)

// Tensor is one tensor to write: its safetensors dtype name ("F32",
// "BF16", "F8_E4M3", ...), shape and little-endian bytes.
type Tensor struct {
	Name  string
	DType string
	Shape []int
	Data  []byte
}

// Write writes tensors to path in order: the 8-byte header length, the
// JSON header (padded with spaces to a multiple of 8), then the data.
func Write(path string, tensors []Tensor) error {
	header := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	offset := 0
	for _, t := range tensors {
		size, ok := elementBytes[t.DType]
		n := size
		for _, d := range t.Shape {
			n *= d
		}
		if !ok || n != len(t.Data) {
			return fmt.Errorf("write safetensors %s: tensor %s: %d bytes for %s %v", path, t.Name, len(t.Data), t.DType, t.Shape)
		}
		header[t.Name] = map[string]any{"dtype": t.DType, "shape": t.Shape, "data_offsets": []int{offset, offset + n}}
		offset += n
	}
	hdr, err := json.Marshal(header)
	if err != nil {
		return fmt.Errorf("write safetensors %s: %w", path, err)
	}
	for len(hdr)%8 != 0 {
		hdr = append(hdr, ' ')
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write safetensors: %w", err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	binary.Write(w, binary.LittleEndian, uint64(len(hdr)))
	w.Write(hdr)
	for _, t := range tensors {
		w.Write(t.Data)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("write safetensors %s: %w", path, err)
	}
	return f.Close()
}
