package model

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/gosling-ai/gosling/tensor"
)

// AWQ checkpoints (quant_method "awq", AutoAWQ's GEMM layout, as vLLM and
// SGLang serve them) store each quantized linear layer NAME [out, in] as
//
//	NAME.qweight  int32 [in, out/8]         4-bit quants of W^T
//	NAME.qzeros   int32 [in/group, out/8]   4-bit zero points
//	NAME.scales   float16 [in/group, out]
//
// Each int32 packs eight neighbouring outputs 8p…8p+7, nibble i (bits
// 4i…4i+3) holding output 8p + awqOrder[i]; weight [o, k] = scales[g, o]·
// (q[k, o] − z[g, o]) for g = k/group. awqSource presents NAME.weight as
// one tensor.AWQ4_G<group> matrix [out, in], repacked row by row, which a
// GPU and the CPU (device/cpu's I4 panels) keep compact.

// awqOrder is AutoAWQ's interleave: nibble i of a packed word holds
// output awqOrder[i] of its eight.
var awqOrder = [8]int{0, 2, 4, 6, 1, 3, 5, 7}

// awqGroups are the group sizes gosling reads (those of tensor's AWQ4
// formats).
const awqGroups = "32, 64 or 128"

// checkAWQ validates an "awq" quantization_config: 4 bits, a group size
// of awqGroups, zero points, the GEMM packing.
func (q *quantConfig) checkAWQ() error {
	bits := q.Bits
	if bits == nil {
		bits = q.WBit
	}
	group := q.GroupSize
	if group == nil {
		group = q.QGroupSize
	}
	switch {
	case bits == nil:
		return fmt.Errorf("quantization_config (awq) has no bits")
	case *bits != 4:
		return fmt.Errorf("quantization_config.bits %d is not supported (AWQ 4-bit only)", *bits)
	case group == nil:
		return fmt.Errorf("quantization_config (awq) has no group_size")
	case q.ZeroPoint != nil && !*q.ZeroPoint:
		return fmt.Errorf("quantization_config.zero_point false is not supported (AWQ with zero points only)")
	case q.Version != "" && !strings.EqualFold(q.Version, "gemm"):
		return fmt.Errorf("quantization_config.version %q is not supported (AWQ's \"gemm\" packing only)", q.Version)
	}
	if _, ok := tensor.AWQ4Format(*group); !ok {
		return fmt.Errorf("quantization_config.group_size %d is not supported (AWQ groups of %s)", *group, awqGroups)
	}
	q.awqGroup = *group
	return nil
}

// awqSource presents an AWQ or GPTQ checkpoint's quantized layers as
// AWQ4 matrices; other tensors pass through.
type awqSource struct {
	WeightSource
	raw    rawSource
	method string              // "awq" or "gptq", for messages
	gptq   bool                // GPTQ's packing (gptq.go)
	group  int                 // inputs per stored group; GPTQ's -1: the whole row
	offset int                 // added to every stored zero point (GPTQ v1: 1)
	layers map[string]awqLayer // by the presented NAME.weight
	hidden map[string]bool     // the qweight, qzeros, scales (and g_idx) they replace
	names  []string
}

// awqLayer is one quantized layer: its tensors' prefix and shape, the
// AWQ4 format it is presented in and that format's group size (the
// stored group's, or for GPTQ's whole-row groups the largest AWQ4 group
// dividing the row, each block repeating the row's scale and zero).
type awqLayer struct {
	base    string
	out, in int
	dtype   tensor.DType
	block   int
}

func newAWQSource(ws WeightSource, q *quantConfig) (WeightSource, error) {
	method := "awq"
	if q.gptq {
		method = "gptq"
	}
	raw, ok := ws.(rawSource)
	if !ok {
		return nil, fmt.Errorf("quantization_config.quant_method %s: the weights cannot be read as stored", method)
	}
	s := &awqSource{WeightSource: ws, raw: raw, method: method, gptq: q.gptq, group: q.awqGroup, offset: q.zeroOffset, layers: map[string]awqLayer{}, hidden: map[string]bool{}}
	for _, name := range ws.Names() {
		base, ok := strings.CutSuffix(name, ".qweight")
		if !ok {
			continue
		}
		check := s.check
		if s.gptq {
			check = s.checkGPTQ
		}
		l, err := check(base)
		if err != nil {
			return nil, err
		}
		if ws.Has(base + ".weight") {
			return nil, fmt.Errorf("tensor %s.weight is stored beside %s; a layer is either quantized or not", base, name)
		}
		s.layers[base+".weight"] = l
		for _, part := range []string{".qweight", ".qzeros", ".scales", ".g_idx"} {
			if ws.Has(base + part) {
				s.hidden[base+part] = true
			}
		}
	}
	if len(s.layers) == 0 {
		return nil, fmt.Errorf("quantization_config.quant_method %s: no tensor is stored as .qweight", method)
	}
	s.names = viewNames(ws, s.hidden, s.layers)
	return s, nil
}

// get reads the shape of tensor base+part, which the layout stores as a
// dims-D dtype tensor.
func (s *awqSource) get(base, part, dtype string, dims int) ([]int, error) {
	r, err := s.raw.Raw(base + part)
	if err != nil {
		return nil, fmt.Errorf("%s layer %s: %w", strings.ToUpper(s.method), base, err)
	}
	if r.DType != dtype || len(r.Shape) != dims {
		return nil, fmt.Errorf("tensor %s%s is %s %v; %s stores it as %d-D %s", base, part, r.DType, r.Shape, strings.ToUpper(s.method), dims, dtype)
	}
	return r.Shape, nil
}

