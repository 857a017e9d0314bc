package cuda

import (
	"errors"
	"fmt"
	"time"

	"github.com/gosling-ai/gosling/tensor"
)

// CopyBandwidth is the device-to-device copy bandwidth in GB/s, counting
// the bytes read and the bytes written (as CUDA's bandwidthTest does): the
// best of runs copies of a bytes-long buffer on the device stream, timed
// with events, after one warm-up copy.
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
	best, err := dev.bestTime(runs, func() error { return dev.CopyDtoDAsync(dst, src, bytes, dev.Stream) })
	if err != nil {
		return 0, fmt.Errorf("copy bandwidth: %w", err)
	}
	return 2 * float64(bytes) / best.Seconds() / 1e9, nil
}

// ReadBandwidth is the device-memory read bandwidth in GB/s: the best of
// runs passes of the read_probe kernel over a bytes-long buffer (bytes
// read only, nothing written). A decode step reads its weights and KV
// cache and writes little, so this is its roofline; a copy's rate
// (CopyBandwidth) mixes in writes.
func (k *Kernels) ReadBandwidth(bytes, runs int) (float64, error) {
	dev := k.dev
	if bytes < 16 || runs <= 0 {
		return 0, fmt.Errorf("read bandwidth: %d bytes, %d runs", bytes, runs)
	}
	bytes &^= 15
	src, err := dev.Malloc(bytes)
	if err != nil {
		return 0, err
	}
	defer dev.Free(src)
	sink, err := dev.Malloc(16)
	if err != nil {
		return 0, err
	}
	defer dev.Free(sink)
	// Not zeros: a probe over constant memory could be served faster.
	if err := k.FillSynthetic(dev.Stream, src, 0, bytes/2, BF16, tensor.Synthetic{Seed: 7, Scale: 1}); err != nil {
		return 0, err
	}
	cfg := LaunchConfig{Grid: D1(dev.Info.SMs * 8), Block: D1(256)}
	args := readProbeArgs{Src: src, N16: bytes / 16, Sink: sink}
	best, err := dev.bestTime(runs, func() error { return k.launchReadProbe(dev.Stream, cfg, args) })
	if err != nil {
		return 0, fmt.Errorf("read bandwidth: %w", err)
	}
	return float64(bytes) / best.Seconds() / 1e9, nil
}

// bestTime runs enqueue once to warm up, then runs times, each timed with
// events on the device stream, and returns the shortest.
func (dev *Device) bestTime(runs int, enqueue func() error) (time.Duration, error) {
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
	if err := errors.Join(enqueue(), dev.StreamSync(dev.Stream)); err != nil {
		return 0, err
	}
	var best time.Duration
	for range runs {
		if err := errors.Join(dev.Record(start, dev.Stream), enqueue(), dev.Record(end, dev.Stream), dev.EventSync(end)); err != nil {
			return 0, err
		}
		d, err := dev.Elapsed(start, end)
		if err != nil {
			return 0, err
		}
		if best == 0 || d < best {
			best = d
		}
	}
	return best, nil
}
