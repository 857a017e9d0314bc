package server_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// These tests talk to the server through OpenAI's official Go SDK, so the
// shapes are checked by the decoder real clients use.

func sdkClient(baseURL string) openai.Client {
	return openai.NewClient(option.WithBaseURL(baseURL+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
}

func storyChat(maxTokens int64) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:       "stories260K.gguf",
		Messages:    []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Once upon a time")},
		MaxTokens:   openai.Int(maxTokens),
		Temperature: openai.Float(0),
	}
}

func TestOpenAIGoChat(t *testing.T) {
	ts, _ := newServer(t)
	client := sdkClient(ts.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	params := storyChat(24)
	params.Logprobs = openai.Bool(true)
	params.TopLogprobs = openai.Int(3)
	resp, err := client.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatalf("chat completion: %v", err)
	}
	if resp.Object != "chat.completion" || !strings.HasPrefix(resp.ID, "chatcmpl-") || resp.Model != "stories260K.gguf" {
		t.Errorf("object %q id %q model %q", resp.Object, resp.ID, resp.Model)
	}
	if len(resp.Choices) != 1 {
		t.Fatalf("%d choices, want 1", len(resp.Choices))
	}
	c := resp.Choices[0]
	if c.Message.Role != "assistant" || c.Message.Content == "" {
		t.Errorf("message %+v", c.Message)
	}
	if c.FinishReason != "length" {
		t.Errorf("finish_reason %q, want length (24 tokens of a story)", c.FinishReason)
	}
	if resp.Usage.CompletionTokens != 24 || resp.Usage.PromptTokens < 2 ||
		resp.Usage.TotalTokens != resp.Usage.PromptTokens+resp.Usage.CompletionTokens {
		t.Errorf("usage %+v", resp.Usage)
	}
	if len(c.Logprobs.Content) != 24 {
		t.Fatalf("%d logprob entries, want 24", len(c.Logprobs.Content))
	}
	var joined strings.Builder
	for i, lp := range c.Logprobs.Content {
		joined.WriteString(lp.Token)
		if lp.Logprob > 0 || len(lp.TopLogprobs) != 3 {
			t.Fatalf("entry %d: logprob %v with %d alternatives", i, lp.Logprob, len(lp.TopLogprobs))
		}
		// Greedy: the chosen token is the most likely one.
		if lp.TopLogprobs[0].Token != lp.Token || lp.TopLogprobs[0].Logprob != lp.Logprob {
			t.Errorf("entry %d: chosen %q (%v) but top is %q (%v)", i, lp.Token, lp.Logprob, lp.TopLogprobs[0].Token, lp.TopLogprobs[0].Logprob)
		}
		if string(bytesOf(lp.Bytes)) != lp.Token {
			t.Errorf("entry %d: bytes %v do not spell %q", i, lp.Bytes, lp.Token)
		}
	}
	if joined.String() != c.Message.Content {
		t.Errorf("logprob tokens spell %q, content is %q", joined.String(), c.Message.Content)
	}

	// n choices with a seed: reproducible, one usage for all.
	params = storyChat(8)
	params.Temperature = openai.Float(1)
	params.N = openai.Int(3)
	params.Seed = openai.Int(7)
	first, err := client.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	again, err := client.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Choices) != 3 || first.Usage.CompletionTokens != 24 {
		t.Fatalf("%d choices, usage %+v", len(first.Choices), first.Usage)
	}
	for i := range first.Choices {
		if first.Choices[i].Index != int64(i) || first.Choices[i].Message.Content != again.Choices[i].Message.Content {
			t.Errorf("choice %d: %q then %q with the same seed", i, first.Choices[i].Message.Content, again.Choices[i].Message.Content)
		}
	}
}

func bytesOf(v []int64) []byte {
	out := make([]byte, len(v))
	for i, b := range v {
		out[i] = byte(b)
	}
	return out
}

