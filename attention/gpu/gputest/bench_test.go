package gputest_test

import (
	"fmt"
	"testing"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/attention/attnbench"
	"github.com/gosling-ai/gosling/attention/gpu"
	"github.com/gosling-ai/gosling/attention/gpu/gputest"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/tensor"
)

// The shapes: 32 query heads, 8 KV heads, head dim 128, bf16
// activations and KV cache; prefill with page size 16.
const (
	benchHeads, benchKVHeads, benchDim, benchPage = 32, 8, 128, 16
)

type benchCase struct {
	mode     forward.Mode
	reqs     int
	ctx      int // tokens per request after this forward
	newToks  int // new tokens per request
	page     int
	backends []attention.Entry
}

// BenchmarkCUDADecode reports GB/s of KV read (K and V of every context
// token, once per KV head) for decode steps, with page sizes 1 and 16.
func BenchmarkCUDADecode(b *testing.B) {
	for _, page := range []int{1, 16} {
		for _, reqs := range []int{1, 16, 64} {
			for _, ctx := range []int{4096, 32768} {
				entries := append([]attention.Entry{gpu.FlashEntry, gpu.SplitKVEntry}, offered(gpu.CudnnEntry)...)
				if reqs == 1 && ctx == 4096 && page == 16 {
					entries = append(entries, gpu.NativeEntry)
				}
				runBench(b, benchCase{forward.Decode, reqs, ctx, 1, page, entries})
			}
		}
	}
}

// BenchmarkCUDAPrefill reports TFLOP/s of causal prefill (4·n²/2·heads·dim).
func BenchmarkCUDAPrefill(b *testing.B) {
	for _, n := range []int{1024, 4096, 16384} {
		entries := append([]attention.Entry{gpu.FlashEntry, gpu.SplitKVEntry}, offered(gpu.CudnnEntry)...)
		if n <= 4096 {
			entries = append(entries, gpu.NativeEntry)
		}
		runBench(b, benchCase{forward.Extend, 1, n, n, benchPage, entries})
	}
}

// offered is e when its library loads here, else nothing (with a note).
func offered(e attention.Entry) []attention.Entry {
	if err := e.Unavailable(); err != nil {
		fmt.Printf("%s: not measured, not offered here: %v\n", e.Name, err)
		return nil
	}
	return []attention.Entry{e}
}

// BenchmarkCUDARead is the device-memory read bandwidth (a read-only
// pass over 4 GiB), the roofline the decode figures compare with.
func BenchmarkCUDARead(b *testing.B) {
	rt := gputest.TestRuntime(b)
	gbs, err := rt.Kernels.ReadBandwidth(4<<30, max(b.N, 5))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(gbs, "GB/s")
}

// BenchmarkCUDACopy is the device-to-device copy bandwidth (read + write).
func BenchmarkCUDACopy(b *testing.B) {
	rt := gputest.TestRuntime(b)
	gbs, err := rt.Dev.CopyBandwidth(1<<30, max(b.N, 3))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(gbs, "GB/s")
}

func runBench(b *testing.B, c benchCase) {
	name := fmt.Sprintf("%v/page%d/reqs%d/ctx%d", c.mode, c.page, c.reqs, c.ctx)
	dev := gputest.TestDevice(b)
	// bf16 activations; decode also with float32 queries over the bf16
	// cache, as the engine runs.
	acts := []tensor.DType{tensor.BF16}
	if c.mode == forward.Decode {
		acts = append(acts, tensor.F32)
	}
	sh := attnbench.Shape{Heads: benchHeads, KVHeads: benchKVHeads, HeadDim: benchDim}
	rt := dev.AttentionRuntime()
	// On Hopper, prefill runs on attn_fa3 and again on the sm_80 kernel.
	kernels := []string{""}
	if c.mode != forward.Decode && rt.Hopper() {
		kernels = append(kernels, "-sm80")
	}
	defer func() { rt.NoHopper = false }()
	for _, dt := range acts {
		for _, e := range c.backends {
			for _, kern := range kernels {
				if kern != "" && e.Name == gpu.CudnnEntry.Name {
					continue // the library's kernels, not ours
				}
				rt.NoHopper = kern != ""
				b.Run(fmt.Sprintf("%s%s/%s/q-%v", e.Name, kern, name, dt), func(b *testing.B) {
					r, err := attnbench.RunCUDA(e, dev, sh, attnbench.CUDACase{Mode: c.mode, Reqs: c.reqs, Ctx: c.ctx, NewToks: c.newToks,
						Page: c.page, KV: tensor.BF16, Act: dt}, b.N)
					if err != nil {
						b.Fatal(err)
					}
					if r.GBps > 0 {
						b.ReportMetric(r.GBps, "GB/s")
					} else {
						b.ReportMetric(r.GFLOPs/1e3, "TFLOP/s")
					}
					b.ReportMetric(r.Seconds*1e6, "µs/step")
				})
			}
		}
	}
}