// checkGroups reads layer l's qzeros and scales shapes against its
// qweight qw (groups of s.group, or one per row for GPTQ's -1).
func (s *awqSource) checkGroups(l awqLayer, qw []int) error {
	groups := 1
	if s.group > 0 {
		groups = l.in / s.group
	}
	qz, err := s.get(l.base, ".qzeros", "I32", 2)
	if err != nil {
		return err
	}
	if !slices.Equal(qz, []int{groups, l.out / 8}) {
		return fmt.Errorf("tensor %s.qzeros has shape %v; %s.qweight %v in groups of %d implies %v", l.base, qz, l.base, qw, s.group, []int{groups, l.out / 8})
	}
	sc, err := s.get(l.base, ".scales", "F16", 2)
	if err != nil {
		return err
	}
	if !slices.Equal(sc, []int{groups, l.out}) {
		return fmt.Errorf("tensor %s.scales has shape %v; %s.qweight %v in groups of %d implies %v", l.base, sc, l.base, qw, s.group, []int{groups, l.out})
	}
	return nil
}

// check reads the shapes of AWQ layer base's three tensors against each
// other and the group size.
func (s *awqSource) check(base string) (awqLayer, error) {
	qw, err := s.get(base, ".qweight", "I32", 2)
	if err != nil {
		return awqLayer{}, err
	}
	l := awqLayer{base: base, in: qw[0], out: 8 * qw[1], block: s.group}
	l.dtype, _ = tensor.AWQ4Format(s.group)
	if l.in <= 0 || l.out <= 0 || l.in%s.group != 0 {
		return awqLayer{}, fmt.Errorf("tensor %s.qweight has shape %v: %d inputs are not whole groups of %d (quantization_config.group_size)", base, qw, l.in, s.group)
	}
	return l, s.checkGroups(l, qw)
}

func (s *awqSource) Has(name string) bool {
	if _, ok := s.layers[name]; ok {
		return true
	}
	return !s.hidden[name] && s.WeightSource.Has(name)
}

func (s *awqSource) Names() []string { return slices.Clone(s.names) }

// Unwrap is the checkpoint's own weights (RawTensor).
func (s *awqSource) Unwrap() WeightSource { return s.WeightSource }

func (s *awqSource) Tensor(name string) (tensor.Weight, error) {
	l, ok := s.layers[name]
	if !ok {
		if s.hidden[name] {
			return tensor.Weight{}, fmt.Errorf("tensor %s is read through its %s layer's %s.weight", name, strings.ToUpper(s.method), name[:strings.LastIndex(name, ".")])
		}
		return s.WeightSource.Tensor(name)
	}
	qw, err := s.raw.Raw(l.base + ".qweight")
	if err != nil {
		return tensor.Weight{}, err
	}
	qz, err := s.raw.Raw(l.base + ".qzeros")
	if err != nil {
		return tensor.Weight{}, err
	}
	sc, err := s.raw.Raw(l.base + ".scales")
	if err != nil {
		return tensor.Weight{}, err
	}
	var data []byte
	if s.gptq {
		data = repackGPTQ(qw.Data, qz.Data, sc.Data, l, s.group, s.offset)
	} else {
		data = repackAWQ(qw.Data, qz.Data, sc.Data, l.out, l.in, s.group)
	}
	return tensor.Weight{Name: name, DType: l.dtype, Shape: []int{l.out, l.in}, Data: data}, nil
}

// repackAWQ lays a layer's packed tensors out as AWQ4 blocks, row o of
// the result holding output o's in/group groups (tensor/quant4.go).
func repackAWQ(qweight, qzeros, scales []byte, out, in, group int) []byte {
	groups, words := in/group, out/8
	blk := 4 + group/2
	data := make([]byte, out*groups*blk)
	at := func(o, g int) int { return (o*groups + g) * blk }
	// Workers take bands of 128 outputs (16 words: one 64-byte line of a
	// qweight row), so that each reads whole lines and writes its own rows.
	outputBands(words, func(p0, p1 int) {
		for g := range groups {
			for p := p0; p < p1; p++ {
				z := binary.LittleEndian.Uint32(qzeros[4*(g*words+p):])
				for i, o := range awqOrder {
					b := data[at(8*p+o, g):]
					copy(b[:2], scales[2*(g*out+8*p+o):])
					binary.LittleEndian.PutUint16(b[2:], uint16(z>>(4*i)&15))
				}
			}
		}
		for k := range in {
			g, r := k/group, k%group
			off, shift := 4+16*(r/32)+r%16, uint(4*(r%32/16))
			row := qweight[4*k*words:]
			for p := p0; p < p1; p++ {
				w := binary.LittleEndian.Uint32(row[4*p:])
				for i, o := range awqOrder {
					data[at(8*p+o, g)+off] |= byte(w>>(4*i)&15) << shift
				}
			}
		}
	})
	return data
}

// outputBands runs fn over [0, words) in bands of 16 int32 words (128
// outputs), on up to GOMAXPROCS goroutines.
func outputBands(words int, fn func(p0, p1 int)) {
	const band = 16
	var wg sync.WaitGroup
	next := make(chan int, (words+band-1)/band)
	for p := 0; p < words; p += band {
		next <- p
	}
	close(next)
	for range min(runtime.GOMAXPROCS(0), cap(next)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p0 := range next {
				fn(p0, min(p0+band, words))
			}
		}()
	}
	wg.Wait()
}
