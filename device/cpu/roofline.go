package cpu

import "time"

// Probes for the roofline (gosling bench roofline).

// StreamRead reads buf once with every worker, each a contiguous share,
// with the active kernels' widest loads, and returns a value that depends
// on every byte (so nothing is optimised away).
func StreamRead(w *Workers, buf []byte) float32 {
	vk := &kernels().vec
	parts := w.N()
	chunk := (len(buf)/parts + 255) &^ 255
	sums := make([]float32, parts)
	run := func(_, p int) {
		lo := min(len(buf), p*chunk)
		hi := min(len(buf), lo+chunk)
		sums[p] = vk.streamRead(buf[lo : lo+(hi-lo)&^255])
	}
	if w.tryAcquire() {
		w.run(parts, run)
		w.release()
	} else {
		for p := range parts {
			run(0, p)
		}
	}
	var s float32
	for _, v := range sums {
		s += v
	}
	return s
}

// FMAPeak measures float32 fused multiply-add throughput with every
// worker running independent FMA chains for about d, in FLOP/s (an FMA is
// two).
func FMAPeak(w *Workers, d time.Duration) float64 {
	vk := &kernels().vec
	const iters = 1 << 20
	var flops float64
	start := time.Now()
	for time.Since(start) < d {
		w.For(w.N(), 1, func(lo, hi int) {
			for range hi - lo {
				vk.fmaLoop(iters)
			}
		})
		flops += float64(w.N()) * iters * float64(vk.fmaLoopLane) * 2
	}
	return flops / time.Since(start).Seconds()
}
