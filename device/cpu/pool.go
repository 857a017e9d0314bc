// Package cpu holds the host kernels that are not attention: matrix
// products against stored weights, normalisation, RoPE, activations. Work
// is split over a fixed pool of worker goroutines sized to the cores.
//
// Hot loops are Go assembly (AVX-512 where present, else AVX2+FMA+F16C),
// chosen at start-up from golang.org/x/sys/cpu; every kernel has a pure-Go
// twin that SetAssembly(false) (or GOSLING_NOASM=1) selects, and the tests
// run both. See kernels.go for the dispatch and gemm.go for the tiling.
package cpu

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Workers is a fixed pool of goroutines that run index ranges.
//
// Decode issues a few hundred short parallel jobs per token (a few tens of
// microseconds each), so handing work over must cost far less than that: a
// job is published through an atomic generation counter that idle workers
// spin on for a short while before parking on a channel, and tasks are
// claimed with an atomic counter, so a core slowed by another process
// simply claims fewer of them.
type Workers struct {
	n int

	// mu is held by the goroutine whose job runs; a second caller (a nested
	// For, or another goroutine) finds it taken and runs serially.
	mu  sync.Mutex
	gen atomic.Uint64
	cur atomic.Pointer[job]

	parked []atomic.Bool
	wake   []chan struct{}
	closed atomic.Bool

	// Scratch owned by whoever holds mu: per-worker tiles and the packed
	// activations of the current matrix product (see gemm.go).
	scratch []workerScratch
	shared  []byte

	// missed counts the latest jobs in a row that the caller ran every
	// task of, the other workers taking none; until soloUntil jobs run on
	// the caller alone, unpublished (run). Both belong to mu's holder.
	missed    int
	soloUntil time.Time
	// dec is the one-token product's gemm (forwardGroup), reused by
	// whoever holds mu.
	dec gemm
}

type job struct {
	fn       func(worker, task int)
	tasks    int64
	next     atomic.Int64
	finished atomic.Int64
}

// spinFor is how long an idle worker polls for the next job before it
// parks. Decode steps leave gaps of tens of microseconds between jobs
// (norms, attention set-up, sampling); waking a parked goroutine costs
// about as much again.
const spinFor = 200 * time.Microsecond

// yieldAfter is how long a waiting worker spins before it also yields
// its core to the OS at each pause (osYield), and yieldSpins about as
// many spins of run's wait for a job's last task. Most of a decode
// step's waits are a few microseconds on an idle machine, where a
// sched_yield only delays noticing the next job, while a thread that
// another process descheduled is gone for a whole time slice,
// milliseconds. (Batch-1 decode of stories110M Q4_K_M on the idle 2-core
// machine, 4 interleaved rounds, medians: yielding at once 404 and 437
// tok/s against 453 and 478 without yielding; after 20 µs 433 and 496
// against 478 and 441: within the rounds' noise.)
const (
	yieldAfter = 20 * time.Microsecond
	yieldSpins = 1 << 13
)

// NewWorkers starts n workers (n <= 0: one per logical CPU).
func NewWorkers(n int) *Workers {
	if n <= 0 {
		n = runtime.GOMAXPROCS(0)
	}
	w := &Workers{n: n, parked: make([]atomic.Bool, n), wake: make([]chan struct{}, n), scratch: make([]workerScratch, n)}
	for id := 1; id < n; id++ { // the caller's goroutine is worker 0
		w.wake[id] = make(chan struct{}, 1)
		go w.loop(id)
	}
	return w
}

// N is the number of workers.
func (w *Workers) N() int {
	if w == nil {
		return 1
	}
	return w.n
}

// For runs fn over [0, n) split into contiguous ranges, at least minChunk
// long (the last may be shorter), and returns when all are done. Every
// index is passed exactly once; ranges may run on any worker, several on
// one. A nil pool, or a call made while the pool is busy (from inside fn,
// or from another goroutine), runs fn(0, n) on the caller.
func (w *Workers) For(n, minChunk int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	minChunk = max(minChunk, 1)
	// A few ranges per worker let a core that another process slows down
	// take fewer of them.
	parts := min(w.N()*4, max(1, n/minChunk))
	if parts <= 1 || !w.tryAcquire() {
		fn(0, n)
		return
	}
	defer w.release()
	chunk := (n + parts - 1) / parts
	parts = (n + chunk - 1) / chunk
	w.run(parts, func(_, task int) { fn(task*chunk, min(n, (task+1)*chunk)) })
}

// tryAcquire takes the pool for the caller's job, unless it is busy. A
// pool of one worker is taken too: its jobs run on the caller alone, but
// in the pool's scratch, not in memory allocated per matrix product.
func (w *Workers) tryAcquire() bool { return w != nil && w.mu.TryLock() }

