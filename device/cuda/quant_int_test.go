package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/model/safetensors"
	"github.com/gosling-ai/gosling/tensor"
)

// A Go statement of qgemv_int's arithmetic (kernels/quant.cu), step for
// step: the staging of x as L limbs, each format's weights as integers
// with a scale and a minimum per run of 16 (QIView: the K-quants'
// integer scales and minimums under the block's float d and dmin), and
// the dot products, so that the scheme's accuracy is checked here against
// the float32 reference before it meets a GPU. The fake GPU runs the
// qgemv_int kernels through it. Only the order of the sum over units
// differs from the kernel's (lanes, then warps); fmaf is emulated in
// float64 then rounded (a double rounding in rare ties).

// qiTMax is the kernel's qi_tmax<L>, the largest t: 2^(8L−1) − 1.
func qiTMax(limbs int) float32 { return float32(int32(1)<<(8*limbs-1) - 1) }

func fma32(a, b, c float32) float32 { return float32(math.FMA(float64(a), float64(b), float64(c))) }

// qiPos is quant.cu's Q::pos: the first value of unit u's run s.
func qiPos(dt DType, u, s int) int {
	switch dt {
	case tensor.Q4_K, tensor.Q5_K:
		return 256*(u>>3) + 64*((u&7)>>1) + 16*(u&1) + 32*s
	case tensor.Q6_K:
		return 256*(u>>3) + 128*((u&7)>>2) + 16*(u&3) + 64*s
	}
	return 32*u + 16*s
}

// qiMins is Q::mins: the formats whose runs subtract b·Σx.
func qiMins(dt DType) bool {
	switch dt {
	case tensor.Q4_K, tensor.Q5_K, tensor.AWQ4_G32, tensor.AWQ4_G64, tensor.AWQ4_G128:
		return true
	}
	return false
}

// qiIScale is QIView::iscale: the formats whose runs have integer scales
// (and minimums) under a float d (and dmin) per block, multiplied into
// the integer sums.
func qiIScale(dt DType) bool { return dt == tensor.Q4_K || dt == tensor.Q5_K || dt == tensor.Q6_K }

// qiWeights are a row's values as the integer kernels take them. Value i
// is a[i]·q[i] − b[i] for the formats without integer scales (a and b
// constant over each run of 16), and (a[i]·sc[i])·q[i] − b[i]·m[i] with
// them (qiIScale: a the block's d, b its dmin, sc and m the run's
// integer scale and minimum); q the integer the kernel's dp4a takes
// (int8: Q8_0's quants, Q6_K's q − 32, MXFP4's doubled E2M1 values; or
// unsigned: the 4- and 5-bit quants of the formats with a minimum).
type qiWeights struct {
	a, b  []float32
	sc, m []int32
	q     []int32
}

// value is weight i as the CPU reference rounds it.
func (w qiWeights) value(dt DType, i int) float32 {
	if qiIScale(dt) {
		return float32(float32(w.a[i]*float32(w.sc[i]))*float32(w.q[i])) - float32(w.b[i]*float32(w.m[i]))
	}
	return float32(w.a[i]*float32(w.q[i])) - w.b[i]
}

