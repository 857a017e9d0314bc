package gpu

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
)

// fa3Bar models an mbarrier as PTX defines it: a phase completes when its
// pending arrivals reach zero and its transaction count is back at zero,
// then the next phase starts with count arrivals pending. An arrival
// beyond the pending count, and a transaction count outside ±(2^20-1),
// are undefined behaviour on the device: errors here.
type fa3Bar struct {
	name               string
	count, pending, tx int
	phase              int // phases completed
}

func newFA3Bar(name string, count int) *fa3Bar {
	return &fa3Bar{name: name, count: count, pending: count}
}

const fa3MaxTx = 1<<20 - 1

func (b *fa3Bar) settle() {
	if b.pending == 0 && b.tx == 0 {
		b.phase++
		b.pending = b.count
	}
}

func (b *fa3Bar) arrive(n int) error {
	if n > b.pending {
		return fmt.Errorf("%s: %d arrivals on phase %d with %d pending", b.name, n, b.phase, b.pending)
	}
	b.pending -= n
	b.settle()
	return nil
}

// expectTx is mbarrier.arrive.expect_tx: the bytes, then one arrival.
func (b *fa3Bar) expectTx(bytes int) error {
	b.tx += bytes
	if b.tx > fa3MaxTx {
		return fmt.Errorf("%s: tx-count %d over the limit", b.name, b.tx)
	}
	return b.arrive(1)
}

// completeTx is a bulk copy's bytes landing.
func (b *fa3Bar) completeTx(bytes int) error {
	b.tx -= bytes
	if b.tx < -fa3MaxTx {
		return fmt.Errorf("%s: tx-count %d under the limit", b.name, b.tx)
	}
	b.settle()
	return nil
}

// passes is mbarrier.try_wait.parity: true once the current phase's parity
// differs from the one waited for (which it takes for that phase done).
func (b *fa3Bar) passes(parity int) bool { return b.phase&1 != parity }

// fa3RingCase is one attn_fa3 block's K/V ring under the accelerator: head
// dim, page size, tma bits, its full tiles (all keys below hi) and tiles.
type fa3RingCase struct {
	d, page, tma, nFull, nTiles, group int
}

func (c fa3RingCase) String() string {
	return fmt.Sprintf("d%d/page%d/tma%d/g%d/tiles%d+%d", c.d, c.page, c.tma, c.group, c.nFull, c.nTiles-c.nFull)
}

// fa3Agent is one of the block's independent parties (producer warp 0,
// producer warps 1-3, each consumer warpgroup) run as a coroutine: it
// yields at every shared-memory or barrier step, saying whether it is
// blocked on a wait.
type fa3Agent struct {
	name    string
	resume  chan bool // false: stop
	yielded chan bool // blocked
	done    bool
}

func (a *fa3Agent) yield(blocked bool) {
	a.yielded <- blocked
	if !<-a.resume {
		runtime.Goexit()
	}
}

// runAgents runs bodies[i] as agents[i] (a goroutine each, resumed one at
// a time) and the completions queued in *pending, choosing the next step
// at random, until all are done with nothing pending, *err is set (by the
// bodies' checks), or every live agent stays blocked with nothing pending
// (a deadlock, reported through fail). The agents not done are then
// stopped.
func runAgents(agents []*fa3Agent, bodies []func(a *fa3Agent), pending *[]func(), rng *rand.Rand, err *error, fail func(error)) {
	for i, a := range agents {
		a.resume, a.yielded = make(chan bool), make(chan bool)
		go func() {
			if !<-a.resume {
				return
			}
			bodies[i](a)
			a.done = true
			a.yielded <- false
		}()
	}
	idle := 0
	for *err == nil {
		var live []*fa3Agent
		for _, a := range agents {
			if !a.done {
				live = append(live, a)
			}
		}
		if len(live) == 0 && len(*pending) == 0 {
			break
		}
		if k := rng.IntN(len(live) + min(len(*pending), 1)); k == len(live) {
			j := rng.IntN(len(*pending))
			op := (*pending)[j]
			*pending = append((*pending)[:j], (*pending)[j+1:]...)
			op()
			idle = 0
		} else {
			a := live[k]
			a.resume <- true
			if <-a.yielded {
				idle++
			} else {
				idle = 0
			}
		}
		if idle > 1000 && len(*pending) == 0 {
			var who []string
			for _, a := range live {
				who = append(who, a.name)
			}
			fail(fmt.Errorf("deadlock: %v wait forever", who))
		}
	}
	for _, a := range agents {
		if !a.done {
			a.resume <- false
		}
	}
}

