package cuda

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gosling-ai/gosling/tensor"
)

// TestGPUQuantOps: compact Q8_0, Q4_K, Q5_K and Q6_K matrices on the GPU
// against the CPU's dequantised reference (quantOpsSuite): qembed and
// qwiden bit for bit, qgemv for decode batches (x with and without the
// norm; ks 1, 2 and 4 warps a row; a pair of rows straddling two
// matrices of a group; the MLP's gate and up with the SiLU·mul epilogue)
// and the widened GEMM for larger ones, within the accumulation-order
// bounds qgemvTol and qwideTol state. Four ways through the decode
// kernels: the integer ones on x quantised once by qquant_x, copied into
// each block's shared memory where it fits (int/preq: every batch up to
// qgemvIntMaxRows = 32 rows, GOSLING_QGEMV_INT_ROWS=32, in groups of
// QGEMV_INT_GROUP) or always read
// in place (int/preq-inplace); the integer ones quantising x in each
// block (int/block-staged, GOSLING_QGEMV_PREQ=0: 1 to 3 rows of 4096, 1
// of 14336, up to 8 of 256; the float kernels elsewhere); the float ones
// (GOSLING_QGEMV=float). Then the integer ones with x as one limb
// (GOSLING_QGEMV_LIMBS=1, llama.cpp's 8-bit activations) and two, each
// held to qiBound, the staging's own error bound, besides qgemvTol.
func TestGPUQuantOps(t *testing.T) {
	dev, k := needKernels(t)
	_, lt := needLt(t)
	defer func(v bool, p, r, l int) { qgemvIntKernels, qgemvPreq, qgemvIntRows, qgemvLimbs = v, p, r, l }(qgemvIntKernels, qgemvPreq, qgemvIntRows, qgemvLimbs)
	qgemvIntRows = qgemvIntMaxRows // every batch the kernels take (16 by default)
	for _, mode := range []struct {
		name       string
		intKernels bool
		preq       int
		limbs      int
		rows       []int
	}{
		{"int/preq", true, qgemvPreqStaged, 3, []int{1, 2, 3, 4, 5, 8, 13, 16, 32, 40}},
		// (TestGPUQGemvPreq checks these give int/preq's bits.)
		{"int/preq-inplace", true, qgemvPreqInPlace, 3, []int{1, 5, 13, 32}},
		{"int/block-staged", true, qgemvPreqOff, 3, []int{1, 2, 3, 8, 16}},
		{"float", false, qgemvPreqStaged, 3, []int{1, 2, 8, 16}},
		// GOSLING_QGEMV_LIMBS=1 and 2 (qiBound added to the tolerance).
		{"int/preq/l1", true, qgemvPreqStaged, 1, []int{1, 2, 4, 8, 13, 32, 40}},
		{"int/preq-inplace/l1", true, qgemvPreqInPlace, 1, []int{1, 5}},
		{"int/block-staged/l1", true, qgemvPreqOff, 1, []int{1, 3, 8}},
		{"int/preq/l2", true, qgemvPreqStaged, 2, []int{1, 2, 8, 13}},
	} {
		qgemvIntKernels, qgemvPreq, qgemvLimbs = mode.intKernels, mode.preq, mode.limbs
		t.Run(mode.name, func(t *testing.T) {
			o := NewModelOps(dev, k, lt, dev.Stream, ModelOpsOptions{WeightDType: BF16, KeepQuantized: true})
			defer o.Close()
			quantOpsSuite(t, o, []quantShape{
				{outs: []int{1040, 256, 257}, in: 4096, rows: mode.rows, inter: 1536},
				{outs: []int{512}, in: 14336, rows: []int{1, 4, 8}},
				{outs: []int{3, 1}, in: 256, rows: []int{1, 7, 9, 32}},
			})
		})
	}
}

