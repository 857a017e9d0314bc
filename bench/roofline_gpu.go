package bench

import (
	"fmt"

	"github.com/gosling-ai/gosling/device/cuda"
)

// MeasureGPUCopy is the decode roofline of a GPU: the best of runs
// device-to-device copies of a bufMiB buffer, counting the bytes read and
// the bytes written (as CUDA's bandwidthTest does), timed with events. A
// decode step reads every weight once, so tokens/s ≤ batch · this / bytes
// of weights.
func MeasureGPUCopy(bufMiB, runs int) (Roofline, error) {
	if bufMiB <= 0 {
		bufMiB = 1024
	}
	runs = max(runs, 3)
	r := Roofline{Device: "cuda", BufferMiB: bufMiB, ReadRuns: runs}
	dev, err := cuda.Open(0)
	if err != nil {
		return r, err
	}
	defer dev.Close()
	r.Kernels = dev.Info.Name
	n := bufMiB << 20
	src, err := dev.Malloc(n)
	if err != nil {
		return r, err
	}
	defer dev.Free(src)
	dst, err := dev.Malloc(n)
	if err != nil {
		return r, err
	}
	defer dev.Free(dst)
	start, err := dev.NewEvent(true)
	if err != nil {
		return r, err
	}
	defer dev.DestroyEvent(start)
	end, err := dev.NewEvent(true)
	if err != nil {
		return r, err
	}
	defer dev.DestroyEvent(end)
	if err := dev.CopyDtoD(dst, src, n); err != nil { // warm up
		return r, err
	}
	for range runs {
		err := dev.Record(start, dev.Stream)
		if err == nil {
			err = dev.CopyDtoDAsync(dst, src, n, dev.Stream)
		}
		if err == nil {
			err = dev.Record(end, dev.Stream)
		}
		if err == nil {
			err = dev.EventSync(end)
		}
		if err != nil {
			return r, fmt.Errorf("GPU copy bandwidth: %w", err)
		}
		d, err := dev.Elapsed(start, end)
		if err != nil {
			return r, err
		}
		r.ReadGBs = max(r.ReadGBs, 2*float64(n)/d.Seconds()/1e9)
	}
	return r, nil
}
