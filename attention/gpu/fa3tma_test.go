package gpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gosling-ai/gosling/device/cuda"
	"github.com/gosling-ai/gosling/tensor"
)

// sw128 is the kernel's sw128<R>(r, c): the byte offset of 16-byte chunk c
// of row r in a swizzled tile of R rows (64-column panels of R × 128
// bytes, chunk c of row r at (c ^ r%8)·16 within its row).
func sw128(rows, r, c int) int { return (c>>3)*rows*128 + r*128 + ((c&7)^(r&7))<<4 }

// tmaCopy emulates cp.async.bulk.tensor of one box through m: the box at
// coords (innermost first) is walked innermost first and written densely
// from shared offset dst, its elements outside m.Dims as zero, and with
// Swizzle128 every 16-byte chunk moves within its 1024-byte atom as the
// 128-byte swizzle moves it: address bits 4-6 XORed with bits 7-9 (the
// shared buffer starts 1024-aligned). read returns a 16-bit element of
// global memory by byte address. It returns the bytes written.
func tmaCopy(m cuda.TiledMap, coords []int, smem []byte, dst int, read func(addr uint64) uint16) int {
	n := 1
	for _, b := range m.Box {
		n *= int(b)
	}
	idx := make([]int, m.Rank())
	for e := range n {
		rem, in := e, true
		addr := uint64(m.Base)
		for d := range m.Rank() {
			idx[d] = coords[d] + rem%int(m.Box[d])
			rem /= int(m.Box[d])
			if idx[d] < 0 || uint64(idx[d]) >= m.Dims[d] {
				in = false
			}
			if d == 0 {
				addr += uint64(idx[d]) * 2
			} else {
				addr += uint64(idx[d]) * m.Strides[d-1]
			}
		}
		var v uint16
		if in {
			v = read(addr)
		}
		at := dst + 2*e
		if m.Swizzle128 {
			at ^= (at >> 7 & 7) << 4
		}
		smem[at], smem[at+1] = byte(v), byte(v>>8)
	}
	return 2 * n
}

