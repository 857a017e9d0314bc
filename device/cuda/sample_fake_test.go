package cuda

import (
	"math"
	"math/bits"
)

// The sampling kernel of kernels/sample.cu restated for fakeGPU, step for
// step (the same bisections, the same Philox draws, float32 where the
// kernel computes in float), so the ModelOps path and the algorithm run on
// every machine. A real GPU runs the same tests in sample_gpu_test.go.

func init() {
	fakeKernels[nameSample(F32)] = fakeKernel{7, fakeSample}
	fakeKernels[nameArgmaxPart(F32)] = fakeKernel{9, fakeArgmaxPart}
	fakeKernels[nameArgmaxFinal()] = fakeKernel{4, fakeArgmaxFinal}
	fakeKernels[nameSpecVerify(F32)] = fakeKernel{6, fakeSpecVerify}
}

// fakeMaskedRow is params row p's logits as the kernels read them: a copy
// with -Inf where the row's token mask (word 9's index into masks) clears
// the bit, or the row itself without one.
func fakeMaskedRow(f *fakeGPU, row []float32, p []int32, masks DevicePtr, maskWords int) ([]float32, error) {
	if p[9] < 0 {
		return row, nil
	}
	mask, err := f.i32s(masks.Add(4*int(p[9])*maskWords), maskWords)
	if err != nil {
		return nil, err
	}
	out := make([]float32, len(row))
	for i, x := range row {
		out[i] = float32(math.Inf(-1))
		if uint32(mask[i/32])>>(i%32)&1 != 0 {
			out[i] = x
		}
	}
	return out, nil
}

// fakeArgmaxPart is argmax_part_f32: the best (value, id) of each chunk.
func fakeArgmaxPart(f *fakeGPU, _ string, grid [3]int, a fakeArgs) error {
	n, parts, vocab, stride, chunk := grid[0], grid[1], a.i32(6), a.i64(7), a.i32(8)
	partV, err := f.f32s(a.ptr(0), n*parts)
	if err != nil {
		return err
	}
	partI, err := f.i32s(a.ptr(1), n*parts)
	if err != nil {
		return err
	}
	params, err := f.i32s(a.ptr(3), n*sampleWords)
	if err != nil {
		return err
	}
	for r := range n {
		p := params[r*sampleWords : (r+1)*sampleWords]
		row, err := f.f32s(a.ptr(2).Add(4*int(p[0])*stride), vocab)
		if err != nil {
			return err
		}
		if row, err = fakeMaskedRow(f, row, p, a.ptr(4), a.i32(5)); err != nil {
			return err
		}
		for p := range parts {
			bv, bi := float32(math.Inf(-1)), int32(math.MaxInt32)
			for i := p * chunk; i < min(vocab, (p+1)*chunk); i++ {
				if row[i] > bv {
					bv, bi = row[i], int32(i)
				}
			}
			partV[r*parts+p], partI[r*parts+p] = bv, bi
		}
	}
	return nil
}

// fakeArgmaxFinal is argmax_final: the best part of each row.
func fakeArgmaxFinal(f *fakeGPU, _ string, grid [3]int, a fakeArgs) error {
	n, parts := grid[0], a.i32(3)
	out, err := f.i32s(a.ptr(0), n)
	if err != nil {
		return err
	}
	partV, err := f.f32s(a.ptr(1), n*parts)
	if err != nil {
		return err
	}
	partI, err := f.i32s(a.ptr(2), n*parts)
	if err != nil {
		return err
	}
	for r := range n {
		bv, bi := float32(math.Inf(-1)), int32(math.MaxInt32)
		for p := range parts {
			v, i := partV[r*parts+p], partI[r*parts+p]
			if v > bv || (v == bv && i < bi) {
				bv, bi = v, i
			}
		}
		if bi == math.MaxInt32 {
			bi = 0
		}
		out[r] = bi
	}
	return nil
}

