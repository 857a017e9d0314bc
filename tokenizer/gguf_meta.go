package tokenizer

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
)

// This file reads only the header and metadata key/values of a GGUF file,
// enough to build its tokenizer without depending on the model loader.
//
// Layout (little-endian, versions 2 and 3):
//
//	"GGUF" | u32 version | u64 tensor count | u64 kv count | kv...
//	kv    = string key | u32 type | value
//	string = u64 length | bytes
//	array  = u32 element type | u64 count | elements

const ggufMagic = "GGUF"

// GGUF value types.
const (
	ggufU8 = iota
	ggufI8
	ggufU16
	ggufI16
	ggufU32
	ggufI32
	ggufF32
	ggufBool
	ggufString
	ggufArray
	ggufU64
	ggufI64
	ggufF64
)

type ggufReader struct {
	r         *bufio.Reader
	remaining int64 // bytes left in the file, to reject absurd lengths early
}

var errGGUFTruncated = errors.New("file is truncated")

func (g *ggufReader) read(buf []byte) error {
	if int64(len(buf)) > g.remaining {
		return errGGUFTruncated
	}
	if _, err := io.ReadFull(g.r, buf); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return errGGUFTruncated
		}
		return err
	}
	g.remaining -= int64(len(buf))
	return nil
}

func (g *ggufReader) u32() (uint32, error) {
	var b [4]byte
	err := g.read(b[:])
	return binary.LittleEndian.Uint32(b[:]), err
}

func (g *ggufReader) u64() (uint64, error) {
	var b [8]byte
	err := g.read(b[:])
	return binary.LittleEndian.Uint64(b[:]), err
}

func (g *ggufReader) str() (string, error) {
	n, err := g.u64()
	if err != nil {
		return "", err
	}
	if n > uint64(g.remaining) {
		return "", errGGUFTruncated
	}
	buf := make([]byte, n)
	if err := g.read(buf); err != nil {
		return "", err
	}
	return string(buf), nil
}

// value reads one value of type typ; arrays become []any.
func (g *ggufReader) value(typ uint32, depth int) (any, error) {
	var b [8]byte
	switch typ {
	case ggufU8, ggufI8, ggufBool:
		if err := g.read(b[:1]); err != nil {
			return nil, err
		}
		switch typ {
		case ggufU8:
			return b[0], nil
		case ggufI8:
			return int8(b[0]), nil
		}
		return b[0] != 0, nil
	case ggufU16, ggufI16:
		if err := g.read(b[:2]); err != nil {
			return nil, err
		}
		v := binary.LittleEndian.Uint16(b[:])
		if typ == ggufI16 {
			return int16(v), nil
		}
		return v, nil
	case ggufU32, ggufI32, ggufF32:
		v, err := g.u32()
		if err != nil {
			return nil, err
		}
		switch typ {
		case ggufI32:
			return int32(v), nil
		case ggufF32:
			return math.Float32frombits(v), nil
		}
		return v, nil
	case ggufU64, ggufI64, ggufF64:
		v, err := g.u64()
		if err != nil {
			return nil, err
		}
		switch typ {
		case ggufI64:
			return int64(v), nil
		case ggufF64:
			return math.Float64frombits(v), nil
		}
		return v, nil
	case ggufString:
		return g.str()
	case ggufArray:
		if depth > 8 {
			return nil, errors.New("arrays nested too deeply")
		}
		elemType, err := g.u32()
		if err != nil {
			return nil, err
		}
		n, err := g.u64()
		if err != nil {
			return nil, err
		}
		// Every element takes at least one byte.
		if n > uint64(g.remaining) {
			return nil, errGGUFTruncated
		}
		arr := make([]any, n)
		for i := range arr {
			if arr[i], err = g.value(elemType, depth+1); err != nil {
				return nil, err
			}
		}
		return arr, nil
	}
	return nil, fmt.Errorf("unknown value type %d", typ)
}

// readGGUFMetadata returns the metadata map of a GGUF v2/v3 file.
func readGGUFMetadata(path string) (map[string]any, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	g := &ggufReader{r: bufio.NewReaderSize(f, 1<<20), remaining: st.Size()}
	var magic [4]byte
	if err := g.read(magic[:]); err != nil {
		return nil, err
	}
	if string(magic[:]) != ggufMagic {
		return nil, fmt.Errorf("not a GGUF file (magic %q)", magic[:])
	}
	version, err := g.u32()
	if err != nil {
		return nil, err
	}
	if version != 2 && version != 3 {
		return nil, fmt.Errorf("unsupported GGUF version %d (supported: 2, 3)", version)
	}
	if _, err := g.u64(); err != nil { // tensor count: not needed here
		return nil, err
	}
	kvCount, err := g.u64()
	if err != nil {
		return nil, err
	}
	md := make(map[string]any, min(kvCount, 1024))
	for i := uint64(0); i < kvCount; i++ {
		key, err := g.str()
		if err != nil {
			return nil, fmt.Errorf("metadata entry %d: %w", i, err)
		}
		typ, err := g.u32()
		if err != nil {
			return nil, fmt.Errorf("metadata %q: %w", key, err)
		}
		v, err := g.value(typ, 0)
		if err != nil {
			return nil, fmt.Errorf("metadata %q: %w", key, err)
		}
		md[key] = v
	}
	return md, nil
}