// emulateFA3Ring runs the attn_fa3 producer (the accelerator path of
// kernels/attn_kernels.cu, tma bit 0) and its two consumer warpgroups over
// one block's ring of F3_STAGES(d) K/V stages, interleaving every step of
// the four parties and the bulk copies' completions at random, and checks:
// every box's shared destination lies inside its stage, inside the
// kernel's dynamic shared memory, 1024-byte aligned (the 128-byte swizzle's
// atoms; TMA asks 128); every barrier phase's arrivals and bytes match what
// is issued to it; no copy writes a stage a consumer reads, and a consumer
// reads a stage only once all of its tile (and Q) landed; every party
// finishes. ownWait is the producer's previous last-tile protocol (warps
// 1-3 waiting for the stage themselves), kept to show the checks catch it.
func emulateFA3Ring(c fa3RingCase, rng *rand.Rand, ownWait bool) error {
	d, bm, bn, st := c.d, fa3Rows, fa3Keys(c.d), fa3Stages(c.d)
	tile := bn * d * 2
	run := min(c.page, bn)
	nRuns, panels := bn/run, d/64
	// The kernel's dynamic shared memory, declared 1024-aligned: Q, ST K
	// tiles, ST V tiles.
	if need := bm*d*2 + 2*st*tile; need > fa3SharedMem(d, false) {
		return fmt.Errorf("Q and the stages need %d bytes of dynamic shared memory, the launch gives %d", need, fa3SharedMem(d, false))
	}
	// The static variables come first, the dynamic part at the next 1024.
	static := 4 + 2*bm*4 + 8*(1+4*st) + 2*bn*4 // f3_hi, row_lo/hi, f3_bar, f3_slot
	if total := (static+1023)/1024*1024 + fa3SharedMem(d, false); total > 227*1024 {
		return fmt.Errorf("%d bytes of shared memory, over sm_90's 227 KiB", total)
	}

	var err error
	fail := func(e error) {
		if e != nil && err == nil {
			err = e
		}
	}
	qBar := newFA3Bar("bar_q", 96)
	if c.tma&fa3TMAQ != 0 {
		qBar.count, qBar.pending = 1, 1
	}
	// K (kv 0) and V (kv 1) land and free on barriers of their own.
	var full, free [2][]*fa3Bar
	for kv, name := range []string{"k", "v"} {
		full[kv], free[kv] = make([]*fa3Bar, st), make([]*fa3Bar, st)
		for s := range st {
			full[kv][s] = newFA3Bar(fmt.Sprintf("bar_%sfull[%d]", name, s), 1)
			free[kv][s] = newFA3Bar(fmt.Sprintf("bar_%sfree[%d]", name, s), 256)
		}
	}
	// Stage contents: the tile each (K/V, panel, row) holds; copies in
	// flight and consumer warpgroups reading, per stage.
	held := make([][]int, st)
	for s := range held {
		held[s] = make([]int, 2*panels*bn)
		for i := range held[s] {
			held[s][i] = -1
		}
	}
	var inflight, readers [2][]int
	for kv := range 2 {
		inflight[kv], readers[kv] = make([]int, st), make([]int, st)
	}
	qLanded := 0
	named4 := false // bar.arrive 4 by warp 0

	var pending []func() // the copies' completions
	write := func(s, kv, p, r0, rows, it int) {
		for r := r0; r < r0+rows; r++ {
			held[s][(kv*panels+p)*bn+r] = it
		}
	}
	beginWrite := func(who string, kv, s, it int) {
		if readers[kv][s] > 0 {
			fail(fmt.Errorf("%s writes %s stage %d (tile %d) while a consumer reads it", who, []string{"K", "V"}[kv], s, it))
		}
	}
	// A box of rows × 64 columns at byte offset off of K's or V's stages.
	box := func(off, rows int) (s, p, r0 int, e error) {
		bytes := rows * 128
		if off < 0 || off+bytes > st*tile {
			return 0, 0, 0, fmt.Errorf("a box of %d bytes at %d leaves the %d bytes of the stages", bytes, off, st*tile)
		}
		if off%1024 != 0 {
			return 0, 0, 0, fmt.Errorf("a box at %d is not 1024-byte aligned", off)
		}
		s, in := off/tile, off%tile
		p, r0 = in/(bn*128), in%(bn*128)/128
		if r0+rows > bn {
			return 0, 0, 0, fmt.Errorf("a box at %d crosses panel %d of stage %d", off, p, s)
		}
		return s, p, r0, nil
	}

	wait := func(a *fa3Agent, b *fa3Bar, parity int) {
		for !b.passes(parity) {
			a.yield(true)
		}
	}
	agents := []*fa3Agent{{name: "producer warp 0"}, {name: "producer warps 1-3"}, {name: "consumer 0"}, {name: "consumer 1"}}
	bodies := []func(a *fa3Agent){
		func(a *fa3Agent) { // warp 0: Q by the accelerator, then the full tiles
			if c.tma&fa3TMAQ != 0 && c.nTiles > 0 {
				fail(qBar.expectTx(bm * d * 2))
				for p := range panels {
					off := p * bm * 128 // tma_load3(qs + p·BM·128): F3_BM/group tokens × group heads × 64 columns
					bytes := (bm / c.group) * c.group * 128
					if off%1024 != 0 || off+bytes > bm*d*2 {
						fail(fmt.Errorf("Q box at %d of %d bytes outside Q's %d", off, bytes, bm*d*2))
					}
					pending = append(pending, func() { qLanded += bytes; fail(qBar.completeTx(bytes)) })
				}
				a.yield(false)
			}
			for it := range c.nFull {
				s := it % st
				for kv := range 2 {
					if it >= st {
						wait(a, free[kv][s], (it/st+1)&1)
					}
					fail(full[kv][s].expectTx(tile))
					a.yield(false)
					for i := range nRuns {
						for p := range panels {
							off := s*tile + p*bn*128 + i*run*128
							bs, bp, r0, e := box(off, run)
							fail(e)
							if e != nil || bs != s || bp != p || r0 != i*run {
								fail(fmt.Errorf("tile %d run %d panel %d: box at %d lands in stage %d panel %d row %d", it, i, p, off, bs, bp, r0))
								return
							}
							beginWrite("the accelerator", kv, s, it)
							inflight[kv][s]++
							pending = append(pending, func() {
								beginWrite("the accelerator", kv, s, it)
								write(s, kv, p, r0, run, it)
								inflight[kv][s]--
								fail(full[kv][s].completeTx(run * 128))
							})
							a.yield(false)
						}
					}
				}
			}
			if !ownWait && c.nTiles > c.nFull {
				if c.nFull >= st {
					for kv := range 2 {
						wait(a, free[kv][c.nFull%st], (c.nFull/st+1)&1)
					}
				}
				named4 = true
				a.yield(false)
			}
		},
		func(a *fa3Agent) { // warps 1-3: Q gathered unless it came by the accelerator, then the last tile
			if c.nTiles == 0 {
				return
			}
			if c.tma&fa3TMAQ == 0 {
				qLanded = bm * d * 2
				fail(qBar.arrive(96))
				a.yield(false)
			}
			if c.nTiles > c.nFull {
				it := c.nFull
				s := it % st
				if ownWait {
					if it >= st {
						for kv := range 2 {
							wait(a, free[kv][s], (it/st+1)&1)
						}
					}
				} else {
					for !named4 {
						a.yield(true)
					}
				}
				for kv := range 2 {
					beginWrite("the last tile's gather", kv, s, it)
					inflight[kv][s]++
				}
				a.yield(false)
				for kv := range 2 {
					beginWrite("the last tile's gather", kv, s, it)
					for p := range panels {
						write(s, kv, p, 0, bn, it)
					}
					inflight[kv][s]--
				}
				for kv := range 2 {
					fail(full[kv][s].arrive(1))
				}
				a.yield(false)
			}
		},
	}
	consumer := func(a *fa3Agent) {
		if c.nTiles > 0 {
			wait(a, qBar, 0)
			if qLanded != bm*d*2 {
				fail(fmt.Errorf("%s reads Q with %d of its %d bytes landed", a.name, qLanded, bm*d*2))
			}
		}
		// The default order (F3_OVERLAP 0): K for S, then V for P·V.
		for it := range c.nTiles {
			s := it % st
			for kv := range 2 {
				wait(a, full[kv][s], (it/st)&1)
				if inflight[kv][s] > 0 {
					fail(fmt.Errorf("%s reads tile %d from stage %d with copies to it in flight", a.name, it, s))
				}
				half := held[s][kv*panels*bn : (kv+1)*panels*bn]
				for i, h := range half {
					if h != it {
						fail(fmt.Errorf("%s reads tile %d from stage %d: %s panel %d row %d holds tile %d", a.name, it, s, []string{"K", "V"}[kv],
							i/bn, i%bn, h))
						break
					}
				}
				readers[kv][s]++
				a.yield(false)
				readers[kv][s]--
				fail(free[kv][s].arrive(128))
				a.yield(false)
			}
		}
	}
	bodies = append(bodies, consumer, consumer)

	runAgents(agents, bodies, &pending, rng, &err, fail)
	if err != nil {
		return err
	}
	// Every phase was one tile's (or Q's), no more and no less.
	if c.nTiles > 0 && qBar.phase != 1 {
		return fmt.Errorf("bar_q completed %d phases", qBar.phase)
	}
	for s := range st {
		want := (c.nTiles - s + st - 1) / st
		for _, b := range []*fa3Bar{full[0][s], full[1][s], free[0][s], free[1][s]} {
			if b.phase != want || b.pending != b.count || b.tx != 0 {
				return fmt.Errorf("%s: %d phases (want %d), %d arrivals and %d bytes left over", b.name, b.phase, want, b.count-b.pending, b.tx)
			}
		}
	}
	return nil
}

