package model

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/gosling-ai/gosling/model/safetensors"
	"github.com/gosling-ai/gosling/tensor"
)

// MXFP4 checkpoints (quant_method "mxfp4", GPT-OSS as published) store
// each expert stack P as P_blocks, uint8 [experts, rows, groups, 16], and
// P_scales, uint8 [experts, rows, groups]: row r of expert e is [out, in]
// row r, in groups of 32 values, each a 4-bit E2M1 code (byte j of a
// group holds value 2j in its low nibble, 2j+1 in its high one) times the
// group's E8M0 scale 2^(s-127). The codes times any such power of two are
// exact in bfloat16, so the weights are dequantized to bfloat16 at load
// with no rounding; or, for a device that keeps MXFP4 compact (ServeCompact),
// repacked into tensor.MXFP4 blocks as they are. gate_up_proj's rows
// interleave gate (even) and up (odd), as in the unquantized x·W layout's
// columns.

// FP4Values are the E2M1 codes' values.
var FP4Values = tensor.E2M1Values

// DecodeMXFP4 dequantizes one row: groups of 16 code bytes and one scale
// byte each, into dst (32 values per group).
func DecodeMXFP4(blocks, scales []byte, dst []float32) {
	for g, s := range scales {
		scale := tensor.E8M0(s)
		for j, b := range blocks[16*g : 16*g+16] {
			dst[32*g+2*j] = FP4Values[b&15] * scale
			dst[32*g+2*j+1] = FP4Values[b>>4] * scale
		}
	}
}

// rawSource is a weight source that can hand out tensors of any stored
// dtype (safetensors files).
type rawSource interface {
	Raw(name string) (safetensors.Raw, error)
}

// mxfp4Source presents an MXFP4 GPT-OSS checkpoint's experts as one
// bfloat16 [out, in] matrix and one float32 bias per expert and
// projection (mlp.experts.N.gate_proj.weight, …), the layout GPT-OSS
// loads from GGUF too; other tensors pass through.
type mxfp4Source struct {
	WeightSource
	raw     rawSource
	experts map[string]mxfp4Part
	hidden  map[string]bool // the stacks the expert views replace
	names   []string
	dequantizing
	compact bool // hand the experts over as tensor.MXFP4 blocks
}

// mxfp4Part is one expert's projection: rows first, first+step, … of
// expert e of the stack base (base_blocks and base_scales, or base_bias).
type mxfp4Part struct {
	base        string
	expert      int
	first, step int
	bias        bool
}

func newMXFP4Source(ws WeightSource) (WeightSource, error) {
	raw, ok := ws.(rawSource)
	if !ok {
		return nil, fmt.Errorf("quantization_config.quant_method mxfp4: the weights cannot be read as stored")
	}
	s := &mxfp4Source{WeightSource: ws, raw: raw, experts: map[string]mxfp4Part{}, hidden: map[string]bool{}}
	for _, name := range ws.Names() {
		base, ok := strings.CutSuffix(name, "_blocks")
		if !ok {
			continue
		}
		dot := strings.LastIndex(base, ".")
		prefix, proj := base[:max(dot, 0)], base[dot+1:]
		if !strings.HasSuffix(prefix, "mlp.experts") || (proj != "gate_up_proj" && proj != "down_proj") {
			return nil, fmt.Errorf("tensor %s: MXFP4 is read for GPT-OSS's experts (mlp.experts.gate_up_proj, down_proj) only", name)
		}
		blocks, err := raw.Raw(name)
		if err != nil {
			return nil, err
		}
		scales, err := raw.Raw(base + "_scales")
		if err != nil {
			return nil, fmt.Errorf("MXFP4 tensor %s has no %s_scales beside it", name, base)
		}
		b, sc := blocks.Shape, scales.Shape
		if blocks.DType != "U8" || scales.DType != "U8" || len(b) != 4 || b[3] != 16 || !slices.Equal(b[:3], sc) {
			return nil, fmt.Errorf("MXFP4 tensors %s %s %v and %s_scales %s %v: want U8 [experts, rows, groups, 16] and U8 [experts, rows, groups]",
				name, blocks.DType, b, base, scales.DType, sc)
		}
		parts := map[string][2]int{"down_proj": {0, 1}}
		if proj == "gate_up_proj" {
			parts = map[string][2]int{"gate_proj": {0, 2}, "up_proj": {1, 2}}
		}
		hasBias := ws.Has(base + "_bias")
		for e := range b[0] {
			for p, fs := range parts {
				n := prefix + "." + strconv.Itoa(e) + "." + p
				s.experts[n+".weight"] = mxfp4Part{base: base, expert: e, first: fs[0], step: fs[1]}
				if hasBias {
					s.experts[n+".bias"] = mxfp4Part{base: base, expert: e, first: fs[0], step: fs[1], bias: true}
				}
			}
		}
		s.hidden[name], s.hidden[base+"_scales"], s.hidden[base+"_bias"] = true, true, true
	}
	s.names = viewNames(ws, s.hidden, s.experts)
	return s, nil
}

