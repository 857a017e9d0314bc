package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/gosling-ai/gosling/internal/par"
	"github.com/gosling-ai/gosling/tensor"
)

// Packed weights. A linear layer's W [n, k] is rearranged once, at load,
// into panels of panelWidth output rows. Within a panel, the 32 weights
// that multiply one input element x[k] sit next to each other, so a
// micro-kernel broadcasts x[k] and multiplies a whole vector of weights:
// no horizontal sums, and one contiguous stream per panel, which the
// hardware prefetchers follow at full bandwidth. Panels past n are zero.
//
//	F32   panel = [k][32] float32
//	F16   panel = [k][32] float16
//	BF16  panel = [k][32] bfloat16, pairs interleaved: element 2j is row j,
//	      element 2j+1 is row j+16 (j < 16). A shift left by 16 of each
//	      32-bit lane then yields rows 0..15 and a mask yields rows 16..31:
//	      two instructions convert 32 weights in registers.
//	Q8_0  panel = per block of 32 inputs: [8][32][4] uint8 then [32] f16
//	      scales (1088 bytes). Byte i of group g, row j is the quant of
//	      input 4g+i plus 128 (an unsigned byte, the operand VPDPBUSD wants
//	      unsigned); scale j is row j's block scale, as GGUF stores it.
//	QK    the other GGUF block formats (Q4_K, Q6_K, IQ4_XS …), at about
//	      their own bits per weight: see qk.go.
//	I4    AWQ and GPTQ int4 (tensor.AWQ4_G*), 4 bits and per group a
//	      zero point and an f16 scale: see i4.go.
//
// Every dtype is served as stored (MXFP4 as the BF16 it is exact in); any
// other dtype is widened to F32.
const panelWidth = 32

// q8PanelBlock is the bytes of one block (32 inputs) of a Q8 panel.
const q8PanelBlock = 32*panelWidth + 2*panelWidth

type packedWeight struct {
	kind   int
	qk     int // kindQK: the panel format, an index into qkFormats; kindI4: into i4Groups
	n, k   int
	panels int
	stride int // bytes per panel
	data   []byte
}

func kindOf(d tensor.DType) int {
	switch d {
	case tensor.BF16:
		return kindBF16
	case tensor.F16:
		return kindF16
	case tensor.Q8_0:
		return kindQ8
	}
	if _, ok := qkFormatOf[d]; ok {
		return kindQK
	}
	if isI4(d) {
		return kindI4
	}
	return kindF32
}

// packWeight lays w [n, k] out in panels, in memory from alloc (n zeroed
// bytes, 64-byte aligned).
func packWeight(w tensor.Weight, alloc func(n int) []byte) (packedWeight, error) {
	if w.DType == tensor.MXFP4 && w.Synthetic == nil {
		// E2M1 codes times powers of two are exact in bfloat16: BF16
		// panels hold MXFP4 weights (GGUF's experts) exactly, at half
		// float32's bytes.
		if _, err := w.DType.RowBytes(w.Cols()); err != nil {
			return packedWeight{}, fmt.Errorf("tensor %s: %w", w.Name, err)
		}
		w = tensor.Lazily(w, tensor.BF16)
	}
	n, k := w.Rows(), w.Cols()
	p := packedWeight{kind: kindOf(w.DType), n: n, k: k, panels: (n + panelWidth - 1) / panelWidth}
	switch p.kind {
	case kindF32:
		p.stride = k * panelWidth * 4
	case kindBF16, kindF16:
		p.stride = k * panelWidth * 2
	case kindQ8:
		if k%tensor.Q8_0BlockSize != 0 {
			return p, fmt.Errorf("tensor %s: Q8_0 rows of %d values are not whole blocks", w.Name, k)
		}
		p.stride = k / tensor.Q8_0BlockSize * q8PanelBlock
	case kindQK:
		p.qk = qkFormatOf[w.DType]
		f := &qkFormats[p.qk]
		if k%f.super != 0 {
			return p, fmt.Errorf("tensor %s: %v rows of %d values are not whole blocks of %d", w.Name, w.DType, k, f.super)
		}
		p.stride = k / f.super * f.superBytes()
	case kindI4:
		group := tensor.BlockValues(w.DType)
		if k%group != 0 {
			return p, fmt.Errorf("tensor %s: %v rows of %d values are not whole groups of %d", w.Name, w.DType, k, group)
		}
		p.qk, p.stride = i4GroupIndex(group), k/group*i4GroupBytes(group)
	}
	if err := w.Validate(); err != nil {
		return p, err
	}
	if p.kind != kindF32 {
		// A synthetic or lazy weight's bytes, for fill; F32 panels are
		// filled through DecodeRow, which reads such weights as they are.
		var err error
		if w, err = w.Materialize(); err != nil {
			return p, err
		}
	}
	if p.kind == kindI4 {
		if err := checkI4(w); err != nil {
			return p, err
		}
	}
	p.data = alloc(p.panels * p.stride)
	// Panels are independent; big matrices pack on all cores (a 7B model
	// is gigabytes of scattered writes).
	par.For(p.panels, max(1, (1<<20)/p.stride), func(lo, hi int) { p.fill(w, lo, hi) })
	return p, nil
}

