// Package bench measures gosling on this machine: the machine's own limits
// (Roofline: memory read bandwidth and FMA throughput) and one static
// batch through the engine (OneBatch: prefill and decode speed), each
// figure next to the bound the roofline gives it.
package bench

import (
	"time"

	"github.com/gosling-ai/gosling/device/cpu"
	"github.com/gosling-ai/gosling/internal/hugemem"
)

// Roofline is what bounds CPU inference here. Decode reads every weight
// once per step, so tokens/s ≤ batch · Bandwidth / bytes of weights;
// prefill is arithmetic, so tokens/s ≤ FMAPeak / FLOPs per token.
type Roofline struct {
	// Device is "cpu" (the zero value) or "cuda": on a GPU ReadGBs is the
	// device-memory read bandwidth and Kernels the GPU's name.
	Device     string  `json:"device,omitempty"`
	Threads    int     `json:"threads"`
	Kernels    string  `json:"kernels"`
	BufferMiB  int     `json:"buffer_mib"`
	ReadGBs    float64 `json:"read_gb_per_s"`        // best of the runs
	FMAGFLOPs  float64 `json:"fma_peak_gflop_per_s"` // an FMA counts as 2 FLOPs
	ReadRuns   int     `json:"read_runs"`
	FMASeconds float64 `json:"fma_seconds"`
}

// RooflineOptions size the probes.
type RooflineOptions struct {
	BufferMiB int           // streamed buffer (default 1024: far beyond any cache)
	Runs      int           // reads of the buffer; the best counts (default 5)
	FMATime   time.Duration // per FMA run, best of three (default 300 ms)
}

// MeasureRoofline streams a buffer much larger than the caches with all
// workers (each a contiguous share, with the widest vector loads, as the
// matrix kernels read weights) and runs independent FMA chains on all
// workers. The buffer is allocated like packed weights (huge-page advised).
func MeasureRoofline(w *cpu.Workers, o RooflineOptions) Roofline {
	if o.BufferMiB <= 0 {
		o.BufferMiB = 1024
	}
	if o.Runs <= 0 {
		o.Runs = 5
	}
	if o.FMATime <= 0 {
		o.FMATime = 300 * time.Millisecond
	}
	r := Roofline{Threads: w.N(), Kernels: cpu.KernelPath(), BufferMiB: o.BufferMiB, ReadRuns: o.Runs, FMASeconds: 3 * o.FMATime.Seconds()}
	buf := hugemem.Aligned(o.BufferMiB << 20)
	for i := range buf {
		buf[i] = byte(i) & 0x3f // small finite floats, no subnormals
	}
	cpu.StreamRead(w, buf) // fault in, warm the TLB
	r.ReadGBs = readBandwidth(w, buf, o.Runs)
	for range 3 {
		r.FMAGFLOPs = max(r.FMAGFLOPs, cpu.FMAPeak(w, o.FMATime)/1e9)
	}
	return r
}

// readBandwidth is the best of runs reads of buf, in GB/s.
func readBandwidth(w *cpu.Workers, buf []byte, runs int) float64 {
	best := 0.0
	for range runs {
		start := time.Now()
		cpu.StreamRead(w, buf)
		best = max(best, float64(len(buf))/time.Since(start).Seconds()/1e9)
	}
	return best
}

// BandwidthProbe reads a buffer (best of three; 512 MiB take about 50 ms)
// each time it is called. A shared host's read bandwidth can move between
// levels within seconds (the 2-core VM this was written on alternates
// between about 32 and 55 GB/s), so a decode figure is only comparable
// with the bandwidth measured next to it.
type BandwidthProbe struct {
	w   *cpu.Workers
	buf []byte
}

// NewBandwidthProbe allocates a buffer of mib MiB (as weights are
// allocated); it must be far larger than the last-level cache.
func NewBandwidthProbe(w *cpu.Workers, mib int) *BandwidthProbe {
	buf := hugemem.Aligned(mib << 20)
	for i := range buf {
		buf[i] = byte(i) & 0x3f
	}
	return &BandwidthProbe{w: w, buf: buf}
}

// ReadGBs measures now.
func (p *BandwidthProbe) ReadGBs() float64 { return readBandwidth(p.w, p.buf, 3) }
