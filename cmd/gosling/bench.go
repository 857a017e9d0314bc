package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/gosling-ai/gosling/bench"
	"github.com/gosling-ai/gosling/device/cpu"
)

type benchCmd struct {
	OneBatch  benchOneBatchCmd  `cmd:"" name:"one-batch" help:"Time prefill and decode of static batches of random prompts, each next to its roofline."`
	Roofline  benchRooflineCmd  `cmd:"" help:"Measure this machine's memory read bandwidth and FMA peak with all threads."`
	Attention benchAttentionCmd `cmd:"" help:"Attention backends: causal prefill GFLOP/s and paged decode GB/s of KV read, next to the read bandwidth."`
}

type rooflineFlags struct {
	BufferMiB int  `help:"Size of the streamed buffer in MiB (far beyond the caches)." default:"1024" name:"buffer-mib"`
	Runs      int  `help:"Reads of the buffer; the best counts." default:"5"`
	JSON      bool `help:"Print JSON." name:"json"`
}

type benchRooflineCmd struct {
	rooflineFlags
	Threads int `help:"Threads (0: one per core)." default:"0"`
}

func (c *benchRooflineCmd) Run() error {
	w := cpu.NewWorkers(c.Threads)
	defer w.Close()
	r := bench.MeasureRoofline(w, bench.RooflineOptions{BufferMiB: c.BufferMiB, Runs: c.Runs})
	if c.JSON {
		return json.NewEncoder(os.Stdout).Encode(r)
	}
	r.Print(os.Stdout)
	return nil
}

type benchOneBatchCmd struct {
	engineFlags
	rooflineFlags
	Batch     []int  `help:"Batch sizes (comma-separated)." default:"1,8,32"`
	InputLen  int    `help:"Prompt tokens per request." default:"512"`
	OutputLen int    `help:"Generated tokens per request." default:"64"`
	Seed      uint64 `help:"Seed of the random prompts." default:"0"`
	NoProbe   bool   `help:"Do not re-measure the read bandwidth around each batch (the decode roofline then uses the first measurement)." name:"no-probe"`
}

func (c *benchOneBatchCmd) Run() error {
	cfg, err := c.config()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	w := cpu.NewWorkers(c.Threads)
	defer w.Close()
	start := time.Now()
	roof := bench.MeasureRoofline(w, bench.RooflineOptions{BufferMiB: c.BufferMiB, Runs: c.Runs})
	fmt.Fprintf(os.Stderr, "roofline measured in %.1fs\n", time.Since(start).Seconds())
	var probe *bench.BandwidthProbe
	if !c.NoProbe {
		probe = bench.NewBandwidthProbe(w)
	}
	rep, err := bench.OneBatch(ctx, cfg, bench.OneBatchOptions{Batches: c.Batch, InputLen: c.InputLen, OutputLen: c.OutputLen, Seed: c.Seed, Probe: probe}, roof)
	if err != nil {
		return err
	}
	if c.JSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	rep.Print(os.Stdout)
	return nil
}
