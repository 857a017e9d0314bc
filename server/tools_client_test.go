package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	sdkshared "github.com/openai/openai-go/v3/shared"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/server"
)

// qwen3Template is Qwen3's published chat template (tools rendered in the
// system prompt, calls as <tool_call> blocks), from ../shared.
func qwen3Template(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(shared.Path(t, "tokenizers/qwen3/tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		ChatTemplate string `json:"chat_template"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	return cfg.ChatTemplate
}

var weatherParams = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"city": map[string]any{"type": "string", "maxLength": 12},
		"unit": map[string]any{"enum": []any{"celsius", "fahrenheit"}},
	},
	"required": []any{"city", "unit"}, "additionalProperties": false,
}

var timeParams = map[string]any{
	"type":       "object",
	"properties": map[string]any{"zone": map[string]any{"type": "string", "pattern": "^[A-Z][a-z]{2,8}/[A-Z][a-z]{2,8}$"}},
	"required":   []any{"zone"}, "additionalProperties": false,
}

func weatherTools() []openai.ChatCompletionToolUnionParam {
	return []openai.ChatCompletionToolUnionParam{
		openai.ChatCompletionFunctionTool(sdkshared.FunctionDefinitionParam{Name: "get_weather", Parameters: weatherParams}),
		openai.ChatCompletionFunctionTool(sdkshared.FunctionDefinitionParam{Name: "get_time", Parameters: timeParams}),
	}
}

