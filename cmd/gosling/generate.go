package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/tokenizer"
	"github.com/gosling-ai/gosling/vision"
)

type generateCmd struct {
	engineFlags
	samplingFlags

	Prompt         *string  `help:"Prompt text (the tokenizer adds BOS as the model expects)."`
	InputIDs       string   `help:"Prompt as comma-separated token ids, e.g. 1,2,3." name:"input-ids"`
	Chat           bool     `help:"Chat: wrap --prompt in the model's chat template, or without --prompt read user turns from stdin."`
	System         string   `help:"System message for --chat."`
	ChatTemplate   string   `help:"Chat template for --chat (a Jinja file or string), overriding the tokenizer's."`
	JSON           bool     `help:"Print one JSON object (output_ids, text, ...) instead of streaming text." name:"json"`
	Logprobs       bool     `help:"Return the log-probability of each generated token (output_logprobs)."`
	TopLogprobs    int      `help:"Return the N most likely tokens at each step." default:"0"`
	PromptLogprobs bool     `help:"Return log p(prompt[i] | prompt[:i]) for every prompt token (prompt_logprobs; element 0 is null)."`
	Images         []string `help:"Image file for a vision-language model (repeatable): one per image placeholder of --input-ids or --prompt; with --chat the template places them." name:"image" type:"path"`
}

type generateJSON struct {
	PromptIDs      []int              `json:"prompt_ids"`
	OutputIDs      []int              `json:"output_ids"`
	Text           string             `json:"text"`
	FinishReason   string             `json:"finish_reason"`
	OutputLogprobs []float32          `json:"output_logprobs,omitempty"`
	TopLogprobs    [][]topLogprobJSON `json:"output_top_logprobs,omitempty"`
	PromptLogprobs []*float32         `json:"prompt_logprobs,omitempty"`
	Usage          map[string]float64 `json:"usage"`
}

type topLogprobJSON struct {
	ID      int     `json:"id"`
	Logprob float32 `json:"logprob"`
}

