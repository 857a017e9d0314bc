//go:build amd64

package cpu

//go:generate go run ./internal/asmgen/gen

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// detectKernels returns the kernel sets this CPU runs, narrowest first
// (the last is used; the tests run them all). AVX-512 needs F (the float
// kernels), BW and VL (byte and ymm forms), and VNNI for the int8 Q8
// kernel; without VNNI, Q8 keeps the AVX2 kernel.
func detectKernels() []*kernelSet {
	x := cpu.X86
	if !x.HasAVX2 || !x.HasFMA || !x.HasF16C {
		return nil
	}
	avx2 := &kernelSet{name: "avx2", vec: asmVec, asmDot: true}
	for kind := range kindQ8 {
		avx2.mrMax[kind] = maxMRY
		avx2.float[kind] = floatKernelsY[kind]
	}
	avx2.mrMax[kindQ8] = 1
	avx2.mrMax[kindQK] = maxMRQKY
	avx2.qk = qkKernelsY
	avx2.mrMax[kindI4] = maxMRI4Y
	avx2.i4 = i4KernelsY
	avx2.widenI4 = widenI4KernelsY
	avx2.q8[1] = gemmQ8Y1
	avx2.quantQ8Row = quantQ8RowY
	avx2.quantQKRow = quantQKRowY
	sets := []*kernelSet{avx2}
	if x.HasAVX512F && x.HasAVX512BW && x.HasAVX512VL {
		avx512 := *avx2
		avx512.name = "avx512"
		for kind := range kindQ8 {
			avx512.mrMax[kind] = maxMRZ
			avx512.float[kind] = floatKernelsZ[kind]
			avx512.floatStore[kind] = floatStoreKernelsZ[kind]
		}
		avx512.packFloat = packKernelsZ
		avx512.quantQ8Row = quantQ8RowZ
		avx512.vec.streamRead = func(buf []byte) float32 { return streamReadZ(unsafe.SliceData(buf), len(buf)) }
		avx512.vec.fmaLoop = func(iters int) float32 { return fmaLoopZ(iters) }
		avx512.vec.fmaLoopLane = 16 * 12
		if x.HasAVX512VNNI {
			avx512.name = "avx512-vnni"
			avx512.mrMax[kindQ8] = maxMRQ8Z
			avx512.q8 = q8KernelsZ
			// One token's QK products take the VNNI kernels; taller
			// tiles keep the AVX2 ones.
			for f, k := range qkKernelsZ1 {
				if k != nil {
					avx512.qk[f][1] = k
				}
			}
			avx512.qkRun = qkRunKernelsZ
		}
		sets = append(sets, &avx512)
	}
	return sets
}

// asmDot is vec.dot without the slice checks, for n a positive multiple
// of 16 (Dot's fast path).
func asmDot(a, b *float32, n int) float32 { return dotY(a, b, n) }

// Tile heights of the generated kernels (internal/asmgen's constants).
const (
	maxMRZ   = 12
	maxMRQ8Z = 6
	maxMRY   = 2
	maxMRQKY = 4
	maxMRI4Y = 6
)

