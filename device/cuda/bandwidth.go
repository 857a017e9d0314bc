package cuda

import (
	"errors"
	"fmt"
)

// CopyBandwidth is the device-to-device copy bandwidth in GB/s, counting
// the bytes read and the bytes written (as CUDA's bandwidthTest does): the
// best of runs copies of a bytes-long buffer on the device stream, timed
// with events, after one warm-up copy. It is the roofline a decode step
// (every weight read once) is measured against.
func (dev *Device) CopyBandwidth(bytes, runs int) (float64, error) {
	if bytes <= 0 || runs <= 0 {
		return 0, fmt.Errorf("copy bandwidth: %d bytes, %d runs", bytes, runs)
	}
	src, err := dev.Malloc(bytes)
	if err != nil {
		return 0, err
	}
	defer dev.Free(src)
	dst, err := dev.Malloc(bytes)
	if err != nil {
		return 0, err
	}
	defer dev.Free(dst)
	start, err := dev.NewEvent(true)
	if err != nil {
		return 0, err
	}
	defer dev.DestroyEvent(start)
	end, err := dev.NewEvent(true)
	if err != nil {
		return 0, err
	}
	defer dev.DestroyEvent(end)
	if err := dev.CopyDtoD(dst, src, bytes); err != nil {
		return 0, err
	}
	best := 0.0
	for range runs {
		err := errors.Join(dev.Record(start, dev.Stream), dev.CopyDtoDAsync(dst, src, bytes, dev.Stream),
			dev.Record(end, dev.Stream), dev.EventSync(end))
		if err != nil {
			return 0, fmt.Errorf("copy bandwidth: %w", err)
		}
		d, err := dev.Elapsed(start, end)
		if err != nil {
			return 0, err
		}
		best = max(best, 2*float64(bytes)/d.Seconds()/1e9)
	}
	return best, nil
}