// qiRow decomposes one row of stored blocks.
func qiRow(dt DType, row []byte, in int) qiWeights {
	w := qiWeights{a: make([]float32, in), b: make([]float32, in), sc: make([]int32, in), m: make([]int32, in), q: make([]int32, in)}
	mul := func(x, y float32) float32 { return float32(x * y) }
	f16 := func(b []byte) float32 { return tensor.F16ToF32(binary.LittleEndian.Uint16(b)) }
	bv, bb := tensor.BlockValues(dt), tensor.BlockBytes(dt)
	for i := range in {
		blk, j := row[i/bv*bb:(i/bv+1)*bb], i%bv
		switch dt {
		case tensor.Q8_0:
			w.a[i], w.q[i] = f16(blk), int32(int8(blk[2+j]))
		case tensor.Q4_K, tensor.Q5_K:
			sub, l := j/32, j%32
			sc, m := tensor.KScaleMin(blk[4:16], sub)
			w.a[i], w.b[i], w.sc[i], w.m[i] = f16(blk), f16(blk[2:]), int32(sc), int32(m)
			if dt == tensor.Q4_K {
				w.q[i] = int32(blk[16+32*(sub/2)+l] >> (4 * (sub % 2)) & 15)
			} else {
				w.q[i] = int32(blk[48+32*(sub/2)+l]>>(4*(sub%2))&15 | blk[16+l]>>sub&1<<4)
			}
		case tensor.Q6_K:
			c, r := j/128, j%128
			lo := blk[64*c+r%64] >> (4 * (r / 64)) & 15
			hi := blk[128+32*c+r%32] >> (2 * (r / 32)) & 3
			w.a[i], w.sc[i], w.q[i] = f16(blk[208:]), int32(int8(blk[192+j/16])), int32(lo|hi<<4)-32
		case tensor.MXFP4:
			code := blk[1+j%16] >> (4 * (j / 16)) & 15
			w.a[i], w.q[i] = tensor.E8M0(blk[0])/2, int32(2*tensor.E2M1Values[code])
		default: // AWQ4: s | z | quants, value 32c+16h+k in nibble h of byte 16c+k
			s, z := f16(blk), float32(binary.LittleEndian.Uint16(blk[2:]))
			c, h, k := j/32, j%32/16, j%16
			w.a[i], w.b[i], w.q[i] = s, mul(s, z), int32(blk[4+16*c+k]>>(4*h)&15)
		}
	}
	return w
}

// qiX is one row of x as qi_stage leaves it for limbs limbs: t per value
// (at its position), Σt per run and D per unit.
type qiX struct {
	limbs int
	t     []int32
	sums  []float32 // [units][2]
	d     []float32 // [units]
}

// qiStage is qi_stage for one row of x (already normalised), with the
// limbs the launches take (qgemvFormatLimbs).
func qiStage(dt DType, x []float32) qiX { return qiStageL(dt, x, qgemvFormatLimbs(dt)) }

// qiStageL is qi_stage<Q, limbs> for one row of x.
func qiStageL(dt DType, x []float32, limbs int) qiX {
	units := len(x) / 32
	s := qiX{limbs: limbs, t: make([]int32, len(x)), sums: make([]float32, 2*units), d: make([]float32, units)}
	for u := range units {
		var amax float32
		for r := range 2 {
			for _, v := range x[qiPos(dt, u, r) : qiPos(dt, u, r)+16] {
				amax = max(amax, float32(math.Abs(float64(v))))
			}
		}
		e := int(math.Float32bits(amax)>>23&255) - 127
		sh := min(max(8*limbs-2-e, -126), 126)
		sc := math.Float32frombits(uint32(127+sh) << 23)
		for r := range 2 {
			p := qiPos(dt, u, r)
			var ts int32
			for k := range 16 {
				s.t[p+k] = int32(math.RoundToEven(float64(min(float32(x[p+k]*sc), qiTMax(limbs)))))
				ts += s.t[p+k]
			}
			s.sums[2*u+r] = float32(ts)
		}
		s.d[u] = math.Float32frombits(uint32(127-sh) << 23)
	}
	return s
}

// qiBytes lays one row's staging s out as qi_stage_units writes it
// (quant.cu): limb l of run s of unit u, value k of the run, at byte
// 16·((2l+s)·units + u) + k; Σt of run s as float32 at 32L·units +
// 4·(2u+s); D at (32L+8)·units + 4u; qiRowBytesL in all.
func qiBytes(dt DType, s qiX) []byte {
	units, L := len(s.d), s.limbs
	row := make([]byte, qiRowBytesL(32*units, L))
	for u := range units {
		for r := range 2 {
			p := qiPos(dt, u, r)
			for l := range L {
				for k := range 16 {
					row[16*((2*l+r)*units+u)+k] = byte(qiLimb(s.t[p+k], l, L))
				}
			}
			binary.LittleEndian.PutUint32(row[32*L*units+4*(2*u+r):], math.Float32bits(s.sums[2*u+r]))
		}
		binary.LittleEndian.PutUint32(row[(32*L+8)*units+4*u:], math.Float32bits(s.d[u]))
	}
	return row
}

