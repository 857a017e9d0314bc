package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"time"

	"github.com/alecthomas/kong"

	"github.com/gosling-ai/gosling/bench"
	"github.com/gosling-ai/gosling/device/cpu"
	"github.com/gosling-ai/gosling/device/cuda"
	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/tokenizer"
)

type benchCmd struct {
	OneBatch    benchOneBatchCmd    `cmd:"" name:"one-batch" help:"Time prefill and decode of static batches of random prompts, each next to its roofline."`
	Roofline    benchRooflineCmd    `cmd:"" help:"Measure this machine's memory read bandwidth and FMA peak with all threads."`
	Attention   benchAttentionCmd   `cmd:"" help:"Attention backends: causal prefill GFLOP/s and paged decode GB/s of KV read, next to the read bandwidth."`
	Speculative benchSpeculativeCmd `cmd:"" help:"One greedy request decoded without and with --speculative-algorithm (one engine after the other): decode tok/s, accept length, and whether the outputs match."`
	Serving     benchServingCmd     `cmd:"" help:"Load-test an OpenAI-compatible server like sglang.bench_serving (random or ShareGPT prompts): throughput, TTFT, TPOT, ITL and E2E latency, cache hit rate."`
	AllReduce   benchAllReduceCmd   `cmd:"" name:"allreduce" help:"All-reduce bus bandwidth over a sweep of message sizes, through NCCL across this machine's GPUs (or in-process CPU ranks); --custom adds the custom all-reduce's peer-memory kernels beside NCCL."`
}

type rooflineFlags struct {
	BufferMiB int  `help:"Size of the streamed buffer in MiB (far beyond the caches)." default:"1024" name:"buffer-mib"`
	Runs      int  `help:"Reads of the buffer; the best counts." default:"5"`
	FMAMs     int  `help:"Milliseconds of each of the three FMA runs." default:"300" name:"fma-ms"`
	JSON      bool `help:"Print JSON." name:"json"`
}

func (f *rooflineFlags) options() bench.RooflineOptions {
	return bench.RooflineOptions{BufferMiB: f.BufferMiB, Runs: f.Runs, FMATime: time.Duration(f.FMAMs) * time.Millisecond}
}

type benchRooflineCmd struct {
	rooflineFlags
	Threads int `help:"Threads (0: one per core)." default:"0"`
}

func (c *benchRooflineCmd) Run() error {
	w := cpu.NewWorkers(c.Threads)
	defer w.Close()
	r := bench.MeasureRoofline(w, c.options())
	if c.JSON {
		return json.NewEncoder(os.Stdout).Encode(r)
	}
	r.Print(os.Stdout)
	return nil
}

type benchOneBatchCmd struct {
	engineFlags
	rooflineFlags
	Batch          []int    `help:"Batch sizes (comma-separated)." default:"1,8,32"`
	InputLen       int      `help:"Prompt tokens per request." default:"512"`
	OutputLen      int      `help:"Generated tokens per request." default:"64"`
	Seed           uint64   `help:"Seed of the random prompts." default:"0"`
	NoProbe        bool     `help:"Do not re-measure the read bandwidth around each batch (the decode roofline then uses the first measurement)." name:"no-probe"`
	Repeat         int      `help:"Run the list of batch sizes this many times, interleaved, and report each size's medians (prefill by prefill tok/s, decode by decode tok/s) with the ranges of all: on a shared machine every size then meets the same machine states." default:"1"`
	ProfileKernels bool     `name:"profile-kernels" help:"After the timed runs, run each batch size once more with every GPU operation (kernel, GEMM, copy) timed, and print the time per forward of each (prefill and decode separately). Profiled forwards run without CUDA graphs, queued behind a hold so that they run back to back. CUDA only."`
	Images         []string `help:"Image file (repeatable) that every request carries besides its --input-len random text tokens (a vision-language model): the vision encode is timed apart from the language prefill, and each batch size runs again without images, text tokens in their place. The radix cache is off, so every request encodes its images." name:"image" type:"path"`
	ImageSizes     []string `help:"Like --image, a synthetic image of this size (WxH, repeatable; the same pixels every run)." name:"image-size" placeholder:"WxH"`
}

