package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/tensor"
)

// q, k and v of a prefill in the weights' 16-bit dtype
// (NormLinearGroup16) and their rotation in it (RopeQK on 16-bit
// tensors), against host references and against the float32 path they
// replace: the two differ by where values are rounded to 16 bits, never
// by more than that rounding explains.

// ulp16 is the largest gap between neighbours of a 16-bit dtype relative
// to the value (7 and 10 explicit mantissa bits): two roundings of nearly
// equal values differ by at most that.
func ulp16(dt DType) float64 {
	if dt == F16 {
		return 1.0 / (1 << 10)
	}
	return 1.0 / (1 << 7)
}

func testModelOpsNormLinear16(t *testing.T, env opsEnv) {
	rng := rand.New(rand.NewPCG(52, 52))
	const (
		hidden, hd, heads, kvHeads = 64, 32, 3, 1
		eps                        = 1e-6
	)
	outs := []int{heads * hd, kvHeads * hd, kvHeads * hd}
	norm := randn(rng, hidden, 0.2)
	for i := range norm {
		norm[i]++
	}
	for _, wdt := range []DType{BF16, F16} {
		subtest(t, wdt.String(), func(t *testing.T) {
			o := env.newOps(t, wdt)
			ws := make([]tensor.Weight, len(outs))
			wvals := make([][]float32, len(outs))
			for i, n := range outs {
				ws[i] = storedWeight(t, randn(rng, n*hidden, 0.125), F32, n, hidden)
				wvals[i] = roundAll(ws[i].Float32(), wdt)
			}
			group, err := o.MatrixGroup(ws, nil) // adjacent, as a model loads q, k and v
			if err != nil {
				t.Fatal(err)
			}
			v := testVector(t, o, norm)
			r := &device.Rope{HeadDim: hd, InvFreq: ropeInvFreq(hd, 10000)}
			// More rows than a product of adjacent matrices fuses (fuseMaxRows).
			rows := fuseMaxRows + 44
			x := randn(rng, rows*hidden, 1)
			pos := make([]int32, rows)
			for i := range pos {
				pos[i] = int32(i)
			}
			pos[rows-1] = 120000
			o.BeginForward()
			defer o.EndForward()
			dx := o.Upload(tensor.From(x, rows, hidden))
			got := o.NormLinearGroup16(dx, v, eps, wdt, group...)
			f32 := o.NormLinearGroup(dx, v, eps, group...)
			xn := rmsnormRef(x, norm, eps, 0, F32)
			atol, _ := linearTolerance(hidden, wdt)
			host16 := make([][]float32, len(outs))
			host32 := make([][]float32, len(outs))
			for i, n := range outs {
				if got[i].DType != wdt || !slices.Equal(got[i].Shape, []int{rows, n}) {
					t.Fatalf("product %d is %v %v, want %v [%d, %d]", i, got[i].DType, got[i].Shape, wdt, rows, n)
				}
				host16[i], host32[i] = o.ToHost(got[i]).HostData(), o.ToHost(f32[i]).HostData()
				// The GEMM's float32 sum rounded once: the host's sum rounded
				// may land on the neighbour.
				want := roundAll(linearRef(xn, wvals[i], nil, rows, hidden, n, wdt), wdt)
				compare(t, fmt.Sprintf("product %d", i), host16[i], want, atol, ulp16(wdt))
				compare(t, fmt.Sprintf("product %d against the float32 path", i), host16[i], host32[i], atol, ulp16(wdt))
			}

			o.RopeQK(got[0], got[1], pos, r)
			o.RopeQK(f32[0], f32[1], pos, r)
			for i, h := range []int{heads, kvHeads} {
				// rope_<dt>: float32 arithmetic on the 16-bit values, rounded once.
				want := slices.Clone(host16[i])
				ropeRef(want, h*hd, h, hd, hd, pos, r.InvFreq, false, 1, wdt)
				rotated := o.ToHost(got[i]).HostData()
				compare(t, fmt.Sprintf("rotated %c", "qk"[i]), rotated, want, 1e-5, ulp16(wdt))
				// Against the float32 path: each output mixes two inputs that
				// were each rounded once more than there, and is rounded itself.
				ref := o.ToHost(f32[i]).HostData()
				bad := 0
				for j := range ref {
					pair := j - j%hd
					x0, x1 := host32[i][pair+j%(hd/2)], host32[i][pair+j%(hd/2)+hd/2]
					bound := ulp16(wdt)*(math.Abs(float64(x0))+math.Abs(float64(x1))+math.Abs(float64(ref[j]))) + atol
					if d := math.Abs(float64(rotated[j] - ref[j])); d > bound {
						if bad < 5 {
							t.Errorf("rotated %c[%d] = %v, float32 path %v (bound %.3g)", "qk"[i], j, rotated[j], ref[j], bound)
						}
						bad++
					}
				}
				if bad > 0 {
					t.Errorf("rotated %c: %d of %d values off the float32 path", "qk"[i], bad, len(ref))
				}
			}

			// Elsewhere the products stay float32, NormLinearGroup's own.
			for _, c := range []struct {
				name string
				rows int
				dt   DType
				mats []device.Matrix
			}{
				{"decode rows", 1, wdt, group},
				{"fused adjacent rows", fuseMaxRows, wdt, group},
				{"other 16-bit dtype", rows, map[DType]DType{BF16: F16, F16: BF16}[wdt], group},
				{"float32 asked", rows, F32, group},
			} {
				dx := o.Upload(tensor.From(x[:c.rows*hidden], c.rows, hidden))
				got := o.NormLinearGroup16(dx, v, eps, c.dt, c.mats...)
				want := o.NormLinearGroup(dx, v, eps, c.mats...)
				for i := range got {
					if got[i].DType != F32 {
						t.Fatalf("%s: product %d is %v, want F32", c.name, i, got[i].DType)
					}
					compare(t, fmt.Sprintf("%s: product %d", c.name, i), o.ToHost(got[i]).HostData(), o.ToHost(want[i]).HostData(), 0, 0)
				}
			}
			biased, err := o.Matrix(ws[1], randn(rng, outs[1], 0.1))
			if err != nil {
				t.Fatal(err)
			}
			if got := o.NormLinearGroup16(dx, v, eps, wdt, group[0], biased); got[0].DType != F32 || got[1].DType != F32 {
				t.Errorf("with a bias: products in %v and %v, want F32", got[0].DType, got[1].DType)
			}
		})
	}
}