// qiUnbytes reads a row of in values of limbs limbs laid out as qiBytes
// lays it (the kernels' reading of it) back into its staging.
func qiUnbytes(dt DType, row []byte, in, limbs int) qiX {
	units, L := in/32, limbs
	s := qiX{limbs: L, t: make([]int32, in), sums: make([]float32, 2*units), d: make([]float32, units)}
	for u := range units {
		for r := range 2 {
			p := qiPos(dt, u, r)
			for k := range 16 {
				var t int32
				for l := range L {
					b := int32(row[16*((2*l+r)*units+u)+k])
					if l == 0 {
						b = int32(int8(b)) // the top limb is signed
					}
					t = t<<8 + b
				}
				s.t[p+k] = t
			}
			s.sums[2*u+r] = math.Float32frombits(binary.LittleEndian.Uint32(row[32*L*units+4*(2*u+r):]))
		}
		s.d[u] = math.Float32frombits(binary.LittleEndian.Uint32(row[(32*L+8)*units+4*u:]))
	}
	return s
}

// qiLimb is limb l of t's limbs limbs: byte limbs−1−l, the top one signed.
func qiLimb(t int32, l, limbs int) int32 {
	b := t >> (8 * (limbs - 1 - l))
	if l == 0 {
		return int32(int8(b))
	}
	return b & 255
}

// qiLimbs is quant.cu's qi_limbs<L, wide>: with one scale a unit the
// top two limbs' sums combine in int32, with integer scales (wide) every
// limb's sum goes through float32.
func qiLimbs(ia []int32, wide bool) float32 {
	f := func(v int32) float32 { return float32(v) }
	switch {
	case len(ia) == 1:
		return f(ia[0])
	case len(ia) == 2 && wide:
		return fma32(f(ia[0]), 256, f(ia[1]))
	case len(ia) == 2:
		return f(ia[0]*256 + ia[1])
	case wide:
		return fma32(fma32(f(ia[0]), 256, f(ia[1])), 256, f(ia[2]))
	}
	return fma32(f(ia[0]*256+ia[1]), 256, f(ia[2]))
}

// qiInt32 is v, which the kernel holds in an int32: the emulation
// stops where the kernel's sum would wrap.
func qiInt32(v int64) int32 {
	if v != int64(int32(v)) {
		panic(fmt.Sprintf("qgemv_int: an integer sum %d past int32", v))
	}
	return int32(v)
}

// qiDot is QIntRows' sum for one weight row and one staged row of x:
// per unit and limb the runs' dp4a sums, scaled and added in int32
// (qiIScale) or added, the limbs combined (qiLimbs), then QIView's part
// and D. As the kernel takes them: Q6_K's runs as q + 32 (0..63) from a
// start of −32·Σlimb (QIView's qoff); Q4_K's run 1 as 16·q with run 0's
// scale and dmin 16 times, the lane's sum divided by 16 at the end
// (QIView's scale; exact, so the same bits as unscaled).
func qiDot(dt DType, w qiWeights, x qiX) float32 {
	var acc float32
	L, wide := x.limbs, qiIScale(dt)
	qoff, hi, scale := int64(0), int64(1), float32(1)
	switch dt {
	case tensor.Q6_K:
		qoff = -32
	case tensor.Q4_K:
		hi, scale = 16, 16
	}
	ia := make([]int32, L)
	for u := range x.d {
		p0, p1 := qiPos(dt, u, 0), qiPos(dt, u, 1)
		for l := range L {
			var s [2]int64
			for r, p := range [2]int{p0, p1} {
				var ones int64
				for k := range 16 {
					ones += int64(qiLimb(x.t[p+k], l, L))
				}
				s[r] = qoff * ones // the chain's start
				for k := range 16 {
					q := int64(w.q[p+k]) - qoff
					if r == 1 {
						q *= hi
					}
					s[r] += q * int64(qiLimb(x.t[p+k], l, L))
					qiInt32(s[r])
				}
			}
			if wide {
				ia[l] = qiInt32(hi*int64(w.sc[p0])*int64(qiInt32(s[0])) + int64(w.sc[p1])*int64(qiInt32(s[1])))
			} else {
				ia[l] = qiInt32(s[0] + s[1])
			}
		}
		sum := qiLimbs(ia, wide)
		sx0, sx1 := x.sums[2*u], x.sums[2*u+1]
		var part float32
		switch {
		case wide && qiMins(dt): // d·S − dmin·(m0·Σx0 + m1·Σx1)
			mins := fma32(float32(w.m[p1]), sx1, float32(float32(w.m[p0])*sx0))
			part = fma32(w.a[p0], sum, float32(-(w.b[p0]*float32(hi))*mins))
		case wide:
			part = float32(w.a[p0] * sum)
		case qiMins(dt):
			part = fma32(-w.b[p0], float32(sx0+sx1), float32(w.a[p0]*sum))
		default:
			part = float32(w.a[p0] * sum)
		}
		acc = fma32(x.d[u], part, acc)
	}
	return acc / scale
}

