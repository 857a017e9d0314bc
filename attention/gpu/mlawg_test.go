package gpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/device/cuda"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/tensor"
)

// TestMLAWGLayout: attn_mla_wg's shared memory and the addresses its
// producer and MMAs use. The producer's threads (half h, row phase crow,
// chunk cpart) write every chunk of every row of their stage once, each
// at sw128<64>(row, chunk), from byte chunk·16 of the key's row; S's k
// steps start at their 16 columns in Q and K; P·V's value panels are the
// tile's first 512 columns, 256 a consumer; the regions fit in the 227 KiB
// of a block beside the kernel's 1024 static bytes.
func TestMLAWGLayout(t *testing.T) {
	const bm, bn, st = mlaWGHeads, mlaWGKeys, mlaWGStages
	const cpr, panel, tile = mlaDK / 8, bn * 128, bn * mlaRow
	if bm != 64 || bn != 64 || st != 2 || mlaWGThreads != 384 {
		t.Fatalf("the kernel is written for 64 heads, tiles of 64 keys, 2 stages, 384 threads: %d %d %d %d", bm, bn, st, mlaWGThreads)
	}
	q, pfr := bm*mlaRow, bm*mlaRow+st*tile
	afr := pfr + 128*64
	if end := afr + 128*8; end != mlaWGSharedMem {
		t.Errorf("the regions end at %d, the launch gives %d", end, mlaWGSharedMem)
	}
	if q%1024 != 0 || tile%1024 != 0 || panel%1024 != 0 {
		t.Errorf("Q (%d), a tile (%d) or a panel (%d) breaks the 1024-byte swizzle atoms", q, tile, panel)
	}
	if total := 1024 + mlaWGSharedMem; total > 227*1024 {
		t.Errorf("%d bytes of shared memory, over sm_90's 227 KiB", total)
	}
	// The producer: every (stage, row, chunk) once, at its swizzled place.
	seen := make(map[int]bool)
	for th := range 128 {
		half, crow, cpart := th>>6, (th>>3)&7, th&7
		dst0 := half*tile + crow*128 + (cpart^crow)<<4
		for x := range bn / 8 {
			for p := range mlaDK / 64 {
				r, c := crow+8*x, 8*p+cpart
				off, src := dst0+x*8*128+p*panel, cpart*16+p*128
				if want := half*tile + sw128(bn, r, c); off != want {
					t.Fatalf("thread %d row %d chunk %d: writes %d, sw128 puts it at %d", th, r, c, off, want)
				}
				if src != c*16 {
					t.Fatalf("thread %d row %d chunk %d: reads byte %d of the key", th, r, c, src)
				}
				if seen[off] {
					t.Fatalf("offset %d written twice", off)
				}
				seen[off] = true
			}
		}
	}
	if len(seen) != st*bn*cpr {
		t.Errorf("%d chunks written, want %d", len(seen), st*bn*cpr)
	}
	// S's k step kk reads columns 16kk .. 16kk+15 of Q and K: panel kk/4,
	// byte (16kk % 64)·2 of each swizzled row (the descriptor's start; the
	// hardware swizzles the rest as sw128 does).
	for kk := range mlaDK / 16 {
		koff := (kk>>2)*panel + (kk&3)*32
		if want := sw128(bn, 0, 2*kk); koff != want {
			t.Errorf("k step %d starts at %d, sw128 has column %d of row 0 at %d", kk, koff, 16*kk, want)
		}
	}
	// P·V: consumer cw's value columns 256cw .. 256cw+255 are panels
	// 4cw .. 4cw+3, all below the 512 value columns.
	for cw := range 2 {
		start := 4 * cw * panel
		if want := sw128(bn, 0, 256*cw/8); start != want || (4*cw+4)*64 > mlaDV {
			t.Errorf("consumer %d's value panels start at %d, want %d", cw, start, want)
		}
	}
}

// mlaNamedBar models bar.sync / bar.arrive on a named barrier of count
// threads: a generation completes once count threads arrived. A party
// (here a warpgroup, arriving as one) arriving twice in one generation
// would complete it with the wrong threads: an error.
type mlaNamedBar struct {
	name           string
	count, arrived int
	gen            int
	who            map[string]bool
}

func (b *mlaNamedBar) arrive(who string, n int) error {
	if b.who == nil {
		b.who = map[string]bool{}
	}
	if b.who[who] {
		return fmt.Errorf("%s: %s arrives twice in generation %d", b.name, who, b.gen)
	}
	b.who[who] = true
	if b.arrived += n; b.arrived > b.count {
		return fmt.Errorf("%s: %d arrivals of %d", b.name, b.arrived, b.count)
	}
	if b.arrived == b.count {
		b.gen, b.arrived, b.who = b.gen+1, 0, nil
	}
	return nil
}

