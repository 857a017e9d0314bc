package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"
	"unsafe"

	"github.com/gosling-ai/gosling/device/cpu/internal/asmgen"
	"github.com/gosling-ai/gosling/tensor"
)

// eachKernelSet runs fn once per kernel set this CPU has: always the pure
// Go one, and every assembly set the CPU supports (AVX2 on AVX-512 too).
func eachKernelSet(t *testing.T, fn func(t *testing.T)) {
	t.Helper()
	sets := append([]*kernelSet{goKernels}, asmSets...)
	if asmKernels == nil {
		t.Logf("no assembly kernels on this CPU; testing the Go kernels only")
	}
	prev := active.Load()
	defer active.Store(prev)
	for _, ks := range sets {
		active.Store(ks)
		t.Run(ks.name, fn)
	}
}

func randWeight(rng *rand.Rand, dtype tensor.DType, n, k int) tensor.Weight {
	values := make([]float32, n*k)
	for i := range values {
		values[i] = float32(rng.NormFloat64())
	}
	w := tensor.FromFloat32("w", values, n, k)
	if dtype == tensor.F32 {
		return w
	}
	c, err := tensor.Convert(w, dtype)
	if err != nil {
		panic(err)
	}
	return c
}

// q8Activations is what the Q8 kernels multiply by: x quantised per block
// of 32 and dequantised (the reference for their int8 arithmetic).
func q8Activations(x []float32) []float32 { return qkActivations(x, 32) }

// checkLinear compares Forward with a float64 product of the decoded
// weights; the tolerance scales with Σ|w·x|, the size of the rounding.
func checkLinear(t *testing.T, w *Workers, l *Linear, x tensor.T) {
	t.Helper()
	got := l.Forward(w, x)
	n, k := l.Out(), l.In()
	row := make([]float32, k)
	for o := range n {
		l.W.DecodeRow(o, row)
		for r := range x.Rows() {
			xr := x.Row(r)
			if l.DType() == tensor.Q8_0 {
				xr = q8Activations(xr)
			}
			var want, mag float64
			for i := range k {
				p := float64(row[i]) * float64(xr[i])
				want += p
				mag += math.Abs(p)
			}
			if l.Bias != nil {
				want += float64(l.Bias[o])
				mag += math.Abs(float64(l.Bias[o]))
			}
			if diff := math.Abs(float64(got.HostData()[r*n+o]) - want); diff > 2e-6*mag+1e-30 {
				t.Fatalf("%v [%d×%d] token %d of %d, output %d: got %v, want %v (Σ|terms| %v)", l.DType(), n, k, r, x.Rows(), o, got.HostData()[r*n+o], want, mag)
			}
		}
	}
}

func randInput(rng *rand.Rand, m, k int) tensor.T {
	x := tensor.New(m, k)
	for i := range x.HostData() {
		x.HostData()[i] = float32(rng.NormFloat64())
	}
	return x
}

// TestLinearKernels covers every dtype and tile height over sizes with
// partial panels (n % 32 ≠ 0) and odd inner sizes (k % 4 ≠ 0: the
// unrolled loop's tail), on one worker and on several.
func TestLinearKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pool := NewWorkers(3)
	defer pool.Close()
	eachKernelSet(t, func(t *testing.T) {
		for _, dtype := range []tensor.DType{tensor.F32, tensor.BF16, tensor.F16, tensor.Q8_0} {
			ks := []int{1, 3, 17, 64, 133}
			if dtype == tensor.Q8_0 {
				ks = []int{32, 96, 160}
			}
			for _, k := range ks {
				for _, n := range []int{1, 31, 33, 70} {
					l := NewLinear(randWeight(rng, dtype, n, k), nil)
					if n == 33 {
						l.Bias = randInput(rng, 1, n).HostData()
					}
					for _, m := range []int{1, 2, 3, 5, 6, 7, 12, 13, 25} {
						checkLinear(t, nil, l, randInput(rng, m, k))
					}
				}
			}
			// Large enough to be split over the workers, in panels and tiles,
			// with k cut in blocks and a partial last block (kBlock).
			k := 1088
			l := NewLinear(randWeight(rng, dtype, 300, k), nil)
			for _, m := range []int{1, 4, 40} {
				checkLinear(t, pool, l, randInput(rng, m, k))
			}
		}
	})
}

