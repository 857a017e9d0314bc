package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gosling-ai/gosling/tensor"
)

// Every kernel is checked against a CPU reference on random data, in each
// dtype it is built for: the CPU side works on the inputs as rounded to the
// dtype, so the only differences left are the kernel's own arithmetic and
// its output rounding. The references follow device/cpu's rules (RMSNorm
// accumulated in float64, RoPE angles in float32 with float64 trigonometry,
// the sampler's argmax tie rule); they are restated here so this package's
// tests do not move with the CPU kernels' internals.

func TestGPUEmbedding(t *testing.T) {
	dev, k := needKernels(t)
	rng := rand.New(rand.NewPCG(1, 1))
	const vocab, hidden = 1000, 384
	ids := []int32{5, 999, 0, -1, 1000, 42, 5}
	for _, dts := range [][2]DType{{F32, F32}, {BF16, BF16}, {F16, F16}, {BF16, F32}, {F16, F32}} {
		tabDT, outDT := dts[0], dts[1]
		t.Run(fmt.Sprintf("%v_%v", tabDT, outDT), func(t *testing.T) {
			table := roundAll(randn(rng, vocab*hidden, 1), tabDT)
			dTable := upload(t, dev, table, tabDT)
			dIDs := uploadInt32(t, dev, ids)
			dOut := alloc(t, dev, len(ids)*hidden*ElemSize(outDT))
			const scale = 1.7
			if err := k.Embedding(dev.Stream, dOut, dTable, dIDs, len(ids), hidden, vocab, tabDT, outDT, scale); err != nil {
				t.Fatal(err)
			}
			want := make([]float32, len(ids)*hidden)
			for ti, id := range ids {
				if id < 0 || id >= vocab {
					continue // zeros
				}
				for i := range hidden {
					want[ti*hidden+i] = round(table[int(id)*hidden+i]*scale, outDT)
				}
			}
			compare(t, "embedding", download(t, dev, dOut, len(want), outDT), want, 0, 0)
		})
	}
}

// rmsnormRef is the float64 reference: rows of width hidden.
func rmsnormRef(x, w []float32, eps, offset float32, dt DType) []float32 {
	hidden := len(w)
	out := make([]float32, len(x))
	for r := 0; r < len(x)/hidden; r++ {
		row := x[r*hidden : (r+1)*hidden]
		var ss float64
		for _, v := range row {
			ss += float64(v) * float64(v)
		}
		inv := 1 / math.Sqrt(ss/float64(hidden)+float64(eps))
		for i, v := range row {
			out[r*hidden+i] = round(float32(float64(v)*inv*float64(w[i]+offset)), dt)
		}
	}
	return out
}

