package cpu

import (
	"encoding/binary"
	"math"
	"unsafe"

	"github.com/gosling-ai/gosling/tensor"
)

// The pure-Go kernels: the reference the assembly is tested against, and
// what runs on CPUs without AVX2. They read the same packed layouts.

func newGoKernels() *kernelSet {
	ks := &kernelSet{name: "go"}
	for kind := range numKinds {
		ks.mrMax[kind] = 4
	}
	for mr := 1; mr <= maxMR; mr++ {
		ks.float[kindF32][mr] = func(a, b unsafe.Pointer, k int, c unsafe.Pointer, ldc int) { goFloatTile(kindF32, mr, a, b, k, c, ldc) }
		ks.float[kindBF16][mr] = func(a, b unsafe.Pointer, k int, c unsafe.Pointer, ldc int) {
			goFloatTile(kindBF16, mr, a, b, k, c, ldc)
		}
		ks.float[kindF16][mr] = func(a, b unsafe.Pointer, k int, c unsafe.Pointer, ldc int) { goFloatTile(kindF16, mr, a, b, k, c, ldc) }
		ks.q8[mr] = func(a, b unsafe.Pointer, nblk int, c unsafe.Pointer, ldc int) { goQ8Tile(mr, a, b, nblk, c, ldc) }
		for fi := range numQKFormats {
			ks.qk[fi][mr] = func(a, b unsafe.Pointer, n int, c unsafe.Pointer, ldc int) { goQKTile(fi, mr, a, b, n, c, ldc) }
		}
		for gi, group := range i4Groups {
			ks.i4[gi][mr] = func(a, b unsafe.Pointer, k int, c unsafe.Pointer, ldc int) { goI4Tile(group, mr, a, b, k, c, ldc) }
		}
		for kind := range kindQ8 {
			add := ks.float[kind][mr]
			ks.floatStore[kind][mr] = func(a, b unsafe.Pointer, k int, c unsafe.Pointer, ldc int, _ unsafe.Pointer) {
				for t := range mr {
					*cRow(c, t, ldc) = [panelWidth]float32{}
				}
				add(a, b, k, c, ldc)
			}
		}
	}
	ks.vec = vecKernels{
		width:       1,
		sumSquares:  goSumSquares,
		scaleMul:    goScaleMul,
		siluMul:     goSiLUMul,
		add:         goAdd,
		exp:         goExp,
		dot:         goDot,
		axpy:        goAxpy,
		max:         goMax,
		dotRows:     goDotRows,
		accRows:     goAccRows,
		expSubSum:   goExpSubSum,
		streamRead:  goStreamRead,
		fmaLoop:     goFMALoop,
		fmaLoopLane: 1,
	}
	return ks
}

var f16Table = func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for h := range t {
		t[h] = tensor.F16ToF32(uint16(h))
	}
	return &t
}()

// cRow is row t of an output tile whose rows are ldc bytes apart.
func cRow(c unsafe.Pointer, t, ldc int) *[panelWidth]float32 {
	return (*[panelWidth]float32)(unsafe.Add(c, t*ldc))
}

// goFloatTile computes c[mr][32] += Σ_k a[k][mr] ⊗ panel[k][32].
func goFloatTile(kind, mr int, a, b unsafe.Pointer, k int, c unsafe.Pointer, ldc int) {
	as := unsafe.Slice((*float32)(a), k*mr)
	var w [panelWidth]float32
	for i := range k {
		switch kind {
		case kindF32:
			copy(w[:], unsafe.Slice((*float32)(unsafe.Add(b, i*panelWidth*4)), panelWidth))
		case kindBF16:
			row := unsafe.Slice((*uint16)(unsafe.Add(b, i*panelWidth*2)), panelWidth)
			for j := range panelWidth {
				w[j] = math.Float32frombits(uint32(row[bf16Slot(j)]) << 16)
			}
		case kindF16:
			row := unsafe.Slice((*uint16)(unsafe.Add(b, i*panelWidth*2)), panelWidth)
			for j, h := range row {
				w[j] = f16Table[h]
			}
		}
		for t := range mr {
			x := as[i*mr+t]
			ct := cRow(c, t, ldc)
			for j := range ct {
				ct[j] += x * w[j]
			}
		}
	}
}

// goQ8Tile is the integer form the VNNI kernel computes: per block,
// Σ (q_w+128)·q_x − 128·Σ q_x exactly in int32, then scaled by d_w·d_x.
func goQ8Tile(mr int, a, b unsafe.Pointer, nblk int, c unsafe.Pointer, ldc int) {
	as := unsafe.Slice((*byte)(a), nblk*40*mr)
	bs := unsafe.Slice((*byte)(b), nblk*q8PanelBlock)
	for blk := range nblk {
		ab := as[blk*40*mr:]
		pb := bs[blk*q8PanelBlock:]
		for t := range mr {
			corr := int32(binary.LittleEndian.Uint32(ab[36*mr+4*t:]))
			dx := math.Float32frombits(binary.LittleEndian.Uint32(ab[32*mr+4*t:]))
			for j := range panelWidth {
				sum := corr
				for g := range 8 {
					wq := pb[g*4*panelWidth+j*4:][:4]
					xq := ab[(g*mr+t)*4:][:4]
					for i := range 4 {
						sum += int32(wq[i]) * int32(int8(xq[i]))
					}
				}
				scale := f16Table[binary.LittleEndian.Uint16(pb[32*panelWidth+2*j:])] * dx
				cRow(c, t, ldc)[j] += float32(sum) * scale
			}
		}
	}
}

