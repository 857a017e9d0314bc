// Package par runs load-time work on every core, outside any worker pool.
package par

import (
	"runtime"
	"sync"
)

// For runs fn over [0, n) in chunks of at least minChunk on up to
// GOMAXPROCS goroutines, and returns when every chunk has.
func For(n, minChunk int, fn func(lo, hi int)) {
	parts := min(runtime.GOMAXPROCS(0), max(1, n/max(1, minChunk)))
	if parts <= 1 {
		fn(0, n)
		return
	}
	var wg sync.WaitGroup
	chunk := (n + parts - 1) / parts
	for lo := 0; lo < n; lo += chunk {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(lo, min(n, lo+chunk))
		}()
	}
	wg.Wait()
}
