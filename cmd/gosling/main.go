// Command gosling serves and runs LLMs: generate, tokenize, backends.
package main

import (
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"runtime/pprof"
	"strings"

	"github.com/alecthomas/kong"

	// The CUDA device and attention backends (--device cuda, auto).
	_ "github.com/gosling-ai/gosling/device/cudadev"
)

type cli struct {
	LogLevel   string `help:"Log level: debug, info, warn, error (default: info for serve, warn otherwise)." enum:",debug,info,warn,error" default:""`
	CPUProfile string `help:"Write a Go CPU profile of the whole command to this file (inspect with go tool pprof)." type:"path"`

	Serve    serveCmd    `cmd:"" help:"Serve the model over HTTP: OpenAI-compatible (/v1/...) and SGLang-native (/generate, ...) APIs."`
	Generate generateCmd `cmd:"" help:"Generate text from a prompt (streams to stdout, or one JSON object with --json)."`
	Tokenize tokenizeCmd `cmd:"" help:"Tokenize JSON lines {\"text\": ...} from stdin (or detokenize {\"ids\": [...]} with --decode)."`
	Grammar  grammarCmd  `cmd:"" help:"Compile a JSON Schema, regex or EBNF against a tokenizer and check JSON lines {\"text\": ...} from stdin token by token."`
	Backends backendsCmd `cmd:"" help:"List the attention backends and what each supports."`
	Bench    benchCmd    `cmd:"" help:"Benchmarks: one-batch (prefill and decode speed), roofline (this machine's limits)."`
	Model    modelCmd    `cmd:"" help:"Model utilities: random (write a random-weights checkpoint)."`
}

func main() {
	var c cli
	os.Args = joinNegativeValues(os.Args)
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
	stop, err := startCPUProfile(c.CPUProfile)
	if err == nil {
		err = ctx.Run()
		stop()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gosling:", err)
		os.Exit(1)
	}
}

// startCPUProfile starts a CPU profile into path (none when path is empty);
// the returned function stops it and closes the file.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// joinNegativeValues writes "--flag -1" as "--flag=-1": the flag parser
// reads a separate "-1" as a short flag, and the help offers -1 for
// --chunked-prefill-size and --top-k. No gosling flag takes a value that
// is a negative number's text otherwise.
func joinNegativeValues(args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if strings.HasPrefix(a, "--") && !strings.Contains(a, "=") && i+1 < len(args) && negativeNumber.MatchString(args[i+1]) {
			a += "=" + args[i+1]
			i++
		}
		out = append(out, a)
	}
	return out
}

var negativeNumber = regexp.MustCompile(`^-[0-9]+(\.[0-9]+)?$`)
