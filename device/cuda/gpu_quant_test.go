package cuda

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gosling-ai/gosling/tensor"
)

// TestGPUQuantOps: compact Q8_0, Q4_K, Q5_K and Q6_K matrices on the GPU
// against the CPU's dequantised reference (quantOpsSuite): qembed and
// qwiden bit for bit, qgemv for decode batches (x staged with and
// without the norm, and read in place where 4·rows·in bytes exceed the
// shared memory; ks 1, 2 and 4 warps a row; a pair of rows straddling two
// matrices of a group; the MLP's gate and up with the SiLU·mul epilogue)
// and the widened GEMM for larger ones, within the
// accumulation-order bounds qgemvTol and qwideTol state. Decode batches
// run on the integer kernels where their staged x fits (1 to 3 rows of
// 4096, 1 of 14336, up to QGEMV_INT_MAX_ROWS of 256) and on the float
// ones elsewhere, then all on the float ones (GOSLING_QGEMV=float).
func TestGPUQuantOps(t *testing.T) {
	dev, k := needKernels(t)
	_, lt := needLt(t)
	defer func(v bool) { qgemvIntKernels = v }(qgemvIntKernels)
	for _, intKernels := range []bool{true, false} {
		qgemvIntKernels = intKernels
		t.Run(fmt.Sprintf("int=%t", intKernels), func(t *testing.T) {
			o := NewModelOps(dev, k, lt, dev.Stream, ModelOpsOptions{WeightDType: BF16, KeepQuantized: true})
			defer o.Close()
			quantOpsSuite(t, o, []quantShape{
				{outs: []int{1040, 256, 257}, in: 4096, rows: []int{1, 2, 3, 8, 16, 40}, inter: 1536},
				{outs: []int{512}, in: 14336, rows: []int{1, 4}},
				{outs: []int{3, 1}, in: 256, rows: []int{1, 7, 9}},
			})
		})
	}
}

// The compiled decode kernels' registers and local memory per thread
// (logged): qgemv_int asks for four resident blocks of GEMV_WARPS warps
// per SM (at most 64 registers), qgemv for two. At 64 registers the
// integer kernels spill a little (16-56 bytes a thread on an H100 with
// CUDA 13's NVRTC, 2026-11-26) and still decode 1.3× faster than the
// float ones; qgemvIntSpill bounds that, so a register blowup fails here
// (QGEMV_INT_MAX_ROWS's accumulators are the first thing to cut).
func TestGPUQGemvResources(t *testing.T) {
	const qgemvIntSpill = 64
	dev, k := needKernels(t)
	for _, dt := range quantFormats {
		q := quantName(dt)
		res := map[string]Resources{}
		for _, name := range []string{nameQGemv(q), nameQGemvInt(q), nameQGemvSwiGLU(q), nameQGemvSwiGLUInt(q)} {
			f, err := k.Function(name)
			if err != nil {
				t.Fatal(err)
			}
			if res[name], err = dev.FuncResources(f); err != nil {
				t.Fatal(err)
			}
			t.Logf("%-24s %3d registers, %3d bytes of local memory a thread", name, res[name].Regs, res[name].LocalBytes)
		}
		for _, name := range []string{nameQGemvInt(q), nameQGemvSwiGLUInt(q)} {
			if r := res[name]; r.LocalBytes > qgemvIntSpill {
				t.Errorf("%s: %d bytes of local memory a thread (at most %d)", name, r.LocalBytes, qgemvIntSpill)
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
// into the residual (down); for 1, 2, 4 and 8 rows of x, on the integer
// kernels (int: where their staged x fits, else the launch falls back to
// the float kernel, named int>float; at one row with 2 and 4 blocks a
// SM) and the float ones (float). Compare with BenchmarkGPUCopyDtoD.
func BenchmarkGPUQGemv(b *testing.B) {
	dev, k := needKernels(b)
	rng := rand.New(rand.NewPCG(24, 4))
	defer func(v bool) { qgemvIntKernels = v }(qgemvIntKernels)
	const hidden, inter, kv = 4096, 14336, 1024
	x := alloc(b, dev, 4*GemvMaxRows*inter)
	norm := alloc(b, dev, 4*inter)
	y := alloc(b, dev, 4*GemvMaxRows*2*inter)
	if err := CopyHtoD(dev, x, randn(rng, GemvMaxRows*inter, 1)); err != nil {
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
			bytes := 0
			for _, m := range ms {
				bytes += m.quant.plan.Bytes()
			}
			for _, rows := range []int{1, 2, 4, 8} {
				for _, intKernels := range []bool{true, false} {
					qgemvIntKernels = intKernels
					path := "float"
					if intKernels {
						path = "int"
						if !qgemvIntStages(rows, ms[0].in) {
							path = "int>float"
						}
					}
					run := func() error {
						switch layer {
						case "qkv":
							return k.QGemv(dev.Stream, QGemvCall{X: x, Staged: true, Stage: GemvRMSNorm, Norm: norm, Eps: 1e-5, M: rows,
								Mats: ms, Y: []DevicePtr{y, y, y}})
						case "gateup":
							return k.QGemvSwiGLU(dev.Stream, x, norm, 1e-5, rows, ms[0], ms[1], y, 0)
						}
						return k.QGemv(dev.Stream, QGemvCall{X: x, Staged: qgemvStages(rows, ms[0].in), M: rows, Accumulate: true,
							Mats: ms, Y: []DevicePtr{y}})
					}
					if layer == "gateup" || layer == "qkv" {
						if !qgemvStages(rows, hidden) {
							continue // the norm is not fused at this batch: a launch of its own
						}
					}
					perSM := []int{0}
					if path == "int" && rows == 1 {
						perSM = []int{2, qgemvIntBlocksPerSM} // each block stages x: fewer stage it less often
					}
					for _, n := range perSM {
						name := fmt.Sprintf("%s/%s/m%d/%s", quantName(dt), layer, rows, path)
						if n > 0 {
							name += fmt.Sprintf("/blocks%d", n)
						}
						b.Run(name, func(b *testing.B) {
							qgemvIntKernels, k.qintBlocksPerSM = intKernels, n
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
