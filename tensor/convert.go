package tensor

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
)

// convertAsm is set where the assembly conversions of bf16 and FP8 E4M3
// slices (bf16.go, fp8.go) run: amd64 with AVX2, unless GOSLING_NOASM is
// set; the tests run both paths.
var convertAsm = haveConvertAsm()

// ParseDType reads a dtype name as the CLI and config files spell it:
// float32/f32/fp32, bfloat16/bf16, float16/f16/fp16/half, q8_0, and the
// GGUF block formats by their ggml names (q4_k, iq4_xs …).
func ParseDType(s string) (DType, error) {
	for d, f := range blockFormats {
		if strings.EqualFold(s, f.name) {
			return d, nil
		}
	}
	switch strings.ToLower(s) {
	case "float32", "f32", "fp32":
		return F32, nil
	case "bfloat16", "bf16":
		return BF16, nil
	case "float16", "f16", "fp16", "half":
		return F16, nil
	case "q8_0":
		return Q8_0, nil
	}
	return 0, fmt.Errorf("unknown dtype %q (want float32, bfloat16, float16 or q8_0)", s)
}

// Convert returns w stored as dtype to, in newly allocated memory (w
// itself is returned when it already has that dtype). Float conversions
// round to nearest even; Q8_0 quantises each block of 32 as llama.cpp
// does (scale d = max|x|/127 stored as f16, quants round(x/d)), which
// needs rows of whole blocks. A synthetic weight converts as its
// Synthetic's doc says.
func Convert(w Weight, to DType) (Weight, error) {
	if w.DType == to {
		return w, nil
	}
	if !CanEncode(to) {
		return Weight{}, fmt.Errorf("convert %s to %v: gosling does not write %v", w.Name, to, to)
	}
	rowBytes, err := to.RowBytes(w.Cols())
	if err != nil {
		return Weight{}, fmt.Errorf("convert %s to %v: %w", w.Name, to, err)
	}
	if err := w.Validate(); err != nil {
		return Weight{}, err
	}
	if w.Synthetic != nil {
		// A synthetic weight stays synthetic in another float dtype (its
		// generator's values rounded anew); quantised dtypes start from
		// the generator's float32 values.
		if syntheticDType(to) == nil {
			return Weight{Name: w.Name, DType: to, Shape: append([]int(nil), w.Shape...), Synthetic: w.Synthetic}, nil
		}
		if w, err = (Weight{Name: w.Name, DType: F32, Shape: w.Shape, Synthetic: w.Synthetic}).Materialize(); err != nil {
			return Weight{}, err
		}
		w.Synthetic = nil
	}
	out := Weight{Name: w.Name, DType: to, Shape: append([]int(nil), w.Shape...), Data: make([]byte, rowBytes*w.Rows())}
	encodeRows(w, to, rowBytes, out.Data)
	return out, nil
}

// encodeRows stores w's rows as dtype to (rowBytes each) into out.
func encodeRows(w Weight, to DType, rowBytes int, out []byte) {
	// Rows are independent: large matrices convert on every core (load
	// time of a quantised 7B model is otherwise minutes).
	parallelRows(w.Rows(), w.Cols(), func(lo, hi int) {
		row := make([]float32, w.Cols())
		for r := lo; r < hi; r++ {
			w.DecodeRow(r, row)
			EncodeInto(to, row, out[r*rowBytes:(r+1)*rowBytes])
		}
	})
}

// EncodeInto stores src as dtype d into dst (RowBytes(len(src)) bytes).
func EncodeInto(d DType, src []float32, dst []byte) {
	switch d {
	case F32:
		for i, v := range src {
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
		}
	case F16:
		for i, v := range src {
			binary.LittleEndian.PutUint16(dst[2*i:], F32ToF16(v))
		}
	case BF16:
		EncodeBF16(dst, src)
	case FP8E4M3:
		EncodeFP8E4M3(dst, src, 1)
	case Q8_0:
		QuantizeQ8_0(src, dst)
	default:
		q, ok := quantizers[d]
		if !ok {
			panic(fmt.Sprintf("tensor.EncodeInto: unsupported dtype %v", d))
		}
		f := blockFormats[d]
		for b := 0; b*f.values < len(src); b++ {
			q(src[b*f.values:(b+1)*f.values], dst[b*f.bytes:(b+1)*f.bytes])
		}
	}
}

// QuantizeQ8_0 writes src (whole blocks of 32) as Q8_0 blocks into dst.
func QuantizeQ8_0(src []float32, dst []byte) {
	for b := 0; b*Q8_0BlockSize < len(src); b++ {
		blk := src[b*Q8_0BlockSize : (b+1)*Q8_0BlockSize]
		out := dst[b*q8_0BlockBytes : (b+1)*q8_0BlockBytes]
		var amax float32
		for _, v := range blk {
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		d := amax / 127
		var id float32
		if d != 0 {
			id = 1 / d
		}
		binary.LittleEndian.PutUint16(out, F32ToF16(d))
		for j, v := range blk {
			out[2+j] = byte(int8(math.Round(float64(v * id))))
		}
	}
}