// qiGemv is y [m, out] = x·Wᵀ for stored rows of W through the integer
// path (no bias).
func qiGemv(dt DType, stored []byte, out, in int, x []float32, m int) []float32 {
	xs := make([]qiX, m)
	for r := range m {
		xs[r] = qiStage(dt, x[r*in:(r+1)*in])
	}
	return qiGemvStaged(dt, stored, out, in, xs)
}

// qiGemvStaged is qiGemv on x already staged, a row each.
func qiGemvStaged(dt DType, stored []byte, out, in int, xs []qiX) []float32 {
	rb, _ := dt.RowBytes(in)
	ws := make([]qiWeights, out)
	for o := range out {
		ws[o] = qiRow(dt, stored[o*rb:(o+1)*rb], in)
	}
	y := make([]float32, len(xs)*out)
	for r, x := range xs {
		for o := range out {
			y[r*out+o] = qiDot(dt, ws[o], x)
		}
	}
	return y
}

// The byte layout reads back as it was written, for each layout of
// units, and the formats of one layout (qiLayout) stage x alike: the
// Go side's reuse of one quantised x across launch groups rests on it.
func TestQIntBytes(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 4))
	const in = 768
	x := randn(rng, in, 1)
	x[7] = 1e4
	for limbs := 1; limbs <= 3; limbs++ {
		for _, dt := range quantFormats {
			if in%tensor.BlockValues(dt) != 0 {
				continue
			}
			s := qiStageL(dt, x, limbs)
			row := qiBytes(dt, s)
			if len(row) != qiRowBytesL(in, limbs) || len(row)%16 != 0 {
				t.Fatalf("%v L=%d: a row of %d bytes, want %d (16-byte words)", dt, limbs, len(row), qiRowBytesL(in, limbs))
			}
			back := qiUnbytes(dt, row, in, limbs)
			if !slices.Equal(back.t, s.t) || !slices.Equal(back.sums, s.sums) || !slices.Equal(back.d, s.d) {
				t.Fatalf("%v L=%d: the row does not read back as written", dt, limbs)
			}
			for _, other := range quantFormats {
				if qiLayout(other) == qiLayout(dt) && !slices.Equal(qiBytes(other, qiStageL(other, x, limbs)), row) {
					t.Errorf("%v and %v share layout %d but stage x differently", dt, other, qiLayout(dt))
				}
				if qiLayout(other) != qiLayout(dt) && slices.Equal(qiBytes(other, qiStageL(other, x, limbs)), row) {
					t.Errorf("%v and %v stage x alike but have layouts %d and %d", dt, other, qiLayout(dt), qiLayout(other))
				}
			}
		}
	}
}

// Every format's decomposition gives back the CPU reference's values bit
// for bit: a·q − b rounded as the reference rounds it (a·q one product
// under __fmul_rn), and q within what dp4a takes (int8, or unsigned below
// 32 for the formats with a minimum).
func TestQIntWeights(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 1))
	for _, dt := range quantFormats {
		out, in := 5, 2*max(256, tensor.BlockValues(dt))
		q, ref := quantWeight(t, rng, dt, out, in)
		rb, _ := dt.RowBytes(in)
		for o := range out {
			w := qiRow(dt, q.Data[o*rb:(o+1)*rb], in)
			for i := range in {
				got := w.value(dt, i)
				if math.Float32bits(got) != math.Float32bits(ref[o*in+i]) && !(got == 0 && ref[o*in+i] == 0) {
					t.Fatalf("%v [%d, %d] = (%g·%d)·%d − %g·%d = %g, reference %g", dt, o, i, w.a[i], w.sc[i], w.q[i], w.b[i], w.m[i], got, ref[o*in+i])
				}
				if qiIScale(dt) && (w.sc[i] < -128 || w.sc[i] > 127 || w.m[i] < 0 || w.m[i] > 63) {
					t.Fatalf("%v [%d, %d]: scale %d, minimum %d out of the packed ranges", dt, o, i, w.sc[i], w.m[i])
				}
				if lo, hi := int32(-128), int32(127); qiMins(dt) {
					if w.q[i] < 0 || w.q[i] > 31 {
						t.Fatalf("%v [%d, %d]: q %d is not an unsigned 5-bit quant", dt, o, i, w.q[i])
					}
				} else if w.q[i] < lo || w.q[i] > hi {
					t.Fatalf("%v [%d, %d]: q %d is not int8", dt, o, i, w.q[i])
				}
			}
			if i := in - 1; w.a[i] != w.a[i-15] || w.b[i] != w.b[i-15] || w.sc[i] != w.sc[i-15] || w.m[i] != w.m[i-15] {
				t.Fatalf("%v: the scale changes within a run of 16", dt)
			}
		}
	}
}

