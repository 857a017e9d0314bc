package main

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/attention/attnbench"
	"github.com/gosling-ai/gosling/attention/gpu"
	"github.com/gosling-ai/gosling/attention/registry"
	"github.com/gosling-ai/gosling/bench"
	"github.com/gosling-ai/gosling/device/cpu"
	"github.com/gosling-ai/gosling/device/cuda"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/tensor"
)

type benchAttentionCmd struct {
	rooflineFlags
	Device     string        `help:"cpu, or cuda (GPU 0, next to its read bandwidth)." default:"cpu" enum:"cpu,cuda"`
	Backends   []string      `help:"Backends to measure (default: every backend of the device)."`
	PageSizes  []int         `help:"Page sizes." default:"1,16"`
	PrefillLen []int         `help:"Causal prefill lengths (one request each)." default:"4096"`
	Decode     []string      `help:"Decode cases as BATCHxCONTEXT." default:"1x32768,16x4096,64x4096"`
	Heads      int           `help:"Query heads." default:"32"`
	KVHeads    int           `help:"KV heads." default:"8" name:"kv-heads"`
	HeadDim    []int         `help:"Head dimensions." default:"128"`
	MLA        bool          `help:"DeepSeek's latent attention: one KV head of --head-dim (e.g. 576) whose first --head-dim-v values (e.g. 512) are the value." name:"mla"`
	HeadDimV   int           `help:"With --mla: the value head dim." default:"512" name:"head-dim-v"`
	KVDType    string        `help:"cuda: KV cache dtype (bf16 or fp8_e4m3)." default:"bf16" name:"kv-cache-dtype" enum:"bf16,fp8_e4m3"`
	MinTime    time.Duration `help:"cpu: minimum time per measurement." default:"300ms"`
	Iters      int           `help:"cuda: timed forwards per measurement (after two warm-ups)." default:"20"`
	Threads    int           `help:"cpu: threads (0: one per core)." default:"0"`
	Quick      bool          `help:"A short pass: page size 16, prefill 1024, decode 1x4096 and 16x4096, fewer repetitions."`
}

