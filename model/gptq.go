package model

import (
	"encoding/binary"
	"fmt"

	"github.com/gosling-ai/gosling/tensor"
)

// GPTQ checkpoints (quant_method "gptq": AutoGPTQ's and GPTQModel's
// exports, as vLLM and SGLang serve them) store each quantized linear
// layer NAME [out, in] as
//
//	NAME.qweight  int32 [in/8, out]          4-bit quants of W^T
//	NAME.qzeros   int32 [groups, out/8]      4-bit zero points
//	NAME.scales   float16 [groups, out]
//	NAME.g_idx    int32 [in]                 input k's group (optional)
//
// with groups = in/group_size, or one per row for group_size -1. Word
// [i, o] of qweight packs inputs 8i…8i+7 of output o, input 8i+j in
// nibble j; word [g, p] of qzeros packs outputs 8p…8p+7, output 8p+j in
// nibble j. weight [o, k] = scales[g, o]·(q[k, o] − z[g, o]) where the
// zero point z is the stored nibble plus one in the original format
// (checkpoint_format "gptq" or absent: AutoGPTQ stored z − 1) and the
// stored nibble itself in "gptq_v2", as vLLM's kernels read them (so a
// v1 zero may be 16, which the AWQ4 blocks' 16-bit zero holds). These
// layers are presented as the same AWQ4 matrices as AWQ's (awq.go), so
// every device serves both with one set of kernels.
//
// Act-order checkpoints (desc_act true) quantize the inputs in a
// permuted order, g_idx naming each input's group; they are refused: an
// AWQ4 row's groups are runs of consecutive inputs.

// gptqGroups are the group sizes gosling reads.
const gptqGroups = "32, 64, 128 or -1"

// checkGPTQ validates a "gptq" quantization_config: 4 bits, a group size
// of gptqGroups, no act-order, a known checkpoint format.
func (q *quantConfig) checkGPTQ() error {
	switch {
	case q.Bits == nil:
		return fmt.Errorf("quantization_config (gptq) has no bits")
	case *q.Bits != 4:
		return fmt.Errorf("quantization_config.bits %d is not supported (GPTQ 4-bit only)", *q.Bits)
	case q.GroupSize == nil:
		return fmt.Errorf("quantization_config (gptq) has no group_size")
	case q.DescAct != nil && *q.DescAct:
		return fmt.Errorf("quantization_config.desc_act true is not supported (GPTQ act-order: g_idx permutes the inputs' groups; re-export with desc_act false)")
	}
	switch q.CheckpointFormat {
	case "", "gptq":
		q.zeroOffset = 1
	case "gptq_v2":
	default:
		return fmt.Errorf("quantization_config.checkpoint_format %q is not supported (\"gptq\" or \"gptq_v2\")", q.CheckpointFormat)
	}
	if _, ok := tensor.AWQ4Format(*q.GroupSize); !ok && *q.GroupSize != -1 {
		return fmt.Errorf("quantization_config.group_size %d is not supported (GPTQ groups of %s)", *q.GroupSize, gptqGroups)
	}
	q.awqGroup, q.gptq = *q.GroupSize, true
	return nil
}

// checkGPTQ reads the shapes of GPTQ layer base's tensors against each
// other and the group size, and its g_idx, if stored, against groups of
// consecutive inputs.
func (s *awqSource) checkGPTQ(base string) (awqLayer, error) {
	qw, err := s.get(base, ".qweight", "I32", 2)
	if err != nil {
		return awqLayer{}, err
	}
	l := awqLayer{base: base, in: 8 * qw[0], out: qw[1], block: s.group}
	switch {
	case l.in <= 0 || l.out <= 0 || l.out%8 != 0:
		return awqLayer{}, fmt.Errorf("tensor %s.qweight has shape %v: %d outputs are not whole words of 8 zero points", base, qw, l.out)
	case s.group > 0 && l.in%s.group != 0:
		return awqLayer{}, fmt.Errorf("tensor %s.qweight has shape %v: %d inputs are not whole groups of %d (quantization_config.group_size)", base, qw, l.in, s.group)
	case s.group < 0:
		// One group per row: blocks of the largest AWQ4 group dividing
		// it, each carrying the row's scale and zero point.
		l.block = 0
		for _, b := range []int{128, 64, 32} {
			if l.in%b == 0 {
				l.block = b
				break
			}
		}
		if l.block == 0 {
			return awqLayer{}, fmt.Errorf("tensor %s.qweight has shape %v: %d inputs are not whole runs of 32 (quantization_config.group_size -1)", base, qw, l.in)
		}
	}
	l.dtype, _ = tensor.AWQ4Format(l.block)
	if err := s.checkGroups(l, qw); err != nil {
		return awqLayer{}, err
	}
	if !s.Has(base + ".g_idx") {
		return l, nil
	}
	gi, err := s.get(base, ".g_idx", "I32", 1)
	if err != nil {
		return awqLayer{}, err
	}
	if gi[0] != l.in {
		return awqLayer{}, fmt.Errorf("tensor %s.g_idx has shape %v; %s.qweight %v implies [%d]", base, gi, base, qw, l.in)
	}
	r, err := s.raw.Raw(base + ".g_idx")
	if err != nil {
		return awqLayer{}, err
	}
	for k := range l.in {
		want := 0
		if s.group > 0 {
			want = k / s.group
		}
		if g := int32(binary.LittleEndian.Uint32(r.Data[4*k:])); int(g) != want {
			return awqLayer{}, fmt.Errorf("tensor %s.g_idx[%d] is %d, not %d: inputs out of order (act-order) are not supported", base, k, g, want)
		}
	}
	return l, nil
}

// repackGPTQ lays a GPTQ layer's packed tensors out as AWQ4 blocks of
// l.block inputs, row o of the result holding output o's blocks; group
// is the stored group size (-1: the whole row), offset is added to each
// stored zero point.
func repackGPTQ(qweight, qzeros, scales []byte, l awqLayer, group, offset int) []byte {
	if group < 0 {
		group = l.in
	}
	blocks, blk, words := l.in/l.block, 4+l.block/2, l.out/8
	data := make([]byte, l.out*blocks*blk)
	at := func(o, b int) int { return (o*blocks + b) * blk }
	// Bands of 128 outputs: 512 contiguous bytes of each qweight row.
	outputBands(words, func(p0, p1 int) {
		for b := range blocks {
			g := b * l.block / group
			for o := 8 * p0; o < 8*p1; o++ {
				z := binary.LittleEndian.Uint32(qzeros[4*(g*words+o/8):]) >> (4 * (o % 8)) & 15
				d := data[at(o, b):]
				copy(d[:2], scales[2*(g*l.out+o):])
				binary.LittleEndian.PutUint16(d[2:], uint16(int(z)+offset))
			}
		}
		for i := range l.in / 8 {
			row := qweight[4*i*l.out:]
			for o := 8 * p0; o < 8*p1; o++ {
				w := binary.LittleEndian.Uint32(row[4*o:])
				for j := range 8 {
					b, r := (8*i+j)/l.block, (8*i+j)%l.block
					data[at(o, b)+4+16*(r/32)+r%16] |= byte(w>>(4*j)&15) << (4 * (r % 32 / 16))
				}
			}
		}
	})
	return data
}