// TestGPUQGemvPreq: qgemvPreqSuite on the GPU, x 1024 wide (each block
// can quantise up to GemvMaxRows rows itself, so the paths meet at every
// decode batch to 8) and 4096 wide (to 3 rows; a Llama-3.1-8B's hidden
// size): the integer kernels' bits are the same on qquant_x's x, from
// shared memory or in place, as on each block's own, for every format,
// m = 1, 2, 3, 4, 5, 8, 13, 16 and 32, with and without the norm, q/k/v
// and gate/up; and qquant_x's bytes are the Go statement's; for 1, 2 and
// 3 limbs.
func TestGPUQGemvPreq(t *testing.T) {
	dev, k := needKernels(t)
	_, lt := needLt(t)
	o := NewModelOps(dev, k, lt, dev.Stream, ModelOpsOptions{WeightDType: BF16, KeepQuantized: true})
	defer o.Close()
	defer func(l int) { qgemvLimbs = l }(qgemvLimbs)
	for limbs := 1; limbs <= 3; limbs++ {
		qgemvLimbs = limbs
		for _, in := range []int{1024, 4096} {
			t.Run(fmt.Sprintf("l%d/%d", limbs, in), func(t *testing.T) { qgemvPreqSuite(t, o, in, []int{1, 2, 3, 4, 5, 8, 13, 16, 32}) })
		}
	}
}

// The compiled decode kernels' registers and local memory per thread
// (logged), and qquant_x's, for each limb count: qgemv_int asks for four
// resident blocks of GEMV_WARPS warps per SM (at most 64 registers),
// qgemv for two. At 64 registers the integer kernels spill: ptxas (CUDA
// 13.0, sm_90a, by hand from NVRTC's PTX) gives the one-row kernels with
// three limbs stack frames of 88-120 bytes (Q8_0 88, Q4_K 96, Q5_K 112,
// Q6_K 120: the K-quants' lane constants stay in registers across the
// unit loop, and the shared-x loop itself keeps at most 3 local loads),
// with one limb 16-88, and the four-row ones 104-168. The bounds catch a
// register blowup, not those (QGEMV_INT_GROUP's accumulators are the
// first thing to cut).
func TestGPUQGemvResources(t *testing.T) {
	const qgemvInt1Spill, qgemvIntSpill = 128, 192
	dev, k := needKernels(t)
	for _, dt := range quantFormats {
		q := quantName(dt)
		res := map[string]Resources{}
		names := []string{nameQGemv(q), nameQGemvSwiGLU(q)}
		for l := 1; l <= 3; l++ {
			names = append(names, nameQGemvInt(l, q), nameQGemvSwiGLUInt(l, q), nameQGemvInt1(l, q), nameQGemvSwiGLUInt1(l, q), nameQQuantX(l, q))
		}
		for _, name := range names {
			f, err := k.Function(name)
			if err != nil {
				t.Fatal(err)
			}
			if res[name], err = dev.FuncResources(f); err != nil {
				t.Fatal(err)
			}
			t.Logf("%-24s %3d registers, %3d bytes of local memory a thread", name, res[name].Regs, res[name].LocalBytes)
		}
		for l := 1; l <= 3; l++ {
			for name, bound := range map[string]int{nameQGemvInt(l, q): qgemvIntSpill, nameQGemvSwiGLUInt(l, q): qgemvIntSpill,
				nameQGemvInt1(l, q): qgemvInt1Spill, nameQGemvSwiGLUInt1(l, q): qgemvInt1Spill} {
				if r := res[name]; r.LocalBytes > bound {
					t.Errorf("%s: %d bytes of local memory a thread (at most %d)", name, r.LocalBytes, bound)
				}
			}
		}
	}
}