// TestKernelTilesDirect calls every generated kernel of the active set
// against the Go kernel on the same packed operands.
func TestKernelTilesDirect(t *testing.T) {
	if asmKernels == nil {
		t.Skip("no assembly kernels on this CPU")
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, ks := range asmSets {
		testKernelTiles(t, rng, ks)
	}
}

func testKernelTiles(t *testing.T, rng *rand.Rand, ks *kernelSet) {
	for _, dtype := range []tensor.DType{tensor.F32, tensor.BF16, tensor.F16, tensor.Q8_0} {
		k := 96
		p, err := packWeight(randWeight(rng, dtype, panelWidth, k), weightBytes)
		if err != nil {
			t.Fatal(err)
		}
		kind := kindOf(dtype)
		for mr := 1; mr <= ks.mrMax[kind]; mr++ {
			x := randInput(rng, mr, k)
			want := make([]float32, mr*panelWidth)
			got := make([]float32, mr*panelWidth)
			if kind == kindQ8 {
				a := make([]byte, q8TileBytes(mr, k))
				packQ8Tile(a, x.HostData(), k, 0, mr, k)
				goKernels.q8[mr](ptr(a), p.panel(0), k/32, ptr(want), 4*panelWidth)
				ks.q8[mr](ptr(a), p.panel(0), k/32, ptr(got), 4*panelWidth)
			} else {
				a := make([]float32, mr*k)
				packFloatTile(a, x.HostData(), k, 0, mr, k)
				goKernels.float[kind][mr](ptr(a), p.panel(0), k, ptr(want), 4*panelWidth)
				ks.float[kind][mr](ptr(a), p.panel(0), k, ptr(got), 4*panelWidth)
				if st := ks.floatStore[kind][mr]; st != nil {
					// Overwrites c: stale values in it must not show.
					stored := make([]float32, mr*panelWidth)
					for i := range stored {
						stored[i] = float32(i) + 0.5
					}
					// A prefetch of any address, even past the panel, is
					// harmless; nil asks for none.
					pf := p.panel(0)
					if mr%2 == 0 {
						pf = nil
					}
					st(ptr(a), p.panel(0), k, ptr(stored), 4*panelWidth, pf)
					for i := range want {
						if d := math.Abs(float64(stored[i] - want[i])); d > 1e-4*(1+math.Abs(float64(want[i]))) {
							t.Fatalf("%s %v mr=%d store element %d: %v, go %v", ks.name, dtype, mr, i, stored[i], want[i])
						}
					}
				}
			}
			for i := range want {
				if d := math.Abs(float64(got[i] - want[i])); d > 1e-4*(1+math.Abs(float64(want[i]))) {
					t.Fatalf("%s %v mr=%d element %d: asm %v, go %v", ks.name, dtype, mr, i, got[i], want[i])
				}
			}
		}
	}
}

func TestForwardGroupMixedKinds(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	pool := NewWorkers(2)
	defer pool.Close()
	eachKernelSet(t, func(t *testing.T) {
		k := 128
		ls := []*Linear{
			NewLinear(randWeight(rng, tensor.Q8_0, 40, k), nil),
			NewLinear(randWeight(rng, tensor.F32, 64, k), nil),
			NewLinear(randWeight(rng, tensor.BF16, 33, k), nil),
		}
		for _, m := range []int{1, 9, 30} {
			x := randInput(rng, m, k)
			outs := ForwardGroup(pool, x, ls...)
			for i, l := range ls {
				alone := l.Forward(nil, x)
				for j := range alone.HostData() {
					if outs[i].HostData()[j] != alone.HostData()[j] {
						t.Fatalf("layer %d (%v), m=%d: grouped %v, alone %v", i, l.DType(), m, outs[i].HostData()[j], alone.HostData()[j])
					}
				}
			}
		}
	})
}

func TestOtherDTypesWidenToF32(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	w := randWeight(rng, tensor.F32, 5, 20)
	vals := w.Float32()
	fp8 := make([]byte, len(vals))
	for i, v := range vals {
		fp8[i] = tensor.F32ToFP8E4M3(v)
	}
	l := NewLinear(tensor.Weight{Name: "fp8", DType: tensor.FP8E4M3, Shape: []int{5, 20}, Data: fp8}, nil)
	if l.DType() != tensor.F32 {
		t.Fatalf("FP8 served as %v", l.DType())
	}
	eachKernelSet(t, func(t *testing.T) { checkLinear(t, nil, l, randInput(rng, 3, 20)) })
}

func TestGeneratedKernelsUpToDate(t *testing.T) {
	for name, want := range map[string]string{"kernels_amd64.s": asmgen.Assembly(), "kernels_amd64_gen.go": asmgen.Declarations()} {
		got, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("%s is stale: run go generate ./device/cpu", name)
		}
	}
	if maxMRZ != asmgen.MaxMRZ || maxMRQ8Z != asmgen.MaxMRQ8Z || maxMRY != asmgen.MaxMRY || maxMRQKY != asmgen.MaxMRQKY || maxMRI4Y != asmgen.MaxMRI4Y || asmgen.MaxMRZ > maxMR {
		t.Errorf("tile heights disagree with internal/asmgen")
	}
}

// TestQKFormatsAgree: the generator's copy of each panel format is
// device/cpu's.
func TestQKFormatsAgree(t *testing.T) {
	for _, g := range asmgen.QKFormatsY {
		f := qkFormats[g.ID]
		want := asmgen.QKFormat{ID: g.ID, Super: f.super, HB: f.hb, Sub: f.sub, Signed: f.signed, Mins: f.mins, Offset: f.offset, Table: f.table}
		if g != want {
			t.Errorf("asmgen format %d is %+v, device/cpu's %+v", g.ID, g, f)
		}
	}
}