func TestGPURMSNorm(t *testing.T) {
	dev, k := needKernels(t)
	rng := rand.New(rand.NewPCG(2, 2))
	const tokens, hidden, eps = 7, 1000, 1e-6
	for _, dt := range []DType{F32, BF16, F16} {
		for _, residual := range []bool{false, true} {
			for _, offset := range []float32{0, 1} {
				t.Run(fmt.Sprintf("%v/residual=%v/offset=%v", dt, residual, offset), func(t *testing.T) {
					x := roundAll(randn(rng, tokens*hidden, 2), dt)
					w := roundAll(randn(rng, hidden, 0.5), dt)
					res := roundAll(randn(rng, tokens*hidden, 1), dt)
					dX, dW := upload(t, dev, x, dt), upload(t, dev, w, dt)
					dOut := alloc(t, dev, len(x)*ElemSize(dt))
					p := RMSNormParams{Out: dOut, X: dX, Weight: dW, NTokens: tokens, Hidden: hidden, Eps: eps, WeightOffset: offset, DType: dt}
					normIn := x
					if residual {
						p.Residual = upload(t, dev, res, dt)
						normIn = make([]float32, len(x))
						for i := range x {
							normIn[i] = round(x[i]+res[i], dt)
						}
					}
					if err := k.RMSNorm(dev.Stream, p); err != nil {
						t.Fatal(err)
					}
					atol, rtol := tolerance(dt)
					compare(t, "out", download(t, dev, dOut, len(x), dt), rmsnormRef(normIn, w, eps, offset, dt), atol, rtol)
					if residual {
						compare(t, "residual", download(t, dev, p.Residual, len(x), dt), normIn, 0, 0)
					}
				})
			}
		}
	}

	// Per-head norm (Qwen3 q/k norm) in place inside a padded fused row.
	t.Run("heads in strided rows", func(t *testing.T) {
		const heads, headDim, stride = 4, 128, 4*128 + 3*128
		for _, dt := range []DType{F32, BF16} {
			buf := roundAll(randn(rng, tokens*stride, 1), dt)
			w := roundAll(randn(rng, headDim, 1), dt)
			dBuf := upload(t, dev, buf, dt)
			err := k.RMSNorm(dev.Stream, RMSNormParams{Out: dBuf, X: dBuf, Weight: upload(t, dev, w, dt),
				NTokens: tokens, Hidden: headDim, Heads: heads, XStride: stride, OutStride: stride, Eps: eps, DType: dt})
			if err != nil {
				t.Fatal(err)
			}
			want := append([]float32(nil), buf...)
			for tk := range tokens {
				seg := want[tk*stride : tk*stride+heads*headDim]
				copy(seg, rmsnormRef(seg, w, eps, 0, dt))
			}
			atol, rtol := tolerance(dt)
			compare(t, fmt.Sprintf("%v strided heads", dt), download(t, dev, dBuf, len(buf), dt), want, atol, rtol)
		}
	})
}

// ropeRef rotates heads in place like the kernel, on float32 angles and
// float64 trigonometry (device/cpu's rule).
func ropeRef(x []float32, stride, heads, headDim, rot int, pos []int32, invFreq []float32, interleaved bool, mscale float32, dt DType) {
	half := rot / 2
	for t, p := range pos {
		for h := range heads {
			head := x[t*stride+h*headDim:]
			for i := range half {
				angle := float32(p) * invFreq[i]
				c := float32(math.Cos(float64(angle))) * mscale
				s := float32(math.Sin(float64(angle))) * mscale
				a, b := i, i+half
				if interleaved {
					a, b = 2*i, 2*i+1
				}
				x0, x1 := head[a], head[b]
				head[a] = round(x0*c-x1*s, dt)
				head[b] = round(x0*s+x1*c, dt)
			}
		}
	}
}

func ropeInvFreq(rot int, theta float64) []float32 {
	f := make([]float32, rot/2)
	for i := range f {
		f[i] = float32(1 / math.Pow(theta, float64(2*i)/float64(rot)))
	}
	return f
}

func TestGPURope(t *testing.T) {
	dev, k := needKernels(t)
	rng := rand.New(rand.NewPCG(3, 3))
	const tokens, nq, nkv, headDim = 9, 4, 2, 128
	const stride = (nq + 2*nkv) * headDim // fused qkv rows: q | k | v
	pos := make([]int32, tokens)
	for i := range pos {
		pos[i] = int32(rng.IntN(200000))
	}
	pos[0] = 0
	dPos := uploadInt32(t, dev, pos)
	for _, dt := range []DType{F32, BF16, F16} {
		for _, interleaved := range []bool{false, true} {
			for _, rot := range []int{headDim, headDim / 2} {
				mscale := float32(1)
				if rot != headDim {
					mscale = 1.2
				}
				name := fmt.Sprintf("%v/interleaved=%v/rot=%d", dt, interleaved, rot)
				t.Run(name, func(t *testing.T) {
					qkv := roundAll(randn(rng, tokens*stride, 1), dt)
					invFreq := ropeInvFreq(rot, 500000)
					dQKV := upload(t, dev, qkv, dt)
					err := k.Rope(dev.Stream, RopeParams{
						Q: dQKV, K: dQKV.Add(nq * headDim * ElemSize(dt)), Positions: dPos, InvFreq: upload(t, dev, invFreq, F32),
						NTokens: tokens, NQHeads: nq, NKVHeads: nkv, HeadDim: headDim, RotDim: rot,
						QStride: stride, KStride: stride, Interleaved: interleaved, MScale: mscale, DType: dt,
					})
					if err != nil {
						t.Fatal(err)
					}
					want := append([]float32(nil), qkv...)
					// q and k heads are adjacent in the row; v (after them) must stay untouched.
					ropeRef(want, stride, nq+nkv, headDim, rot, pos, invFreq, interleaved, mscale, dt)
					atol, rtol := tolerance(dt)
					if dt == F32 {
						atol, rtol = 2e-5, 2e-5
					}
					compare(t, "qkv", download(t, dev, dQKV, len(qkv), dt), want, atol, rtol)
				})
			}
		}
	}
}