// fill packs panels [lo, hi).
func (p *packedWeight) fill(w tensor.Weight, lo, hi int) {
	n, k := p.n, p.k
	rowBytes, _ := w.DType.RowBytes(k)
	var row []float32
	for r := lo * panelWidth; r < min(n, hi*panelWidth); r++ {
		panel, j := p.data[r/panelWidth*p.stride:][:p.stride], r%panelWidth
		switch p.kind {
		case kindF32:
			if row == nil {
				row = make([]float32, k)
			}
			w.DecodeRow(r, row)
			dst := unsafe.Slice((*float32)(unsafe.Pointer(&panel[0])), k*panelWidth)
			for i, v := range row {
				dst[i*panelWidth+j] = v
			}
		case kindBF16, kindF16:
			if p.kind == kindBF16 {
				j = bf16Slot(j)
			}
			src := w.Data[r*rowBytes:][:rowBytes]
			dst := unsafe.Slice((*uint16)(unsafe.Pointer(&panel[0])), k*panelWidth)
			for i := range k {
				dst[i*panelWidth+j] = binary.LittleEndian.Uint16(src[2*i:])
			}
		case kindQK:
			p.fillQK(w, r)
		case kindI4:
			p.fillI4(w, r)
		case kindQ8:
			const bs = tensor.Q8_0BlockSize
			src := w.Data[r*rowBytes:]
			for b := range k / bs {
				blk := src[b*(bs+2):][:bs+2]
				dst := panel[b*q8PanelBlock:][:q8PanelBlock]
				copy(dst[32*panelWidth+2*j:][:2], blk[:2])
				for i := range bs {
					dst[(i/4)*4*panelWidth+j*4+i%4] = blk[2+i] ^ 0x80
				}
			}
		}
	}
}

// bf16Slot is where row j of a panel sits in a BF16 panel row.
func bf16Slot(j int) int {
	if j < 16 {
		return 2 * j
	}
	return 2*(j-16) + 1
}

func (p *packedWeight) panel(i int) unsafe.Pointer {
	return unsafe.Pointer(&p.data[i*p.stride])
}

// bytes is the size of the weights as stored (without panel padding): what
// one pass over them reads from memory.
func (p *packedWeight) bytes() int64 {
	return int64(p.stride) * int64(p.n) / panelWidth
}