// emulateMLAWG runs attn_mla_wg's four parties over a block of nTiles
// tiles (kernels/attn_kernels.cu: the producer's two halves, one a stage,
// and the two consumer warpgroups), interleaving their steps and the
// copies' completions at random, and checks: every mbarrier phase gets
// exactly its arrivals; a consumer reads a stage only once its tile (and
// Q) landed, and no copy writes a stage a consumer reads; consumer 1
// reads P and the factors of the tile it works on, consumer 0 never
// overwrites them (nor, at the end, the factors with the row sums) before
// consumer 1 read them; no named barrier generation mixes tiles; every
// party finishes.
func emulateMLAWG(nTiles int, rng *rand.Rand) error {
	const st = mlaWGStages
	var err error
	fail := func(e error) {
		if e != nil && err == nil {
			err = e
		}
	}
	barQ := newFA3Bar("bar_q", 128)
	full, free := make([]*fa3Bar, st), make([]*fa3Bar, st)
	for s := range st {
		full[s] = newFA3Bar(fmt.Sprintf("bar_full[%d]", s), 64)
		free[s] = newFA3Bar(fmt.Sprintf("bar_free[%d]", s), 256)
	}
	named := map[int]*mlaNamedBar{}
	for _, id := range []int{2, 3, 4} {
		named[id] = &mlaNamedBar{name: fmt.Sprintf("named barrier %d", id), count: 256}
	}
	held, inflight, readers := make([]int, st), make([]int, st), make([]int, st)
	for s := range held {
		held[s] = -1
	}
	var qIn [st]int                             // each half's Q copies in flight
	pTile, pRead, finWritten := -1, true, false // the tile whose P the buffer holds; consumer 1 took it
	var pending []func()

	wait := func(a *fa3Agent, b *fa3Bar, parity int) {
		for !b.passes(parity) {
			a.yield(true)
		}
	}
	sync := func(a *fa3Agent, id int) {
		b := named[id]
		g := b.gen
		fail(b.arrive(a.name, 128))
		a.yield(false)
		for b.gen == g {
			a.yield(true)
		}
	}
	producer := func(half int) func(a *fa3Agent) {
		return func(a *fa3Agent) {
			// Q: this half's 64 threads' copies, in their own group.
			qIn[half]++
			pending = append(pending, func() { qIn[half]-- })
			qTold := false
			a.yield(false)
			for it := half; it < nTiles; it += st {
				if it >= st {
					wait(a, free[half], (it/st+1)&1)
				}
				if readers[half] > 0 {
					fail(fmt.Errorf("producer half %d writes stage %d (tile %d) while a consumer reads it", half, half, it))
				}
				inflight[half]++
				pending = append(pending, func() {
					if readers[half] > 0 {
						fail(fmt.Errorf("a copy of tile %d lands in stage %d while a consumer reads it", it, half))
					}
					held[half] = it
					inflight[half]--
				})
				a.yield(false)
				for inflight[half] > 0 || qIn[half] > 0 { // cp.async.wait_group 0: the tile's copies and Q's
					a.yield(true)
				}
				if !qTold {
					fail(barQ.arrive(64))
					qTold = true
				}
				fail(full[half].arrive(64))
				a.yield(false)
			}
			for qIn[half] > 0 {
				a.yield(true)
			}
			if !qTold {
				fail(barQ.arrive(64))
			}
		}
	}
	readStage := func(a *fa3Agent, s, it int) {
		if inflight[s] > 0 || held[s] != it {
			fail(fmt.Errorf("%s reads tile %d from stage %d, which holds tile %d with %d copies in flight", a.name, it, s, held[s], inflight[s]))
		}
		readers[s]++
		a.yield(false)
		readers[s]--
		fail(free[s].arrive(128))
		a.yield(false)
	}
	consumer0 := func(a *fa3Agent) {
		if nTiles > 0 {
			wait(a, barQ, 0)
			if qIn[0]+qIn[1] > 0 {
				fail(fmt.Errorf("consumer 0 reads Q with copies in flight"))
			}
		}
		for it := range nTiles {
			s := it % st
			wait(a, full[s], (it/st)&1)
			if held[s] != it || inflight[s] > 0 {
				fail(fmt.Errorf("consumer 0's S reads tile %d from stage %d holding tile %d", it, s, held[s]))
			}
			a.yield(false)
			if it > 0 {
				sync(a, 3)
			}
			if !pRead {
				fail(fmt.Errorf("consumer 0 overwrites P of tile %d before consumer 1 read it", pTile))
			}
			pTile, pRead = it, false
			fail(named[2].arrive(a.name, 128))
			a.yield(false)
			readStage(a, s, it) // P·V over panels 0-3
		}
		if nTiles > 0 {
			sync(a, 3)
		}
		if !pRead {
			fail(fmt.Errorf("consumer 0 writes the row sums over the factors of tile %d before consumer 1 read them", pTile))
		}
		finWritten = true
		fail(named[4].arrive(a.name, 128))
	}
	consumer1 := func(a *fa3Agent) {
		for it := range nTiles {
			s := it % st
			wait(a, full[s], (it/st)&1)
			sync(a, 2)
			if pTile != it || pRead {
				fail(fmt.Errorf("consumer 1 takes P of tile %d (read: %v) for tile %d", pTile, pRead, it))
			}
			pRead = true
			fail(named[3].arrive(a.name, 128))
			a.yield(false)
			readStage(a, s, it) // P·V over panels 4-7
		}
		sync(a, 4)
		if !finWritten {
			fail(fmt.Errorf("consumer 1 reads the row sums before consumer 0 wrote them"))
		}
	}
	agents := []*fa3Agent{{name: "producer half 0"}, {name: "producer half 1"}, {name: "consumer 0"}, {name: "consumer 1"}}
	bodies := []func(a *fa3Agent){producer(0), producer(1), consumer0, consumer1}
	runAgents(agents, bodies, &pending, rng, &err, fail)
	if err != nil {
		return err
	}
	if barQ.phase != 1 {
		return fmt.Errorf("bar_q completed %d phases", barQ.phase)
	}
	for s := range st {
		want := (nTiles - s + st - 1) / st
		for _, b := range []*fa3Bar{full[s], free[s]} {
			if b.phase != want || b.pending != b.count {
				return fmt.Errorf("%s: %d phases (want %d), %d arrivals left over", b.name, b.phase, want, b.count-b.pending)
			}
		}
	}
	for id, b := range named {
		if b.arrived != 0 {
			return fmt.Errorf("named barrier %d: %d arrivals left over", id, b.arrived)
		}
	}
	return nil
}

