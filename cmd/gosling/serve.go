package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/server"
)

type serveCmd struct {
	engineFlags

	Host                string        `help:"Address to listen on." default:"127.0.0.1"`
	Port                int           `help:"Port to listen on." default:"30000"`
	ServedModelName     string        `help:"Model name of the OpenAI API (default: the base name of --model-path)."`
	APIKey              string        `help:"Require \"Authorization: Bearer KEY\" on every route but /health* and /metrics." name:"api-key" env:"GOSLING_API_KEY"`
	ChatTemplate        string        `help:"Chat template (a Jinja file or string) overriding the tokenizer's."`
	ToolCallParser      string        `help:"Tool-call syntax of the model family: hermes, qwen25, qwen3, mistral, llama3 or deepseekv3 (default: detected in the chat template)."`
	ReasoningParser     string        `help:"Split <think> reasoning into reasoning_content: qwen3 or deepseek-r1 (default: off)."`
	MaxRequestBytes     int64         `help:"Largest request body accepted." default:"33554432"`
	MaxRequestSequences int           `help:"Most sequences (prompts × n) one request may start." default:"1024"`
	MaxRequestTokens    int           `help:"Most prompt tokens × n one request may hold (0: 1048576, or the context length when longer)." default:"0"`
	AllowLocalImages    bool          `help:"Let requests name image files on this machine by path (off: only data: URLs and base64)." name:"allow-local-images"`
	MaxImageBytes       int           `help:"Largest encoded image accepted." default:"20971520"`
	MaxImagePixels      int           `help:"Most pixels (width × height) of an image accepted." default:"50000000"`
	ShutdownTimeout     time.Duration `help:"On SIGTERM/SIGINT, how long requests in flight may run before they are aborted." default:"30s"`
}

func (c *serveCmd) Run() error {
	cfg, err := c.config()
	if err != nil {
		return err
	}
	if ran, err := c.runNode(cfg); ran {
		return err
	}
	eng, err := engine.New(cfg)
	if err != nil {
		return err
	}
	defer eng.Close()
	srv, err := server.New(eng, server.Options{
		ServedModelName: c.ServedModelName, APIKey: c.APIKey, ChatTemplate: c.ChatTemplate,
		ToolCallParser: c.ToolCallParser, ReasoningParser: c.ReasoningParser,
		MaxRequestBytes: c.MaxRequestBytes, MaxRequestSequences: c.MaxRequestSequences, MaxRequestTokens: c.MaxRequestTokens,
		AllowLocalImages: c.AllowLocalImages, MaxImageBytes: c.MaxImageBytes, MaxImagePixels: c.MaxImagePixels,
		Logger: slog.Default(),
	})
	if err != nil {
		return err
	}
	addr := net.JoinHostPort(c.Host, strconv.Itoa(c.Port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w (choose another --port or --host)", addr, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The server goes down with the engine when it stops on its own (a
	// tensor-parallel rank failed): requests would only fail from then on.
	ctx, engineStopped := context.WithCancel(ctx)
	defer engineStopped()
	go func() {
		select {
		case <-eng.Done():
			engineStopped()
		case <-ctx.Done():
		}
	}()
	// Printed whatever the log level, so a user sees where to connect.
	fmt.Fprintf(os.Stderr, "gosling: serving %s on http://%s (OpenAI API under /v1)\n", c.ModelPath, ln.Addr())
	if err := srv.Serve(ctx, ln, c.ShutdownTimeout); err != nil {
		return err
	}
	if err := eng.Err(); err != nil {
		return fmt.Errorf("the engine stopped: %w", err)
	}
	fmt.Fprintln(os.Stderr, "gosling: shut down")
	return nil
}