// viewNames is the sorted names of a source that shows views over ws:
// ws's names less the hidden ones, and the views'.
func viewNames[V any](ws WeightSource, hidden map[string]bool, views map[string]V) []string {
	var names []string
	for _, n := range ws.Names() {
		if !hidden[n] {
			names = append(names, n)
		}
	}
	for n := range views {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func (s *mxfp4Source) Has(name string) bool {
	if _, ok := s.experts[name]; ok {
		return true
	}
	return !s.hidden[name] && s.WeightSource.Has(name)
}

func (s *mxfp4Source) Names() []string { return slices.Clone(s.names) }

func (s *mxfp4Source) Tensor(name string) (tensor.Weight, error) {
	p, ok := s.experts[name]
	if !ok {
		if s.hidden[name] {
			return tensor.Weight{}, fmt.Errorf("tensor %s is read through its MXFP4 experts' views", name)
		}
		return s.WeightSource.Tensor(name)
	}
	if p.bias {
		w, err := s.WeightSource.Tensor(p.base + "_bias")
		if err != nil {
			return tensor.Weight{}, err
		}
		if len(w.Shape) != 2 {
			return tensor.Weight{}, fmt.Errorf("tensor %s has shape %v, want [experts, rows]", w.Name, w.Shape)
		}
		all := w.Float32()
		row := all[p.expert*w.Shape[1] : (p.expert+1)*w.Shape[1]]
		var out []byte
		for i := p.first; i < len(row); i += p.step {
			out = binary.LittleEndian.AppendUint32(out, math.Float32bits(row[i]))
		}
		return tensor.Weight{Name: name, DType: tensor.F32, Shape: []int{len(out) / 4}, Data: out}, nil
	}
	blocks, err := s.raw.Raw(p.base + "_blocks")
	if err != nil {
		return tensor.Weight{}, err
	}
	scales, err := s.raw.Raw(p.base + "_scales")
	if err != nil {
		return tensor.Weight{}, err
	}
	rows, groups := blocks.Shape[1], blocks.Shape[2]
	cols := 32 * groups
	n := (rows - p.first + p.step - 1) / p.step
	if s.compact {
		data := make([]byte, n*groups*17)
		for o := range n {
			r := p.expert*rows + p.first + o*p.step
			for g := range groups {
				repackMXFP4(blocks.Data[(r*groups+g)*16:], scales.Data[r*groups+g], data[(o*groups+g)*17:])
			}
		}
		return tensor.Weight{Name: name, DType: tensor.MXFP4, Shape: []int{n, cols}, Data: data}, nil
	}
	row := func(o int, dst []float32) {
		r := p.expert*rows + p.first + o*p.step
		DecodeMXFP4(blocks.Data[r*groups*16:(r+1)*groups*16], scales.Data[r*groups:(r+1)*groups], dst)
	}
	return s.hand(tensor.Weight{Name: name, DType: tensor.BF16, Shape: []int{n, cols}, Lazy: row}) // exact in bfloat16
}

// repackMXFP4 writes one group, 16 code bytes as checkpoints store them
// (value 2j in byte j's low nibble, 2j+1 in its high one) and its scale,
// as a tensor.MXFP4 block (the scale, then value j in byte j's low nibble
// and j+16 in its high one).
func repackMXFP4(codes []byte, scale byte, blk []byte) {
	code := func(i int) byte { return codes[i/2] >> (4 * (i % 2)) & 15 }
	blk[0] = scale
	for j := range 16 {
		blk[1+j] = code(j) | code(j+16)<<4
	}
}

// ServeCompact has ws hand over the tensors it can give either
// dequantized or in a compact format (an MXFP4 checkpoint's experts, as
// tensor.MXFP4) compact where keeps holds for the format: for a device
// that keeps them so in its memory (device.CompactWeights). It reports
// whether ws has such tensors. Call it before the model is built.
func ServeCompact(ws WeightSource, keeps func(tensor.DType) bool) bool {
	for {
		switch s := ws.(type) {
		case *mxfp4Source:
			s.compact = keeps(tensor.MXFP4)
			return true
		case interface{ Unwrap() WeightSource }:
			ws = s.Unwrap()
		default:
			return false
		}
	}
}
