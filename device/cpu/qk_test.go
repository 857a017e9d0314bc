package cpu

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gosling-ai/gosling/tensor"
)

// qkF16Fields are the byte offsets of each block format's f16 scales.
var qkF16Fields = map[tensor.DType][]int{
	tensor.Q4_0: {0}, tensor.Q4_1: {0, 2}, tensor.Q5_0: {0}, tensor.Q5_1: {0, 2},
	tensor.Q2_K: {80, 82}, tensor.Q3_K: {108}, tensor.Q4_K: {0, 2}, tensor.Q5_K: {0, 2},
	tensor.Q6_K: {208}, tensor.IQ4_NL: {0}, tensor.IQ4_XS: {0},
	tensor.AWQ4_G32: {0}, tensor.AWQ4_G64: {0}, tensor.AWQ4_G128: {0},
}

// randBlocks is an n×k weight of random blocks: every quant and integer
// scale bit uniformly random (the extremes the kernels' integer sums
// must hold included), the f16 scales small and of both signs.
func randBlocks(rng *rand.Rand, dt tensor.DType, n, k int) tensor.Weight {
	rowBytes, err := dt.RowBytes(k)
	if err != nil {
		panic(err)
	}
	data := make([]byte, n*rowBytes)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	bb := tensor.BlockBytes(dt)
	for b := 0; b < len(data); b += bb {
		for _, off := range qkF16Fields[dt] {
			binary.LittleEndian.PutUint16(data[b+off:], tensor.F32ToF16(float32(rng.NormFloat64()*0.01)))
		}
	}
	return tensor.Weight{Name: "w", DType: dt, Shape: []int{n, k}, Data: data}
}

// qkActivations is what the QK kernels multiply by: x quantised per
// super-block as packQKTile does, and dequantised.
func qkActivations(x []float32, super int) []float32 {
	out := make([]float32, len(x))
	for b := 0; b < len(x); b += super {
		d, id := q8Scale(x[b : b+super])
		for i, v := range x[b : b+super] {
			out[b+i] = roundAway(v*id) * d
		}
	}
	return out
}

// checkQKLinear compares Forward with a float64 product of the decoded
// weights and the quantised activations. The kernels' sums are exact
// integers; what remains is float32 rounding of each super-block's
// scaled sums, whose parts (scale and min terms) may each exceed the
// result, hence the looser bound than checkLinear's.
func checkQKLinear(t *testing.T, w *Workers, l *Linear, x tensor.T) {
	t.Helper()
	got := l.Forward(w, x)
	n, k := l.Out(), l.In()
	super := qkFormats[l.packed.qk].super
	row := make([]float32, k)
	for o := range n {
		l.W.DecodeRow(o, row)
		for r := range x.Rows() {
			xr := qkActivations(x.Row(r), super)
			var want, mag float64
			if l.Bias != nil {
				want, mag = float64(l.Bias[o]), math.Abs(float64(l.Bias[o]))
			}
			for i := range k {
				p := float64(row[i]) * float64(xr[i])
				want += p
				mag += math.Abs(p)
			}
			if diff := math.Abs(float64(got.HostData()[r*n+o]) - want); diff > 2e-5*mag+1e-30 {
				t.Fatalf("%v [%d×%d] token %d of %d, output %d: got %v, want %v (Σ|terms| %v)", l.W.DType, n, k, r, x.Rows(), o, got.HostData()[r*n+o], want, mag)
			}
		}
	}
}

var qkDTypes = []tensor.DType{tensor.Q4_0, tensor.Q4_1, tensor.Q5_0, tensor.Q5_1, tensor.Q2_K, tensor.Q3_K, tensor.Q4_K, tensor.Q5_K, tensor.Q6_K, tensor.IQ4_NL, tensor.IQ4_XS}

// TestQKLinear covers every block format, served compactly, on every
// kernel set: partial panels, one and several super-blocks, tile heights
// up to the sets' largest and past them, on one worker and on several.
func TestQKLinear(t *testing.T) {
	rng := rand.New(rand.NewPCG(24, 1))
	pool := NewWorkers(2)
	defer pool.Close()
	eachKernelSet(t, func(t *testing.T) {
		for _, dt := range qkDTypes {
			for _, shape := range [][2]int{{33, 256}, {64, 768}} {
				l := NewLinear(randBlocks(rng, dt, shape[0], shape[1]), nil)
				if l.DType() != dt {
					t.Fatalf("%v served as %v", dt, l.DType())
				}
				for _, m := range []int{1, 2, 4, 7} {
					checkQKLinear(t, nil, l, randInput(rng, m, shape[1]))
				}
			}
		}
		// Split over workers, k in blocks (kBlock) for many tiles; with
		// a bias, and a partial last panel after whole ones (one token's
		// run kernels take the whole panels of a task).
		for _, n := range []int{96, 200} {
			l := NewLinear(randBlocks(rng, tensor.Q4_K, n, 1280), nil)
			if n == 200 {
				l.Bias = randInput(rng, 1, n).HostData()
			}
			for _, m := range []int{1, 24} {
				checkQKLinear(t, pool, l, randInput(rng, m, 1280))
			}
		}
	})
}