// benchQMatrix is a compact [out, in] matrix in dt on the GPU, its bytes
// random (the kernels' speed does not depend on the values; the few
// bytes past the last whole word stay as allocated), freed with b.
func benchQMatrix(b *testing.B, dev *Device, rng *rand.Rand, dt DType, out, in int) *Matrix {
	p, err := planQuant(dt, out, in)
	if err != nil {
		b.Fatal(err)
	}
	m := &Matrix{out: out, in: in, dtype: dt, quant: &quantMatrix{plan: p}}
	m.ptr = alloc(b, dev, p.Bytes())
	if p.scaleRow > 0 {
		m.quant.scale = m.ptr.Add(p.scaleOffset())
	}
	host := make([]uint64, (p.Bytes()+7)/8)
	for i := range host {
		host[i] = rng.Uint64()
	}
	if err := CopyHtoD(dev, m.ptr, host[:p.Bytes()/8]); err != nil {
		b.Fatal(err)
	}
	return m
}

// BenchmarkGPUQGemv is the decode kernels' read bandwidth of the
// quantised bytes (GB/s of the matrices' device bytes, x and y not
// counted) on the linear layers of a Llama-3.1-8B decode step: q, k and v
// in one launch with the RMSNorm prologue (qkv), o adding into the
// residual (o), gate and up with the SiLU epilogue (gateup), down adding
// into the residual (down); for 1 to 32 rows of x, by path:
//
//   - preq: qquant_x (the norm fused for qkv and gateup) then the integer
//     kernel, which copies x into shared memory where it fits and reads it
//     in place beyond, both timed (ModelOps' default); at one row also
//     with 2 and 4 blocks a SM (/blocks2, /blocks4);
//   - preq-inplace: the same, x always read in place
//     (GOSLING_QGEMV_PREQ=inplace);
//   - block: the integer kernel quantising x in each block
//     (GOSLING_QGEMV_PREQ=0), where it fits (else block>float: the float
//     kernel, as ModelOps falls back; qkv and gateup then skipped, the
//     norm not fused);
//   - float: the float kernels (GOSLING_QGEMV=float), up to 8 rows.
//
// Compare with BenchmarkGPUCopyDtoD. For the figures of issue 24 (the
// integer paths with as many limbs as GOSLING_QGEMV_LIMBS says, 3 unset):
//
//	go test ./device/cuda -run '^$' -bench 'BenchmarkGPUQGemv/q4_k/(qkv|o)/m(1|8)/' -benchtime 200x
func BenchmarkGPUQGemv(b *testing.B) {
	dev, k := needKernels(b)
	rng := rand.New(rand.NewPCG(24, 4))
	defer func(v bool, p int) { qgemvIntKernels, qgemvPreq = v, p }(qgemvIntKernels, qgemvPreq)
	const hidden, inter, kv, maxRows = 4096, 14336, 1024, qgemvIntMaxRows
	x := alloc(b, dev, 4*maxRows*inter)
	norm := alloc(b, dev, 4*inter)
	y := alloc(b, dev, 4*maxRows*2*inter)
	xq := alloc(b, dev, maxRows*qiRowBytesL(inter, 3)) // three limbs: the most bytes
	if err := CopyHtoD(dev, x, randn(rng, maxRows*inter, 1)); err != nil {
		b.Fatal(err)
	}
	if err := CopyHtoD(dev, norm, randn(rng, inter, 1)); err != nil {
		b.Fatal(err)
	}
	for _, dt := range []DType{tensor.Q4_K, tensor.Q8_0, tensor.Q6_K, tensor.Q5_K, tensor.MXFP4, tensor.AWQ4_G128} {
		mats := map[string][]*Matrix{
			"qkv":    {benchQMatrix(b, dev, rng, dt, hidden, hidden), benchQMatrix(b, dev, rng, dt, kv, hidden), benchQMatrix(b, dev, rng, dt, kv, hidden)},
			"o":      {benchQMatrix(b, dev, rng, dt, hidden, hidden)},
			"gateup": {benchQMatrix(b, dev, rng, dt, inter, hidden), benchQMatrix(b, dev, rng, dt, inter, hidden)},
			"down":   {benchQMatrix(b, dev, rng, dt, hidden, inter)},
		}
		for _, layer := range []string{"qkv", "o", "gateup", "down"} {
			ms := mats[layer]
			in := ms[0].in
			bytes := 0
			for _, m := range ms {
				bytes += m.quant.plan.Bytes()
			}
			normed := layer == "qkv" || layer == "gateup"
			for _, rows := range []int{1, 2, 4, 8, 16, 32} {
				for _, path := range []string{"preq", "preq-inplace", "block", "float"} {
					intKernels, preq := path != "float", qgemvPreqStaged
					switch path {
					case "preq-inplace":
						preq = qgemvPreqInPlace
					case "block":
						preq = qgemvPreqOff
					}
					qgemvIntKernels, qgemvPreq = intKernels, preq
					name := path
					switch {
					case path == "float" && rows > GemvMaxRows:
						continue
					case path == "block" && rows > GemvMaxRows:
						continue
					case path == "block" && !qgemvIntStages(rows, in, dt):
						name = "block>float"
					}
					if !intKernels || preq == qgemvPreqOff {
						if normed && !qgemvStages(rows, in, dt) {
							continue // the norm is not fused at this batch: a launch of its own
						}
					}
					run := func() error {
						var q DevicePtr
						if intKernels && preq != qgemvPreqOff {
							stage, np := GemvRound, DevicePtr(0)
							if normed {
								stage, np = GemvRMSNorm, norm
							}
							if err := k.QQuantX(dev.Stream, xq, x, stage, np, 1e-5, rows, in, dt); err != nil {
								return err
							}
							q = xq
						}
						switch layer {
						case "qkv":
							return k.QGemv(dev.Stream, QGemvCall{X: x, Staged: true, Stage: GemvRMSNorm, Norm: norm, Eps: 1e-5, M: rows,
								Mats: ms, Y: []DevicePtr{y, y, y}, XQ: q})
						case "gateup":
							return k.QGemvSwiGLU(dev.Stream, x, norm, 1e-5, rows, ms[0], ms[1], y, q)
						}
						return k.QGemv(dev.Stream, QGemvCall{X: x, Staged: q != 0 || qgemvStages(rows, in, dt), M: rows, Accumulate: true,
							Mats: ms, Y: []DevicePtr{y}, XQ: q})
					}
					perSM := []int{0}
					if path == "preq" && rows == 1 {
						perSM = []int{2, qgemvIntBlocksPerSM}
					}
					for _, n := range perSM {
						full := fmt.Sprintf("%s/%s/m%d/%s", quantName(dt), layer, rows, name)
						if n > 0 {
							full += fmt.Sprintf("/blocks%d", n)
						}
						b.Run(full, func(b *testing.B) {
							qgemvIntKernels, qgemvPreq, k.qintBlocksPerSM = intKernels, preq, n
							defer func() { k.qintBlocksPerSM = 0 }()
							benchGPUQGemvLoop(b, dev, run, bytes)
						})
					}
				}
			}
		}
	}
}

// benchGPUQGemvLoop times b.N launches of run between two events and
// reports GB/s of bytes a launch.
func benchGPUQGemvLoop(b *testing.B, dev *Device, run func() error, bytes int) {
	start, _ := dev.NewEvent(true)
	end, _ := dev.NewEvent(true)
	defer dev.DestroyEvent(start)
	defer dev.DestroyEvent(end)
	if err := run(); err != nil {
		b.Fatal(err)
	}
	sync0(b, dev)
	b.ResetTimer()
	dev.Record(start, dev.Stream)
	for range b.N {
		if err := run(); err != nil {
			b.Fatal(err)
		}
	}
	dev.Record(end, dev.Stream)
	dev.EventSync(end)
	el, _ := dev.Elapsed(start, end)
	b.ReportMetric(float64(bytes)*float64(b.N)/el.Seconds()/1e9, "GB/s")
	b.ReportMetric(el.Seconds()*1e6/float64(b.N), "µs/launch")
}
