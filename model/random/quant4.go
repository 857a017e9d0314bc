package random

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/gosling-ai/gosling/model/safetensors"
	"github.com/gosling-ai/gosling/tensor"
)

// The 4-bit safetensors layouts, written from a float32 Hugging Face
// checkpoint for tests: the quantized checkpoint in its real layout, and
// beside it the same model with the dequantized values stored plainly in
// float32, whose logits the quantized one must reproduce.

// awqNibble is where AutoAWQ's packing puts output j of eight in an int32:
// nibble awqNibble[j] (its order [0 2 4 6 1 3 5 7] inverted).
var awqNibble = [8]int{0, 4, 1, 5, 2, 6, 3, 7}

// WriteAWQ copies the float32 checkpoint in src to quantized in AutoAWQ's
// GEMM layout (qweight, qzeros int32 and float16 scales, 4 bits, groups of
// group inputs, zero points) and to dequantized with the values those
// encode, in float32. Every 2-D projection ("_proj.weight") whose inputs
// are whole groups and outputs whole int32 words is quantized; the rest
// is copied. It returns the quantized tensors' names.
func WriteAWQ(src, quantized, dequantized string, group int) ([]string, error) {
	dt, ok := tensor.AWQ4Format(group)
	if !ok {
		return nil, fmt.Errorf("WriteAWQ: no AWQ format for groups of %d", group)
	}
	q := map[string]any{"quant_method": "awq", "bits": 4, "group_size": group, "zero_point": true, "version": "gemm"}
	return writeProjections(src, quantized, dequantized, q, func(name string, w tensor.Weight) ([]safetensors.Tensor, []byte, error) {
		if w.Shape[1]%group != 0 || w.Shape[0]%8 != 0 {
			return nil, nil, nil
		}
		q, err := tensor.Convert(w, dt)
		if err != nil {
			return nil, nil, err
		}
		deq, err := tensor.Convert(q, tensor.F32)
		if err != nil {
			return nil, nil, err
		}
		return packAWQ(strings.TrimSuffix(name, ".weight"), q.Data, w.Shape[0], w.Shape[1], group), deq.Data, nil
	})
}

// writeProjections copies the float32 checkpoint in src to quantized,
// with quantization_config q, and to dequantized: each 2-D projection
// ("_proj.weight") that pack takes (returning its quantized tensors and
// its dequantized float32 bytes; nil tensors to leave it) is stored
// quantized and dequantized, the rest copied. It returns the quantized
// tensors' names.
func writeProjections(src, quantized, dequantized string, q map[string]any, pack func(name string, w tensor.Weight) ([]safetensors.Tensor, []byte, error)) ([]string, error) {
	in, cfg, err := openFloat32(src)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	var qts, dts []safetensors.Tensor
	var names []string
	for _, name := range in.Names() {
		w, err := in.Tensor(name)
		if err != nil {
			return nil, err
		}
		if w.DType != tensor.F32 {
			return nil, fmt.Errorf("%s is %v; the %s writer reads float32 checkpoints", name, w.DType, q["quant_method"])
		}
		var packed []safetensors.Tensor
		var deq []byte
		if len(w.Shape) == 2 && strings.HasSuffix(name, "_proj.weight") {
			if packed, deq, err = pack(name, w); err != nil {
				return nil, err
			}
		}
		if packed == nil {
			st := safetensors.Tensor{Name: name, DType: "F32", Shape: w.Shape, Data: w.Data}
			qts, dts = append(qts, st), append(dts, st)
			continue
		}
		qts = append(qts, packed...)
		dts = append(dts, safetensors.Tensor{Name: name, DType: "F32", Shape: w.Shape, Data: deq})
		names = append(names, name)
	}
	if err := writeQuantPair(cfg, q, quantized, qts, dequantized, dts); err != nil {
		return nil, err
	}
	return names, nil
}

// packAWQ stores the AWQ4 blocks of a [out, in] matrix as AutoAWQ does.
// Workers take bands of int32 columns (eight outputs each), which no other
// writes.
func packAWQ(base string, blocks []byte, out, in, group int) []safetensors.Tensor {
	groups, words, blk := in/group, out/8, 4+group/2
	qweight, qzeros, scales := make([]byte, 4*in*words), make([]byte, 4*groups*words), make([]byte, 2*groups*out)
	or32 := func(b []byte, at int, v uint32) {
		binary.LittleEndian.PutUint32(b[at:], binary.LittleEndian.Uint32(b[at:])|v)
	}
	const band = 16
	parallel((words+band-1)/band, func(c int) {
		for o := 8 * band * c; o < min(out, 8*band*(c+1)); o++ {
			p, nib := o/8, uint(4*awqNibble[o%8])
			for g := range groups {
				b := blocks[(o*groups+g)*blk:]
				copy(scales[2*(g*out+o):], b[:2])
				or32(qzeros, 4*(g*words+p), uint32(binary.LittleEndian.Uint16(b[2:]))<<nib)
				for r := range group {
					q := b[4+16*(r/32)+r%16] >> (4 * (r % 32 / 16)) & 15
					or32(qweight, 4*((g*group+r)*words+p), uint32(q)<<nib)
				}
			}
		}
	})
	return []safetensors.Tensor{
		{Name: base + ".qweight", DType: "I32", Shape: []int{in, words}, Data: qweight},
		{Name: base + ".qzeros", DType: "I32", Shape: []int{groups, words}, Data: qzeros},
		{Name: base + ".scales", DType: "F16", Shape: []int{groups, out}, Data: scales},
	}
}