// The staging keeps x to within D/2 (D where the clamp below 2^(8L−1)
// took a value) and D to at most amax·2^(2−8L) (amax
// the unit's largest magnitude, D its power-of-two scale), its limbs
// reassemble t, and the sums are the runs' Σt; a value that rounds up to
// 2^(8L−1) is kept below it.
func TestQIntStage(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 2))
	for limbs := 1; limbs <= 3; limbs++ {
		t.Run(fmt.Sprintf("L%d", limbs), func(t *testing.T) { qiStageCheck(t, rng, limbs) })
	}
}

func qiStageCheck(t *testing.T, rng *rand.Rand, limbs int) {
	for _, dt := range []DType{tensor.Q8_0, tensor.Q4_K, tensor.Q6_K} {
		x := randn(rng, 1024, 1)
		x[5], x[300], x[301] = 40, -1e-3, 0 // an outlier, a tiny value, a zero
		clear(x[512:544])                   // an all-zero block
		for u := range len(x) / 32 {        // x[600] the largest of its unit, rounding up to 2^(8L−1) at its scale
			for r := range 2 {
				if p := qiPos(dt, u, r); p <= 600 && 600 < p+16 {
					for i := range 32 {
						x[qiPos(dt, u, i/16)+i%16] /= 8
					}
				}
			}
		}
		x[600] = 1 - 0x1p-24
		s := qiStageL(dt, x, limbs)
		for u := range s.d {
			amax := 0.0
			for r := range 2 {
				for _, v := range x[qiPos(dt, u, r) : qiPos(dt, u, r)+16] {
					amax = max(amax, math.Abs(float64(v)))
				}
			}
			if amax > 0 && float64(s.d[u]) > math.Ldexp(amax, 2-8*limbs) {
				t.Fatalf("%v unit %d: scale %g for largest magnitude %g", dt, u, s.d[u], amax)
			}
			for r := range 2 {
				p := qiPos(dt, u, r)
				var ts int32
				for k := range 16 {
					i := p + k
					var back int32
					for l := range limbs {
						back = back<<8 + qiLimb(s.t[i], l, limbs)
					}
					if back != s.t[i] || s.t[i] > int32(qiTMax(limbs)) {
						t.Fatalf("%v x[%d]: t %d, limbs give %d", dt, i, s.t[i], back)
					}
					d := math.Abs(float64(s.d[u])*float64(s.t[i]) - float64(x[i]))
					// D/2, or D where a value kept below 2^(8L−1) lost up to a
					// whole unit to the clamp (at L = 3 only half of one:
					// float32 x·2^s then ends in .5 at most).
					bound := float64(s.d[u]) / 2
					if s.t[i] == int32(qiTMax(limbs)) {
						bound = float64(s.d[u])
					}
					if d > bound {
						t.Fatalf("%v x[%d] = %g staged as %g·%d: off by %.3g (bound %.3g)", dt, i, x[i], s.d[u], s.t[i], d, bound)
					}
					ts += s.t[i]
				}
				if s.sums[2*u+r] != float32(ts) {
					t.Fatalf("%v unit %d run %d: sum %g, want %d", dt, u, r, s.sums[2*u+r], ts)
				}
			}
		}
	}
}

