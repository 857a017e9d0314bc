package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"

	"github.com/gosling-ai/gosling/bench"
)

type benchSpeculativeCmd struct {
	engineFlags
	Prompt    string `help:"Prompt text (the tokenizer adds BOS as the model expects)." default:"Once upon a time, there was a little girl named Lily. She loved to play outside."`
	InputIDs  string `help:"Prompt as comma-separated token ids instead of --prompt." name:"input-ids"`
	OutputLen int    `help:"Generated tokens." default:"256"`
	Workload  string `help:"copy: the prompt, the model's own greedy continuation of it and the prompt again, so that the output repeats text in the prompt (where n-gram drafting pays); prompt: the prompt as it is." default:"copy" enum:"copy,prompt"`
	Repeat    int    `help:"Timed runs of each mode after a warm-up; medians are printed." default:"3"`
	JSON      bool   `help:"Print the result as one JSON object." name:"json"`

	VerifySteps []int `name:"verify-steps" help:"First time one verify step of each of these sizes (tokens per request, the newest token included, as --speculative-num-draft-tokens counts them; a chain and a tree of each) against one plain decode step, at each --batch, on this speculative engine: synthetic sequences of --step-context random tokens, the greedy draw included, through CUDA graphs where the engine has them."`
	Batch       []int `help:"Batch sizes of --verify-steps (default 1,16)."`
	StepContext int   `name:"step-context" help:"Tokens each request of --verify-steps holds in the KV cache (default 512)."`
	StepRepeat  int   `name:"step-repeat" help:"Timed steps of each --verify-steps shape after an untimed one; medians are printed (default 20)."`
	NoEndToEnd  bool  `name:"no-end-to-end" help:"With --verify-steps, skip the end-to-end runs."`
}

func (c *benchSpeculativeCmd) Run() error {
	cfg, err := c.config()
	if err != nil {
		return err
	}
	if cfg.TPSize > 1 || cfg.NNodes > 1 {
		return fmt.Errorf("bench speculative runs one rank: drop --tp-size/--nnodes")
	}
	if len(c.VerifySteps) == 0 && (c.Batch != nil || c.StepContext != 0 || c.StepRepeat != 0 || c.NoEndToEnd) {
		return fmt.Errorf("--batch, --step-context, --step-repeat and --no-end-to-end go with --verify-steps")
	}
	if c.StepContext < 0 || c.StepRepeat < 0 {
		return fmt.Errorf("--step-context and --step-repeat must be positive")
	}
	ids, err := parseIDs(c.InputIDs)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var steps *bench.VerifyStepReport
	if len(c.VerifySteps) > 0 {
		o := bench.VerifyStepOptions{Batches: c.Batch, DraftTokens: c.VerifySteps, Context: c.StepContext, Repeat: c.StepRepeat}
		if o.Batches == nil {
			o.Batches = []int{1, 16}
		}
		if o.Context == 0 {
			o.Context = 512
		}
		if o.Repeat == 0 {
			o.Repeat = 20
		}
		if steps, err = bench.VerifySteps(ctx, cfg, o); err != nil {
			return err
		}
		if !c.JSON {
			steps.Print(os.Stdout)
		}
		if c.NoEndToEnd {
			if c.JSON {
				return printJSON(steps)
			}
			return nil
		}
		if !c.JSON {
			fmt.Println()
		}
	}
	rep, err := bench.Speculative(ctx, cfg, bench.SpeculativeOptions{Prompt: c.Prompt, InputIDs: ids, OutputLen: c.OutputLen,
		Copy: c.Workload == "copy", Repeat: c.Repeat})
	if err != nil {
		return err
	}
	switch {
	case c.JSON && steps != nil:
		return printJSON(struct {
			VerifySteps *bench.VerifyStepReport  `json:"verify_steps"`
			EndToEnd    *bench.SpeculativeReport `json:"end_to_end"`
		}{steps, rep})
	case c.JSON:
		return printJSON(rep)
	}
	rep.Print(os.Stdout)
	return nil
}

func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
