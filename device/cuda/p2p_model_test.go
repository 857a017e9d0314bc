package cuda

import (
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// p2pModel plays kernels/allreduce.cu's protocol on the host, line for
// line where it matters (block ranges, receive areas and halves, flag
// epochs, the two-shot parts), with goroutines for GPUs' blocks: a rank
// is a goroutine playing a stream (a launch's blocks all finish before
// the next launch starts), a block is a goroutine, flags are atomics
// (the kernels' st.release.sys and ld.relaxed.sys + fence.acq_rel.sys),
// and receive memory is plain memory. Under -race, a protocol that let
// a rank write a receive area while a peer may still read it, or read
// one before its writer's barrier, is a data race the detector reports
// (it tracks happens-before, whatever the interleaving); without -race,
// the sums still have to come out right. A block's threads are one
// goroutine here: the kernels order them with __syncthreads.
type p2pModel struct {
	plan ARPlan
	area int              // vectors of one receive area
	recv [][][4]float32   // [rank]: area(b, half, slot) at ((b·2+half)·ranks+slot)·area
	sig  [][]atomic.Int64 // [rank][b·P2PMaxRanks + p]: written by rank p (uint32 values)
	ctr  [][][2]uint32    // [rank][b]: the rank's own (epoch, calls) per block
}

func newP2PModel(plan ARPlan) *p2pModel {
	m := &p2pModel{plan: plan, area: plan.areaBytes() / p2pVec}
	for range plan.Ranks {
		m.recv = append(m.recv, make([][4]float32, plan.receiveBytes()/p2pVec))
		m.sig = append(m.sig, make([]atomic.Int64, plan.Blocks*P2PMaxRanks))
		m.ctr = append(m.ctr, make([][2]uint32, plan.Blocks))
	}
	return m
}

func (m *p2pModel) areaOf(rank, b int, half uint32, slot int) [][4]float32 {
	o := ((b*2+int(half))*m.plan.Ranks + slot) * m.area
	return m.recv[rank][o : o+m.area]
}

// barrier is p2p_barrier for block b of rank.
func (m *p2pModel) barrier(rank, b int, epoch uint32, shake func()) {
	for p := range m.plan.Ranks {
		if p != rank {
			m.sig[p][b*P2PMaxRanks+rank].Store(int64(epoch))
		}
	}
	for p := range m.plan.Ranks {
		if p == rank {
			continue
		}
		for int32(uint32(m.sig[rank][b*P2PMaxRanks+p].Load())-epoch) < 0 {
			shake()
		}
	}
}

func modelLoad(x []float32, v int) (u [4]float32) {
	for j := range 4 {
		if e := v*4 + j; e < len(x) {
			u[j] = x[e]
		}
	}
	return u
}

func modelStore(x []float32, v int, u [4]float32) {
	for j := range 4 {
		if e := v*4 + j; e < len(x) {
			x[e] = u[j]
		}
	}
}

// sum is sum_vecs: rank order from u[0].
func modelSum(u [][4]float32) [4]float32 {
	s := u[0]
	for _, w := range u[1:] {
		for j := range 4 {
			s[j] += w[j]
		}
	}
	return s
}

// block plays block b of a launch of g blocks on rank: p2p_oneshot or
// p2p_twoshot for float32 x.
func (m *p2pModel) block(rank, b, g int, x []float32, algo ARAlgo, shake func()) {
	n := m.plan.Ranks
	vecs := (len(x) + 3) / 4
	r := (vecs + g - 1) / g
	lo := min(b*r, vecs)
	hi := min(lo+r, vecs)
	epoch, calls := m.ctr[rank][b][0], m.ctr[rank][b][1]+1
	half := calls & 1
	u := make([][4]float32, n)
	if algo == AROneShot {
		for v := lo; v < hi; v++ {
			for p := range n {
				if p != rank {
					m.areaOf(p, b, half, rank)[v-lo] = modelLoad(x, v)
				}
			}
		}
		shake()
		epoch++
		m.barrier(rank, b, epoch, shake)
		for v := lo; v < hi; v++ {
			for p := range n {
				if p == rank {
					u[p] = modelLoad(x, v)
				} else {
					u[p] = m.areaOf(rank, b, half, p)[v-lo]
				}
			}
			modelStore(x, v, modelSum(u))
		}
	} else {
		part := (hi - lo + n - 1) / n
		for v := lo; v < hi; v++ {
			if q := (v - lo) / part; q != rank {
				m.areaOf(q, b, half, rank)[v-lo-q*part] = modelLoad(x, v)
			}
		}
		shake()
		m.barrier(rank, b, epoch+1, shake)
		mine := lo + rank*part
		mineHi := min(mine+part, hi)
		for v := mine; v < mineHi; v++ {
			for p := range n {
				if p == rank {
					u[p] = modelLoad(x, v)
				} else {
					u[p] = m.areaOf(rank, b, half, p)[v-mine]
				}
			}
			s := modelSum(u)
			modelStore(x, v, s)
			for p := range n {
				if p != rank {
					m.areaOf(p, b, half, rank)[part+v-mine] = s
				}
			}
		}
		shake()
		epoch += 2
		m.barrier(rank, b, epoch, shake)
		for v := lo; v < hi; v++ {
			if q := (v - lo) / part; q != rank {
				modelStore(x, v, m.areaOf(rank, b, half, q)[part+v-lo-q*part])
			}
		}
	}
	m.ctr[rank][b] = [2]uint32{epoch, calls}
}

// TestP2PProtocolModel: random sequences of all-reduces (sizes whose grid
// changes from call to call, one-shot and two-shot mixed) queued back to
// back on every rank with no sync between calls, at 2, 3, 4 and 8 ranks,
// through the model of the kernels' protocol: every rank ends every call
// with the host's rank-order sum, to the bit. Run with -race to have the
// detector check the receive areas' reuse (the double buffering).
func TestP2PProtocolModel(t *testing.T) {
	for _, c := range []struct {
		ranks, blocks, calls int
	}{{2, 4, 80}, {3, 3, 60}, {4, 4, 60}, {8, 2, 30}} {
		// Two-shot from MaxBytes sizes the areas for both paths at every
		// size (as the GPU test's plan does); every call picks its path
		// at random.
		top := c.blocks * p2pThreads * p2pVec * 2
		plan := ARPlan{Ranks: c.ranks, MaxBytes: top, TwoShotBytes: top, Blocks: c.blocks}
		m := newP2PModel(plan)
		rng := rand.New(rand.NewPCG(uint64(c.ranks), 99))
		type call struct {
			algo ARAlgo
			in   [][]float32 // [rank]: the inputs, then the results
		}
		calls := make([]call, c.calls)
		for i := range calls {
			n := 1 + rng.IntN(plan.MaxBytes/4)
			if rng.IntN(2) == 0 {
				n = 1 + rng.IntN(3*p2pThreads*4) // 1 to 3 blocks
			}
			calls[i].algo = []ARAlgo{AROneShot, ARTwoShot}[rng.IntN(2)]
			for range c.ranks {
				x := make([]float32, n)
				for j := range x {
					x[j] = float32(rng.NormFloat64())
				}
				calls[i].in = append(calls[i].in, x)
			}
		}
		want := make([][]float32, len(calls))
		for i, cl := range calls {
			want[i] = sumRanks(cl.in)
		}
		var streams sync.WaitGroup
		for rank := range c.ranks {
			streams.Add(1)
			go func() {
				defer streams.Done()
				srng := rand.New(rand.NewPCG(uint64(rank), 7))
				var mu sync.Mutex // the blocks share srng
				shake := func() {
					mu.Lock()
					k := srng.IntN(4)
					mu.Unlock()
					for range k {
						runtime.Gosched()
					}
				}
				for _, cl := range calls {
					x := cl.in[rank]
					g, _, need := plan.grid(len(x)*4, cl.algo)
					if need > m.area { // AllReduceSumBy's refusal
						panic("no room")
					}
					var blocks sync.WaitGroup
					for b := range g {
						blocks.Add(1)
						go func() {
							defer blocks.Done()
							m.block(rank, b, g, x, cl.algo, shake)
						}()
					}
					blocks.Wait()
				}
			}()
		}
		streams.Wait()
		for i, cl := range calls {
			for rank, got := range cl.in {
				for j := range got {
					if math.Float32bits(got[j]) != math.Float32bits(want[i][j]) {
						t.Fatalf("%d ranks, call %d (%v, %d elements), rank %d: [%d] = %v, want %v",
							c.ranks, i, cl.algo, len(got), rank, j, got[j], want[i][j])
					}
				}
			}
		}
	}
}