// TestMLAWGProtocol runs emulateMLAWG over blocks of 0 to 9 tiles (an
// empty split, the first laps of the ring, several laps) under many
// schedules.
func TestMLAWGProtocol(t *testing.T) {
	for n := range 10 {
		for seed := range 32 {
			if err := emulateMLAWG(n, rand.New(rand.NewPCG(uint64(seed), uint64(n)))); err != nil {
				t.Fatalf("%d tiles, seed %d: %v", n, seed, err)
			}
		}
	}
}

// TestMLADecodeSelect: which MLA decode kernel a decode plan gets, and
// its blocks and splits. attn_mla_wg on an sm_90a build above 32 heads,
// unless NoMLAWG or NoHopper; attn_mla (16·mt heads a block) otherwise.
func TestMLADecodeSelect(t *testing.T) {
	const h100Smem = 227 << 10
	for _, c := range []struct {
		arch, heads        int
		hopper, noWG, no90 bool
		wantWG             bool
		wantHeads          int // per block
	}{
		{90, 128, true, false, false, true, 64},
		{90, 64, true, false, false, true, 64},
		{90, 48, true, false, false, true, 64},
		{90, 32, true, false, false, false, 32},
		{90, 16, true, false, false, false, 16},
		{90, 128, true, true, false, false, 64},   // GOSLING_MLA_WG=0
		{90, 128, true, false, true, false, 64},   // NoHopper
		{90, 128, false, false, false, false, 64}, // a module without sm_90a kernels
		{80, 128, false, false, false, false, 64},
	} {
		rt := &Runtime{Dev: &cuda.Device{Info: cuda.Info{Major: c.arch / 10, Minor: c.arch % 10, SMs: 132, MaxSharedOptin: h100Smem}},
			hopper: c.hopper, NoMLAWG: c.noWG, NoHopper: c.no90}
		p := &Plan{Layout: Layout{PageSize: 16, MaxExtend: 1, MaxSeq: 4096}, NumTokens: 64,
			Batch: &forward.Batch{KV: &kvcache.Cache{Pool: &kvcache.Pool{Spec: kvcache.Spec{DType: tensor.BF16}}}}}
		layer := &attention.Layer{NumHeads: c.heads, NumKVHeads: 1, HeadDim: mlaDK, HeadDimV: mlaDV, MLA: true, Scale: 0.04}
		mk, ok := rt.mlaDecode(p, layer, tensor.BF16)
		if !ok || mk.wg != c.wantWG || mk.heads() != c.wantHeads {
			t.Errorf("%+v: %+v (%d heads a block), %v", c, mk, mk.heads(), ok)
			continue
		}
		if mk.wg && (mk.smem != mlaWGSharedMem || mk.smem+1024 > h100Smem) {
			t.Errorf("%+v: %d bytes of shared memory", c, mk.smem)
		}
		blocks := 64 * ((c.heads + c.wantHeads - 1) / c.wantHeads)
		if got := rt.Blocks(p, layer, tensor.BF16); got != blocks {
			t.Errorf("%+v: %d blocks a split, want %d", c, got, blocks)
		}
		// bs64 × 4K at 128 heads: attn_mla_wg's 128 blocks are one wave.
		if c.wantWG && c.heads == 128 {
			if sp := FillGPU(rt, p, layer, tensor.BF16, true); sp.Splits != 1 {
				t.Errorf("%+v: split %+v, want one", c, sp)
			}
		}
		// float32 queries run neither kernel.
		if _, ok := rt.mlaDecode(p, layer, tensor.F32); ok {
			t.Errorf("%+v: float32 queries on an MLA kernel", c)
		}
	}
}