// Activation packing. For the float kinds a tile of mr tokens is [k][mr]
// float32, so a micro-kernel broadcasts consecutive elements.
func packFloatTile(dst, x []float32, ldx, t0, mr, k int) {
	dst = dst[:k*mr]
	i := 0
	if pk := kernels().packFloat[mr]; pk != nil && k >= 8 {
		// Transposed in registers, eight inputs of every token at a time
		// (packKernel).
		_ = x[(t0+mr-1)*ldx+k-1]
		i = k / 8 * 8
		pk(unsafe.Pointer(&dst[0]), unsafe.Pointer(&x[t0*ldx]), 4*ldx, k/8)
	}
	// Eight inputs at a time: a short read from each token's row, a run of
	// 8·mr contiguous writes (twice the speed of a token at a time, which
	// strides through all of dst once per token).
	for ; i+8 <= k; i += 8 {
		d := dst[i*mr:][:8*mr]
		for t := range mr {
			r := x[(t0+t)*ldx+i:][:8]
			d[t], d[mr+t], d[2*mr+t], d[3*mr+t] = r[0], r[1], r[2], r[3]
			d[4*mr+t], d[5*mr+t], d[6*mr+t], d[7*mr+t] = r[4], r[5], r[6], r[7]
		}
	}
	for ; i < k; i++ {
		for t := range mr {
			dst[i*mr+t] = x[(t0+t)*ldx+i]
		}
	}
}

// For Q8 panels the activations are quantised like llama.cpp's q8_0 (per
// block of 32: d = max|x|/127, q = round(x/d)), and a tile of mr tokens is,
// per block, [8][mr][4] int8 quants, then [mr] float32 d, then [mr] int32
// -128·Σq: the term that removes the +128 the panel adds to each weight
// quant. d stays float32 (llama.cpp rounds it to f16).
func q8TileBytes(mr, k int) int { return k / tensor.Q8_0BlockSize * 40 * mr }

// packQ8Tile quantises inputs [0, k) of tokens t0 … t0+mr-1 of x (rows
// ldx apart) into dst in that layout: with the kernel set's quantQ8Row
// when it has one, else goPackQ8Tile's loop, which it matches bit for bit.
func packQ8Tile(dst []byte, x []float32, ldx, t0, mr, k int) {
	const bs = tensor.Q8_0BlockSize
	dst = dst[:q8TileBytes(mr, k)]
	if q := kernels().quantQ8Row; q != nil && k >= bs {
		_ = x[(t0+mr-1)*ldx+k-1]
		for t := range mr {
			q(&dst[4*t], &x[(t0+t)*ldx], k/bs, mr)
		}
		return
	}
	goPackQ8Tile(dst, x, ldx, t0, mr, k)
}

func goPackQ8Tile(dst []byte, x []float32, ldx, t0, mr, k int) {
	const bs = tensor.Q8_0BlockSize
	stride := 40 * mr
	for t := range mr {
		row := x[(t0+t)*ldx:][:k]
		for b := range k / bs {
			blk := row[b*bs : (b+1)*bs]
			d, id := q8Scale(blk)
			out := dst[b*stride:]
			var sum int32
			for i, v := range blk {
				q := int8(roundAway(v * id))
				sum += int32(q)
				out[((i/4)*mr+t)*4+i%4] = byte(q)
			}
			binary.LittleEndian.PutUint32(out[32*mr+4*t:], math.Float32bits(d))
			binary.LittleEndian.PutUint32(out[36*mr+4*t:], uint32(-128*sum))
		}
	}
}

// q8Scale is the scale d = max|x|/127 of symmetric int8 quants of blk,
// and its inverse (0 for an all-zero block).
func q8Scale(blk []float32) (d, id float32) {
	var amax float32
	for _, v := range blk {
		amax = max(amax, abs32(v))
	}
	d = amax / 127
	if d != 0 {
		id = 1 / d
	}
	return d, id
}

func abs32(v float32) float32 { return math.Float32frombits(math.Float32bits(v) &^ (1 << 31)) }

// roundAway rounds half away from zero, as C's roundf.
func roundAway(v float32) float32 { return float32(math.Round(float64(v))) }
