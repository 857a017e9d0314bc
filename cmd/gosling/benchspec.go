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
}

func (c *benchSpeculativeCmd) Run() error {
	cfg, err := c.config()
	if err != nil {
		return err
	}
	if cfg.TPSize > 1 || cfg.NNodes > 1 {
		return fmt.Errorf("bench speculative runs one rank: drop --tp-size/--nnodes")
	}
	ids, err := parseIDs(c.InputIDs)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep, err := bench.Speculative(ctx, cfg, bench.SpeculativeOptions{Prompt: c.Prompt, InputIDs: ids, OutputLen: c.OutputLen,
		Copy: c.Workload == "copy", Repeat: c.Repeat})
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
