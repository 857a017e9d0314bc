// Package attnbench measures attention backends on the shapes of issue 3:
// causal prefill in GFLOP/s and paged decode in GB/s of KV read. Both
// `go test -bench` and `gosling bench attention` use it.
package attnbench

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/device/cpu"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/tensor"
)

// Shape is the attention layer measured.
type Shape struct {
	Heads, KVHeads, HeadDim int
	// MLA: DeepSeek's latent attention, one KV head (KVHeads 1) of
	// HeadDim values whose first HeadDimV are the value; nothing is
	// stored or read for V.
	MLA      bool
	HeadDimV int
}

// DV is the value head dim: HeadDimV for MLA, else HeadDim.
func (s Shape) DV() int {
	if s.MLA {
		return s.HeadDimV
	}
	return s.HeadDim
}

// Default is Llama-3-8B's attention: 32 query heads, 8 KV heads, dim 128.
var Default = Shape{Heads: 32, KVHeads: 8, HeadDim: 128}

// Result is one measurement.
type Result struct {
	Backend  string
	PageSize int
	Case     string
	Seconds  float64 // per forward of one layer
	GFLOPs   float64 // prefill: useful FLOP/s (causal half counted once)
	GBps     float64 // decode: KV bytes read per second
}

func (r Result) String() string {
	if r.GBps > 0 {
		return fmt.Sprintf("%-8s page %-3d %-22s %8.2f ms  %7.2f GB/s", r.Backend, r.PageSize, r.Case, r.Seconds*1e3, r.GBps)
	}
	return fmt.Sprintf("%-8s page %-3d %-22s %8.2f ms  %7.2f GFLOP/s", r.Backend, r.PageSize, r.Case, r.Seconds*1e3, r.GFLOPs)
}

// setup fills a one-layer cache with reqs sequences of ctx tokens of
// random K/V and returns a batch that extends each by newTokens.
func setup(sh Shape, pageSize, reqs, ctx, newTokens int, mode forward.Mode) (*forward.Batch, tensor.T, tensor.T, tensor.T, error) {
	spec := kvcache.Spec{NumLayers: 1, NumKVHeads: sh.KVHeads, HeadDim: sh.HeadDim, HeadDimV: sh.DV(), SharedV: sh.MLA}
	total := reqs * (ctx + newTokens)
	cache, err := kvcache.NewCache(spec, pageSize, total+reqs*pageSize, reqs, ctx+newTokens)
	if err != nil {
		return nil, tensor.T{}, tensor.T{}, tensor.T{}, err
	}
	host, err := cache.Pool.Host()
	if err != nil {
		return nil, tensor.T{}, tensor.T{}, tensor.T{}, err
	}
	rng := rand.New(rand.NewPCG(1, 2))
	row := make([]float32, spec.KWidth())
	b := &forward.Batch{Mode: mode, KV: cache}
	for range reqs {
		seq, _ := cache.NewSeq()
		if ok, err := cache.Grow(seq, ctx+newTokens); !ok || err != nil {
			return nil, tensor.T{}, tensor.T{}, tensor.T{}, fmt.Errorf("cache too small")
		}
		slots := cache.Table.Row(seq.Row)
		for i := range ctx {
			for j := range row {
				row[j] = float32(rng.NormFloat64())
			}
			host.StoreK(0, slots[i], row)
			if !sh.MLA {
				host.StoreV(0, slots[i], row)
			}
		}
		b.ReqRows = append(b.ReqRows, int32(seq.Row))
		b.PrefixLens = append(b.PrefixLens, int32(ctx))
		b.ExtendLens = append(b.ExtendLens, int32(newTokens))
		for i := ctx; i < ctx+newTokens; i++ {
			b.InputIDs = append(b.InputIDs, 0)
			b.Positions = append(b.Positions, int32(i))
			b.OutSlots = append(b.OutSlots, slots[i])
		}
	}
	if err := b.Finalize(); err != nil {
		return nil, tensor.T{}, tensor.T{}, tensor.T{}, err
	}
	n := b.NumTokens()
	rnd := func(cols int) tensor.T {
		t := tensor.New(n, cols)
		for i := range t.HostData() {
			t.HostData()[i] = float32(rng.NormFloat64())
		}
		return t
	}
	var v tensor.T // none for MLA
	if !sh.MLA {
		v = rnd(sh.KVHeads * sh.HeadDim)
	}
	return b, rnd(sh.Heads * sh.HeadDim), rnd(sh.KVHeads * sh.HeadDim), v, nil
}