func fakeSample(f *fakeGPU, _ string, grid [3]int, a fakeArgs) error {
	n, vocab, stride := grid[0], a.i32(5), a.i64(6)
	params, err := f.i32s(a.ptr(2), n*sampleWords)
	if err != nil {
		return err
	}
	out, err := f.i32s(a.ptr(0), n)
	if err != nil {
		return err
	}
	for r := range n {
		p := params[r*sampleWords : (r+1)*sampleWords]
		row, err := f.f32s(a.ptr(1).Add(4*int(p[0])*stride), vocab)
		if err != nil {
			return err
		}
		if row, err = fakeMaskedRow(f, row, p, a.ptr(3), a.i32(4)); err != nil {
			return err
		}
		out[r] = int32(refSampleRow(row, p))
	}
	return nil
}

// orderedKey and keyFloat are ordered_key and key_float.
func orderedKey(x float32) uint32 {
	if x == 0 {
		x = 0
	}
	u := math.Float32bits(x)
	if u&0x80000000 != 0 {
		return ^u
	}
	return u | 0x80000000
}

func keyFloat(k uint32) float32 {
	if k&0x80000000 != 0 {
		return math.Float32frombits(k & 0x7fffffff)
	}
	return math.Float32frombits(^k)
}

func isNaN32(x float32) bool { return x != x }

func expf(x float32) float32 { return float32(math.Exp(float64(x))) }

// philox4x32x10 is philox_4x32_10: all four words of the block.
func philox4x32x10(c [4]uint32, k0, k1 uint32) [4]uint32 {
	for range 10 {
		hi0, lo0 := bits.Mul32(0xD2511F53, c[0])
		hi1, lo1 := bits.Mul32(0xCD9E8D57, c[2])
		c = [4]uint32{hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0}
		k0 += 0x9E3779B9
		k1 += 0xBB67AE85
	}
	return c
}

// raceScore is a kept token's score in the exponential race.
func raceScore(lw float32, id int, seedLo, seedHi, stepLo, stepHi uint32) float32 {
	b := philox4x32x10([4]uint32{uint32(id), stepLo, stepHi, 0}, seedLo, seedHi)[0]
	u := float32(2*(b>>9)+1) * 0x1p-24
	e := float32(-math.Log1p(-float64(u)))
	return lw - float32(math.Log(float64(e)))
}

const raceFloor = -20

// refFilter is RowFilter: what row_filter finds of one row.
type refFilter struct {
	m          float32
	am         int // -1: none
	greedy     bool
	infMax     bool
	invT, minP float32
	useK, useP bool
	kk, kp     uint32
	cutK, cutP int
}

func (f *refFilter) logWeight(x float32) float32 {
	if f.infMax {
		if x == f.m {
			return 0
		}
		return float32(math.Inf(-1))
	}
	return (x - f.m) * f.invT
}

func (f *refFilter) inK(k uint32, i int) bool {
	return !f.useK || k > f.kk || (k == f.kk && i <= f.cutK)
}
func (f *refFilter) inP(k uint32, i int) bool {
	return !f.useP || k > f.kp || (k == f.kp && i <= f.cutP)
}

// keptLW is kept_lw: token i's log weight when the filters keep it and it
// is at least lo, else -Inf.
func (f *refFilter) keptLW(x float32, i int, lo float32) float32 {
	negInf := float32(math.Inf(-1))
	if isNaN32(x) {
		return negInf
	}
	lw := f.logWeight(x)
	if !(lw >= lo) {
		return negInf
	}
	if f.minP > 0 && !(expf(lw) >= f.minP) {
		return negInf
	}
	k := orderedKey(x)
	if !f.inK(k, i) || !f.inP(k, i) {
		return negInf
	}
	return lw
}