func TestGPUGatedAct(t *testing.T) {
	dev, k := needKernels(t)
	rng := rand.New(rand.NewPCG(4, 4))
	const tokens, inter = 5, 1000
	acts := map[Activation]func(float64) float64{
		SiLU: func(g float64) float64 { return g / (1 + math.Exp(-g)) },
		GeLUTanh: func(g float64) float64 {
			return 0.5 * g * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(g+0.044715*g*g*g)))
		},
	}
	for act, fn := range acts {
		for _, dt := range []DType{F32, BF16, F16} {
			t.Run(fmt.Sprintf("act%d/%v", act, dt), func(t *testing.T) {
				gateUp := roundAll(randn(rng, tokens*2*inter, 3), dt) // fused [T, 2·inter]
				dGU := upload(t, dev, gateUp, dt)
				dOut := alloc(t, dev, tokens*inter*ElemSize(dt))
				if err := k.GatedAct(dev.Stream, act, dOut, dGU, dGU.Add(inter*ElemSize(dt)), tokens, inter, 2*inter, dt); err != nil {
					t.Fatal(err)
				}
				want := make([]float32, tokens*inter)
				for tk := range tokens {
					for i := range inter {
						g, u := gateUp[tk*2*inter+i], gateUp[tk*2*inter+inter+i]
						want[tk*inter+i] = round(float32(fn(float64(g))*float64(u)), dt)
					}
				}
				atol, rtol := tolerance(dt)
				compare(t, "out", download(t, dev, dOut, len(want), dt), want, atol, rtol)
			})
		}
	}

}

func TestGPUSoftcap(t *testing.T) {
	dev, k := needKernels(t)
	rng := rand.New(rand.NewPCG(5, 5))
	for _, dt := range []DType{F32, BF16} {
		x := roundAll(randn(rng, 10007, 40), dt)
		dX := upload(t, dev, x, dt)
		const capv = 30
		if err := k.Softcap(dev.Stream, dX, len(x), capv, dt); err != nil {
			t.Fatal(err)
		}
		want := make([]float32, len(x))
		for i, v := range x {
			want[i] = round(float32(capv*math.Tanh(float64(v)/capv)), dt)
		}
		atol, rtol := tolerance(dt)
		compare(t, dt.String(), download(t, dev, dX, len(x), dt), want, atol, rtol)
	}
}

