package bench

import "github.com/gosling-ai/gosling/device/cuda"

// MeasureGPURead is the decode roofline of GPU 0: its device-memory read
// bandwidth (cuda.Kernels.ReadBandwidth, a read-only pass; a decode step
// reads its weights and writes little) over a bufMiB buffer, best of runs
// (at least 3). tokens/s ≤ batch · this / bytes read per step.
func MeasureGPURead(bufMiB, runs int) (Roofline, error) {
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
	nv, err := cuda.LoadNVRTC()
	if err != nil {
		return r, err
	}
	kernels, err := cuda.LoadKernels(dev, nv, cuda.NewDefaultKernelCache())
	if err != nil {
		return r, err
	}
	defer kernels.Unload()
	r.Kernels = dev.Info.Name
	r.ReadGBs, err = kernels.ReadBandwidth(bufMiB<<20, runs)
	return r, err
}
