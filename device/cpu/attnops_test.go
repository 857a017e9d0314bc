package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/gosling-ai/gosling/internal/hugemem"
	"github.com/gosling-ai/gosling/tensor"
)

func randRows(rng *rand.Rand, n, width int) [][]float32 {
	rows := make([][]float32, n)
	for i := range rows {
		rows[i] = randVec(rng, width, 1)
	}
	return rows
}

func TestAttentionLoops(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	eachKernelSet(t, func(t *testing.T) {
		for _, d := range []int{1, 8, 15, 16, 64, 72, 128} {
			for _, nrows := range []int{1, 3, 4, 9, 64} {
				const off = 5
				rows := randRows(rng, nrows, d+off+3)
				q := randVec(rng, d, 1)
				s := make([]float32, nrows)
				DotRows(s, q, rows, off)
				for x := range s {
					var want float64
					for i := range q {
						want += float64(q[i]) * float64(rows[x][off+i])
					}
					if math.Abs(float64(s[x])-want) > 1e-5*math.Sqrt(float64(d)) {
						t.Fatalf("DotRows d=%d rows=%d [%d]: %v, want %v", d, nrows, x, s[x], want)
					}
				}
				p := randVec(rng, nrows, 1)
				p[nrows-1] = 0
				y := randVec(rng, d, 1)
				want := make([]float64, d)
				for i := range want {
					want[i] = float64(y[i])
					for x := range p {
						want[i] += float64(p[x]) * float64(rows[x][off+i])
					}
				}
				AccumulateRows(y, p, rows, off)
				for i := range y {
					if math.Abs(float64(y[i])-want[i]) > 1e-5*float64(nrows) {
						t.Fatalf("AccumulateRows d=%d rows=%d [%d]: %v, want %v", d, nrows, i, y[i], want[i])
					}
				}
			}
		}
		x := []float32{0, -1, float32(math.Inf(-1)), -3, -0.5, -2, -7, -1, -1, -4, -6, -8, -9, -10, -11, -12, -13}
		orig := append([]float32(nil), x...)
		sum := ExpSubSum(x, 0)
		var want float64
		for i, v := range orig {
			e := math.Exp(float64(v))
			want += e
			if !near(float64(x[i]), e, 3e-7) {
				t.Errorf("ExpSubSum [%d] = %v, want %v", i, x[i], e)
			}
		}
		if !near(float64(sum), want, 1e-6) {
			t.Errorf("ExpSubSum = %v, want %v", sum, want)
		}
	})
}