func TestGPUKVStore(t *testing.T) {
	dev, k := needKernels(t)
	rng := rand.New(rand.NewPCG(6, 6))
	const nSlots, kvWidth, qWidth = 64, 2 * 128, 4 * 128
	const stride = qWidth + 2*kvWidth // k and v inside fused qkv rows
	slots := []int32{17, 3, -1, 63, 0, 40, 41, 42, 8, 9}
	for _, dts := range [][2]DType{{F32, F32}, {BF16, BF16}, {F16, F16}, {F32, BF16}, {F32, F16}} {
		inDT, cacheDT := dts[0], dts[1]
		t.Run(fmt.Sprintf("%v_%v", inDT, cacheDT), func(t *testing.T) {
			qkv := roundAll(randn(rng, len(slots)*stride, 1), inDT)
			sentinel := make([]float32, nSlots*kvWidth)
			for i := range sentinel {
				sentinel[i] = 7
			}
			dQKV := upload(t, dev, qkv, inDT)
			dK, dV := upload(t, dev, sentinel, cacheDT), upload(t, dev, sentinel, cacheDT)
			err := k.KVStore(dev.Stream, KVStoreParams{
				KCache: dK, VCache: dV, K: dQKV.Add(qWidth * ElemSize(inDT)), V: dQKV.Add((qWidth + kvWidth) * ElemSize(inDT)),
				Slots: uploadInt32(t, dev, slots), NTokens: len(slots), KVWidth: kvWidth, KStride: stride, VStride: stride,
				InDT: inDT, CacheDT: cacheDT,
			})
			if err != nil {
				t.Fatal(err)
			}
			wantK, wantV := append([]float32(nil), sentinel...), append([]float32(nil), sentinel...)
			for tk, s := range slots {
				if s < 0 {
					continue
				}
				for i := range kvWidth {
					wantK[int(s)*kvWidth+i] = round(qkv[tk*stride+qWidth+i], cacheDT)
					wantV[int(s)*kvWidth+i] = round(qkv[tk*stride+qWidth+kvWidth+i], cacheDT)
				}
			}
			compare(t, "k cache", download(t, dev, dK, len(wantK), cacheDT), wantK, 0, 0)
			compare(t, "v cache", download(t, dev, dV, len(wantV), cacheDT), wantV, 0, 0)
		})
	}
}

// argmaxRef is the CPU sampler's rule.
func argmaxRef(row []float32) int32 {
	best, bestScore := 0, float32(math.Inf(-1))
	for i, v := range row {
		if v > bestScore {
			best, bestScore = i, v
		}
	}
	return int32(best)
}

func TestGPUArgmax(t *testing.T) {
	dev, k := needKernels(t)
	rng := rand.New(rand.NewPCG(7, 7))
	const vocab, padded = 50257, 50304
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for _, dt := range []DType{F32, BF16} {
		rows := make([][]float32, 6)
		for r := range rows {
			rows[r] = randn(rng, vocab, 4)
		}
		rows[1][100], rows[1][50], rows[1][30000] = 99, 99, 99 // tie: lowest index
		rows[2][3], rows[2][7] = nan, 50                       // NaN skipped
		for i := range rows[3] {
			rows[3][i] = -inf // nothing above -inf: 0
		}
		rows[3][9] = nan
		rows[4][vocab-1] = 1000 // last index
		for i := range rows[5] {
			rows[5][i] = 2 // all equal: 0
		}
		flat := make([]float32, len(rows)*padded) // rows padded to a stride
		want := make([]float32, len(rows))
		for r, row := range rows {
			row = roundAll(row, dt)
			copy(flat[r*padded:], row)
			want[r] = float32(argmaxRef(row))
		}
		dOut := alloc(t, dev, len(rows)*4)
		if err := k.Argmax(dev.Stream, dOut, upload(t, dev, flat, dt), len(rows), vocab, padded, dt); err != nil {
			t.Fatal(err)
		}
		got := make([]int32, len(rows))
		if err := CopyDtoH(dev, got, dOut); err != nil {
			t.Fatal(err)
		}
		for r := range rows {
			if float32(got[r]) != want[r] {
				t.Errorf("%v row %d: argmax %d, want %v", dt, r, got[r], want[r])
			}
		}
	}
}

