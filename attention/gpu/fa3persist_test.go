package gpu

import (
	"math/rand/v2"
	"regexp"
	"testing"

	"github.com/gosling-ai/gosling/device/cuda"
)

// TestFA3PersistDefault: the host sizes attn_fa3's grid for the form the
// kernel compiles by default (F3_PERSIST in kernels/attn_kernels.cu), and
// for the one GOSLING_NVRTC_DEFINES asks for.
func TestFA3PersistDefault(t *testing.T) {
	src, err := kernelFS.ReadFile("kernels/attn_kernels.cu")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^#ifndef F3_PERSIST\n#define F3_PERSIST (\d+)$`).FindSubmatch(src)
	if m == nil {
		t.Fatal("attn_kernels.cu: no #ifndef F3_PERSIST / #define F3_PERSIST n")
	}
	if want := string(m[1]) != "0"; fa3PersistDefault != want {
		t.Errorf("fa3PersistDefault %v, the kernel's F3_PERSIST %s", fa3PersistDefault, m[1])
	}
	for _, c := range []struct {
		v   string
		set bool
		per bool
	}{{"", false, fa3PersistDefault}, {"0", true, false}, {"1", true, true}, {"0x0", true, false}, {"2", true, true}} {
		if got := fa3PersistFrom(c.v, c.set); got != c.per {
			t.Errorf("fa3PersistFrom(%q, %v) = %v", c.v, c.set, got)
		}
	}
}

// TestFA3WorkGrid: the persistent grid is one block per SM, never more
// blocks than work tiles (the counter's reset needs every block to take
// one); the other form is a block per tile.
func TestFA3WorkGrid(t *testing.T) {
	w := newFA3Work(true, 132, 512, 1, 8, 0x1000)
	if w.grid != (cuda.Dim3{X: 132, Y: 1, Z: 1}) || w.work != 4096 || w.xTiles != 512 || w.sched != 0x1000 {
		t.Errorf("persistent 16K prefill: %+v", w)
	}
	if w := newFA3Work(true, 132, 3, 2, 8, 0x1000); w.grid.X != 48 || w.work != 48 {
		t.Errorf("persistent, fewer tiles than SMs: %+v", w)
	}
	w = newFA3Work(false, 132, 24, 3, 8, 0x1000)
	if w.grid != (cuda.Dim3{X: 24, Y: 3, Z: 8}) || w.work != 576 || w.sched != 0 {
		t.Errorf("one block per tile: %+v", w)
	}
	a := w.args(fa3Args{Tma: 3})
	if a.XTiles != 24 || a.NWork != 576 || a.Sched != 0 || a.Tma != 3 {
		t.Errorf("args: %+v", a)
	}
}

// TestFA3Schedule models the persistent kernel's tile counter (each
// block's thread 32: its own index first, then gridDim.x + atomicAdd, the
// fetch that returns n_work-1 resetting it) over blocks whose fetches
// interleave at random, two launches in a row on one counter, and the
// kernel's decoding of a work index into (x tile, request, KV head): every
// tile is taken exactly once and the counter is back at zero.
func TestFA3Schedule(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	ctr := 0
	for _, s := range []struct{ sms, xTiles, reqs, heads int }{{132, 512, 1, 8}, {132, 24, 3, 8}, {7, 5, 1, 1}, {132, 1, 1, 1}, {4, 3, 2, 2}} {
		for range 2 {
			w := newFA3Work(true, s.sms, s.xTiles, s.reqs, s.heads, 1)
			g := w.grid.X
			next := make([]int, g) // each block's next work index
			for b := range next {
				next[b] = b
			}
			taken := map[[3]int]int{}
			live := g
			for live > 0 {
				b := rng.IntN(g)
				if next[b] >= w.work {
					continue
				}
				wi := next[b]
				nReqs := w.work / (w.xTiles * s.heads)
				taken[[3]int{wi % w.xTiles, (wi / w.xTiles) % nReqs, wi / (w.xTiles * nReqs)}]++
				k := ctr
				ctr++
				if k == w.work-1 {
					ctr = 0
				}
				if next[b] = g + k; next[b] >= w.work {
					live--
				}
			}
			if len(taken) != w.work {
				t.Errorf("%+v: %d distinct tiles of %d", s, len(taken), w.work)
			}
			for k, n := range taken {
				if n != 1 || k[0] >= s.xTiles || k[1] >= s.reqs || k[2] >= s.heads {
					t.Errorf("%+v: tile %v taken %d times", s, k, n)
				}
			}
			if ctr != 0 {
				t.Errorf("%+v: the counter ends at %d", s, ctr)
			}
		}
	}
}