func (c *benchOneBatchCmd) Run() error {
	if c.Repeat < 1 {
		return fmt.Errorf("--repeat must be at least 1, got %d", c.Repeat)
	}
	cfg, err := c.config()
	if err != nil {
		return err
	}
	if ran, err := c.runNode(cfg); ran {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	w := cpu.NewWorkers(c.Threads)
	defer w.Close()
	start := time.Now()
	var roof bench.Roofline
	onGPU := cfg.Device == "cuda" || (cfg.Device == "auto" && cuda.DriverAvailable() == nil)
	if c.ProfileKernels && !onGPU {
		return fmt.Errorf("--profile-kernels times GPU operations: it needs --device cuda")
	}
	if onGPU { // the decode roofline is the GPU's memory bandwidth
		if roof, err = bench.MeasureGPURead(c.BufferMiB, c.Runs); err != nil {
			return err
		}
	} else {
		roof = bench.MeasureRoofline(w, c.options())
	}
	fmt.Fprintf(os.Stderr, "roofline measured in %.1fs\n", time.Since(start).Seconds())
	var probe *bench.BandwidthProbe
	if !c.NoProbe && !onGPU {
		probe = bench.NewBandwidthProbe(w, max(1, min(c.BufferMiB/2, 512)))
	}
	images, err := readImages(c.Images)
	if err != nil {
		return err
	}
	for _, size := range c.ImageSizes {
		var w, h int
		if n, err := fmt.Sscanf(size, "%dx%d", &w, &h); err != nil || n != 2 || fmt.Sprintf("%dx%d", w, h) != size || w <= 0 || h <= 0 {
			return fmt.Errorf("--image-size %q: want WxH with positive integers, such as 448x448", size)
		}
		images = append(images, engine.Image{Decoded: bench.SyntheticImage(w, h)})
	}
	rep, err := bench.OneBatch(ctx, cfg, bench.OneBatchOptions{Batches: c.Batch, InputLen: c.InputLen, OutputLen: c.OutputLen, Seed: c.Seed, Probe: probe, Repeat: c.Repeat, ProfileKernels: c.ProfileKernels, Images: images}, roof)
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

type benchServingCmd struct {
	engineFlags
	BaseURL           string  `help:"Server to measure; with --model-path, one started in this process instead." default:"http://127.0.0.1:30000" name:"base-url"`
	Backend           string  `help:"gosling: streaming /generate; openai: streaming /v1/completions; openai-chat: streaming /v1/chat/completions, the prompt as the user's message (needs a tokenizer). Prompts are text with a tokenizer, token ids without." default:"gosling" enum:"gosling,openai,openai-chat"`
	Model             string  `help:"openai backend: the model name (default: the server's first in /v1/models)."`
	NumPrompts        int     `help:"Requests to send." default:"1000"`
	DatasetName       string  `help:"random: prompts of random tokens (text when a tokenizer is known: --tokenizer or --model-path; else token ids); sharegpt: the first two turns of conversations in --dataset-path." default:"random" enum:"random,sharegpt"`
	DatasetPath       string  `help:"sharegpt: a ShareGPT-style JSON file ([{\"conversations\": [{\"from\": ..., \"value\": ...}, ...]}, ...])." type:"path"`
	SharegptOutputLen int     `help:"sharegpt: output tokens of every request (0: the length of the conversation's reply)." default:"0" name:"sharegpt-output-len"`
	RandomInputLen    int     `help:"Prompt tokens per request (the most, with --random-range-ratio < 1)." default:"1024"`
	RandomOutputLen   int     `help:"Generated tokens per request (ignore_eos; the most, with --random-range-ratio < 1)." default:"1024"`
	RandomRangeRatio  float64 `help:"Lengths are drawn from [len*ratio, len]; 1 fixes them." default:"0.0"`
	SharedPrefixLen   int     `help:"Every prompt starts with the same random prefix of this many tokens (part of --random-input-len)." default:"0"`
	RequestRate       float64 `help:"Mean requests per second of Poisson arrivals; inf sends all at once." default:"inf"`
	MaxConcurrency    int     `help:"Most requests in flight (0: no cap)." default:"0"`
	Seed              uint64  `help:"Seed of the prompts and arrivals." default:"1"`
	VocabSize         int     `help:"Random token ids are below this (0: the server's vocab_size)." default:"0"`
	FlushCache        bool    `help:"Empty the server's prefix cache (POST /flush_cache) before the run."`
	DisableProgress   bool    `help:"No progress bar on stderr."`
	JSON              bool    `help:"Print the result as one JSON object." name:"json"`
	OutputFile        string  `help:"Append the result to this file as one line of JSON." type:"path"`
	OutputDetails     bool    `help:"Keep each request's lengths, TTFT and error in the JSON result."`
}

// BeforeReset makes --model-path optional here: engineFlags requires it
// for the commands that always load a model, but this one may measure a
// server already running at --base-url.
func (c *benchServingCmd) BeforeReset(ctx *kong.Context) error {
	for _, f := range ctx.Selected().Flags {
		if f.Name == "model-path" {
			f.Required = false
		}
	}
	return nil
}

func (c *benchServingCmd) Run() error {
	if c.RequestRate <= 0 {
		return fmt.Errorf("--request-rate must be positive, or inf to send every request at once; got %g", c.RequestRate)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	base := c.BaseURL
	var tok *tokenizer.Tokenizer
	switch tp := cmp.Or(c.Tokenizer, c.ModelPath); {
	case tp != "":
		var err error
		if tok, err = bench.LoadTokenizer(tp); err != nil {
			return err
		}
	case c.DatasetName == "sharegpt":
		return fmt.Errorf("--dataset-name sharegpt needs the served model's tokenizer to count tokens: pass --tokenizer")
	}
	if c.ModelPath != "" {
		cfg, err := c.config()
		if err != nil {
			return err
		}
		if ran, err := c.runNode(cfg); ran {
			return err
		}
		url, shutdown, err := bench.StartServer(cfg, slog.Default())
		if err != nil {
			return err
		}
		defer shutdown()
		base = url
	}
	o := bench.ServingOptions{
		BaseURL: base, Backend: c.Backend, Model: c.Model, NumPrompts: c.NumPrompts,
		InputLen: c.RandomInputLen, OutputLen: c.RandomOutputLen, RangeRatio: c.RandomRangeRatio, SharedPrefixLen: c.SharedPrefixLen,
		RequestRate: c.RequestRate, MaxConcurrency: c.MaxConcurrency, Seed: c.Seed, VocabSize: c.VocabSize, FlushCache: c.FlushCache,
		Dataset: c.DatasetName, DatasetPath: c.DatasetPath, ShareGPTOutputLen: c.SharegptOutputLen, Tokenizer: tok, Details: c.OutputDetails,
	}
	if !c.DisableProgress {
		o.Progress = os.Stderr
	}
	rep, err := bench.RunServing(ctx, o)
	if err != nil {
		return err
	}
	if c.OutputFile != "" {
		line, err := json.Marshal(rep)
		if err != nil {
			return err
		}
		f, err := os.OpenFile(c.OutputFile, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return fmt.Errorf("--output-file: %w", err)
		}
		_, werr := f.Write(append(line, '\n'))
		if err := cmp.Or(werr, f.Close()); err != nil {
			return fmt.Errorf("--output-file: %w", err)
		}
	}
	if c.JSON {
		return json.NewEncoder(os.Stdout).Encode(rep)
	}
	rep.Print(os.Stdout)
	return nil
}
