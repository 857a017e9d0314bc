// Command gosling serves and runs LLMs: generate, tokenize, backends.
package main

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/alecthomas/kong"
)

type cli struct {
	LogLevel string `help:"Log level: debug, info, warn, error." default:"warn" enum:"debug,info,warn,error"`

	Serve    serveCmd    `cmd:"" help:"Serve the model over HTTP: OpenAI-compatible (/v1/...) and SGLang-native (/generate, ...) APIs."`
	Generate generateCmd `cmd:"" help:"Generate text from a prompt (streams to stdout, or one JSON object with --json)."`
	Tokenize tokenizeCmd `cmd:"" help:"Tokenize JSON lines {\"text\": ...} from stdin (or detokenize {\"ids\": [...]} with --decode)."`
	Backends backendsCmd `cmd:"" help:"List the attention backends and what each supports."`
	Bench    benchCmd    `cmd:"" help:"Benchmarks: one-batch (prefill and decode speed), roofline (this machine's limits)."`
	Model    modelCmd    `cmd:"" help:"Model utilities: random (write a random-weights checkpoint)."`
}

func main() {
	var c cli
	ctx := kong.Parse(&c, kong.Name("gosling"),
		kong.Description("gosling: an LLM inference engine and server in Go."),
		kong.UsageOnError())
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.LogLevel))
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))
	if err := ctx.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "gosling:", err)
		os.Exit(1)
	}
}