// TestFA3LoadsFor: which loads the accelerator takes, and the maps' dims,
// strides and boxes, for each page size, head dim, GQA group and dtype;
// the bytes a tile's boxes write are the kernel's expect_tx counts.
func TestFA3LoadsFor(t *testing.T) {
	const slots, tokens = 4096, 300
	for _, dt := range []tensor.DType{tensor.BF16, tensor.F16, tensor.FP8E4M3} {
		for _, d := range []int{64, 128, 256} {
			for _, page := range []int{1, 8, 16, 32, 64, 128, 256} {
				for _, group := range []int{1, 2, 3, 4, 6, 8, 16} {
					const kvHeads = 2
					heads := kvHeads * group
					s := fa3Shape{D: d, Heads: heads, KVHeads: kvHeads, PageSize: page, DType: dt, Q: 1 << 20, QStride: heads*d + 3*8,
						Tokens: tokens, K: 1 << 30, V: 1 << 31, KStride: kvHeads * d, VStride: kvHeads * d, Slots: slots}
					name := fmt.Sprintf("%v/d%d/page%d/g%d", dt, d, page, group)
					l := fa3LoadsFor(s)
					if page < 16 || dt == tensor.FP8E4M3 {
						if l.bits != 0 {
							t.Errorf("%s: tma %d, want the gather", name, l.bits)
						}
						continue
					}
					bn := fa3Keys(d)
					run := min(page, bn)
					for _, kv := range []struct {
						m      cuda.TiledMap
						base   cuda.DevicePtr
						stride int
					}{{l.k, s.K, s.KStride}, {l.v, s.V, s.VStride}} {
						m := kv.m
						if m.DType != dt || m.Base != kv.base || !m.Swizzle128 || fmt.Sprint(m.Dims) != fmt.Sprint([]uint64{uint64(kvHeads * d), slots}) ||
							fmt.Sprint(m.Strides) != fmt.Sprint([]uint64{uint64(2 * kv.stride)}) || fmt.Sprint(m.Box) != fmt.Sprint([]uint32{64, uint32(run)}) {
							t.Errorf("%s: K/V map %+v", name, m)
						}
						if err := m.Validate(); err != nil {
							t.Errorf("%s: %v", name, err)
						}
						// A tile is bn/run runs × d/64 panels of boxes: TILE bytes.
						if got := (bn / run) * (d / 64) * m.BoxBytes(); got != bn*d*2 {
							t.Errorf("%s: a tile's boxes write %d bytes, want %d", name, got, bn*d*2)
						}
					}
					pow2 := group&(group-1) == 0
					if l.bits != fa3TMAKV|fa3TMAQ && pow2 || l.bits != fa3TMAKV && !pow2 {
						t.Errorf("%s: tma %d", name, l.bits)
					}
					if !pow2 {
						continue
					}
					q := l.q
					if q.Base != s.Q || fmt.Sprint(q.Dims) != fmt.Sprint([]uint64{uint64(d), uint64(heads), tokens}) ||
						fmt.Sprint(q.Strides) != fmt.Sprint([]uint64{uint64(2 * d), uint64(2 * s.QStride)}) ||
						fmt.Sprint(q.Box) != fmt.Sprint([]uint32{64, uint32(group), uint32(128 / group)}) {
						t.Errorf("%s: Q map %+v", name, q)
					}
					if got := (d / 64) * q.BoxBytes(); got != fa3Rows*d*2 {
						t.Errorf("%s: Q's boxes write %d bytes, want %d", name, got, fa3Rows*d*2)
					}
				}
			}
		}
	}
	s := fa3Shape{D: 128, Heads: 8, KVHeads: 2, PageSize: 16, DType: tensor.BF16, Q: 1 << 20, QStride: 1024, Tokens: 10,
		K: 1 << 30, V: 1 << 31, KStride: 256, VStride: 256, Slots: 64}
	if l := fa3LoadsFor(s); l.bits != fa3TMAKV|fa3TMAQ {
		t.Fatalf("aligned: tma %d", l.bits)
	}
	mis := s
	mis.Q += 64
	if l := fa3LoadsFor(mis); l.bits != fa3TMAKV {
		t.Errorf("q 64 bytes off 128: tma %d, want K/V only", l.bits)
	}
	mis = s
	mis.V += 16
	if l := fa3LoadsFor(mis); l.bits != 0 {
		t.Errorf("V 16 bytes off 128: tma %d, want the gather", l.bits)
	}
	mis = s
	mis.PageSize = 48
	if l := fa3LoadsFor(mis); l.bits != fa3TMAKV|fa3TMAQ {
		t.Errorf("page 48: tma %d", l.bits) // the kernel is launched for power-of-two pages only (tiledExtend)
	}
}

