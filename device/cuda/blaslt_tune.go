package cuda

import (
	"errors"
	"fmt"
	"time"
	"unsafe"
)

// Layout of cublasLtMatmulHeuristicResult_t in CUDA 12 and 13: the algo
// (uint64 data[8]), size_t workspaceSize, cublasStatus_t state, float
// wavesCount, int reserved[4]. Only needed to step through an array of
// results; a single result is read at offset 0 and needs none of it.
const (
	ltResultStride      = 96
	ltResultStateOffset = 72
	ltTuneCandidates    = 32
	ltTuneReps          = 10
)

// tune asks the heuristic for its top candidates, times each on scratch
// buffers of g's shape, and copies the fastest into p.algo. The heuristic's
// first choice is often far from the best for skinny products (decode's
// M = 1..16), which are weight-bandwidth bound and where one poor choice
// costs a large share of every step. Runs on the device thread.
func (b *BlasLt) tune(g Gemm, p *ltPlan, pref uintptr) error {
	results := make([]uint64, ltTuneCandidates*ltResultStride/8)
	var returned int32
	st := b.api.cublasLtMatmulAlgoGetHeuristic(b.h, p.op, p.a, p.b, p.d, p.d, pref, ltTuneCandidates, unsafe.Pointer(&results[0]), &returned)
	if st != 0 {
		return b.statusErr("cublasLtMatmulAlgoGetHeuristic", st)
	}
	if returned == 0 {
		return fmt.Errorf("cuBLASLt has no algorithm for %+v", g)
	}
	raw := unsafe.Slice((*byte)(unsafe.Pointer(&results[0])), len(results)*8)
	candidate := func(i int) unsafe.Pointer { return unsafe.Pointer(&raw[i*ltResultStride]) }

	full := g.withDefaults()
	bRows := full.K
	if full.TransB {
		bRows = full.N
	}
	es, outES := ElemSize(g.DType), ElemSize(g.OutDType)
	var bufs []Buffer
	defer func() {
		for _, buf := range bufs {
			b.dev.Mem.Free(buf)
		}
	}()
	scratch := func(bytes int) (DevicePtr, error) {
		buf, err := b.dev.Mem.Alloc(bytes)
		bufs = append(bufs, buf)
		return buf.Ptr, err
	}
	a, errA := scratch(full.M * full.LDA * es)
	w, errB := scratch(bRows * full.LDB * es)
	d, errD := scratch(full.M * full.LDD * outES)
	if err := errors.Join(errA, errB, errD); err != nil {
		return err
	}
	if g.RowScales {
		sa, errA := scratch(4 * full.M)
		sb, errB := scratch(4 * bRows)
		if err := errors.Join(errA, errB); err != nil {
			return err
		}
		if err := b.setScales(p, sb, sa); err != nil { // cuBLAS's A is our B
			return err
		}
	}
	// Finite data (0x3c bytes) so no candidate is timed on NaNs.
	for _, buf := range bufs {
		if err := b.dev.MemsetAsync(buf.Ptr, 0x3c, buf.Bytes, b.dev.Stream); err != nil {
			return err
		}
	}
	start, err := b.dev.NewEvent(true)
	if err != nil {
		return err
	}
	defer b.dev.DestroyEvent(start)
	end, err := b.dev.NewEvent(true)
	if err != nil {
		return err
	}
	defer b.dev.DestroyEvent(end)

	alpha, beta := float32(1), float32(0)
	run := func(algo unsafe.Pointer) error {
		st := b.api.cublasLtMatmul(b.h, p.op, unsafe.Pointer(&alpha), w, p.a, a, p.b, unsafe.Pointer(&beta),
			d, p.d, d, p.d, algo, b.workspace.Ptr, ltWorkspaceBytes, b.dev.Stream)
		if st != 0 {
			return b.statusErr("cublasLtMatmul", st)
		}
		return nil
	}
	// Each candidate is timed as a replayed graph of ltTuneReps products:
	// eager launches of a product this small would time the host.
	best, bestTime := -1, time.Duration(1<<62)
	for i := range int(returned) {
		state := *(*int32)(unsafe.Pointer(&raw[i*ltResultStride+ltResultStateOffset]))
		if state != 0 || run(candidate(i)) != nil { // a failing candidate is skipped
			continue
		}
		graph, err := b.dev.Capture(b.dev.Stream, func() error {
			for range ltTuneReps {
				if err := run(candidate(i)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			continue
		}
		el, err := b.timeGraph(graph, start, end)
		graph.Destroy()
		if err != nil {
			return err
		}
		if el < bestTime {
			best, bestTime = i, el
		}
	}
	if best < 0 {
		best = 0 // none ran: keep the heuristic's first choice
	}
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&p.algo[0])), ltResultStride), raw[best*ltResultStride:(best+1)*ltResultStride])
	return nil
}

// timeGraph replays g once to warm up, then times two replays.
func (b *BlasLt) timeGraph(g *Graph, start, end Event) (time.Duration, error) {
	s := b.dev.Stream
	errs := []error{g.Launch(s), b.dev.Record(start, s), g.Launch(s), g.Launch(s), b.dev.Record(end, s), b.dev.EventSync(end)}
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	return b.dev.Elapsed(start, end)
}
