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

// fa3Tile is one work tile of an attn_fa3 block: its K/V tiles, of which
// the first nFull hold only keys below hi (the rest, at most one, is
// gathered).
type fa3Tile struct{ nFull, nTiles int }

// fa3RingCase is one attn_fa3 block under the accelerator: head dim, page
// size, tma bits, GQA group and the work tiles it takes in turn (one for
// the F3_PERSIST 0 form).
type fa3RingCase struct {
	d, page, tma, group int
	tiles               []fa3Tile
}

func (c fa3RingCase) String() string {
	var ts []string
	for _, t := range c.tiles {
		ts = append(ts, fmt.Sprintf("%d+%d", t.nFull, t.nTiles-t.nFull))
	}
	return fmt.Sprintf("d%d/page%d/tma%d/g%d/tiles%v", c.d, c.page, c.tma, c.group, ts)
}

// fa3Fault is a deliberate protocol error for emulateFA3Ring to catch.
type fa3Fault int

const (
	fa3NoFault fa3Fault = iota
	// fa3OwnWait: producer warps 1-3 wait for the last tile's stage
	// themselves (the kernel's previous protocol).
	fa3OwnWait
	// fa3RingRestart: every work tile restarts the K/V ring and the Q
	// buffers at position 0, phase 0, instead of carrying the running
	// counts across tiles.
	fa3RingRestart
)

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

