// Package cpu holds the host kernels that are not attention: matrix
// products against stored weights, normalisation, RoPE, activations. Work
// is split over a fixed pool of worker goroutines sized to the cores.
package cpu

import (
	"runtime"
	"sync"
)

// Workers is a fixed pool of goroutines that run index ranges.
type Workers struct {
	n     int
	tasks chan task
}

type task struct {
	fn     func(lo, hi int)
	lo, hi int
	wg     *sync.WaitGroup
}

// NewWorkers starts n workers (n <= 0: one per logical CPU).
func NewWorkers(n int) *Workers {
	if n <= 0 {
		n = runtime.GOMAXPROCS(0)
	}
	w := &Workers{n: n, tasks: make(chan task, 4*n)}
	for range n - 1 { // the caller's goroutine is the n-th worker
		go func() {
			for t := range w.tasks {
				t.fn(t.lo, t.hi)
				t.wg.Done()
			}
		}()
	}
	return w
}

// N is the number of workers.
func (w *Workers) N() int { return w.n }

// For runs fn over [0, n) split into contiguous ranges, at least minChunk
// long, and returns when all are done.
func (w *Workers) For(n, minChunk int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	parts := min(w.n, max(1, n/max(minChunk, 1)))
	if parts == 1 {
		fn(0, n)
		return
	}
	var wg sync.WaitGroup
	chunk := (n + parts - 1) / parts
	var first [2]int
	for p := 0; p < parts; p++ {
		lo, hi := p*chunk, min(n, (p+1)*chunk)
		if lo >= hi {
			break
		}
		if p == 0 {
			first = [2]int{lo, hi}
			continue
		}
		wg.Add(1)
		w.tasks <- task{fn: fn, lo: lo, hi: hi, wg: &wg}
	}
	fn(first[0], first[1])
	wg.Wait()
}

// Close stops the workers.
func (w *Workers) Close() { close(w.tasks) }
