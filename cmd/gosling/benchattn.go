package main

import (
	"encoding/json"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/gosling-ai/gosling/attention/attnbench"
	"github.com/gosling-ai/gosling/attention/registry"
	"github.com/gosling-ai/gosling/bench"
	"github.com/gosling-ai/gosling/device/cpu"
)

type benchAttentionCmd struct {
	rooflineFlags
	Backends   []string      `help:"Backends to measure (default: every CPU backend)."`
	PageSizes  []int         `help:"Page sizes." default:"1,16"`
	PrefillLen int           `help:"Causal prefill length (one request)." default:"4096"`
	Decode     []string      `help:"Decode cases as BATCHxCONTEXT." default:"1x32768,16x4096,64x4096"`
	Heads      int           `help:"Query heads." default:"32"`
	KVHeads    int           `help:"KV heads." default:"8" name:"kv-heads"`
	HeadDim    int           `help:"Head dimension." default:"128"`
	MinTime    time.Duration `help:"Minimum time per decode measurement." default:"300ms"`
	Threads    int           `help:"Threads (0: one per core)." default:"0"`
}

// Run measures each backend's prefill GFLOP/s and decode GB/s of KV read,
// next to this machine's read bandwidth measured in the same run.
func (c *benchAttentionCmd) Run() error {
	w := cpu.NewWorkers(c.Threads)
	defer w.Close()
	roof := bench.MeasureRoofline(w, bench.RooflineOptions{BufferMiB: c.BufferMiB, Runs: c.Runs})
	sh := attnbench.Shape{Heads: c.Heads, KVHeads: c.KVHeads, HeadDim: c.HeadDim}
	var results []attnbench.Result
	for _, e := range registry.ForDevice("cpu") {
		if len(c.Backends) > 0 && !contains(c.Backends, e.Name) {
			continue
		}
		for _, ps := range c.PageSizes {
			r, err := attnbench.Prefill(e, w, sh, ps, c.PrefillLen, 0)
			if err != nil {
				return err
			}
			results = append(results, r)
			fmt.Fprintln(os.Stderr, r)
			for _, d := range c.Decode {
				var batch, ctx int
				if _, err := fmt.Sscanf(d, "%dx%d", &batch, &ctx); err != nil {
					return fmt.Errorf("--decode %q: want BATCHxCONTEXT", d)
				}
				r, err := attnbench.Decode(e, w, sh, ps, batch, ctx, c.MinTime)
				if err != nil {
					return err
				}
				results = append(results, r)
				fmt.Fprintln(os.Stderr, r)
			}
		}
	}
	if c.JSON {
		return json.NewEncoder(os.Stdout).Encode(map[string]any{"roofline": roof, "results": results})
	}
	roof.Print(os.Stdout)
	tw := tabwriter.NewWriter(os.Stdout, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "backend\tpage\tcase\tms\tGFLOP/s\tGB/s\tof read bandwidth")
	for _, r := range results {
		frac := ""
		if r.GBps > 0 && roof.ReadGBs > 0 {
			frac = fmt.Sprintf("%.0f%%", 100*r.GBps/roof.ReadGBs)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%.2f\t%s\t%s\t%s\n", r.Backend, r.PageSize, r.Case, r.Seconds*1e3, num(r.GFLOPs), num(r.GBps), frac)
	}
	return tw.Flush()
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