var asmVec = vecKernels{
	width: 16,
	sumSquares: func(x []float32) float64 {
		return sumSquaresY(unsafe.SliceData(x), len(x))
	},
	scaleMul: func(out, x, w []float32, s float32) {
		_, _ = out[len(x)-1], w[len(x)-1]
		scaleMulY(unsafe.SliceData(out), unsafe.SliceData(x), unsafe.SliceData(w), s, len(x))
	},
	ropeHalves: func(row, cos, sin []float32, half, heads int) {
		_, _, _ = row[2*half*heads-1], cos[half-1], sin[half-1]
		ropeHalvesY(unsafe.SliceData(row), unsafe.SliceData(cos), unsafe.SliceData(sin), half, heads)
	},
	ropePairs: func(row, cos2, sin2 []float32, headDim, heads int) {
		_, _, _ = row[headDim*heads-1], cos2[headDim-1], sin2[headDim-1]
		ropePairsY(unsafe.SliceData(row), unsafe.SliceData(cos2), unsafe.SliceData(sin2), headDim, heads)
	},
	siluMul: func(gate, up []float32) {
		_ = up[len(gate)-1]
		siluMulY(unsafe.SliceData(gate), unsafe.SliceData(up), len(gate))
	},
	add: func(dst, src []float32) {
		_ = dst[len(src)-1]
		addY(unsafe.SliceData(dst), unsafe.SliceData(src), len(src))
	},
	exp: func(dst, src []float32) {
		_ = dst[len(src)-1]
		expY(unsafe.SliceData(dst), unsafe.SliceData(src), len(src))
	},
	dot: func(a, b []float32) float32 {
		_ = b[len(a)-1]
		return dotY(unsafe.SliceData(a), unsafe.SliceData(b), len(a))
	},
	axpy: func(dst []float32, a float32, x []float32) {
		_ = dst[len(x)-1]
		axpyY(unsafe.SliceData(dst), a, unsafe.SliceData(x), len(x))
	},
	max: func(x []float32) float32 { return maxY(unsafe.SliceData(x), len(x)) },
	dotRows: func(s, q []float32, rows [][]float32, off int) {
		dotRowsY(unsafe.SliceData(s), unsafe.SliceData(q), unsafe.SliceData(rows), len(s), off, len(q))
	},
	accRows: func(y, p []float32, rows [][]float32, off int) {
		accRowsY(unsafe.SliceData(y), unsafe.SliceData(p), unsafe.SliceData(rows), len(p), off, len(y))
	},
	dotRowsHeads: func(s []float32, sStride int, q []float32, heads, group int, rows [][]float32, off int, warm [][]float32) {
		d := len(q) / heads
		dotRowsHeadsY(unsafe.SliceData(s), unsafe.SliceData(q), unsafe.SliceData(rows), len(rows), 4*off, 4*d, heads, group, 4*sStride, attnPrefetchRows, 4*heads/group*d, unsafe.SliceData(warm), len(warm))
	},
	accRowsHeads: func(y []float32, yStride int, p []float32, pStride, heads, group int, rows [][]float32, off int, warm [][]float32) {
		d := len(y) / heads
		accRowsHeadsY(unsafe.SliceData(y), unsafe.SliceData(p), unsafe.SliceData(rows), len(rows), 4*off, 4*d, heads, group, 4*yStride, 4*pStride, attnPrefetchRows, 4*heads/group*d, unsafe.SliceData(warm), len(warm))
	},
	// The bf16 kernels take byte offsets and lengths of the rows (two bytes
	// a value); q, s, y and p stay float32 (dotRowsHeadsBF16Y).
	// Four rows at a time (the Y4 kernels), the rest one at a time.
	dotRowsHeadsBF16: func(s []float32, sStride int, q []float32, heads, group int, rows [][]byte, off int) {
		d := len(q) / heads
		n4 := len(rows) &^ 3
		if n4 > 0 {
			dotRowsHeadsBF16Y4(unsafe.SliceData(s), unsafe.SliceData(q), unsafe.SliceData(rows), n4, 2*off, 2*d, heads, group, 4*sStride, attnPrefetchRows, 2*heads/group*d)
		}
		if n4 < len(rows) {
			dotRowsHeadsBF16Y(&s[n4], unsafe.SliceData(q), &rows[n4], len(rows)-n4, 2*off, 2*d, heads, group, 4*sStride, attnPrefetchRows, 2*heads/group*d)
		}
	},
	accRowsHeadsBF16: func(y []float32, yStride int, p []float32, pStride, heads, group int, rows [][]byte, off int) {
		d := len(y) / heads
		n4 := len(rows) &^ 3
		if n4 > 0 {
			accRowsHeadsBF16Y4(unsafe.SliceData(y), unsafe.SliceData(p), unsafe.SliceData(rows), n4, 2*off, 2*d, heads, group, 4*yStride, 4*pStride, attnPrefetchRows, 2*heads/group*d)
		}
		if n4 < len(rows) {
			accRowsHeadsBF16Y(unsafe.SliceData(y), &p[n4], &rows[n4], len(rows)-n4, 2*off, 2*d, heads, group, 4*yStride, 4*pStride, attnPrefetchRows, 2*heads/group*d)
		}
	},
	expSubSum:   func(x []float32, m float32) float32 { return expSubSumY(unsafe.SliceData(x), len(x), m) },
	streamRead:  func(buf []byte) float32 { return streamReadY(unsafe.SliceData(buf), len(buf)) },
	fmaLoop:     func(iters int) float32 { return fmaLoopY(iters) },
	fmaLoopLane: 8 * 12,
}