// WriteMXFP4 copies the float32 GPT-OSS checkpoint in src to quantized
// with its experts' stacks (mlp.experts.gate_up_proj and down_proj, x·W
// [experts, in, out]) stored as published GPT-OSS checkpoints store them
// (P_blocks uint8 [experts, out, in/32, 16], value 2j in byte j's low
// nibble and 2j+1 in its high one, and P_scales uint8 [experts, out,
// in/32] of E8M0 scales; tensor.MXFP4's quantiser), and to dequantized
// with the values those encode in the x·W layout, in bfloat16 (which holds
// them exactly, and in which the MXFP4 experts are dequantized at load).
func WriteMXFP4(src, quantized, dequantized string) error {
	in, cfg, err := openFloat32(src)
	if err != nil {
		return err
	}
	defer in.Close()
	var qts, dts []safetensors.Tensor
	for _, name := range in.Names() {
		w, err := in.Tensor(name)
		if err != nil {
			return err
		}
		if !strings.HasSuffix(name, "experts.gate_up_proj") && !strings.HasSuffix(name, "experts.down_proj") {
			st := safetensors.Tensor{Name: name, DType: "F32", Shape: w.Shape, Data: w.Data}
			qts, dts = append(qts, st), append(dts, st)
			continue
		}
		if w.DType != tensor.F32 || len(w.Shape) != 3 || w.Shape[1]%32 != 0 {
			return fmt.Errorf("%s is %v %v; WriteMXFP4 reads float32 stacks of whole blocks of 32 inputs", name, w.DType, w.Shape)
		}
		v := w.Float32()
		experts, nin, nout := w.Shape[0], w.Shape[1], w.Shape[2]
		var blocks, scales []byte
		deq := make([]float32, len(v))
		row, blk, back := make([]float32, nin), make([]byte, nin/32*17), make([]float32, nin)
		for e := range experts {
			for o := range nout {
				for i := range nin {
					row[i] = v[(e*nin+i)*nout+o]
				}
				tensor.EncodeInto(tensor.MXFP4, row, blk)
				tensor.DecodeInto(tensor.MXFP4, blk, back)
				for i := range nin {
					deq[(e*nin+i)*nout+o] = back[i]
				}
				for b := 0; b < len(blk); b += 17 {
					scales = append(scales, blk[b])
					qs := blk[b+1 : b+17]
					for j := range 16 {
						blocks = append(blocks, mxfp4Code(qs, 2*j)|mxfp4Code(qs, 2*j+1)<<4)
					}
				}
			}
		}
		qts = append(qts,
			safetensors.Tensor{Name: name + "_blocks", DType: "U8", Shape: []int{experts, nout, nin / 32, 16}, Data: blocks},
			safetensors.Tensor{Name: name + "_scales", DType: "U8", Shape: []int{experts, nout, nin / 32}, Data: scales})
		bf, err := tensor.Convert(tensor.FromFloat32(name, deq, w.Shape...), tensor.BF16)
		if err != nil {
			return err
		}
		dts = append(dts, safetensors.Tensor{Name: name, DType: "BF16", Shape: w.Shape, Data: bf.Data})
	}
	q := map[string]any{"quant_method": "mxfp4",
		"modules_to_not_convert": []string{"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"}}
	return writeQuantPair(cfg, q, quantized, qts, dequantized, dts)
}

// mxfp4Code is the code of value i of a tensor.MXFP4 block's 16 code
// bytes (value j in byte j's low nibble, j+16 in its high one).
func mxfp4Code(qs []byte, i int) byte { return qs[i%16] >> (4 * (i / 16)) & 15 }

// openFloat32 opens src's model.safetensors and reads its config.json.
func openFloat32(src string) (*safetensors.File, map[string]any, error) {
	data, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		return nil, nil, err
	}
	var cfg map[string]any
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", filepath.Join(src, "config.json"), err)
	}
	f, err := safetensors.Open(filepath.Join(src, "model.safetensors"))
	return f, cfg, err
}

// writeQuantPair writes the quantized checkpoint (config with
// quantization_config q) and the dequantized one (the config as read).
func writeQuantPair(cfg, q map[string]any, quantized string, qts []safetensors.Tensor, dequantized string, dts []safetensors.Tensor) error {
	for _, c := range []struct {
		dir string
		ts  []safetensors.Tensor
		q   map[string]any
	}{{quantized, qts, q}, {dequantized, dts, nil}} {
		out := map[string]any{}
		for k, v := range cfg {
			out[k] = v
		}
		if c.q != nil {
			out["quantization_config"] = c.q
		}
		if err := os.MkdirAll(c.dir, 0o755); err != nil {
			return err
		}
		data, _ := json.MarshalIndent(out, "", "  ")
		if err := os.WriteFile(filepath.Join(c.dir, "config.json"), append(data, '\n'), 0o644); err != nil {
			return err
		}
		if err := safetensors.Write(filepath.Join(c.dir, "model.safetensors"), c.ts); err != nil {
			return err
		}
	}
	return nil
}