func layerOf(sh Shape) *attention.Layer {
	return &attention.Layer{NumHeads: sh.Heads, NumKVHeads: sh.KVHeads, HeadDim: sh.HeadDim, HeadDimV: sh.DV(),
		Scale: float32(1 / math.Sqrt(float64(sh.HeadDim))), MLA: sh.MLA}
}

func timeIt(be attention.Backend, b *forward.Batch, q, k, v tensor.T, l *attention.Layer, minTime time.Duration) (float64, error) {
	if err := be.Plan(b); err != nil {
		return 0, err
	}
	if _, err := attention.Run(be, q, k, v, l, b); err != nil { // warm-up
		return 0, err
	}
	start, runs := time.Now(), 0
	for runs == 0 || time.Since(start) < minTime {
		if err := be.Plan(b); err != nil {
			return 0, err
		}
		if _, err := attention.Run(be, q, k, v, l, b); err != nil {
			return 0, err
		}
		runs++
	}
	return time.Since(start).Seconds() / float64(runs), nil
}

// Prefill times causal attention over tokens fresh tokens in one request.
func Prefill(e attention.Entry, w *cpu.Workers, sh Shape, pageSize, tokens int, minTime time.Duration) (Result, error) {
	b, q, k, v, err := setup(sh, pageSize, 1, 0, tokens, forward.Extend)
	if err != nil {
		return Result{}, err
	}
	be, err := e.New(attention.Options{Device: "cpu", KV: b.KV, Runtime: cpu.NewRuntime(w)})
	if err != nil {
		return Result{}, err
	}
	secs, err := timeIt(be, b, q, k, v, layerOf(sh), minTime)
	if err != nil {
		return Result{}, err
	}
	// QKᵀ and PV over the causal triangle: 2 matmuls × 2 FLOP per MAC.
	pairs := float64(tokens) * float64(tokens+1) / 2
	flops := 2 * pairs * float64(sh.Heads*(sh.HeadDim+sh.DV()))
	return Result{Backend: e.Name, PageSize: pageSize, Case: fmt.Sprintf("prefill 1x%d", tokens), Seconds: secs, GFLOPs: flops / secs / 1e9}, nil
}

// Decode times one decode step of batch requests at ctx cached tokens.
func Decode(e attention.Entry, w *cpu.Workers, sh Shape, pageSize, batch, ctx int, minTime time.Duration) (Result, error) {
	b, q, k, v, err := setup(sh, pageSize, batch, ctx, 1, forward.Decode)
	if err != nil {
		return Result{}, err
	}
	be, err := e.New(attention.Options{Device: "cpu", KV: b.KV, Runtime: cpu.NewRuntime(w)})
	if err != nil {
		return Result{}, err
	}
	secs, err := timeIt(be, b, q, k, v, layerOf(sh), minTime)
	if err != nil {
		return Result{}, err
	}
	kvRow := 2 * sh.KVHeads * sh.HeadDim // an MLA cache reads its latent row once
	if sh.MLA {
		kvRow = sh.HeadDim
	}
	bytes := float64(batch) * float64(ctx+1) * float64(kvRow*4)
	return Result{Backend: e.Name, PageSize: pageSize, Case: fmt.Sprintf("decode bs%d ctx%d", batch, ctx), Seconds: secs, GBps: bytes / secs / 1e9}, nil
}
