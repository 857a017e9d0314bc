// Command gosling serves and runs LLMs: generate, tokenize, backends.
package main

import (
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/alecthomas/kong"
)

type cli struct {
	LogLevel string `help:"Log level: debug, info, warn, error (default: info for serve, warn otherwise)." enum:",debug,info,warn,error" default:""`

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
	if c.LogLevel == "" {
		c.LogLevel = "warn"
		if strings.HasPrefix(ctx.Command(), "serve") {
			c.LogLevel = "info" // a server reports its settings and KV layout at start-up
		}
	}
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.LogLevel))
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))
	if err := ctx.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "gosling:", err)
		os.Exit(1)
	}
}