func TestOpenAIGoCompletion(t *testing.T) {
	ts, _ := newServer(t)
	client := sdkClient(ts.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := client.Completions.New(ctx, openai.CompletionNewParams{
		Model:       "stories260K.gguf",
		Prompt:      openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
		MaxTokens:   openai.Int(16),
		Temperature: openai.Float(0),
		Logprobs:    openai.Int(2),
		Echo:        openai.Bool(true),
	})
	if err != nil {
		t.Fatalf("completion: %v", err)
	}
	if resp.Object != "text_completion" || len(resp.Choices) != 1 {
		t.Fatalf("object %q, %d choices", resp.Object, len(resp.Choices))
	}
	c := resp.Choices[0]
	if !strings.HasPrefix(c.Text, "Once upon a time") || len(c.Text) <= len("Once upon a time") {
		t.Errorf("echoed text %q", c.Text)
	}
	prompt, completion := int(resp.Usage.PromptTokens), int(resp.Usage.CompletionTokens)
	if completion != 16 || c.FinishReason != "length" {
		t.Errorf("usage %+v, finish %q", resp.Usage, c.FinishReason)
	}
	lp := c.Logprobs
	if n := prompt + completion; len(lp.Tokens) != n || len(lp.TokenLogprobs) != n || len(lp.TopLogprobs) != n || len(lp.TextOffset) != n {
		t.Fatalf("logprobs lengths %d/%d/%d/%d, want %d (echo: prompt + completion)",
			len(lp.Tokens), len(lp.TokenLogprobs), len(lp.TopLogprobs), len(lp.TextOffset), n)
	}
	for i := 1; i < len(lp.Tokens); i++ {
		if lp.TokenLogprobs[i] > 0 || lp.TextOffset[i] < lp.TextOffset[i-1] {
			t.Errorf("token %d %q: logprob %v offset %d", i, lp.Tokens[i], lp.TokenLogprobs[i], lp.TextOffset[i])
		}
		// The offsets point at each token's text inside the choice's text
		// (SentencePiece's dummy space before the first word aside).
		want := lp.Tokens[i]
		if i == 1 {
			want = strings.TrimPrefix(want, " ")
		}
		if off := int(lp.TextOffset[i]); !strings.HasPrefix(c.Text[off:], want) {
			t.Errorf("token %d %q is not at offset %d of %q", i, lp.Tokens[i], off, c.Text)
		}
	}
}

// TestOpenAIGoScoring is the echo + max_tokens 0 idiom: log-probabilities
// of the prompt's own tokens, nothing generated.
func TestOpenAIGoScoring(t *testing.T) {
	ts, _ := newServer(t)
	client := sdkClient(ts.URL)
	resp, err := client.Completions.New(context.Background(), openai.CompletionNewParams{
		Model:     "stories260K.gguf",
		Prompt:    openai.CompletionNewParamsPromptUnion{OfArrayOfTokens: []int64{1, 403, 407, 261, 378}},
		MaxTokens: openai.Int(0),
		Logprobs:  openai.Int(0),
		Echo:      openai.Bool(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	c := resp.Choices[0]
	if c.Text != "Once upon a time" || resp.Usage.CompletionTokens != 0 || c.FinishReason != "length" {
		t.Errorf("text %q, usage %+v, finish %q", c.Text, resp.Usage, c.FinishReason)
	}
	lp := c.Logprobs
	if len(lp.Tokens) != 5 || len(lp.TokenLogprobs) != 5 || !lp.JSON.TokenLogprobs.Valid() {
		t.Fatalf("logprobs %+v", lp)
	}
	for i, v := range lp.TokenLogprobs[1:] {
		if v >= 0 || v < -20 {
			t.Errorf("prompt token %d (%q): logprob %v", i+1, lp.Tokens[i+1], v)
		}
	}
}

func TestOpenAIGoStreamingChat(t *testing.T) {
	ts, _ := newServer(t)
	client := sdkClient(ts.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	whole, err := client.Chat.Completions.New(ctx, storyChat(40))
	if err != nil {
		t.Fatal(err)
	}
	params := storyChat(40)
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := client.Chat.Completions.NewStreaming(ctx, params)
	var text strings.Builder
	var usage *openai.CompletionUsage
	var role, finish string
	chunks := 0
	for stream.Next() {
		ch := stream.Current()
		chunks++
		if ch.Object != "chat.completion.chunk" {
			t.Errorf("chunk object %q", ch.Object)
		}
		if ch.JSON.Usage.Valid() && ch.Usage.TotalTokens > 0 {
			if len(ch.Choices) != 0 {
				t.Errorf("the usage chunk has %d choices, want none", len(ch.Choices))
			}
			u := ch.Usage
			usage = &u
		}
		for _, c := range ch.Choices {
			if c.Delta.Role != "" {
				role = c.Delta.Role
			}
			text.WriteString(c.Delta.Content)
			if c.FinishReason != "" {
				finish = c.FinishReason
			}
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	if role != "assistant" || finish != whole.Choices[0].FinishReason {
		t.Errorf("role %q finish %q (non-streamed: %q)", role, finish, whole.Choices[0].FinishReason)
	}
	if text.String() != whole.Choices[0].Message.Content {
		t.Errorf("streamed deltas spell\n%q\nnon-streamed greedy text is\n%q", text.String(), whole.Choices[0].Message.Content)
	}
	if chunks < 5 {
		t.Errorf("only %d chunks: the text was not streamed", chunks)
	}
	if usage == nil {
		t.Fatal("no usage chunk with stream_options.include_usage")
	}
	if usage.CompletionTokens != whole.Usage.CompletionTokens || usage.PromptTokens != whole.Usage.PromptTokens {
		t.Errorf("streamed usage %+v, non-streamed %+v", usage, whole.Usage)
	}
}

func TestOpenAIGoModels(t *testing.T) {
	ts, _ := newServer(t)
	client := sdkClient(ts.URL)
	page, err := client.Models.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Data) != 1 {
		t.Fatalf("%d models, want 1", len(page.Data))
	}
	m := page.Data[0]
	if m.ID != "stories260K.gguf" || m.OwnedBy != "gosling" || m.Created == 0 {
		t.Errorf("model %+v", m)
	}
	got, err := client.Models.Get(context.Background(), "stories260K.gguf")
	if err != nil || got.ID != m.ID {
		t.Errorf("retrieve model: %v, %+v", err, got)
	}
}

func TestOpenAIGoErrors(t *testing.T) {
	ts, _ := newServer(t)
	client := sdkClient(ts.URL)
	params := storyChat(8)
	params.Temperature = openai.Float(-1)
	_, err := client.Chat.Completions.New(context.Background(), params)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("error %v (%T), want *openai.Error", err, err)
	}
	if apiErr.StatusCode != 400 || apiErr.Type != "invalid_request_error" || apiErr.Param != "temperature" ||
		!strings.Contains(apiErr.Message, "temperature") {
		t.Errorf("status %d type %q param %q message %q", apiErr.StatusCode, apiErr.Type, apiErr.Param, apiErr.Message)
	}

	params = storyChat(8)
	params.Model = "gpt-4o"
	_, err = client.Chat.Completions.New(context.Background(), params)
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Code != "model_not_found" {
		t.Errorf("unknown model: %v", err)
	}
}