// BenchmarkAttentionLoops times the q·K and P·V loops over a 64-key tile
// of head width 64, against plain Go loops.
func BenchmarkAttentionLoops(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	const d, keys = 64, 64
	rows := randRows(rng, keys, d)
	q, p, y, s := randVec(rng, d, 1), randVec(rng, keys, 1), make([]float32, d), make([]float32, keys)
	prev := active.Load()
	defer active.Store(prev)
	for _, ks := range append([]*kernelSet{goKernels}, asmSets...) {
		active.Store(ks)
		b.Run(fmt.Sprintf("DotRows/%s", ks.name), func(b *testing.B) {
			for b.Loop() {
				DotRows(s, q, rows, 0)
			}
			b.ReportMetric(2*d*keys*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
		b.Run(fmt.Sprintf("AccumulateRows/%s", ks.name), func(b *testing.B) {
			for b.Loop() {
				AccumulateRows(y, p, rows, 0)
			}
			b.ReportMetric(2*d*keys*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

func TestAttentionLoopsHeads(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	eachKernelSet(t, func(t *testing.T) {
		cases := 0
		for _, d := range []int{8, 15, 64} {
			for _, hg := range [][2]int{{1, 1}, {4, 1}, {6, 2}, {4, 4}} {
				heads, group := hg[0], hg[1]
				for _, nrows := range []int{1, 4, 9, 64} {
					const off = 3
					kv := heads / group
					rows := randRows(rng, nrows, off+kv*d+2)
					// Rows to warm, fewer, as many as or more than the
					// rows read: prefetches change no result.
					warm := randRows(rng, []int{0, nrows / 2, nrows, nrows + 3}[cases%4], off+kv*d)
					cases++
					q := randVec(rng, heads*d, 1)
					sStride := nrows + 5
					s := make([]float32, heads*sStride)
					DotRowsHeads(s, sStride, q, heads, group, rows, off, warm)
					p := randVec(rng, heads*sStride, 1)
					y := randVec(rng, heads*d, 1)
					want := append([]float32(nil), y...)
					for h := range heads {
						koff := off + h/group*d
						for x := range nrows {
							var w float64
							for i := range d {
								w += float64(q[h*d+i]) * float64(rows[x][koff+i])
							}
							if got := s[h*sStride+x]; math.Abs(float64(got)-w) > 1e-5*math.Sqrt(float64(d)) {
								t.Fatalf("DotRowsHeads d=%d heads=%d group=%d rows=%d [%d,%d]: %v, want %v", d, heads, group, nrows, h, x, got, w)
							}
						}
						AccumulateRows(want[h*d:(h+1)*d], p[h*sStride:h*sStride+nrows], rows, koff)
					}
					AccumulateRowsHeads(y, d, p, sStride, heads, group, rows, off, warm)
					for i := range y {
						if math.Abs(float64(y[i]-want[i])) > 1e-5*float64(nrows) {
							t.Fatalf("AccumulateRowsHeads d=%d heads=%d group=%d rows=%d [%d]: %v, want %v", d, heads, group, nrows, i, y[i], want[i])
						}
					}
				}
			}
		}
	})
}

// BenchmarkAttentionHeadsStream times DotRowsHeads and AccumulateRowsHeads
// on one core as a stories110M-shaped decode calls them (12 heads of 64,
// tiles of 64 keys in pages of 16 contiguous rows), over 192 MiB of rows,
// far beyond the caches: GB/s of key (or value) rows read, to hold against
// BenchmarkStreamRead's one-stream figure.
func BenchmarkAttentionHeadsStream(b *testing.B) {
	const heads, d, page, tile = 12, 64, 16, 64
	const width = heads * d
	buf := hugemem.Aligned(192 << 20)
	all := unsafe.Slice((*float32)(unsafe.Pointer(&buf[0])), len(buf)/4)
	for i := range all {
		all[i] = float32(i%61) / 61
	}
	// Pages in a shuffled order, so consecutive pages are not adjacent
	// (as a pool's pages of one request are not).
	pages := len(all) / (page * width)
	order := rand.New(rand.NewPCG(3, 4)).Perm(pages)
	rows := make([][]float32, 0, pages*page)
	for _, pg := range order {
		for r := range page {
			at := (pg*page + r) * width
			rows = append(rows, all[at:at+width])
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	q, p := randVec(rng, width, 1), randVec(rng, heads*tile, 0.1)
	s, y := make([]float32, heads*tile), make([]float32, width)
	prev := active.Load()
	defer active.Store(prev)
	for _, ks := range asmSets {
		active.Store(ks)
		for _, op := range []string{"DotRowsHeads", "AccumulateRowsHeads"} {
			b.Run(fmt.Sprintf("%s/%s", op, ks.name), func(b *testing.B) {
				var bytes int64
				for b.Loop() {
					for t0 := 0; t0+tile <= len(rows); t0 += tile {
						if op == "DotRowsHeads" {
							DotRowsHeads(s, tile, q, heads, 1, rows[t0:t0+tile], 0, nil)
						} else {
							AccumulateRowsHeads(y, d, p, tile, heads, 1, rows[t0:t0+tile], 0, nil)
						}
					}
					bytes += int64(len(rows) * width * 4)
				}
				b.ReportMetric(float64(bytes)/b.Elapsed().Seconds()/1e9, "GB/s")
			})
		}
		// As a decode's attention alternates them: a tile's keys (the even
		// tiles here), then its values (the odd), with or without warming
		// each pass's successor: the values while scoring, the next keys
		// while summing the values.
		for _, warm := range []bool{false, true} {
			b.Run(fmt.Sprintf("KeysThenValues/warm=%v/%s", warm, ks.name), func(b *testing.B) {
				var bytes int64
				var kWarm, vWarm [][]float32
				for b.Loop() {
					for t0 := 0; t0+2*tile <= len(rows); t0 += 2 * tile {
						keys, values := rows[t0:t0+tile], rows[t0+tile:t0+2*tile]
						if warm {
							vWarm, kWarm = values, rows[t0+2*tile:min(len(rows), t0+3*tile)]
						}
						DotRowsHeads(s, tile, q, heads, 1, keys, 0, vWarm)
						AccumulateRowsHeads(y, d, p, tile, heads, 1, values, 0, kWarm)
					}
					bytes += int64(len(rows) * width * 4)
				}
				b.ReportMetric(float64(bytes)/b.Elapsed().Seconds()/1e9, "GB/s")
			})
		}
	}
}

// TestAttentionLoopsHeadsBF16 holds the bf16 head kernels to the float32
// ones over the same rows decoded first: bit for bit, since widening is
// exact and the order of the sums is the same, for head widths the
// assembly takes and widths it leaves to the Go loops, and odd row
// counts.
func TestAttentionLoopsHeadsBF16(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	eachKernelSet(t, func(t *testing.T) {
		for _, d := range []int{8, 15, 16, 64, 72} {
			for _, hg := range [][2]int{{1, 1}, {4, 1}, {6, 2}, {4, 4}, {12, 12}} {
				heads, group := hg[0], hg[1]
				for _, nrows := range []int{1, 3, 4, 9, 64} {
					const off = 3
					kv := heads / group
					width := off + kv*d + 2
					raw := make([][]byte, nrows)
					rows := make([][]float32, nrows)
					for x := range raw {
						raw[x] = make([]byte, 2*width)
						tensor.EncodeBF16(raw[x], randVec(rng, width, 1))
						rows[x] = make([]float32, width)
						tensor.DecodeBF16(rows[x], raw[x])
					}
					q := randVec(rng, heads*d, 1)
					sStride := nrows + 5
					got, want := make([]float32, heads*sStride), make([]float32, heads*sStride)
					DotRowsHeadsBF16(got, sStride, q, heads, group, raw, off)
					DotRowsHeads(want, sStride, q, heads, group, rows, off, nil)
					for i := range got {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("DotRowsHeadsBF16 d=%d heads=%d group=%d rows=%d [%d]: %v, want %v", d, heads, group, nrows, i, got[i], want[i])
						}
					}
					p := randVec(rng, heads*sStride, 1)
					for x := 0; x < len(p); x += 5 {
						p[x] = 0 // masked keys: the single-row loops skip them
					}
					y := randVec(rng, heads*d, 1)
					yw := append([]float32(nil), y...)
					AccumulateRowsHeadsBF16(y, d, p, sStride, heads, group, raw, off)
					AccumulateRowsHeads(yw, d, p, sStride, heads, group, rows, off, nil)
					for i := range y {
						if math.Float32bits(y[i]) != math.Float32bits(yw[i]) {
							t.Fatalf("AccumulateRowsHeadsBF16 d=%d heads=%d group=%d rows=%d [%d]: %v, want %v", d, heads, group, nrows, i, y[i], yw[i])
						}
					}
				}
			}
		}
	})
}