// refRowFilter is row_filter for one row and its parameters p.
func refRowFilter(row []float32, p []int32) *refFilter {
	vocab := len(row)
	temperature := math.Float32frombits(uint32(p[1]))
	topK := int(p[2])
	topP := math.Float32frombits(uint32(p[3]))
	negInf := float32(math.Inf(-1))
	f := &refFilter{minP: math.Float32frombits(uint32(p[4])), invT: 1, cutK: vocab, cutP: vocab}

	m, am, nans := negInf, -1, 0
	for i, x := range row {
		if isNaN32(x) {
			nans++
		}
		if x > m {
			m, am = x, i
		}
	}
	f.m, f.am = m, am
	f.greedy = !(temperature > 0) || topK == 1 || !(m > negInf)
	if f.greedy {
		return f
	}
	f.infMax = math.IsInf(float64(m), 1)
	f.invT = 1 / temperature
	valid := vocab - nans
	topKey := orderedKey(m)
	// nthWithKey is nth_with_key.
	nthWithKey := func(key uint32, n int) int {
		for i, x := range row {
			if !isNaN32(x) && orderedKey(x) == key {
				if n == 0 {
					return i
				}
				n--
			}
		}
		return vocab
	}

	f.useK = topK > 0 && topK < valid && !f.infMax
	if f.useK {
		lo, hi := uint32(0), topKey+1
		cLo, cHi := valid, 0
		for hi-lo > 1 {
			mid := lo + (hi-lo)/2
			above, below, c := uint32(math.MaxUint32), uint32(0), 0
			for _, x := range row {
				if isNaN32(x) {
					continue
				}
				k := orderedKey(x)
				if k >= mid {
					c++
					if k < hi {
						above = min(above, k)
					}
				} else if k >= lo {
					below = max(below, k)
				}
			}
			if c >= topK {
				lo, cLo = mid, c
				if above != math.MaxUint32 {
					lo = above
				}
			} else {
				hi, cHi = mid, c
				if below >= lo && below < mid {
					hi = below + 1
				}
			}
		}
		f.kk = lo
		allow := topK - cHi
		if cLo-cHi > allow {
			f.cutK = nthWithKey(f.kk, allow-1)
		}
	}

	f.useP = topP < 1
	if f.useP {
		z := 0.0
		for i, x := range row {
			if !isNaN32(x) && f.inK(orderedKey(x), i) {
				z += float64(expf(f.logWeight(x)))
			}
		}
		target := float64(topP) * z
		lo, hi := uint32(0), topKey+1
		if f.useK {
			lo = f.kk
		}
		mHi, cLo, cHi := 0.0, -1, 0
		for hi-lo > 1 {
			mid := lo + (hi-lo)/2
			above, below, c, mass := uint32(math.MaxUint32), uint32(0), 0, 0.0
			for i, x := range row {
				if isNaN32(x) {
					continue
				}
				k := orderedKey(x)
				if !f.inK(k, i) {
					continue
				}
				if k >= mid {
					c++
					mass += float64(expf(f.logWeight(x)))
					if k < hi {
						above = min(above, k)
					}
				} else if k >= lo {
					below = max(below, k)
				}
			}
			if mass >= target {
				lo, cLo = mid, c
				if above != math.MaxUint32 {
					lo = above
				}
			} else {
				hi, mHi, cHi = mid, mass, c
				if below >= lo && below < mid {
					hi = below + 1
				}
			}
		}
		f.kp = lo
		if cLo < 0 {
			cLo = 0
			for i, x := range row {
				if !isNaN32(x) && f.inK(orderedKey(x), i) {
					cLo++
				}
			}
		}
		ties := cLo - cHi
		w := float64(expf(f.logWeight(keyFloat(f.kp))))
		keep := ties
		if w > 0 {
			keep = int(math.Min(float64(ties), math.Max(1, math.Ceil((target-mHi)/w))))
		}
		if keep < ties {
			f.cutP = nthWithKey(f.kp, keep-1)
		}
	}
	return f
}