// TestFA3TMAPlacement emulates the producer's copies of full tiles and of
// Q through the maps fa3LoadsFor describes (the box walk, the page table,
// the 128-byte swizzle) over a pool of distinct values whose pages are
// shuffled, and checks every element lands where the consumers' wgmma
// descriptors read it: key row r, column c of a tile at sw128<BN>(r, c/8)
// + 2·(c%8) of its stage, packed Q row r at sw128<F3_BM>(r, c/8); Q rows
// past the last token read zero.
func TestFA3TMAPlacement(t *testing.T) {
	const kvHeads, stages = 2, 2
	for _, d := range []int{64, 128, 256} {
		for _, page := range []int{16, 32, 64, 128, 256} {
			for _, group := range []int{1, 4, 8} {
				t.Run(fmt.Sprintf("d%d/page%d/g%d", d, page, group), func(t *testing.T) {
					bn := fa3Keys(d)
					heads := kvHeads * group
					numPages := 8*bn/page + 2
					slots := numPages * page
					width := kvHeads * d
					const kBase, vBase, qBase = 1 << 28, 1 << 30, 1 << 26
					pool := make([]uint16, slots*width) // K at kBase, V (the same values, xor 1) at vBase
					rng := rand.New(rand.NewPCG(uint64(d), uint64(page*8+group)))
					for i := range pool {
						pool[i] = uint16(rng.Uint32())
					}
					tokens := 2*fa3Rows/group + 5
					qStride := heads*d + 64
					qv := make([]uint16, tokens*qStride)
					for i := range qv {
						qv[i] = uint16(rng.Uint32())
					}
					read := func(addr uint64) uint16 {
						switch {
						case addr >= vBase:
							return pool[(addr-vBase)/2] ^ 1
						case addr >= kBase:
							return pool[(addr-kBase)/2]
						}
						return qv[(addr-qBase)/2]
					}
					l := fa3LoadsFor(fa3Shape{D: d, Heads: heads, KVHeads: kvHeads, PageSize: page, DType: tensor.BF16, Q: qBase, QStride: qStride,
						Tokens: tokens, K: kBase, V: vBase, KStride: width, VStride: width, Slots: slots})
					if l.bits != fa3TMAKV|fa3TMAQ {
						t.Fatalf("tma %d", l.bits)
					}
					pages := rng.Perm(numPages) // a request's page list
					slotOf := func(j int) int { return pages[j/page]*page + j%page }
					tile := bn * d * 2
					smemK, smemV := make([]byte, stages*tile), make([]byte, stages*tile)
					for g := range kvHeads {
						for it := range 4 * stages {
							// The kernel's warp 0 for tile it (keys from it·BN).
							s, kb := it%stages, it*bn
							run := min(page, bn)
							wrote := 0
							for i := range bn / run {
								row := slotOf(kb + i*run)
								for p := range d / 64 {
									off := s*tile + p*bn*128 + i*run*128
									if off%1024 != 0 {
										t.Fatalf("a box starts at %d, inside a swizzle atom", off)
									}
									wrote += tmaCopy(l.k, []int{g*d + p*64, row}, smemK, off, read)
									wrote += tmaCopy(l.v, []int{g*d + p*64, row}, smemV, off, read)
								}
							}
							if wrote != 2*tile {
								t.Fatalf("tile %d: %d bytes, the kernel expects %d", it, wrote, 2*tile)
							}
							for r := range bn {
								for c := range d {
									at := s*tile + sw128(bn, r, c/8) + 2*(c%8)
									want := pool[slotOf(kb+r)*width+g*d+c]
									if got := uint16(smemK[at]) | uint16(smemK[at+1])<<8; got != want {
										t.Fatalf("head %d tile %d: K row %d col %d = %#x, want %#x", g, it, r, c, got, want)
									}
									if got := uint16(smemV[at]) | uint16(smemV[at+1])<<8; got != want^1 {
										t.Fatalf("head %d tile %d: V row %d col %d = %#x, want %#x", g, it, r, c, got, want^1)
									}
								}
							}
						}
						// Q of the block of packed rows [row0, row0+128) of a request
						// whose new tokens start at row extStart.
						for _, c := range []struct{ extStart, row0 int }{{0, 0}, {5, 0}, {5, fa3Rows}, {tokens - 3, 0}} {
							smemQ := make([]byte, fa3Rows*d*2)
							wrote := 0
							for p := range d / 64 {
								wrote += tmaCopy(l.q, []int{p * 64, g * group, c.extStart + c.row0/group}, smemQ, p*fa3Rows*128, read)
							}
							if wrote != fa3Rows*d*2 {
								t.Fatalf("Q: %d bytes, the kernel expects %d", wrote, fa3Rows*d*2)
							}
							for r := range fa3Rows {
								gr := c.row0 + r
								tok, head := c.extStart+gr/group, g*group+gr%group
								for col := range d {
									at := sw128(fa3Rows, r, col/8) + 2*(col%8)
									var want uint16
									if tok < tokens {
										want = qv[tok*qStride+head*d+col]
									}
									if got := uint16(smemQ[at]) | uint16(smemQ[at+1])<<8; got != want {
										t.Fatalf("head %d %+v: Q row %d col %d = %#x, want %#x", g, c, r, col, got, want)
									}
								}
							}
						}
					}
				})
			}
		}
	}
}