// TestOpenAIGoToolCalls: with Qwen3's template (the hermes syntax is
// detected in it), tool_choice required and named give tool_calls whose
// arguments validate against the function's schema, plain and streamed.
func TestOpenAIGoToolCalls(t *testing.T) {
	tmpl := qwen3Template(t)
	ts, _ := newServer(t, func(o *server.Options) { o.ChatTemplate = tmpl })
	client := sdkClient(ts.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	validators := map[string]any{"get_weather": compileValidator(t, weatherParams), "get_time": compileValidator(t, timeParams)}
	check := func(what string, calls []openai.ChatCompletionMessageToolCallUnion) {
		t.Helper()
		if len(calls) == 0 {
			t.Errorf("%s: no tool calls", what)
		}
		for _, c := range calls {
			if c.Type != "function" || !strings.HasPrefix(c.ID, "call_") {
				t.Errorf("%s: call %+v", what, c)
			}
			v, ok := validators[c.Function.Name]
			if !ok {
				t.Errorf("%s: call of unknown function %q", what, c.Function.Name)
				continue
			}
			validateJSON(t, v.(*jsonschema.Schema), c.Function.Arguments)
		}
	}
	base := openai.ChatCompletionNewParams{
		Model:       "stories260K.gguf",
		Messages:    []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What is the weather in Paris?")},
		MaxTokens:   openai.Int(1000),
		Temperature: openai.Float(1),
		Seed:        openai.Int(11),
		Tools:       weatherTools(),
		// One call per reply here; parallel calls are checked below.
		ParallelToolCalls: openai.Bool(false),
	}
	for _, tc := range []struct {
		name   string
		choice openai.ChatCompletionToolChoiceOptionUnionParam
		want   string // the only function allowed, "" for any
	}{
		{"required", openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")}, ""},
		{"named", openai.ToolChoiceOptionFunctionToolChoice(openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "get_time"}), "get_time"},
	} {
		params := base
		params.ToolChoice = tc.choice
		resp, err := client.Chat.Completions.New(ctx, params)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		c := resp.Choices[0]
		if c.FinishReason != "tool_calls" {
			t.Errorf("%s: finish %q, content %q", tc.name, c.FinishReason, c.Message.Content)
		}
		check(tc.name, c.Message.ToolCalls)
		for _, call := range c.Message.ToolCalls {
			if tc.want != "" && call.Function.Name != tc.want {
				t.Errorf("%s: called %q", tc.name, call.Function.Name)
			}
		}

		// Streamed: the SDK's accumulator rebuilds the same calls.
		stream := client.Chat.Completions.NewStreaming(ctx, params)
		// The arguments come in pieces after a first delta with the id
		// and name, as OpenAI streams them.
		var acc openai.ChatCompletionAccumulator
		pieces := map[int64]int{}
		for stream.Next() {
			chunk := stream.Current()
			for _, c := range chunk.Choices {
				for _, d := range c.Delta.ToolCalls {
					first := pieces[d.Index] == 0
					if first != (d.ID != "") || first != (d.Function.Name != "") || first != (d.Type == "function") {
						t.Errorf("%s streamed: delta %d of call %d: %s", tc.name, pieces[d.Index], d.Index, d.RawJSON())
					}
					pieces[d.Index]++
				}
			}
			acc.AddChunk(chunk)
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		for i, n := range pieces {
			if n < 3 {
				t.Errorf("%s streamed: call %d in %d deltas, want its arguments in pieces", tc.name, i, n)
			}
		}
		sc := acc.Choices[0]
		if sc.FinishReason != "tool_calls" || len(sc.Message.ToolCalls) != len(c.Message.ToolCalls) {
			t.Fatalf("%s streamed: finish %q, %d calls, want %d", tc.name, sc.FinishReason, len(sc.Message.ToolCalls), len(c.Message.ToolCalls))
		}
		for i, call := range sc.Message.ToolCalls {
			if call.Function.Name != c.Message.ToolCalls[i].Function.Name || call.Function.Arguments != c.Message.ToolCalls[i].Function.Arguments {
				t.Errorf("%s streamed call %d: %+v, plain %+v", tc.name, i, call.Function, c.Message.ToolCalls[i].Function)
			}
		}
	}

	// Two calls in parallel, after a tool result the template renders.
	// stories260K rarely draws end-of-sequence, so the reply may run to
	// its budget with a last call cut short: the complete calls count.
	params := base
	params.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")}
	params.ParallelToolCalls = openai.Bool(true)
	params.Messages = append(params.Messages,
		openai.ChatCompletionMessageParamUnion{OfAssistant: &openai.ChatCompletionAssistantMessageParam{
			ToolCalls: []openai.ChatCompletionMessageToolCallUnionParam{{OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
				ID: "call_1", Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: "get_weather", Arguments: `{"city":"Paris","unit":"celsius"}`}}}}}},
		openai.ToolMessage(`{"temperature": 21}`, "call_1"),
		openai.UserMessage("And the time in Tokyo and the weather in Rome?"))
	two := false
	for seed := int64(0); seed < 12 && !two; seed++ {
		params.Seed = openai.Int(seed)
		resp, err := client.Chat.Completions.New(ctx, params)
		if err != nil {
			t.Fatalf("%v: %s", err, errBody(err))
		}
		check("parallel", resp.Choices[0].Message.ToolCalls)
		two = len(resp.Choices[0].Message.ToolCalls) >= 2
	}
	if !two {
		t.Error("no seed of 12 gave two parallel calls")
	}

	// parallel_tool_calls false: exactly one call.
	params.ParallelToolCalls = openai.Bool(false)
	resp, err := client.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(resp.Choices[0].Message.ToolCalls); n != 1 {
		t.Errorf("parallel_tool_calls false: %d calls", n)
	}
}