func (w *Workers) release() { w.mu.Unlock() }

// Absent workers. On a machine that other processes load, a worker can
// be off its core for milliseconds: the caller then runs every task of job
// after job itself while the worker's spinning and waking take CPU time
// that the scheduler charges to this process (its autogroup), so to the
// caller too. After soloAfter jobs in a row that no other worker took a
// task of, the jobs of the next soloFor run on the caller unpublished
// (about 64 jobs of a stories110M batch-1 decode; long enough for the
// idle workers to park, spinFor); then jobs are published again, and
// probeJobs more without help start another solo run. A time rather
// than a count of jobs: a batch's jobs last ten times a batch-1
// decode's. A worker that keeps its core takes a task of nearly every
// job: a decode job's tasks last microseconds, and it notices a job in
// under one.
const (
	soloAfter = 16
	probeJobs = 4
	soloFor   = 10 * spinFor
)

// run executes fn(worker, task) for every task in [0, tasks) on all
// workers; the caller must hold mu. worker identifies the goroutine (0 is
// the caller), so fn may use per-worker scratch.
func (w *Workers) run(tasks int, fn func(worker, task int)) {
	j := &job{fn: fn, tasks: int64(tasks)}
	// Stored even when solo, for unclaimed; a worker that saw an earlier
	// generation late may still claim from it, which is as correct.
	w.cur.Store(j)
	now := time.Now()
	solo := now.Before(w.soloUntil)
	if !solo {
		w.gen.Add(1)
		for id := 1; id < w.n; id++ {
			if w.parked[id].CompareAndSwap(true, false) {
				w.wake[id] <- struct{}{}
			}
		}
	}
	mine := j.work(0)
	for spins := 0; j.finished.Load() < j.tasks; spins++ {
		if spins%64 == 63 {
			runtime.Gosched()
			if spins >= yieldSpins {
				osYield()
			}
		}
	}
	if !solo {
		w.settle(tasks, mine, now)
	}
}

// settle counts a job of tasks tasks published at now, mine of them run by
// the caller, toward a solo run.
func (w *Workers) settle(tasks, mine int, now time.Time) {
	switch {
	case tasks < 2:
	case mine < tasks:
		w.missed = 0
	default:
		if w.missed++; w.missed >= soloAfter {
			w.soloUntil, w.missed = now.Add(soloFor), soloAfter-probeJobs
		}
	}
}

// unclaimed is the first task of the running job that no worker has
// claimed yet (only meaningful inside run's fn, as a hint).
func (w *Workers) unclaimed() int {
	if j := w.cur.Load(); j != nil {
		return int(j.next.Load())
	}
	return 1 << 62
}

// work runs tasks of j until none is left unclaimed and returns how many
// it ran.
func (j *job) work(worker int) (ran int) {
	for {
		t := j.next.Add(1) - 1
		if t >= j.tasks {
			return ran
		}
		j.fn(worker, int(t))
		j.finished.Add(1)
		ran++
	}
}

// loop is worker id's life: wait for a new generation, help with its job.
// A worker that sees a generation late may find its job already drained;
// claiming from it is then a no-op.
func (w *Workers) loop(id int) {
	seen := w.gen.Load()
	for {
		seen = w.await(id, seen)
		if w.closed.Load() {
			return
		}
		if j := w.cur.Load(); j != nil {
			j.work(id)
		}
	}
}

// await returns once the generation differs from seen: it polls for
// spinFor, then parks until run or Close sends a wake token.
func (w *Workers) await(id int, seen uint64) uint64 {
	start := time.Now()
	for spins := 1; ; spins++ {
		if g := w.gen.Load(); g != seen {
			return g
		}
		if spins%256 != 0 {
			continue
		}
		if d := time.Since(start); d < spinFor {
			runtime.Gosched()
			if d >= yieldAfter {
				osYield()
			}
			continue
		}
		w.parked[id].Store(true)
		if g := w.gen.Load(); g != seen {
			// A publisher that already took our parked flag owes us a token.
			if !w.parked[id].CompareAndSwap(true, false) {
				<-w.wake[id]
			}
			return g
		}
		<-w.wake[id]
		start = time.Now()
	}
}

// Close stops the workers.
func (w *Workers) Close() {
	if w == nil || w.closed.Swap(true) {
		return
	}
	w.gen.Add(1)
	for id := 1; id < w.n; id++ {
		if w.parked[id].CompareAndSwap(true, false) {
			w.wake[id] <- struct{}{}
		}
	}
}