// Run measures each backend's prefill FLOP/s and decode GB/s of KV read,
// next to this machine's read bandwidth measured in the same run.
func (c *benchAttentionCmd) Run() error {
	if c.Quick {
		c.PageSizes, c.PrefillLen, c.Decode = []int{16}, []int{1024}, []string{"1x4096", "16x4096"}
		c.MinTime, c.Iters = 100*time.Millisecond, 5
	}
	type decodeCase struct{ batch, ctx int }
	var decodes []decodeCase
	for _, d := range c.Decode {
		var dc decodeCase
		if _, err := fmt.Sscanf(d, "%dx%d", &dc.batch, &dc.ctx); err != nil || dc.batch <= 0 || dc.ctx <= 0 {
			return fmt.Errorf("--decode %q: want BATCHxCONTEXT", d)
		}
		decodes = append(decodes, dc)
	}
	var (
		// hopper is set on an sm_90a build: prefill is measured on attn_fa3
		// and again on the sm_80 kernel.
		hopper  *gpu.Runtime
		roof    bench.Roofline
		results []attnbench.Result
		measure func(e attention.Entry, sh attnbench.Shape, ps int, prefill int, dc decodeCase) (attnbench.Result, error)
	)
	if c.Device == "cuda" {
		dev, err := attnbench.OpenCUDA()
		if err != nil {
			return fmt.Errorf("--device cuda: %w", err)
		}
		defer dev.Close()
		rt := dev.AttentionRuntime()
		if rt.Hopper() {
			hopper = rt
		}
		roof = bench.Roofline{Device: "cuda", Kernels: rt.Dev.Info.Name, BufferMiB: c.BufferMiB, ReadRuns: c.Runs}
		if roof.ReadGBs, err = rt.Kernels.ReadBandwidth(c.BufferMiB<<20, max(c.Runs, 1)); err != nil {
			return err
		}
		kv, err := attention.ParseKVDType(c.KVDType)
		if err != nil {
			return err
		}
		measure = func(e attention.Entry, sh attnbench.Shape, ps, prefill int, dc decodeCase) (attnbench.Result, error) {
			cc := attnbench.CUDACase{Mode: forward.Extend, Reqs: 1, Ctx: prefill, NewToks: prefill, Page: ps, KV: kv, Act: tensor.BF16}
			if prefill == 0 {
				cc = attnbench.CUDACase{Mode: forward.Decode, Reqs: dc.batch, Ctx: dc.ctx, NewToks: 1, Page: ps, KV: kv, Act: tensor.F32}
				if sh.MLA { // DeepSeek's GPU forward runs its latent attention in bf16
					cc.Act = tensor.BF16
				}
			}
			if prefill > 0 && kv != tensor.BF16 {
				cc.Act = tensor.BF16
			}
			return attnbench.RunCUDA(e, dev, sh, cc, c.Iters)
		}
	} else {
		w := cpu.NewWorkers(c.Threads)
		defer w.Close()
		roof = bench.MeasureRoofline(w, bench.RooflineOptions{BufferMiB: c.BufferMiB, Runs: c.Runs})
		measure = func(e attention.Entry, sh attnbench.Shape, ps, prefill int, dc decodeCase) (attnbench.Result, error) {
			if prefill > 0 {
				return attnbench.Prefill(e, w, sh, ps, prefill, c.MinTime)
			}
			return attnbench.Decode(e, w, sh, ps, dc.batch, dc.ctx, c.MinTime)
		}
	}
	kvDType := tensor.F32
	if c.Device == "cuda" {
		kvDType, _ = attention.ParseKVDType(c.KVDType)
	}
	for _, name := range c.Backends {
		if !slices.ContainsFunc(registry.ForDevice(c.Device), func(e attention.Entry) bool { return e.Name == name }) {
			return fmt.Errorf("--backends: no %s backend %q; see `gosling backends`", c.Device, name)
		}
	}
	for _, e := range registry.ForDevice(c.Device) {
		if len(c.Backends) > 0 && !contains(c.Backends, e.Name) {
			continue
		}
		// A backend that is not offered here, or lacks the case's KV
		// dtype, is skipped with the reason (an error when asked for by
		// name); a head dim or page size it lacks skips that case.
		if why := benchRefusal(e, kvDType); why != "" {
			if len(c.Backends) > 0 {
				return fmt.Errorf("%s: %s", e.Name, why)
			}
			fmt.Fprintf(os.Stderr, "%s: not measured: %s\n", e.Name, why)
			continue
		}
		if e.Name == gpu.CudnnEntry.Name {
			fmt.Fprintf(os.Stderr, "%s: %s\n", e.Name, cuda.CudnnLoaded())
		}
		for _, d := range c.HeadDim {
			sh := attnbench.Shape{Heads: c.Heads, KVHeads: c.KVHeads, HeadDim: d}
			if c.MLA {
				sh.KVHeads, sh.MLA, sh.HeadDimV = 1, true, c.HeadDimV
			}
			if unmet := e.Caps.Unmet(attention.Need{Device: c.Device, HeadDims: []int{d}, MLA: c.MLA}); len(unmet) > 0 {
				fmt.Fprintf(os.Stderr, "%s, head dim %d: not measured: %s\n", e.Name, d, strings.Join(unmet, "; "))
				continue
			}
			for _, ps := range c.PageSizes {
				if !e.Caps.PageSizes.Allows(ps) {
					fmt.Fprintf(os.Stderr, "%s, page %d: not measured: page sizes %v\n", e.Name, ps, e.Caps.PageSizes)
					continue
				}
				for _, n := range c.PrefillLen {
					r, err := measure(e, sh, ps, n, decodeCase{})
					if err != nil {
						return fmt.Errorf("%s, head dim %d, page %d, prefill %d: %w", e.Name, d, ps, n, err)
					}
					r.Case = fmt.Sprintf("d%d %s", d, r.Case)
					results = append(results, r)
					fmt.Fprintln(os.Stderr, r)
					if hopper != nil {
						hopper.NoHopper = true
						r, err := measure(e, sh, ps, n, decodeCase{})
						hopper.NoHopper = false
						if err != nil {
							return fmt.Errorf("%s (sm80 kernels), head dim %d, page %d, prefill %d: %w", e.Name, d, ps, n, err)
						}
						r.Backend += " (sm80)"
						r.Case = fmt.Sprintf("d%d %s", d, r.Case)
						results = append(results, r)
						fmt.Fprintln(os.Stderr, r)
					}
				}
				for _, dc := range decodes {
					var wgBefore int64
					if hopper != nil {
						wgBefore = hopper.MLAWGLaunches()
					}
					r, err := measure(e, sh, ps, 0, dc)
					if err != nil {
						return fmt.Errorf("%s, head dim %d, page %d, decode %dx%d: %w", e.Name, d, ps, dc.batch, dc.ctx, err)
					}
					r.Case = fmt.Sprintf("d%d %s", d, r.Case)
					results = append(results, r)
					fmt.Fprintln(os.Stderr, r)
					// MLA decode that ran attn_mla_wg (Hopper, above 32
					// heads) is measured again on attn_mla (mma.sync), in
					// turn, for an A/B in one process.
					if hopper != nil && hopper.MLAWGLaunches() > wgBefore {
						hopper.NoMLAWG = true
						r, err := measure(e, sh, ps, 0, dc)
						hopper.NoMLAWG = false
						if err != nil {
							return fmt.Errorf("%s (attn_mla), head dim %d, page %d, decode %dx%d: %w", e.Name, d, ps, dc.batch, dc.ctx, err)
						}
						r.Backend += " (mma)"
						r.Case = fmt.Sprintf("d%d %s", d, r.Case)
						results = append(results, r)
						fmt.Fprintln(os.Stderr, r)
					}
				}
			}
		}
	}
	if c.JSON {
		return json.NewEncoder(os.Stdout).Encode(map[string]any{"roofline": roof, "results": results})
	}
	if c.Device == "cuda" {
		fmt.Printf("read bandwidth: %s %.0f GB/s (read-only pass over %d MiB, best of %d)\n", roof.Kernels, roof.ReadGBs, c.BufferMiB, c.Runs)
		if hopper != nil {
			n, err := hopper.TMALaunches()
			fmt.Printf("attn_fa3: %d launches loaded K/V by the tensor memory accelerator (pages of 16 keys or more; GOSLING_FA3_TMA=0: never)\n", n)
			if err != nil {
				fmt.Printf("attn_fa3: %v\n", err)
			}
			if c.MLA {
				fmt.Printf("attn_mla_wg: %d launches (MLA decode on wgmma above 32 heads; rows marked (mma) ran attn_mla; GOSLING_MLA_WG=0: never)\n", hopper.MLAWGLaunches())
			}
		}
	} else {
		roof.Print(os.Stdout)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "backend\tpage\tcase\tms\tGFLOP/s\tGB/s\tof read bandwidth")
	for _, r := range results {
		frac := ""
		if r.GBps > 0 && roof.ReadGBs > 0 {
			frac = fmt.Sprintf("%.0f%%", 100*r.GBps/roof.ReadGBs)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%.3f\t%s\t%s\t%s\n", r.Backend, r.PageSize, r.Case, r.Seconds*1e3, num(r.GFLOPs), num(r.GBps), frac)
	}
	return tw.Flush()
}

// benchRefusal is why backend e cannot be measured at all with a KV
// cache of dtype kv ("" when it can).
func benchRefusal(e attention.Entry, kv tensor.DType) string {
	if err := e.Unavailable(); err != nil {
		return "not offered here: " + err.Error()
	}
	if !slices.Contains(e.Caps.KVDTypes, kv) {
		return fmt.Sprintf("does not support KV cache dtype %v", kv)
	}
	return ""
}

func num(x float64) string {
	if x == 0 {
		return ""
	}
	return fmt.Sprintf("%.2f", x)
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}