// refRace is the race of sample_* over the tokens of row that keptLW keeps
// above floor, less those skip names (nil: none): the winner, -1 when none.
func refRace(f *refFilter, row []float32, p []int32, floor float32, skip func(int) bool) int {
	seedLo, seedHi, stepLo, stepHi := uint32(p[5]), uint32(p[6]), uint32(p[7]), uint32(p[8])
	best, bi := float32(math.Inf(-1)), -1
	for i, x := range row {
		lw := f.keptLW(x, i, floor)
		if !(lw >= floor) || (skip != nil && skip(i)) {
			continue
		}
		if s := raceScore(lw, i, seedLo, seedHi, stepLo, stepHi); s > best {
			best, bi = s, i
		}
	}
	return bi
}

// refSampleRow is sample_rows for one row.
func refSampleRow(row []float32, p []int32) int {
	f := refRowFilter(row, p)
	if f.greedy {
		return max(f.am, 0)
	}
	if bi := refRace(f, row, p, raceFloor, nil); bi >= 0 {
		return bi
	}
	return f.am
}

// refVerifyUniform is spec_verify_*'s u_j: Philox counter (j, step, 1).
func refVerifyUniform(j int, p []int32) float64 {
	b := philox4x32x10([4]uint32{uint32(j), uint32(p[7]), uint32(p[8]), 1}, uint32(p[5]), uint32(p[6]))[0]
	return float64(2*(b>>9)+1) * 0x1p-24
}

// refSpecVerifyRow is spec_verify_rows for one row and its drafts (-1
// padded): the accepted child (-1: none) and the token.
func refSpecVerifyRow(row []float32, p []int32, drafts []int32) (child, token int) {
	n := 0
	for n < len(drafts) && drafts[n] >= 0 {
		n++
	}
	f := refRowFilter(row, p)
	if f.greedy {
		token = max(f.am, 0)
		for j := range n {
			if int(drafts[j]) == token {
				return j, token
			}
		}
		return -1, token
	}
	negInf := float32(math.Inf(-1))
	z := 0.0
	for i, x := range row {
		z += float64(expf(f.keptLW(x, i, negInf)))
	}
	total, lastKept := z, -1
	rejected := map[int]bool{}
	for j := range n {
		u := refVerifyUniform(j, p)
		id := int(drafts[j])
		if id >= len(row) {
			continue
		}
		w := float64(expf(f.keptLW(row[id], id, negInf)))
		if !(w > 0) {
			continue
		}
		lastKept = j
		if u*total < w {
			return j, id
		}
		total -= w
		rejected[id] = true
	}
	mr, mi := negInf, -1
	for i, x := range row {
		if lw := f.keptLW(x, i, negInf); lw > mr && !rejected[i] {
			mr, mi = lw, i
		}
	}
	if !(mr > negInf) {
		if lastKept >= 0 {
			return lastKept, int(drafts[lastKept])
		}
		return -1, max(f.am, 0)
	}
	if bi := refRace(f, row, p, mr+raceFloor, func(i int) bool { return rejected[i] }); bi >= 0 {
		return -1, bi
	}
	return -1, mi
}

// fakeSpecVerify is spec_verify_f32.
func fakeSpecVerify(f *fakeGPU, _ string, grid [3]int, a fakeArgs) error {
	n, vocab, stride := grid[0], a.i32(4), a.i64(5)
	params, err := f.i32s(a.ptr(2), n*sampleWords)
	if err != nil {
		return err
	}
	drafts, err := f.i32s(a.ptr(3), n*verifyDrafts)
	if err != nil {
		return err
	}
	out, err := f.i32s(a.ptr(0), 2*n)
	if err != nil {
		return err
	}
	for r := range n {
		p := params[r*sampleWords : (r+1)*sampleWords]
		row, err := f.f32s(a.ptr(1).Add(4*int(p[0])*stride), vocab)
		if err != nil {
			return err
		}
		c, tok := refSpecVerifyRow(row, p, drafts[r*verifyDrafts:(r+1)*verifyDrafts])
		out[2*r], out[2*r+1] = int32(c), int32(tok)
	}
	return nil
}