func TestGPUConvert(t *testing.T) {
	dev, k := needKernels(t)
	rng := rand.New(rand.NewPCG(8, 8))
	special := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 1 + 1.0/256, 1 + 3.0/256, float32(math.NaN()),
		float32(math.Inf(1)), float32(math.Inf(-1)), 65504, 65520, 1e-8, 6e-8, 3.14159265, 3e38, -1e-40}
	vals := append(special, randn(rng, 5000, 10)...)
	n := len(vals)
	dF32 := upload(t, dev, vals, F32)
	for _, dt := range []DType{BF16, F16} {
		d16 := alloc(t, dev, n*2)
		if err := k.Convert(dev.Stream, d16, dF32, n, F32, dt); err != nil {
			t.Fatal(err)
		}
		bits := make([]uint16, n)
		if err := CopyDtoH(dev, bits, d16); err != nil {
			t.Fatal(err)
		}
		want := encode16(vals, dt)
		for i := range bits {
			gotF, wantF := decode16(bits[i:i+1], dt)[0], decode16(want[i:i+1], dt)[0]
			if bits[i] != want[i] && !(math.IsNaN(float64(gotF)) && math.IsNaN(float64(wantF))) {
				t.Errorf("f32→%v(%v) = %#04x, want %#04x", dt, vals[i], bits[i], want[i])
			}
		}
		back := alloc(t, dev, n*4)
		if err := k.Convert(dev.Stream, back, d16, n, dt, F32); err != nil {
			t.Fatal(err)
		}
		compare(t, fmt.Sprintf("%v→f32", dt), download(t, dev, back, n, F32), decode16(want, dt), 0, 0)
	}
	// bf16 → f16 directly equals the two-step conversion.
	dB := upload(t, dev, vals, BF16)
	dH := alloc(t, dev, n*2)
	if err := k.Convert(dev.Stream, dH, dB, n, BF16, F16); err != nil {
		t.Fatal(err)
	}
	want := make([]float32, n)
	for i, v := range vals {
		want[i] = round(round(v, BF16), F16)
	}
	compare(t, "bf16→f16", download(t, dev, dH, n, F16), want, 0, 0)
}

// TestGPUGemvWidensF16 runs the f16 skinny kernels (direct and staged) on
// every f16 bit pattern: row o of W holds pattern o in its first column
// and zeros elsewhere, x is e₀, so y[o] must be the pattern's value, bit
// for bit (NaN as NaN, ±0 as either zero), the subnormals, infinities
// and NaNs included.
func TestGPUGemvWidensF16(t *testing.T) {
	dev, k := needKernels(t)
	const rows, in = 1 << 16, 8
	w := make([]uint16, rows*in)
	for o := range rows {
		w[o*in] = uint16(o)
	}
	dW := alloc(t, dev, 2*len(w))
	if err := CopyHtoD(dev, dW, w); err != nil {
		t.Fatal(err)
	}
	e0 := make([]float32, in)
	e0[0] = 1
	for _, staged := range []bool{false, true} {
		xdt := F16
		if staged {
			xdt = F32
		}
		x := upload(t, dev, e0, xdt)
		y := alloc(t, dev, 4*rows)
		c := GemvCall{X: x, Staged: staged, M: 1, In: in, WDType: F16, Targets: []GemvTarget{{Y: y, W: dW, Out: rows}}}
		if err := k.Gemv(dev.Stream, c); err != nil {
			t.Fatal(err)
		}
		got := download(t, dev, y, rows, F32)
		bad := 0
		for o, v := range got {
			want := tensor.F16ToF32(uint16(o))
			same := math.Float32bits(v) == math.Float32bits(want) || v == want ||
				math.IsNaN(float64(v)) && math.IsNaN(float64(want))
			if !same {
				if bad++; bad <= 5 {
					t.Errorf("staged=%v: f16 %#04x gives %v (%#08x), want %v", staged, o, v, math.Float32bits(v), want)
				}
			}
		}
		if bad > 0 {
			t.Errorf("staged=%v: %d of %d patterns wrong", staged, bad, rows)
		}
	}
}