func (g *generateCmd) Run() error {
	if g.Prompt == nil && g.InputIDs == "" && !g.Chat {
		return fmt.Errorf("give a prompt: --prompt TEXT, --input-ids 1,2,3, or --chat")
	}
	if g.Prompt != nil && g.InputIDs != "" {
		return fmt.Errorf("--prompt and --input-ids are exclusive")
	}
	ids, err := parseIDs(g.InputIDs)
	if err != nil {
		return err
	}
	cfg, err := g.config()
	if err != nil {
		return err
	}
	if ran, err := g.runNode(cfg); ran {
		return err
	}
	if g.ChatTemplate != "" {
		if !g.Chat {
			return fmt.Errorf("--chat-template applies to --chat only")
		}
		cfg.ChatTemplate = g.ChatTemplate
	}
	e, err := engine.New(cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	if g.Chat && g.Prompt == nil {
		if len(g.Images) > 0 {
			return fmt.Errorf("--image needs --prompt: the interactive chat takes no images")
		}
		return g.chatLoop(ctx, e, os.Stdin, os.Stdout)
	}
	req := engine.Request{InputIDs: ids, Logprobs: g.Logprobs, TopLogprobs: g.TopLogprobs, PromptLogprobs: g.PromptLogprobs}
	req.Sampling = g.params(e.Checkpoint().Generation)
	if req.Images, err = readImages(g.Images); err != nil {
		return err
	}
	// Prepared here, once: pan-and-scan crops change the chat prompt's text.
	if req.Images, err = e.PrepareImages(req.Images, vision.Options{}); err != nil {
		return fmt.Errorf("--image: %w", err)
	}
	if g.Prompt != nil {
		req.Prompt = *g.Prompt
		if g.Chat {
			user := *g.Prompt
			if len(g.Images) > 0 {
				if e.ImagePlaceholderText() == "" {
					return fmt.Errorf("--image: model %s does not accept images (or has no tokenizer to place them)", e.ModelConfig().Architecture)
				}
				user = strings.Repeat(e.ImagePlaceholderText(), len(g.Images)) + user
			}
			if req.InputIDs, _, err = e.ChatPromptIDs(g.messages(nil, user), nil, req.Images); err != nil {
				return err
			}
		}
	}
	if !g.JSON {
		req.OnDelta = func(d engine.Delta) { fmt.Print(d.Text) }
	}
	start := time.Now()
	res, err := e.Generate(ctx, req)
	if err != nil {
		return err
	}
	elapsed := time.Since(start).Seconds()
	tokPerSec := float64(len(res.OutputIDs)) / elapsed
	if !g.JSON {
		fmt.Println()
		spec := ""
		if res.SpecVerifySteps > 0 {
			spec = fmt.Sprintf(", %.2f tokens per verify step", float64(res.SpecAcceptedTokens+res.SpecVerifySteps)/float64(res.SpecVerifySteps))
		}
		fmt.Fprintf(os.Stderr, "[%d prompt + %d generated tokens in %.3fs: %.1f tok/s%s, finish: %s]\n",
			len(res.PromptIDs), len(res.OutputIDs), elapsed, tokPerSec, spec, res.FinishReason)
		return nil
	}
	out := generateJSON{
		PromptIDs: res.PromptIDs, OutputIDs: res.OutputIDs, Text: res.Text, FinishReason: res.FinishReason,
		OutputLogprobs: res.OutputLogprobs, PromptLogprobs: res.PromptLogprobs,
		Usage: map[string]float64{"prompt_tokens": float64(len(res.PromptIDs)), "completion_tokens": float64(len(res.OutputIDs)),
			"seconds": elapsed, "tokens_per_second": tokPerSec},
	}
	if res.SpecVerifySteps > 0 {
		out.Usage["spec_verify_steps"] = float64(res.SpecVerifySteps)
		out.Usage["spec_accept_length"] = float64(res.SpecAcceptedTokens+res.SpecVerifySteps) / float64(res.SpecVerifySteps)
	}
	if out.OutputIDs == nil {
		out.OutputIDs = []int{}
	}
	if g.PromptLogprobs && out.PromptLogprobs == nil {
		out.PromptLogprobs = make([]*float32, len(res.PromptIDs))
	}
	for _, step := range res.TopLogprobs {
		var row []topLogprobJSON
		for _, t := range step {
			row = append(row, topLogprobJSON{ID: t.ID, Logprob: t.Logprob})
		}
		out.TopLogprobs = append(out.TopLogprobs, row)
	}
	enc := json.NewEncoder(os.Stdout)
	return enc.Encode(out)
}

func (g *generateCmd) messages(history []tokenizer.ChatMessage, user string) []tokenizer.ChatMessage {
	var msgs []tokenizer.ChatMessage
	if g.System != "" {
		msgs = append(msgs, tokenizer.ChatMessage{"role": "system", "content": g.System})
	}
	msgs = append(msgs, history...)
	return append(msgs, tokenizer.ChatMessage{"role": "user", "content": user})
}

// chatLoop reads one user turn per line and streams each reply.
func (g *generateCmd) chatLoop(ctx context.Context, e *engine.Engine, in io.Reader, out io.Writer) error {
	var history []tokenizer.ChatMessage
	scanner := bufio.NewScanner(in)
	scanner.Buffer(make([]byte, 1<<20), 1<<20)
	fmt.Fprint(out, "> ")
	for scanner.Scan() {
		user := strings.TrimSpace(scanner.Text())
		if user == "" {
			fmt.Fprint(out, "> ")
			continue
		}
		msgs := g.messages(history, user)
		ids, _, err := e.ChatPromptIDs(msgs, nil, nil)
		if err != nil {
			return err
		}
		req := engine.Request{InputIDs: ids, Sampling: g.params(e.Checkpoint().Generation),
			OnDelta: func(d engine.Delta) { fmt.Fprint(out, d.Text) }}
		res, err := e.Generate(ctx, req)
		if err != nil {
			return err
		}
		fmt.Fprint(out, "\n> ")
		history = append(msgs[len(msgs)-len(history)-1:], tokenizer.ChatMessage{"role": "assistant", "content": res.Text})
	}
	fmt.Fprintln(out)
	return scanner.Err()
}

func parseIDs(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var ids []int
	for _, f := range strings.Split(s, ",") {
		id, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("--input-ids: %q is not a token id", f)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// readImages decodes --image files.
func readImages(paths []string) ([]engine.Image, error) {
	var out []engine.Image
	for _, p := range paths {
		img, err := vision.ReadFile(p, vision.DefaultLimits)
		if err != nil {
			return nil, fmt.Errorf("--image %s: %w", p, err)
		}
		out = append(out, engine.Image{Decoded: img})
	}
	return out, nil
}
