package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/tensor"
)

// fp8Want is x·Wᵀ + b for an FP8 weight, computed in float64 from
// device.FP8Path's definitions: the activations each path reads and the
// weight values Q·s.
func fp8Want(x []float32, w tensor.ScaledFP8, bias []float32, rows int) []float64 {
	in, out := w.In(), w.Out()
	path := device.FP8PathOf(rows, w)
	xs := make([]float64, len(x))
	q := make([]byte, in)
	for r := range rows {
		row := x[r*in : (r+1)*in]
		var s float32
		if path == device.FP8Scaled {
			s = tensor.QuantizeFP8Row(q, row)
		}
		for i, v := range row {
			switch path {
			case device.FP8Scaled:
				xs[r*in+i] = float64(tensor.FP8E4M3ToF32(q[i])) * float64(s)
			default:
				xs[r*in+i] = float64(tensor.BF16ToF32(tensor.F32ToBF16(v)))
			}
		}
	}
	y := make([]float64, rows*out)
	wrow := make([]float32, in)
	for o := range out {
		w.WidenRow(o, wrow)
		for r := range rows {
			var sum float64
			for i, v := range wrow {
				if path == device.FP8Widened {
					v = tensor.BF16ToF32(tensor.F32ToBF16(v))
				}
				sum += float64(v) * xs[r*in+i]
			}
			if bias != nil {
				sum += float64(bias[o])
			}
			y[r*out+o] = sum
		}
	}
	return y
}

// randomFP8 is a random [out, in] weight quantised in br×bc blocks.
func randomFP8(t *testing.T, rng *rand.Rand, out, in, br, bc int) tensor.ScaledFP8 {
	vals := make([]float32, out*in)
	for i := range vals {
		vals[i] = float32(rng.NormFloat64())
	}
	w, err := tensor.QuantizeFP8Blocks(tensor.FromFloat32("w", vals, out, in), br, bc)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestFP8Reference: Linear over FP8 matrices takes, at every batch size
// and scale layout, the path device.FP8PathOf names and computes what
// that path defines (float32 sums against float64 sums).
func TestFP8Reference(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	ops := NewOps(NewWorkers(2))
	ops.FP8 = true
	for _, tc := range []struct {
		name            string
		rows, out, in   int
		br, bc          int
		want            device.FP8Path
		withBias, group bool
	}{
		{"skinny per-channel", 3, 40, 64, 1, 64, device.FP8Skinny, true, false},
		{"skinny 128x128 blocks", 8, 200, 272, 128, 128, device.FP8Skinny, false, false},
		{"scaled per-channel", 9, 40, 64, 1, 64, device.FP8Scaled, false, true},
		{"scaled per-channel, 7 rows", 7, 40, 64, 1, 64, device.FP8Scaled, true, false},
		{"scaled per-tensor", 33, 24, 48, 24, 48, device.FP8Scaled, true, false},
		{"widened blocks", 20, 200, 272, 128, 128, device.FP8Widened, true, false},
		{"widened unaligned", 2, 12, 40, 1, 40, device.FP8Widened, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := randomFP8(t, rng, tc.out, tc.in, tc.br, tc.bc)
			if got := device.FP8PathOf(tc.rows, w); got != tc.want {
				t.Fatalf("path %d, want %d", got, tc.want)
			}
			var bias []float32
			if tc.withBias {
				bias = make([]float32, tc.out)
				for i := range bias {
					bias[i] = float32(rng.NormFloat64())
				}
			}
			m, err := ops.FP8Matrix(w, bias)
			if err != nil {
				t.Fatal(err)
			}
			x := make([]float32, tc.rows*tc.in)
			for i := range x {
				x[i] = float32(rng.NormFloat64() * math.Exp(rng.NormFloat64()))
			}
			xt := tensor.From(x, tc.rows, tc.in)
			var got tensor.T
			if tc.group { // beside a plain matrix, which reads x as it is
				plain, err := ops.Matrix(w.Widen(tensor.F32), nil)
				if err != nil {
					t.Fatal(err)
				}
				outs := ops.LinearGroup(xt, plain, m)
				got = outs[1]
				for i, v := range outs[0].HostData() {
					r, o := i/tc.out, i%tc.out
					var s float64
					row := make([]float32, tc.in)
					w.WidenRow(o, row)
					for k := range row {
						s += float64(row[k]) * float64(x[r*tc.in+k])
					}
					if math.Abs(float64(v)-s) > 1e-4*(1+math.Abs(s)) {
						t.Fatalf("plain matrix beside FP8: [%d, %d] = %g, want %g", r, o, v, s)
					}
				}
			} else {
				got = ops.Linear(xt, m)
			}
			want := fp8Want(x, w, bias, tc.rows)
			for i, v := range got.HostData() {
				if math.Abs(float64(v)-want[i]) > 1e-4*(1+math.Abs(want[i])) {
					t.Fatalf("[%d, %d] = %g, want %g", i/tc.out, i%tc.out, v, want[i])
				}
			}
		})
	}
}
