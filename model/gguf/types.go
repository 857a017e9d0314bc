package gguf

import (
	"fmt"

	"github.com/gosling-ai/gosling/tensor"
)

// ValueType is the type tag of a metadata value.
type ValueType uint32

const (
	TypeUint8 ValueType = iota
	TypeInt8
	TypeUint16
	TypeInt16
	TypeUint32
	TypeInt32
	TypeFloat32
	TypeBool
	TypeString
	TypeArray
	TypeUint64
	TypeInt64
	TypeFloat64
)

// GGMLType is the element type of a tensor, numbered as in ggml.h.
type GGMLType uint32

const (
	GGMLF32  GGMLType = 0
	GGMLF16  GGMLType = 1
	GGMLQ8_0 GGMLType = 8
	GGMLBF16 GGMLType = 30
)

// Supported lists the ggml types gosling decodes, in messages' order.
const Supported = "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4"

// blockTypes are the ggml block formats beyond Q8_0, by ggml.h's ids.
var blockTypes = map[GGMLType]tensor.DType{
	2: tensor.Q4_0, 3: tensor.Q4_1, 6: tensor.Q5_0, 7: tensor.Q5_1,
	10: tensor.Q2_K, 11: tensor.Q3_K, 12: tensor.Q4_K, 13: tensor.Q5_K,
	14: tensor.Q6_K, 20: tensor.IQ4_NL, 23: tensor.IQ4_XS,
	39: tensor.MXFP4, // block_mxfp4, which tensor.MXFP4 is
}

// ggmlNames names the types of ggml.h, so that an unsupported tensor is
// reported as "Q4_K", not as a number. Gaps are retired type ids.
var ggmlNames = map[GGMLType]string{
	0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1",
	8: "Q8_0", 9: "Q8_1", 10: "Q2_K", 11: "Q3_K", 12: "Q4_K", 13: "Q5_K",
	14: "Q6_K", 15: "Q8_K", 16: "IQ2_XXS", 17: "IQ2_XS", 18: "IQ3_XXS",
	19: "IQ1_S", 20: "IQ4_NL", 21: "IQ3_S", 22: "IQ2_S", 23: "IQ4_XS",
	24: "I8", 25: "I16", 26: "I32", 27: "I64", 28: "F64", 29: "IQ1_M",
	30: "BF16", 34: "TQ1_0", 35: "TQ2_0", 39: "MXFP4",
}

func (t GGMLType) String() string {
	if name, ok := ggmlNames[t]; ok {
		return name
	}
	return fmt.Sprintf("unknown(%d)", uint32(t))
}

func (t GGMLType) dtype() (tensor.DType, bool) {
	switch t {
	case GGMLF32:
		return tensor.F32, true
	case GGMLF16:
		return tensor.F16, true
	case GGMLQ8_0:
		return tensor.Q8_0, true
	case GGMLBF16:
		return tensor.BF16, true
	}
	d, ok := blockTypes[t]
	return d, ok
}

func (t GGMLType) supported() bool {
	_, ok := t.dtype()
	return ok
}