// fa3Blocks is the (lo, hi) key range of every attn_fa3 block of a
// request of ext new tokens after prefix cached keys (ext_tile,
// ext_block_keys: causal, an optional window, splits of chunk keys).
func fa3Blocks(prefix, ext, group, window, splits, chunk, bn int) [][2]int {
	var out [][2]int
	rows := ext * group
	for row0 := 0; row0 < rows; row0 += fa3Rows {
		tFirst, tLast := row0/group, (min(rows, row0+fa3Rows)-1)/group
		for split := range splits {
			lo, hi := 0, prefix+tLast+1
			if window > 0 {
				lo = max(0, prefix+tFirst+1-window)
			}
			if splits > 1 {
				lo, hi = max(lo, split*chunk), min(hi, (split+1)*chunk)
			}
			out = append(out, [2]int{lo &^ (bn - 1), hi})
		}
	}
	return out
}

// TestFA3RingEmulation runs emulateFA3Ring over the blocks of the GPU
// tests' extend cases (300, 129 and 1 new tokens after 0, 200 and 700
// cached keys, TestCUDAExtendLong) and of the prefill benchmark (1024
// tokens, group 4), one split and several, at every head dim and the page
// sizes the accelerator takes, and over rings of up to five laps.
func TestFA3RingEmulation(t *testing.T) {
	seen := map[fa3RingCase]bool{}
	var cases []fa3RingCase
	add := func(d, page, group int, lo, hi int) {
		bn := fa3Keys(d)
		if hi <= lo {
			return
		}
		tma := fa3TMAKV
		if group&(group-1) == 0 {
			tma |= fa3TMAQ
		}
		c := fa3RingCase{d: d, page: page, tma: tma, group: group, nFull: (hi - lo) / bn, nTiles: (hi - lo + bn - 1) / bn}
		if !seen[c] {
			seen[c] = true
			cases = append(cases, c)
		}
	}
	reqs := [][2]int{{0, 300}, {200, 129}, {700, 1}}
	for _, d := range []int{64, 128, 256} {
		bn := fa3Keys(d)
		for _, page := range []int{16, 32, 64, 128, 256} {
			for _, group := range []int{1, 2, 3, 4, 8} {
				for _, window := range []int{0, 200} {
					for _, splits := range []int{1, 2, 3} {
						chunk := ((701+splits-1)/splits + 15) / 16 * 16
						for _, r := range reqs {
							for _, b := range fa3Blocks(r[0], r[1], group, window, splits, chunk, bn) {
								add(d, page, group, b[0], b[1])
							}
						}
					}
				}
			}
			for _, b := range fa3Blocks(0, 1024, 4, 0, 1, 0, bn) {
				add(d, page, 4, b[0], b[1])
			}
			for n := range 5*fa3Stages(d) + 1 {
				add(d, page, 1, 0, n*bn)
				add(d, page, 3, 0, n*bn+1)
			}
		}
	}
	const seeds = 8
	for _, c := range cases {
		for seed := range seeds {
			if err := emulateFA3Ring(c, rand.New(rand.NewPCG(uint64(seed), uint64(c.nTiles))), false); err != nil {
				t.Fatalf("%v seed %d: %v", c, seed, err)
			}
		}
	}
	t.Logf("%d block shapes × %d schedules", len(cases), seeds)

	// 2·ST+1 full tiles and a last one (on the 2-stage ring, the d128
	// extend's one-token request of 701 keys). With warps 1-3 waiting for
	// the last tile's stage themselves, their parity wait for that stage's
	// second phase passes while its first is still open.
	st := fa3Stages(128)
	c := fa3RingCase{d: 128, page: 16, tma: fa3TMAKV | fa3TMAQ, group: 1, nFull: 2*st + 1, nTiles: 2*st + 2}
	caught := 0
	for seed := range 64 {
		if emulateFA3Ring(c, rand.New(rand.NewPCG(uint64(seed), 1)), true) != nil {
			caught++
		}
	}
	if caught == 0 {
		t.Errorf("%v: the previous last-tile protocol passed 64 schedules", c)
	}
}