func goSumSquares(x []float32) float64 {
	var s float64
	for _, v := range x {
		s += float64(v) * float64(v)
	}
	return s
}

func goScaleMul(out, x, w []float32, s float32) {
	w, out = w[:len(x)], out[:len(x)]
	for i, v := range x {
		out[i] = v * s * w[i]
	}
}

func goSiLUMul(gate, up []float32) {
	up = up[:len(gate)]
	for i, g := range gate {
		gate[i] = g / (1 + expf(-g)) * up[i]
	}
}

func goAdd(dst, src []float32) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] += v
	}
}

func goExp(dst, src []float32) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = expf(v)
	}
}

func goDot(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

func goAxpy(dst []float32, a float32, x []float32) {
	dst = dst[:len(x)]
	for i, v := range x {
		dst[i] += a * v
	}
}

func goDotRows(s, q []float32, rows [][]float32, off int) {
	for x := range s {
		s[x] = goDot(q, rows[x][off:off+len(q)])
	}
}

// goAccRows folds four rows per pass like the assembly.
func goAccRows(y, p []float32, rows [][]float32, off int) {
	x := 0
	for ; x+4 <= len(p); x += 4 {
		r0, r1, r2, r3 := rows[x][off:off+len(y)], rows[x+1][off:off+len(y)], rows[x+2][off:off+len(y)], rows[x+3][off:off+len(y)]
		p0, p1, p2, p3 := p[x], p[x+1], p[x+2], p[x+3]
		for i := range y {
			y[i] += p0*r0[i] + p1*r1[i] + p2*r2[i] + p3*r3[i]
		}
	}
	for ; x < len(p); x++ {
		if p[x] != 0 {
			goAxpy(y, p[x], rows[x][off:off+len(y)])
		}
	}
}

func goMax(x []float32) float32 {
	m := float32(math.Inf(-1))
	for _, v := range x {
		m = max(m, v)
	}
	return m
}

func goExpSubSum(x []float32, m float32) float32 {
	var s float32
	for i, v := range x {
		e := expf(v - m)
		x[i] = e
		s += e
	}
	return s
}

func goStreamRead(buf []byte) float32 {
	var s uint64
	for i := 0; i+8 <= len(buf); i += 64 {
		s += binary.LittleEndian.Uint64(buf[i:])
	}
	return float32(s)
}

func goFMALoop(iters int) float32 {
	var a, b, c, d float32 = 1, 2, 3, 4
	for range iters {
		a = a*0.999 + 0.001
		b = b*0.999 + 0.001
		c = c*0.999 + 0.001
		d = d*0.999 + 0.001
	}
	return a + b + c + d
}

// expf is e^x in float32 by the Cephes method: x = n·ln2 + r with
// |r| ≤ ln2/2, e^r by a degree-7 polynomial, times 2^n. Relative error is
// within 2 ulp; below -87.33 (where 2^n would be subnormal) it returns 0,
// and it clamps x to 88.376 (e^x ≈ 2.4e38) above. The assembly computes the
// same sequence.
func expf(x float32) float32 {
	if x != x {
		return x
	}
	if x < expLo {
		return 0
	}
	x = min(x, expHi)
	n := float32(math.Floor(float64(x*log2e + 0.5)))
	r := fma32(n, -expC1, x)
	r = fma32(n, -expC2, r)
	p := float32(expP0)
	p = fma32(p, r, expP1)
	p = fma32(p, r, expP2)
	p = fma32(p, r, expP3)
	p = fma32(p, r, expP4)
	p = fma32(p, r, expP5)
	p = fma32(p, r*r, r)
	p += 1
	return p * math.Float32frombits(uint32(int32(n)+127)<<23)
}

func fma32(a, b, c float32) float32 { return float32(math.FMA(float64(a), float64(b), float64(c))) }

// Constants of expf, shared with the assembly (kept in sync by the tests).
const (
	expLo = -87.33654        // e^expLo ≈ 2^-126, the smallest normal float32
	expHi = 88.3762626647949 // n stays ≤ 127
	log2e = 1.44269504088896341
	expC1 = 0.693359375
	expC2 = -2.12194440e-4
	expP0 = 1.9875691500e-4
	expP1 = 1.3981999507e-3
	expP2 = 8.3334519073e-3
	expP3 = 4.1665795894e-2
	expP4 = 1.6666665459e-1
	expP5 = 5.0000001201e-1
)
