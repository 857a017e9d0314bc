package bench

import "github.com/gosling-ai/gosling/device/cuda"

// MeasureGPUCopy is the decode roofline of GPU 0: its device-to-device
// copy bandwidth (cuda.Device.CopyBandwidth, read + write) over a bufMiB
// buffer, best of runs (at least 3). A decode step reads every weight
// once, so tokens/s ≤ batch · this / bytes of weights.
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
	r.ReadGBs, err = dev.CopyBandwidth(bufMiB<<20, runs)
	return r, err
}
