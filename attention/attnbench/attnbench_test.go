package attnbench

import (
	"fmt"
	"testing"
	"time"

	"github.com/gosling-ai/gosling/attention/registry"
	"github.com/gosling-ai/gosling/device/cpu"
)

// BenchmarkAttention reports the issue-3 figures for every backend; run
// with `go test -bench . -benchtime 1x ./attention/attnbench/`.
func BenchmarkAttention(b *testing.B) {
	w := cpu.NewWorkers(0)
	defer w.Close()
	for _, e := range registry.ForDevice("cpu") {
		for _, ps := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/page%d/prefill4096", e.Name, ps), func(b *testing.B) {
				for range b.N {
					r, err := Prefill(e, w, Default, ps, 4096, 0)
					if err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(r.GFLOPs, "GFLOP/s")
				}
			})
			for _, c := range []struct{ batch, ctx int }{{1, 32768}, {16, 4096}, {64, 4096}} {
				b.Run(fmt.Sprintf("%s/page%d/decode_bs%d_ctx%d", e.Name, ps, c.batch, c.ctx), func(b *testing.B) {
					for range b.N {
						r, err := Decode(e, w, Default, ps, c.batch, c.ctx, 200*time.Millisecond)
						if err != nil {
							b.Fatal(err)
						}
						b.ReportMetric(r.GBps, "GB/s")
					}
				})
			}
		}
	}
}

// TestSmallRun keeps the harness itself working in CI at a tiny size.
func TestSmallRun(t *testing.T) {
	w := cpu.NewWorkers(0)
	defer w.Close()
	sh := Shape{Heads: 4, KVHeads: 2, HeadDim: 16}
	for _, e := range registry.ForDevice("cpu") {
		if r, err := Prefill(e, w, sh, 16, 64, 0); err != nil || r.GFLOPs <= 0 {
			t.Fatalf("%s prefill: %+v %v", e.Name, r, err)
		}
		if r, err := Decode(e, w, sh, 1, 3, 100, 0); err != nil || r.GBps <= 0 {
			t.Fatalf("%s decode: %+v %v", e.Name, r, err)
		}
	}
}