//go:noescape
func sumSquaresY(x *float32, n int) float64

//go:noescape
func scaleMulY(out, x, w *float32, s float32, n int)

//go:noescape
func siluMulY(gate, up *float32, n int)

//go:noescape
func ropeHalvesY(row, cos, sin *float32, half, heads int)

//go:noescape
func ropePairsY(row, cos2, sin2 *float32, headDim, heads int)

//go:noescape
func expY(dst, src *float32, n int)

//go:noescape
func expSubSumY(x *float32, n int, m float32) float32

//go:noescape
func addY(dst, src *float32, n int)

//go:noescape
func axpyY(dst *float32, a float32, x *float32, n int)

//go:noescape
func dotY(a, b *float32, n int) float32

//go:noescape
func maxY(x *float32, n int) float32

//go:noescape
func dotRowsY(s, q *float32, rows *[]float32, nrows, off, d int)

//go:noescape
func accRowsY(y, p *float32, rows *[]float32, nrows, off, d int)

//go:noescape
func dotRowsHeadsY(s, q *float32, rows *[]float32, nrows, offB, dB, heads, group, sStrideB, pfDist, pfB int, warm *[]float32, nwarm int)

//go:noescape
func accRowsHeadsY(y, p *float32, rows *[]float32, nrows, offB, dB, heads, group, yStrideB, pStrideB, pfDist, pfB int, warm *[]float32, nwarm int)

//go:noescape
func dotRowsHeadsBF16Y(s, q *float32, rows *[]byte, nrows, offB, dB, heads, group, sStrideB, pfDist, pfB int)

//go:noescape
func accRowsHeadsBF16Y(y, p *float32, rows *[]byte, nrows, offB, dB, heads, group, yStrideB, pStrideB, pfDist, pfB int)

//go:noescape
func dotRowsHeadsBF16Y4(s, q *float32, rows *[]byte, nrows, offB, dB, heads, group, sStrideB, pfDist, pfB int)

//go:noescape
func accRowsHeadsBF16Y4(y, p *float32, rows *[]byte, nrows, offB, dB, heads, group, yStrideB, pStrideB, pfDist, pfB int)

//go:noescape
func streamReadY(p *byte, n int) float32

//go:noescape
func quantQ8RowY(dst *byte, x *float32, blocks, mr int)

//go:noescape
func quantQKRowY(dst *byte, x *float32, supers, super, mr int)

//go:noescape
func quantQ8RowZ(dst *byte, x *float32, blocks, mr int)

//go:noescape
func streamReadZ(p *byte, n int) float32

func fmaLoopY(iters int) float32

func fmaLoopZ(iters int) float32

// attnPrefetchRows is how many key (value) rows ahead dotRowsHeadsY and
// accRowsHeadsY prefetch into L2, a whole row at the start of each. Left
// to the hardware prefetchers, a row's reading and its arithmetic did not
// overlap: one core read 16-17 GB/s of rows against 23 GB/s of a plain
// stream. Two rows ahead measured 17.6-20.4 GB/s on one core
// (BenchmarkAttentionHeadsStream), and the batch-32 decode attention
// 22-26 GB/s against 18-23 on two (splitkv's BenchmarkDecodeModel); one
// row ahead was too late, four too early, and T0 hints slower than none.
const attnPrefetchRows = 2
