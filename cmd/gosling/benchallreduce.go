package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/gosling-ai/gosling/bench"
	"github.com/gosling-ai/gosling/tensor"
)

type benchAllReduceCmd struct {
	Backend  string `help:"nccl (one rank per GPU of this machine, through libnccl.so.2) or local (in-process CPU ranks)." default:"nccl" enum:"nccl,local"`
	NGPUs    int    `help:"Ranks: GPUs 0..N-1 with nccl, goroutines with local." default:"2" name:"ngpus" aliases:"ranks"`
	MinBytes string `help:"Smallest message (bytes; K, M, G suffixes are powers of 1024); sizes double up to --max-bytes." default:"1K" name:"min-bytes"`
	MaxBytes string `help:"Largest message." default:"1G" name:"max-bytes"`
	DType    string `help:"Element type: bfloat16 or float32." default:"bfloat16" enum:"bfloat16,float32" name:"dtype"`
	Warmup   int    `help:"Untimed all-reduces before each size." default:"5"`
	Iters    int    `help:"Timed all-reduces per size (their mean is reported)." default:"20"`
	JSON     bool   `help:"Print one JSON object per size." name:"json"`
	Custom   bool   `help:"With nccl: also time the custom all-reduce's peer-memory kernels (one-shot and two-shot, up to 64 MiB) beside NCCL at each size, and name the path its plan picks (GOSLING_CUSTOM_AR_* override the plan). Try --min-bytes 4K --max-bytes 4M." name:"custom"`
	Graph    bool   `help:"With nccl: time a CUDA graph of --iters all-reduces replayed (as decode steps run them) instead of eager launches." name:"graph"`
}

// parseBytes reads 4096, 64K, 16M or 1G (powers of 1024).
func parseBytes(flag, s string) (int64, error) {
	mult := int64(1)
	t := strings.ToUpper(strings.TrimSpace(s))
	switch {
	case strings.HasSuffix(t, "K"):
		mult, t = 1<<10, t[:len(t)-1]
	case strings.HasSuffix(t, "M"):
		mult, t = 1<<20, t[:len(t)-1]
	case strings.HasSuffix(t, "G"):
		mult, t = 1<<30, t[:len(t)-1]
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("--%s %q: want a positive size such as 4096, 64K, 16M or 1G", flag, s)
	}
	return n * mult, nil
}

func (c *benchAllReduceCmd) Run() error {
	lo, err := parseBytes("min-bytes", c.MinBytes)
	if err != nil {
		return err
	}
	hi, err := parseBytes("max-bytes", c.MaxBytes)
	if err != nil {
		return err
	}
	if hi < lo {
		return fmt.Errorf("--max-bytes %s is below --min-bytes %s", c.MaxBytes, c.MinBytes)
	}
	dt := tensor.BF16
	if c.DType == "float32" {
		dt = tensor.F32
	}
	o := bench.AllReduceOptions{Backend: c.Backend, Ranks: c.NGPUs, MinBytes: lo, MaxBytes: hi, DType: dt, Warmup: c.Warmup, Iters: c.Iters, Custom: c.Custom, Graph: c.Graph}
	header := os.Stdout
	if c.JSON {
		header = os.Stderr
	} else {
		defer fmt.Println()
	}
	first := true
	return bench.AllReduceSweep(o, header, func(r bench.AllReduceResult) {
		if c.JSON {
			json.NewEncoder(os.Stdout).Encode(r)
			return
		}
		if first {
			fmt.Printf("%12s %12s %8s %12s %12s %12s", "bytes", "count", "dtype", "time (us)", "algbw (GB/s)", "busbw (GB/s)")
			if c.Custom {
				fmt.Printf(" %12s %12s %12s %12s %9s", "1-shot (us)", "busbw", "2-shot (us)", "busbw", "plan")
			}
			fmt.Println()
			first = false
		}
		fmt.Printf("%12d %12d %8s %12.1f %12.2f %12.2f", r.Bytes, r.Count, c.DType, float64(r.Time.Nanoseconds())/1e3, r.AlgBW, r.BusBW)
		for _, p := range r.Paths {
			fmt.Printf(" %12.1f %12.2f", float64(p.Time.Nanoseconds())/1e3, p.BusBW)
		}
		if r.Plan != "" {
			fmt.Printf(" %9s", r.Plan)
		}
		fmt.Println()
	})
}