// emulateFA3Ring runs the attn_fa3 producer of kernels/attn_kernels.cu
// (the accelerator path, tma bit 0, or the cp.async gather, tma 0) and its
// two consumer warpgroups over one block's work tiles, interleaving every step of the four parties and
// the bulk copies' completions at random. The block's rings are used in
// order by running counts that carry across work tiles: F3_STAGES(d) K/V
// stages, NQ Q buffers, two work descriptions. It checks: every box's
// shared destination lies inside its stage or Q buffer, inside the
// kernel's dynamic shared memory, 1024-byte aligned (the 128-byte
// swizzle's atoms; TMA asks 128); every barrier phase's arrivals and bytes
// match what is issued to it; no copy writes a stage, Q buffer or
// description a consumer reads; a consumer reads a stage only once all of
// its tile landed, Q only once the work tile's own landed, a description
// only once it is the work tile's; every party finishes. fault injects a
// protocol error, to show the checks catch it.
func emulateFA3Ring(c fa3RingCase, rng *rand.Rand, fault fa3Fault) error {
	d, bm, bn, st := c.d, fa3Rows, fa3Keys(c.d), fa3Stages(c.d)
	nq := fa3QBuffers(d, false)
	tile, qtile := bn*d*2, bm*d*2
	run := min(c.page, bn)
	nRuns, panels := bn/run, d/64
	// The kernel's dynamic shared memory, declared 1024-aligned: the Q
	// buffers, ST K tiles, ST V tiles.
	if need := nq*qtile + 2*st*tile; need > fa3SharedMem(d, false) {
		return fmt.Errorf("Q and the stages need %d bytes of dynamic shared memory, the launch gives %d", need, fa3SharedMem(d, false))
	}
	if total := fa3SharedTotal(d, false); total > 227*1024 {
		return fmt.Errorf("%d bytes of shared memory, over sm_90's 227 KiB", total)
	}

	var err error
	fail := func(e error) {
		if e != nil && err == nil {
			err = e
		}
	}
	// Each work tile's running counts: its first K/V tile's ring position
	// and its Q load's (work tiles without keys load no Q).
	type pos struct{ r, qn int }
	at := make([]pos, len(c.tiles))
	totalKV, totalQ := 0, 0
	for i, t := range c.tiles {
		at[i] = pos{totalKV, totalQ}
		if fault == fa3RingRestart {
			at[i] = pos{}
		}
		totalKV += t.nTiles
		if t.nTiles > 0 {
			totalQ++
		}
	}
	// Barrier counts as the kernel inits them: under the accelerator a
	// tile lands on one arrival and Q on one (its box) or warps 1-3's;
	// gathered, every producer thread arrives.
	gather := c.tma&fa3TMAKV == 0
	qCount, fullCount := 96, 1
	if c.tma&fa3TMAQ != 0 {
		qCount = 1
	}
	if gather {
		qCount, fullCount = 128, 128
	}
	var qFull, qFree []*fa3Bar
	for b := range nq {
		qFull = append(qFull, newFA3Bar(fmt.Sprintf("bar_qfull[%d]", b), qCount))
		qFree = append(qFree, newFA3Bar(fmt.Sprintf("bar_qfree[%d]", b), 256))
	}
	// K (kv 0) and V (kv 1) land and free on barriers of their own.
	var full, free [2][]*fa3Bar
	for kv, name := range []string{"k", "v"} {
		full[kv], free[kv] = make([]*fa3Bar, st), make([]*fa3Bar, st)
		for s := range st {
			full[kv][s] = newFA3Bar(fmt.Sprintf("bar_%sfull[%d]", name, s), fullCount)
			free[kv][s] = newFA3Bar(fmt.Sprintf("bar_%sfree[%d]", name, s), 256)
		}
	}
	var mFull, mFree [2]*fa3Bar
	for b := range 2 {
		mFull[b] = newFA3Bar(fmt.Sprintf("bar_mfull[%d]", b), 128)
		mFree[b] = newFA3Bar(fmt.Sprintf("bar_mfree[%d]", b), 256)
	}
	// Contents: the K/V ring position each (stage, K/V, panel, row) holds,
	// the Q load each Q buffer's panels hold (bytes landed of it), the work
	// tile each description holds (len(tiles): no more work); copies in
	// flight and consumers reading, per stage, Q buffer and description.
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
	qHeld, qLanded, qReaders := make([]int, nq), make([]int, nq), make([]int, nq)
	for b := range qHeld {
		qHeld[b] = -1
	}
	mHeld, mReaders := [2]int{-1, -1}, [2]int{}
	named4 := 0     // bar.arrive 4 by warp 0, per work tile with a last tile
	var bar5 [2]int // bar.sync 5 arrivals of warp 0 and of warps 1-3

	// Copies in flight, landing at random; a cp.async group's are forced
	// to land by its wait.
	type copyOp struct {
		fn   func()
		done bool
	}
	var pending []*copyOp
	land := func(op *copyOp) {
		if !op.done {
			op.done = true
			op.fn()
		}
	}
	write := func(s, kv, p, r0, rows, n int) {
		for r := r0; r < r0+rows; r++ {
			held[s][(kv*panels+p)*bn+r] = n
		}
	}
	beginWrite := func(who string, kv, s, n int) {
		if readers[kv][s] > 0 {
			fail(fmt.Errorf("%s writes %s stage %d (ring tile %d) while a consumer reads it", who, []string{"K", "V"}[kv], s, n))
		}
	}
	beginQ := func(who string, b, qn int) {
		if qReaders[b] > 0 {
			fail(fmt.Errorf("%s writes Q buffer %d (Q load %d) while a consumer reads it", who, b, qn))
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
	// sync5 is the producer's named barrier 5 between warp 0 (who 0) and
	// warps 1-3 (who 1).
	sync5 := func(a *fa3Agent, who int) {
		if who < 0 {
			return // the gathering producer: one party
		}
		bar5[who]++
		for bar5[1-who] < bar5[who] {
			a.yield(true)
		}
		a.yield(false)
	}
	// describe is next(): work tile i (len(tiles): no more work) into
	// description i % 2, once the consumers are done with work tile i-2;
	// warp 0's part or warps 1-3's.
	describe := func(a *fa3Agent, who, i int) {
		sync5(a, who) // f3_w is set
		ms := i & 1
		if i >= 2 {
			wait(a, mFree[ms], ((i>>1)+1)&1)
		}
		if mReaders[ms] > 0 {
			fail(fmt.Errorf("the producer describes work tile %d in slot %d while a consumer reads it", i, ms))
		}
		if who <= 0 {
			mHeld[ms] = i
		}
		if i < len(c.tiles) {
			sync5(a, who) // f3_whi
			sync5(a, who) // the description
		}
		fail(mFull[ms].arrive(map[int]int{-1: 128, 0: 32, 1: 96}[who]))
		a.yield(false)
	}
	agents := []*fa3Agent{{name: "producer warp 0"}, {name: "producer warps 1-3"}, {name: "consumer 0"}, {name: "consumer 1"}}
	bodies := []func(a *fa3Agent){
		func(a *fa3Agent) { // warp 0: Q by the accelerator, then the full tiles
			for i, wt := range c.tiles {
				describe(a, 0, i)
				if wt.nTiles == 0 {
					continue
				}
				r, qn := at[i].r, at[i].qn
				if c.tma&fa3TMAQ != 0 {
					qb := qn % nq
					if qn >= nq {
						wait(a, qFree[qb], (qn/nq+1)&1)
					}
					fail(qFull[qb].expectTx(qtile))
					beginQ("the accelerator", qb, qn)
					qHeld[qb], qLanded[qb] = qn, 0
					for p := range panels {
						off := qb*qtile + p*bm*128 // tma_load3(qs + qb·QTILE + p·BM·128): F3_BM/group tokens × group heads × 64 columns
						bytes := (bm / c.group) * c.group * 128
						if off%1024 != 0 || off < qb*qtile || off+bytes > (qb+1)*qtile {
							fail(fmt.Errorf("Q box at %d of %d bytes outside Q buffer %d", off, bytes, qb))
						}
						pending = append(pending, &copyOp{fn: func() {
							beginQ("the accelerator", qb, qn)
							qLanded[qb] += bytes
							fail(qFull[qb].completeTx(bytes))
						}})
					}
					a.yield(false)
				}
				for it := range wt.nFull {
					n := r + it
					s := n % st
					for kv := range 2 {
						if n >= st {
							wait(a, free[kv][s], (n/st+1)&1)
						}
						fail(full[kv][s].expectTx(tile))
						a.yield(false)
						for i := range nRuns {
							for p := range panels {
								off := s*tile + p*bn*128 + i*run*128
								bs, bp, r0, e := box(off, run)
								fail(e)
								if e != nil || bs != s || bp != p || r0 != i*run {
									fail(fmt.Errorf("ring tile %d run %d panel %d: box at %d lands in stage %d panel %d row %d", n, i, p, off, bs, bp, r0))
									return
								}
								beginWrite("the accelerator", kv, s, n)
								inflight[kv][s]++
								pending = append(pending, &copyOp{fn: func() {
									beginWrite("the accelerator", kv, s, n)
									write(s, kv, p, r0, run, n)
									inflight[kv][s]--
									fail(full[kv][s].completeTx(run * 128))
								}})
								a.yield(false)
							}
						}
					}
				}
				if fault != fa3OwnWait && wt.nTiles > wt.nFull {
					n := r + wt.nFull
					if n >= st {
						for kv := range 2 {
							wait(a, free[kv][n%st], (n/st+1)&1)
						}
					}
					named4++
					a.yield(false)
				}
			}
			describe(a, 0, len(c.tiles))
		},
		func(a *fa3Agent) { // warps 1-3: Q gathered unless it came by the accelerator, then the last tile
			seen4 := 0
			for i, wt := range c.tiles {
				describe(a, 1, i)
				if wt.nTiles == 0 {
					continue
				}
				r, qn := at[i].r, at[i].qn
				if c.tma&fa3TMAQ == 0 {
					qb := qn % nq
					if qn >= nq {
						wait(a, qFree[qb], (qn/nq+1)&1)
					}
					beginQ("the Q gather", qb, qn)
					qHeld[qb], qLanded[qb] = qn, qtile
					fail(qFull[qb].arrive(96))
					a.yield(false)
				}
				if wt.nTiles > wt.nFull {
					n := r + wt.nFull
					s := n % st
					if fault == fa3OwnWait {
						if n >= st {
							for kv := range 2 {
								wait(a, free[kv][s], (n/st+1)&1)
							}
						}
					} else {
						for named4 <= seen4 {
							a.yield(true)
						}
						seen4++
					}
					for kv := range 2 {
						beginWrite("the last tile's gather", kv, s, n)
						inflight[kv][s]++
					}
					a.yield(false)
					for kv := range 2 {
						beginWrite("the last tile's gather", kv, s, n)
						for p := range panels {
							write(s, kv, p, 0, bn, n)
						}
						inflight[kv][s]--
					}
					for kv := range 2 {
						fail(full[kv][s].arrive(1))
					}
					a.yield(false)
				}
			}
			describe(a, 1, len(c.tiles))
		},
	}
	// The gather (tma 0): the whole producer warpgroup, one party, copies
	// Q and then each K/V tile by cp.async, one commit group each, and
	// hands a tile over once its group landed: ST-1 tiles behind its
	// copies, the rest (and Q, on a short work tile) when the work tile's
	// copies are drained.
	gatherBody := func(a *fa3Agent) {
		var groups [][]*copyOp // committed, in order
		cpWait := func(k int) {
			for len(groups) > k {
				for _, op := range groups[0] {
					land(op)
				}
				groups = groups[1:]
			}
		}
		handOver := func(s int) {
			for kv := range 2 {
				fail(full[kv][s].arrive(128))
			}
		}
		for i, wt := range c.tiles {
			describe(a, -1, i)
			if wt.nTiles == 0 {
				continue
			}
			r, qn := at[i].r, at[i].qn
			qb := qn % nq
			if qn >= nq {
				wait(a, qFree[qb], (qn/nq+1)&1)
			}
			beginQ("the Q gather", qb, qn)
			qHeld[qb], qLanded[qb] = qn, 0
			qop := &copyOp{fn: func() {
				beginQ("the Q gather", qb, qn)
				qLanded[qb] = qtile
			}}
			pending = append(pending, qop)
			groups = append(groups, []*copyOp{qop})
			a.yield(false)
			for it := range wt.nTiles {
				n := r + it
				s := n % st
				if it >= st-1 {
					cpWait(st - 2)
					if it == st-1 {
						fail(qFull[qb].arrive(128))
					}
					handOver((n - (st - 1)) % st)
					a.yield(false)
				}
				if n >= st {
					for kv := range 2 {
						wait(a, free[kv][s], (n/st+1)&1)
					}
				}
				var g []*copyOp
				for kv := range 2 {
					beginWrite("the gather", kv, s, n)
					inflight[kv][s]++
					op := &copyOp{fn: func() {
						beginWrite("the gather", kv, s, n)
						for p := range panels {
							write(s, kv, p, 0, bn, n)
						}
						inflight[kv][s]--
					}}
					pending = append(pending, op)
					g = append(g, op)
				}
				groups = append(groups, g)
				a.yield(false)
			}
			cpWait(0)
			if wt.nTiles < st {
				fail(qFull[qb].arrive(128))
			}
			for it := max(0, wt.nTiles-(st-1)); it < wt.nTiles; it++ {
				handOver((r + it) % st)
			}
			a.yield(false)
		}
		describe(a, -1, len(c.tiles))
	}
	if gather {
		agents = []*fa3Agent{{name: "producer"}, {name: "consumer 0"}, {name: "consumer 1"}}
		bodies = []func(a *fa3Agent){gatherBody}
	}
	consumer := func(a *fa3Agent) {
		for i := 0; ; i++ {
			ms := i & 1
			wait(a, mFull[ms], (i>>1)&1)
			if mHeld[ms] != i {
				fail(fmt.Errorf("%s reads work tile %d's description from slot %d holding %d's", a.name, i, ms, mHeld[ms]))
				return
			}
			if i == len(c.tiles) {
				return
			}
			mReaders[ms]++
			wt := c.tiles[i]
			r, qn := at[i].r, at[i].qn
			qb := qn % nq
			if wt.nTiles > 0 {
				wait(a, qFull[qb], (qn/nq)&1)
				if qHeld[qb] != qn || qLanded[qb] != qtile {
					fail(fmt.Errorf("%s reads Q load %d from buffer %d holding load %d, %d of its %d bytes landed", a.name, qn, qb, qHeld[qb], qLanded[qb], qtile))
				}
				qReaders[qb]++
			}
			// The default order (F3_OVERLAP 0): K for S, then V for P·V;
			// Q's buffer frees once the last S is done.
			for it := range wt.nTiles {
				n := r + it
				s := n % st
				for kv := range 2 {
					wait(a, full[kv][s], (n/st)&1)
					if inflight[kv][s] > 0 {
						fail(fmt.Errorf("%s reads ring tile %d from stage %d with copies to it in flight", a.name, n, s))
					}
					half := held[s][kv*panels*bn : (kv+1)*panels*bn]
					for j, h := range half {
						if h != n {
							fail(fmt.Errorf("%s reads ring tile %d from stage %d: %s panel %d row %d holds ring tile %d", a.name, n, s, []string{"K", "V"}[kv],
								j/bn, j%bn, h))
							break
						}
					}
					readers[kv][s]++
					a.yield(false)
					readers[kv][s]--
					fail(free[kv][s].arrive(128))
					if kv == 0 && it == wt.nTiles-1 {
						qReaders[qb]--
						fail(qFree[qb].arrive(128))
					}
					a.yield(false)
				}
			}
			a.yield(false) // the epilogue reads the description's rows
			mReaders[ms]--
			fail(mFree[ms].arrive(128))
			a.yield(false)
		}
	}
	bodies = append(bodies, consumer, consumer)

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
	stop := func() {
		for _, a := range agents {
			if !a.done {
				a.resume <- false
			}
		}
	}
	idle := 0
	for err == nil {
		var live []*fa3Agent
		for _, a := range agents {
			if !a.done {
				live = append(live, a)
			}
		}
		if len(live) == 0 && len(pending) == 0 {
			break
		}
		if k := rng.IntN(len(live) + min(len(pending), 1)); k == len(live) {
			j := rng.IntN(len(pending))
			op := pending[j]
			pending = append(pending[:j], pending[j+1:]...)
			land(op)
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
		if idle > 1000 && len(pending) == 0 {
			var who []string
			for _, a := range live {
				who = append(who, a.name)
			}
			fail(fmt.Errorf("deadlock: %v wait forever", who))
		}
	}
	if err != nil {
		stop()
		return err
	}
	// Every phase was one ring tile's, Q load's or description's, no more
	// and no less.
	uses := func(total, n, i int) int { return (total - i + n - 1) / n }
	check := func(b *fa3Bar, want int) error {
		if b.phase != want || b.pending != b.count || b.tx != 0 {
			return fmt.Errorf("%s: %d phases (want %d), %d arrivals and %d bytes left over", b.name, b.phase, want, b.count-b.pending, b.tx)
		}
		return nil
	}
	for s := range st {
		for _, b := range []*fa3Bar{full[0][s], full[1][s], free[0][s], free[1][s]} {
			if e := check(b, uses(totalKV, st, s)); e != nil {
				return e
			}
		}
	}
	for b := range nq {
		for _, x := range []*fa3Bar{qFull[b], qFree[b]} {
			if e := check(x, uses(totalQ, nq, b)); e != nil {
				return e
			}
		}
	}
	for b := range 2 {
		if e := check(mFull[b], uses(len(c.tiles)+1, 2, b)); e != nil {
			return e
		}
		if e := check(mFree[b], uses(len(c.tiles), 2, b)); e != nil {
			return e
		}
	}
	return nil
}

// fa3SharedTotal is a block's shared memory at head dim d: the kernel's
// static variables (the two descriptions and their row ranges, the
// producer's scratch, the barriers, the slot lists), then the dynamic part
// at the next 1024 bytes.
func fa3SharedTotal(d int, fp8 bool) int {
	bm, bn, st, nq := fa3Rows, fa3Keys(d), fa3Stages(d), fa3QBuffers(d, fp8)
	static := 2*11*4 + 2*2*bm*4 + 4 + 3*4 + 4*4 + 8*(2*nq+4*st+4) + 2*bn*4 // f3_meta, row_lo/hi, f3_w, f3_pc, f3_whi, f3_bar, f3_slot
	return (static+1023)/1024*1024 + fa3SharedMem(d, fp8)
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
// sizes the accelerator takes, and over rings of up to five laps: each
// block alone (F3_PERSIST 0), and the persistent form's streams of them,
// taken in ext_tile's order by a few blocks in turn (empty splits too).
func TestFA3RingEmulation(t *testing.T) {
	seen := map[string]bool{}
	var cases []fa3RingCase
	tma := func(group int) int {
		if group&(group-1) == 0 {
			return fa3TMAKV | fa3TMAQ
		}
		return fa3TMAKV
	}
	tileOf := func(bn int, b [2]int) fa3Tile {
		if b[1] <= b[0] {
			return fa3Tile{}
		}
		return fa3Tile{nFull: (b[1] - b[0]) / bn, nTiles: (b[1] - b[0] + bn - 1) / bn}
	}
	var add func(c fa3RingCase)
	add = func(c fa3RingCase) {
		if k := c.String(); !seen[k] {
			seen[k] = true
			cases = append(cases, c)
		}
		if c.page == 16 { // and gathered (pages of 1 key), once per shape
			c.page, c.tma = 1, 0
			add(c)
		}
	}
	// stream deals a launch's blocks (ext_tile's order: the last row tile
	// first) to blocks persistent blocks by a static stride, for every
	// block a case.
	stream := func(d, page, group, blocks int, bs [][2]int) {
		bn := fa3Keys(d)
		for b := range blocks {
			c := fa3RingCase{d: d, page: page, tma: tma(group), group: group}
			for w := b; w < len(bs); w += blocks {
				c.tiles = append(c.tiles, tileOf(bn, bs[len(bs)-1-w]))
			}
			if len(c.tiles) > 0 {
				add(c)
			}
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
						var all [][2]int
						for _, r := range reqs {
							bs := fa3Blocks(r[0], r[1], group, window, splits, chunk, bn)
							for _, b := range bs {
								if b[1] > b[0] {
									add(fa3RingCase{d: d, page: page, tma: tma(group), group: group, tiles: []fa3Tile{tileOf(bn, b)}})
								}
							}
							all = append(all, bs...)
						}
						stream(d, page, group, 3, all)
					}
				}
			}
			bs := fa3Blocks(0, 1024, 4, 0, 1, 0, bn)
			for _, b := range bs {
				add(fa3RingCase{d: d, page: page, tma: tma(4), group: 4, tiles: []fa3Tile{tileOf(bn, b)}})
			}
			stream(d, page, 4, 2, append(append([][2]int{}, bs...), bs...)) // two KV heads
			for n := range 5*fa3Stages(d) + 1 {
				add(fa3RingCase{d: d, page: page, tma: tma(1), group: 1, tiles: []fa3Tile{tileOf(bn, [2]int{0, n * bn})}})
				add(fa3RingCase{d: d, page: page, tma: tma(3), group: 3, tiles: []fa3Tile{tileOf(bn, [2]int{0, n*bn + 1})}})
			}
		}
	}
	const seeds = 8
	for _, c := range cases {
		for seed := range seeds {
			if err := emulateFA3Ring(c, rand.New(rand.NewPCG(uint64(seed), uint64(len(c.tiles)))), fa3NoFault); err != nil {
				t.Fatalf("%v seed %d: %v", c, seed, err)
			}
		}
	}
	t.Logf("%d blocks × %d schedules", len(cases), seeds)

	// 2·ST+1 full tiles and a last one (on the 2-stage ring, the d128
	// extend's one-token request of 701 keys). With warps 1-3 waiting for
	// the last tile's stage themselves, their parity wait for that stage's
	// second phase passes while its first is still open.
	st := fa3Stages(128)
	caught := func(c fa3RingCase, fault fa3Fault) int {
		n := 0
		for seed := range 64 {
			if emulateFA3Ring(c, rand.New(rand.NewPCG(uint64(seed), 1)), fault) != nil {
				n++
			}
		}
		return n
	}
	c := fa3RingCase{d: 128, page: 16, tma: fa3TMAKV | fa3TMAQ, group: 1, tiles: []fa3Tile{{2*st + 1, 2*st + 2}}}
	if caught(c, fa3OwnWait) == 0 {
		t.Errorf("%v: the previous last-tile protocol passed 64 schedules", c)
	}
	// A persistent block whose work tiles restart the rings at position 0
	// (phase 0) instead of carrying the running counts: its second tile
	// waits for phases the first already completed.
	for _, tma := range []int{0, fa3TMAKV, fa3TMAKV | fa3TMAQ} {
		c := fa3RingCase{d: 128, page: 16, tma: tma, group: 1, tiles: []fa3Tile{{3, 3}, {1, 2}, {2, 2}}}
		if caught(c, fa3RingRestart) == 0 {
			t.Errorf("%v: rings restarted per work tile passed 64 schedules", c)
		}
	}
}

// TestFA3SharedMemory: every attn_fa3 variant's shared memory (Q buffers,
// stages, fp8 staging, the static variables) fits sm_90's 227 KiB.
func TestFA3SharedMemory(t *testing.T) {
	for _, d := range []int{64, 128, 256} {
		for _, fp8 := range []bool{false, true} {
			if fp8 && d == 256 {
				continue // not built: the staging rows do not fit
			}
			if total := fa3SharedTotal(d, fp8); total > 227*1024 {
				t.Errorf("d%d fp8 %v: %d bytes of shared memory, over 227 KiB", d, fp8, total)
			}
		}
	}
}