func TestTiles(t *testing.T) {
	for _, tc := range []struct {
		m, mrMax int
		want     []int
	}{{1, 12, []int{1}}, {12, 12, []int{12}}, {13, 12, []int{7, 6}}, {32, 12, []int{11, 11, 10}}, {5, 2, []int{2, 2, 1}}} {
		var got []int
		next := 0
		for _, tl := range tiles(tc.m, tc.mrMax, func(mr int) int { return 8 * mr }) {
			if tl.t0 != next || tl.off != next*8 {
				t.Errorf("m=%d: tile %+v does not follow token %d", tc.m, tl, next)
			}
			next += tl.mr
			got = append(got, tl.mr)
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("tiles(%d, %d) = %v, want %v", tc.m, tc.mrMax, got, tc.want)
		}
	}
}

func ptr[T any](s []T) unsafe.Pointer { return unsafe.Pointer(&s[0]) }

// TestPackFloatTile checks the activation packing of every tile height
// against its definition, dst[i][t] = x[t0+t][i], with inputs that are
// and are not a multiple of the kernels' eight, rows longer than k, and
// the floats around dst left alone (the AVX-512 kernels mask their
// stores to the tile's height).
func TestPackFloatTile(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	eachKernelSet(t, func(t *testing.T) {
		for mr := 1; mr <= maxMR; mr++ {
			for _, k := range []int{1, 8, 13, 24, 771} {
				const t0, guard = 2, 16
				ldx := k + 3
				x := randVec(rng, (t0+mr)*ldx, 1)
				buf := make([]float32, guard+k*mr+guard)
				for i := range buf {
					buf[i] = -7
				}
				packFloatTile(buf[guard:guard+k*mr], x, ldx, t0, mr, k)
				for i := range k {
					for tok := range mr {
						if got, want := buf[guard+i*mr+tok], x[(t0+tok)*ldx+i]; got != want {
							t.Fatalf("mr=%d k=%d input %d token %d: %v, want %v", mr, k, i, tok, got, want)
						}
					}
				}
				for i := range guard {
					if buf[i] != -7 || buf[guard+k*mr+i] != -7 {
						t.Fatalf("mr=%d k=%d: wrote outside the tile", mr, k)
					}
				}
			}
		}
	})
}

// TestPackQ8Tile checks the quantised activation packing of every kernel
// set bit for bit against goPackQ8Tile's loop, over every tile height,
// with blocks of exact halves (which round away from zero), zeros, a
// subnormal maximum (1/d overflows), and guard bytes around the tile; and
// the loop itself against its definition: each value within half a step
// of its quant times d.
// edgeBlock makes one block of bs inputs of token tok's row an edge case
// of quantisation, by tok: every value a tie or exact (d = 1), all zero,
// subnormal, or (tok%4 == 3) left random.
func edgeBlock(rng *rand.Rand, row []float32, tok, bs int) {
	switch b := row[(tok%(len(row)/bs))*bs:][:bs]; tok % 4 {
	case 0:
		for i := range b {
			b[i] = float32(rng.IntN(253)-126) + 0.5*float32(i%2)
		}
		b[rng.IntN(bs)] = -127
	case 1:
		clear(b)
	case 2:
		for i := range b {
			b[i] = float32(i%32-16) * 1e-45
		}
	}
}

func TestPackQ8Tile(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	const bs = tensor.Q8_0BlockSize
	eachKernelSet(t, func(t *testing.T) {
		for mr := 1; mr <= maxMR; mr++ {
			for _, k := range []int{32, 96, 800} {
				const t0, guard = 1, 64
				ldx := k + 5
				x := randVec(rng, (t0+mr)*ldx, 3)
				for tok := range mr {
					edgeBlock(rng, x[(t0+tok)*ldx:][:k], tok, bs)
				}
				size := q8TileBytes(mr, k)
				got, want := make([]byte, guard+size+guard), make([]byte, guard+size+guard)
				for i := range got {
					got[i], want[i] = 0x5a, 0x5a
				}
				packQ8Tile(got[guard:guard+size], x, ldx, t0, mr, k)
				goPackQ8Tile(want[guard:guard+size], x, ldx, t0, mr, k)
				for i := range got {
					if got[i] != want[i] {
						t.Fatalf("mr=%d k=%d: byte %d (tile offset %d) = %#x, want %#x", mr, k, i, i-guard, got[i], want[i])
					}
				}
				for tok := range mr {
					for i := range k {
						blk := want[guard+i/bs*40*mr:]
						q := int8(blk[((i%bs/4)*mr+tok)*4+i%4])
						d := math.Float32frombits(binary.LittleEndian.Uint32(blk[32*mr+4*tok:]))
						v := x[(t0+tok)*ldx+i]
						if d < 1e-30 {
							continue // the subnormal and zero blocks
						}
						if diff := math.Abs(float64(v) - float64(q)*float64(d)); diff > 0.5001*float64(d) {
							t.Fatalf("mr=%d k=%d token %d input %d: %v quantised to %d·%v", mr, k, tok, i, v, q, d)
						}
					}
				}
			}
		}
	})
}