// The pure part of NormLinearGroup16's choice.
func TestNormLinear16Applies(t *testing.T) {
	const rows = fuseMaxRows + 1
	plain := func(dt DType, out int, ptr DevicePtr) *Matrix {
		return &Matrix{out: out, in: 64, dtype: dt, ptr: ptr}
	}
	q, k, v := plain(BF16, 96, 0x1000), plain(BF16, 32, 0x1000+96*64*2), plain(BF16, 32, 0x1000+128*64*2)
	apart := plain(BF16, 32, 0x100000)
	withBias := plain(BF16, 32, 0x200000)
	withBias.bias = 0x300000
	fp8 := plain(BF16, 32, 0x400000)
	fp8.fp8 = &fp8Weights{}
	for _, c := range []struct {
		name string
		rows int
		dt   DType
		mats []*Matrix
		want bool
	}{
		{"prefill of adjacent q, k, v", rows, BF16, []*Matrix{q, k, v}, true},
		{"adjacent within the fused rows", fuseMaxRows, BF16, []*Matrix{q, k, v}, false},
		{"apart within the fused rows", fuseMaxRows, BF16, []*Matrix{q, apart}, true},
		{"decode row", 1, BF16, []*Matrix{q, apart}, false},
		{"f16 asked of bf16 weights", rows, F16, []*Matrix{q, k, v}, false},
		{"float32 asked", rows, F32, []*Matrix{q, k, v}, false},
		{"float32 weights", rows, F32, []*Matrix{plain(F32, 96, 0x1000)}, false},
		{"f16 weights", rows, F16, []*Matrix{plain(F16, 96, 0x1000), plain(F16, 32, 0x500000)}, true},
		{"a bias", rows, BF16, []*Matrix{q, withBias}, false},
		{"fp8 scales", rows, BF16, []*Matrix{q, fp8}, false},
		{"mixed dtypes", rows, BF16, []*Matrix{q, plain(F16, 32, 0x500000)}, false},
	} {
		if got := normLinear16Applies(c.rows, c.mats, c.dt); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