// TestReasoningContent: with --reasoning-parser qwen3 a reply that thinks
// first (forced here with a regex, as stories260K does not think) is split
// into reasoning_content and content, plain and streamed; with
// separate_reasoning false it is not.
func TestReasoningContent(t *testing.T) {
	tmpl := qwen3Template(t)
	ts, _ := newServer(t, func(o *server.Options) { o.ChatTemplate = tmpl; o.ReasoningParser = "qwen3" })
	client := sdkClient(ts.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	params := openai.ChatCompletionNewParams{
		Model: "stories260K.gguf", MaxTokens: openai.Int(80), Temperature: openai.Float(0),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Think, then answer.")},
	}
	re := option.WithJSONSet("regex", `<think>\n[a-z]{2,8}( [a-z]{2,8}){1,3}\n</think>\n\n[A-Z][a-z]{2,8}\.`)
	resp, err := client.Chat.Completions.New(ctx, params, re, option.WithJSONSet("chat_template_kwargs", map[string]any{"enable_thinking": true}))
	if err != nil {
		t.Fatal(err)
	}
	msg := resp.Choices[0].Message
	var raw struct {
		ReasoningContent string `json:"reasoning_content"`
	}
	if err := json.Unmarshal([]byte(msg.RawJSON()), &raw); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(msg.Content, "think>") || raw.ReasoningContent == "" || strings.Contains(raw.ReasoningContent, "think>") || msg.Content == "" {
		t.Errorf("content %q reasoning %q", msg.Content, raw.ReasoningContent)
	}
	stream := client.Chat.Completions.NewStreaming(ctx, params, re)
	var content, reasoningText strings.Builder
	for stream.Next() {
		for _, c := range stream.Current().Choices {
			content.WriteString(c.Delta.Content)
			var d struct {
				ReasoningContent string `json:"reasoning_content"`
			}
			if json.Unmarshal([]byte(c.Delta.RawJSON()), &d) == nil {
				reasoningText.WriteString(d.ReasoningContent)
			}
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if content.String() != msg.Content || reasoningText.String() != raw.ReasoningContent {
		t.Errorf("streamed %q / %q, plain %q / %q", reasoningText.String(), content.String(), raw.ReasoningContent, msg.Content)
	}
	whole, err := client.Chat.Completions.New(ctx, params, re, option.WithJSONSet("separate_reasoning", false))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(whole.Choices[0].Message.Content, "<think>") {
		t.Errorf("separate_reasoning false: %q", whole.Choices[0].Message.Content)
	}
}

// errBody is the answer of a failed SDK call, for messages.
func errBody(err error) string {
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		return apiErr.RawJSON()
	}
	return ""
}

// TestToolCallSyntaxes forces calls in each family's syntax
// (--tool-call-parser with the stories template, which renders no tools)
// and reads them back: the grammar and the parser agree for every format.
func TestToolCallSyntaxes(t *testing.T) {
	validators := map[string]*jsonschema.Schema{"get_weather": compileValidator(t, weatherParams), "get_time": compileValidator(t, timeParams)}
	for _, parser := range []string{"mistral", "llama3", "hermes", "deepseekv3"} {
		t.Run(parser, func(t *testing.T) {
			ts, _ := newServer(t, func(o *server.Options) { o.ToolCallParser = parser })
			client := sdkClient(ts.URL)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			params := openai.ChatCompletionNewParams{
				Model: "stories260K.gguf", MaxTokens: openai.Int(600), Temperature: openai.Float(0),
				Messages:   []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather?")},
				Tools:      weatherTools(),
				ToolChoice: openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")},
			}
			// One call: stories260K rarely ends a list of calls before its
			// budget, and a cut Mistral or Llama list parses as text.
			for _, parallel := range []bool{false} {
				params.ParallelToolCalls = openai.Bool(parallel)
				resp, err := client.Chat.Completions.New(ctx, params)
				if err != nil {
					t.Fatalf("%v: %s", err, errBody(err))
				}
				calls := resp.Choices[0].Message.ToolCalls
				if len(calls) == 0 || !parallel && len(calls) != 1 {
					t.Fatalf("parallel %v: %d calls, finish %q, content %q", parallel, len(calls), resp.Choices[0].FinishReason, resp.Choices[0].Message.Content)
				}
				if resp.Choices[0].FinishReason == "tool_calls" && resp.Choices[0].Message.Content != "" {
					t.Errorf("content beside the calls: %q", resp.Choices[0].Message.Content)
				}
				for _, c := range calls {
					v, ok := validators[c.Function.Name]
					if !ok {
						t.Fatalf("call of %q", c.Function.Name)
					}
					validateJSON(t, v, c.Function.Arguments)
				}
			}
		})
	}
}