// TestQKBadRows: a row that is not whole super-blocks is an error naming
// the tensor and its type.
func TestQKBadRows(t *testing.T) {
	w := tensor.Weight{Name: "blk.0.ffn_down.weight", DType: tensor.Q4_K, Shape: []int{2, 96}}
	_, err := packWeight(w, weightBytes)
	if err == nil || !contains(err.Error(), "blk.0.ffn_down.weight", "Q4_K") {
		t.Fatalf("packWeight of a 96-wide Q4_K row: %v", err)
	}
}

func contains(s string, subs ...string) bool {
	for _, sub := range subs {
		found := false
		for i := 0; i+len(sub) <= len(s); i++ {
			if s[i:i+len(sub)] == sub {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// TestPackQKTile: the kernel sets' quantisation of QK activation tiles is
// packQKTile's Go loop bit for bit, for both super-block sizes, every tile
// height, ties, zero super-blocks and subnormal ones, and writes nothing
// outside the tile.
func TestPackQKTile(t *testing.T) {
	rng := rand.New(rand.NewPCG(24, 25))
	eachKernelSet(t, func(t *testing.T) {
		for _, super := range qkSupers {
			for mr := 1; mr <= maxMR; mr++ {
				for _, k := range []int{super, 3 * super} {
					const t0, guard = 1, 64
					ldx := k + 5
					x := randVec(rng, (t0+mr)*ldx, 3)
					for tok := range mr {
						edgeBlock(rng, x[(t0+tok)*ldx:][:k], tok, super)
					}
					size := qkTileBytes(super, mr, k)
					got, want := make([]byte, guard+size+guard), make([]byte, guard+size+guard)
					for i := range got {
						got[i], want[i] = 0x5a, 0x5a
					}
					packQKTile(got[guard:guard+size], x, ldx, t0, mr, k, super)
					goPackQKTile(want[guard:guard+size], x, ldx, t0, mr, k, super)
					for i := range got {
						if got[i] != want[i] {
							t.Fatalf("super %d mr=%d k=%d: byte %d (tile offset %d) = %#x, want %#x", super, mr, k, i, i-guard, got[i], want[i])
						}
					}
				}
			}
		}
	})
}

// TestQKDecodeGroup: one token through a group of QK linears of mixed
// formats and super-block sizes (decodeQK's run of their panels cut into
// shares that straddle the linears' boundaries) is bit for bit each
// linear alone on the caller, on pools of one, two and three workers; a
// group with a partial panel takes the general path and agrees too.
func TestQKDecodeGroup(t *testing.T) {
	rng := rand.New(rand.NewPCG(24, 7))
	const k = 512
	whole := []*Linear{
		NewLinear(randBlocks(rng, tensor.Q4_K, 96, k), nil),
		NewLinear(randBlocks(rng, tensor.Q6_K, 160, k), nil),
		NewLinear(randBlocks(rng, tensor.Q4_0, 64, k), nil),
		NewLinear(randBlocks(rng, tensor.Q5_K, 32, k), nil),
	}
	whole[1].Bias = randInput(rng, 1, 160).HostData()
	partial := append(slices.Clone(whole[:2]), NewLinear(randBlocks(rng, tensor.Q4_K, 40, k), nil))
	eachKernelSet(t, func(t *testing.T) {
		for _, workers := range []int{1, 2, 3} {
			pool := NewWorkers(workers)
			for _, ls := range [][]*Linear{whole, partial} {
				x := randInput(rng, 1, k)
				outs := ForwardGroup(pool, x, ls...)
				for i, l := range ls {
					alone := l.Forward(nil, x)
					if !slices.Equal(outs[i].HostData(), alone.HostData()) {
						t.Fatalf("%d workers, linear %d (%v, %d rows of %d linears): grouped %v, alone %v",
							workers, i, l.DType(), l.Out(), len(ls), outs[i].HostData()[:4], alone.HostData()[:4])
					}
				}
			}
			pool.Close()
		}
	})
}
