package server_test

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/model/random"
	"github.com/gosling-ai/gosling/server"
	"github.com/gosling-ai/gosling/tensor"
)

// toolTemplates are published chat templates that render tools and tool
// calls, kept in testdata/templates: Llama 3.1 Instruct's (JSON calls,
// tools in the first user message) and Mistral's v3 (a [TOOL_CALLS] list,
// call ids of nine letters and digits), each with its family's tokenizer
// from ../shared and that tokenizer's vocabulary size.
var toolTemplates = []struct {
	name, file, idPrefix, tokenizer string
	vocab                           int
}{
	{"llama3.1", "llama3.1_tools.jinja", "call_", "llama3", 128256},
	{"mistral", "mistral_v3_tools.jinja", "", "mistral", 32000},
}

// randomServer serves a random-weight model of stories260K's body with
// the vocabulary and tokenizer of ../shared/tokenizers/tokenizer, rendering
// chats with tmpl. Its next token is anything the grammar allows, so
// lists of calls end as often as they go on.
func randomServer(t *testing.T, tokenizer string, vocab int, tmpl string) *httptest.Server {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "random")
	shape := random.Presets["stories260K"]
	shape.Vocab, shape.SeqLen, shape.Layers = vocab, 4096, 2
	if err := random.Write(dir, random.Options{Shape: shape, Format: "hf", DType: tensor.F32, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	if err := random.CopyTokenizer(dir, shared.Path(t, "tokenizers/"+tokenizer)); err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(engine.Config{ModelPath: dir, MaxRunningRequests: 4, KVCacheTokens: 4 * 4096, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	srv, err := server.New(eng, server.Options{ChatTemplate: tmpl, ServedModelName: "random", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return ts
}

func readTemplate(t *testing.T, file string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "templates", file))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestToolCallTemplates: with each published tool template (the parser
// detected from it), tool_choice required and named give calls whose
// arguments validate against the function's schema, plain and streamed
// alike; a conversation carrying the call and its result (role "tool")
// renders through the template and is answered.
func TestToolCallTemplates(t *testing.T) {
	validators := map[string]*jsonschema.Schema{"get_weather": compileValidator(t, weatherParams), "get_time": compileValidator(t, timeParams)}
	for _, tt := range toolTemplates {
		t.Run(tt.name, func(t *testing.T) {
			tmpl := readTemplate(t, tt.file)
			ts := randomServer(t, tt.tokenizer, tt.vocab, tmpl)
			client := sdkClient(ts.URL)
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			check := func(what string, calls []openai.ChatCompletionMessageToolCallUnion) {
				t.Helper()
				if len(calls) == 0 {
					t.Errorf("%s: no tool calls", what)
				}
				for _, c := range calls {
					if c.Type != "function" || !strings.HasPrefix(c.ID, tt.idPrefix) {
						t.Errorf("%s: call %+v", what, c)
					}
					v, ok := validators[c.Function.Name]
					if !ok {
						t.Errorf("%s: call of unknown function %q", what, c.Function.Name)
						continue
					}
					validateJSON(t, v, c.Function.Arguments)
				}
			}
			params := openai.ChatCompletionNewParams{
				Model:             "random",
				Messages:          []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What is the weather in Paris?")},
				MaxTokens:         openai.Int(600),
				Temperature:       openai.Float(1),
				Seed:              openai.Int(5),
				Tools:             weatherTools(),
				ParallelToolCalls: openai.Bool(false),
			}
			var first openai.ChatCompletionMessageToolCallUnion
			for _, tc := range []struct {
				name   string
				choice openai.ChatCompletionToolChoiceOptionUnionParam
				want   string
			}{
				{"required", openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")}, ""},
				{"named", openai.ToolChoiceOptionFunctionToolChoice(openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "get_weather"}), "get_weather"},
			} {
				p := params
				p.ToolChoice = tc.choice
				resp, err := client.Chat.Completions.New(ctx, p)
				if err != nil {
					t.Fatalf("%s: %v: %s", tc.name, err, errBody(err))
				}
				c := resp.Choices[0]
				if c.FinishReason != "tool_calls" || len(c.Message.ToolCalls) != 1 {
					t.Fatalf("%s: finish %q, %d calls, content %q", tc.name, c.FinishReason, len(c.Message.ToolCalls), c.Message.Content)
				}
				check(tc.name, c.Message.ToolCalls)
				if tc.want != "" && c.Message.ToolCalls[0].Function.Name != tc.want {
					t.Errorf("%s: called %q", tc.name, c.Message.ToolCalls[0].Function.Name)
				}
				first = c.Message.ToolCalls[0]

				stream := client.Chat.Completions.NewStreaming(ctx, p)
				var acc openai.ChatCompletionAccumulator
				for stream.Next() {
					acc.AddChunk(stream.Current())
				}
				if err := stream.Err(); err != nil {
					t.Fatal(err)
				}
				sc := acc.Choices[0]
				if sc.FinishReason != "tool_calls" || len(sc.Message.ToolCalls) != 1 || sc.Message.ToolCalls[0].Function.Name != c.Message.ToolCalls[0].Function.Name || sc.Message.ToolCalls[0].Function.Arguments != c.Message.ToolCalls[0].Function.Arguments {
					t.Errorf("%s streamed: finish %q, calls %+v, plain %+v", tc.name, sc.FinishReason, sc.Message.ToolCalls, c.Message.ToolCalls)
				}
				check(tc.name+" streamed", sc.Message.ToolCalls)
			}

			// The call and its result go back through the template, with
			// the id the server gave (Mistral's asks for nine characters).
			p := params
			p.MaxTokens = openai.Int(300)
			p.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")}
			p.Messages = append(p.Messages,
				openai.ChatCompletionMessageParamUnion{OfAssistant: &openai.ChatCompletionAssistantMessageParam{
					ToolCalls: []openai.ChatCompletionMessageToolCallUnionParam{{OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
						ID: first.ID, Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: first.Function.Name, Arguments: first.Function.Arguments}}}}}},
				openai.ToolMessage(`{"temperature": 21}`, first.ID))
			resp, err := client.Chat.Completions.New(ctx, p)
			if err != nil {
				t.Fatalf("after a tool result: %v: %s", err, errBody(err))
			}
			check("after a tool result", resp.Choices[0].Message.ToolCalls)

			// Two calls in one reply.
			p = params
			p.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")}
			p.ParallelToolCalls = openai.Bool(true)
			two := false
			for seed := int64(0); seed < 12 && !two; seed++ {
				p.Seed = openai.Int(seed)
				resp, err := client.Chat.Completions.New(ctx, p)
				if err != nil {
					t.Fatalf("parallel: %v: %s", err, errBody(err))
				}
				if calls := resp.Choices[0].Message.ToolCalls; len(calls) > 0 {
					check("parallel", calls)
					two = len(calls) >= 2
				}
			}
			if !two {
				t.Error("no seed of 12 gave two parallel calls")
			}
		})
	}
}
