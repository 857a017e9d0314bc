package random

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	"github.com/gosling-ai/gosling/model/safetensors"
	"github.com/gosling-ai/gosling/tensor"
)

// GPTQOptions are how WriteGPTQ quantizes: Group inputs per group (32, 64,
// 128, or -1 for one per row), symmetric (zero point 8, GPTQ's default)
// or min-max, and the zero points stored as AutoGPTQ's original format
// does (z − 1) or as "gptq_v2" does (z).
type GPTQOptions struct {
	Group int
	Sym   bool
	V2    bool
}

// WriteGPTQ copies the float32 checkpoint in src to quantized in GPTQ's
// layout (qweight int32 [in/8, out] packing eight inputs per word,
// qzeros int32 [groups, out/8] packing eight outputs, float16 scales
// [groups, out], g_idx int32 [in]; desc_act false) and to dequantized
// with the values those encode, in float32. Every 2-D projection
// ("_proj.weight") whose inputs are whole groups (whole runs of 32 for
// Group -1) and outputs whole words is quantized; the rest is copied. It
// returns the quantized tensors' names.
func WriteGPTQ(src, quantized, dequantized string, o GPTQOptions) ([]string, error) {
	if _, ok := tensor.AWQ4Format(o.Group); !ok && o.Group != -1 {
		return nil, fmt.Errorf("WriteGPTQ: groups of %d (want 32, 64, 128 or -1)", o.Group)
	}
	format := "gptq"
	if o.V2 {
		format = "gptq_v2"
	}
	q := map[string]any{"quant_method": "gptq", "bits": 4, "group_size": o.Group, "desc_act": false, "sym": o.Sym, "checkpoint_format": format}
	return writeProjections(src, quantized, dequantized, q, func(name string, w tensor.Weight) ([]safetensors.Tensor, []byte, error) {
		out, in := w.Shape[0], w.Shape[1]
		group := o.Group
		if group < 0 {
			group = in
		}
		if in%group != 0 || in%32 != 0 || out%8 != 0 {
			return nil, nil, nil
		}
		ts, deq := packGPTQ(strings.TrimSuffix(name, ".weight"), w.Float32(), out, in, group, o)
		return ts, tensor.FromFloat32(name, deq, w.Shape...).Data, nil
	})
}

// packGPTQ quantizes a [out, in] matrix w in groups of group inputs and
// stores it as GPTQ does; it returns the tensors and the dequantized
// values s·(q − z) (exact in float32).
func packGPTQ(base string, w []float32, out, in, group int, o GPTQOptions) ([]safetensors.Tensor, []float32) {
	groups, words := in/group, out/8
	qweight, qzeros, scales := make([]byte, 4*(in/8)*out), make([]byte, 4*groups*words), make([]byte, 2*groups*out)
	deq := make([]float32, out*in)
	or32 := func(b []byte, at int, v uint32) {
		binary.LittleEndian.PutUint32(b[at:], binary.LittleEndian.Uint32(b[at:])|v)
	}
	for r := range out {
		for g := range groups {
			x := w[r*in+g*group:][:group]
			s, z := gptqGroup(x, o)
			binary.LittleEndian.PutUint16(scales[2*(g*out+r):], tensor.F32ToF16(s))
			stored := z
			if !o.V2 {
				stored = z - 1
			}
			or32(qzeros, 4*(g*words+r/8), uint32(stored)<<(4*(r%8)))
			for i, v := range x {
				q := min(max(int(math.Round(float64(v/s)))+z, 0), 15)
				k := g*group + i
				or32(qweight, 4*((k/8)*out+r), uint32(q)<<(4*(k%8)))
				deq[r*in+k] = s * float32(q-z)
			}
		}
	}
	gidx := make([]byte, 4*in)
	for k := range in {
		binary.LittleEndian.PutUint32(gidx[4*k:], uint32(k/group))
	}
	return []safetensors.Tensor{
		{Name: base + ".qweight", DType: "I32", Shape: []int{in / 8, out}, Data: qweight},
		{Name: base + ".qzeros", DType: "I32", Shape: []int{groups, words}, Data: qzeros},
		{Name: base + ".scales", DType: "F16", Shape: []int{groups, out}, Data: scales},
		{Name: base + ".g_idx", DType: "I32", Shape: []int{in}, Data: gidx},
	}, deq
}

// gptqGroup is a group's scale (a float16 value) and zero point as GPTQ's
// quantizer picks them: the range widened to hold 0; symmetric, ±max|x|
// with zero 8; else min-max with zero round(−min/s), at least 1 in the
// original format, which stores z − 1 in an unsigned nibble.
func gptqGroup(x []float32, o GPTQOptions) (float32, int) {
	lo, hi := float32(0), float32(0)
	for _, v := range x {
		lo, hi = min(lo, v), max(hi, v)
	}
	if o.Sym {
		m := max(-lo, hi)
		lo, hi = -m, m
	}
	if hi == lo {
		lo, hi = -1, 1
	}
	s := tensor.F16ToF32(tensor.F32ToF16((hi - lo) / 15))
	if o.Sym {
		return s, 8
	}
	z := min(max(int(math.Round(float64(-lo/s))), 0), 15)
	if !o.V2 {
		z = max(z, 1)
	}
	return s, z
}