// The integer path against the float32 reference for every format: unit
// normals, activations with outliers (a few values 100 times the rest,
// as LLM residual streams have), and the real weights and embeddings of
// the reference-tiny llama_gqa checkpoint quantised in each format.
func TestQIntDot(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 3))
	for _, dt := range quantFormats {
		t.Run(dt.String(), func(t *testing.T) {
			const out, in, m = 24, 2048, 2
			q, w := quantWeight(t, rng, dt, out, in)
			x := randn(rng, m*in, 1)
			for limbs := 1; limbs <= 3; limbs++ {
				qiCheck(t, fmt.Sprintf("normal x L=%d", limbs), dt, q, w, x, m, limbs)
			}
			for i := 0; i < len(x); i += 97 {
				x[i] *= 100
			}
			for limbs := 1; limbs <= 3; limbs++ {
				qiCheck(t, fmt.Sprintf("x with outliers L=%d", limbs), dt, q, w, x, m, limbs)
			}
		})
	}
	f, err := safetensors.Open(shared.Path(t, "models/reference-tiny/llama_gqa/model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var vals []float32
	for _, name := range f.Names() {
		wt, err := f.Tensor(name)
		if err != nil {
			t.Fatal(err)
		}
		if len(wt.Shape) != 2 {
			continue
		}
		vals = append(vals, weightF32(t, wt)...)
	}
	const in = 1024
	out := len(vals)/in - 2
	if out < 16 {
		t.Fatalf("llama_gqa: %d values, fewer than 18 rows of %d", len(vals), in)
	}
	// The last two rows' worth of values are x; the rest are W.
	x := vals[out*in : (out+2)*in]
	for _, dt := range quantFormats {
		q, err := tensor.Convert(tensor.FromFloat32("w", vals[:out*in], out, in), dt)
		if err != nil {
			t.Fatal(err)
		}
		for limbs := 1; limbs <= 3; limbs++ {
			qiCheck(t, fmt.Sprintf("llama_gqa %v L=%d", dt, limbs), dt, q, weightF32(t, q), x, 2, limbs)
		}
	}
}

// qiBound is, per output of y [rows, out] = x·Wᵀ through format dt, how
// far staging x as limbs limbs alone may move it: every x_i is kept to
// within D (D/2, or D for a value clamped below 2^(8L−1): TestQIntStage)
// and D <= amax·2^(2−8L), amax its unit's largest magnitude, so |Δy| <=
// 2^(2−8L)·Σ_i |w_i|·amax_u(i) (amax taken 2^−20 larger, for a kernel's
// own normalised x). nil for L = 3: the tests hold it to the float
// kernels' qgemvTol alone, as before the limbs were a choice.
func qiBound(dt DType, x, w []float32, rows, out, in, limbs int) []float64 {
	if limbs == 3 {
		return nil
	}
	b := make([]float64, rows*out)
	amax := make([]float64, in)
	for r := range rows {
		xr := x[r*in : (r+1)*in]
		for u := range in / 32 {
			a := 0.0
			for s := range 2 {
				for _, v := range xr[qiPos(dt, u, s) : qiPos(dt, u, s)+16] {
					a = max(a, math.Abs(float64(v)))
				}
			}
			for s := range 2 {
				for k := range 16 {
					amax[qiPos(dt, u, s)+k] = a * (1 + 0x1p-20)
				}
			}
		}
		for o := range out {
			var s float64
			for i, v := range w[o*in : (o+1)*in] {
				s += math.Abs(float64(v)) * amax[i]
			}
			b[r*out+o] = math.Ldexp(s, 2-8*limbs)
		}
	}
	return b
}

// qiCheck runs the integer path with limbs limbs over W (stored in dt)
// and x and checks it against the float64 product of the dequantised
// weights within qgemvTol of Σ|w·x|, the float kernels' bound, plus
// qiBound's for fewer than three limbs.
func qiCheck(t *testing.T, what string, dt DType, q tensor.Weight, w, x []float32, m, limbs int) {
	t.Helper()
	out, in := q.Shape[0], q.Shape[1]
	xs := make([]qiX, m)
	for r := range m {
		xs[r] = qiStageL(dt, x[r*in:(r+1)*in], limbs)
	}
	got := qiGemvStaged(dt, q.Data, out, in, xs)
	want, mag := quantRef(x, w, nil, m, out, in)
	checkQuantBound(t, what, got, want, mag, qgemvTol, qiBound(dt, x, w, m, out, in, limbs))
}
