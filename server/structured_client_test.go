package server_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// personSchema is bounded everywhere, so that even stories260K (which has
// never seen JSON) finishes it within the token budget.
var personSchema = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"name": map[string]any{"type": "string", "maxLength": 10},
		"age":  map[string]any{"type": "integer", "minimum": 0, "maximum": 120},
		"pet":  map[string]any{"enum": []any{"cat", "dog", "fish"}},
	},
	"required":             []any{"name", "age", "pet"},
	"additionalProperties": false,
}

func compileValidator(t *testing.T, schema any) *jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	if err := c.AddResource("schema.json", schema); err != nil {
		t.Fatal(err)
	}
	v, err := c.Compile("schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func validateJSON(t *testing.T, v *jsonschema.Schema, text string) {
	t.Helper()
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		t.Errorf("output is not JSON: %q: %v", text, err)
		return
	}
	if err := v.Validate(inst); err != nil {
		t.Errorf("output %q does not validate: %v", text, err)
	}
}

// TestOpenAIGoStructuredOutput: response_format json_schema (strict) and
// json_object through OpenAI's Go SDK, greedy and sampled, plain and
// streamed; SGLang's regex extra on /v1/completions.
func TestOpenAIGoStructuredOutput(t *testing.T) {
	ts, _ := newServer(t)
	client := sdkClient(ts.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	validator := compileValidator(t, personSchema)
	format := openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &openai.ResponseFormatJSONSchemaParam{
		JSONSchema: openai.ResponseFormatJSONSchemaJSONSchemaParam{Name: "person", Schema: personSchema, Strict: openai.Bool(true)},
	}}
	for _, temp := range []float64{0, 1} {
		params := storyChat(300)
		params.Temperature = openai.Float(temp)
		params.Seed = openai.Int(7)
		params.ResponseFormat = format
		resp, err := client.Chat.Completions.New(ctx, params)
		if err != nil {
			t.Fatalf("T=%v: %v", temp, err)
		}
		c := resp.Choices[0]
		if c.FinishReason != "stop" {
			t.Errorf("T=%v: finish %q: %q", temp, c.FinishReason, c.Message.Content)
		}
		validateJSON(t, validator, c.Message.Content)

		stream := client.Chat.Completions.NewStreaming(ctx, params)
		var streamed strings.Builder
		for stream.Next() {
			for _, ch := range stream.Current().Choices {
				streamed.WriteString(ch.Delta.Content)
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if streamed.String() != c.Message.Content {
			t.Errorf("T=%v: streamed %q, plain %q", temp, streamed.String(), c.Message.Content)
		}
	}

	params := storyChat(400)
	params.ResponseFormat = openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &openai.ResponseFormatJSONObjectParam{}}
	resp, err := client.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if text := resp.Choices[0].Message.Content; !strings.HasPrefix(strings.TrimSpace(text), "{") {
		t.Errorf("json_object: %q", text)
	}

	re := `(Lily|Tom) (is|was) [0-9]{1,2} years old\.`
	comp, err := client.Completions.New(ctx, openai.CompletionNewParams{
		Model: "stories260K.gguf", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
		MaxTokens: openai.Int(60), Temperature: openai.Float(1), Seed: openai.Int(3),
	}, option.WithJSONSet("regex", re))
	if err != nil {
		t.Fatal(err)
	}
	if text := comp.Choices[0].Text; !regexp.MustCompile("^" + re + "$").MatchString(text) {
		t.Errorf("regex: %q does not match %s", text, re)
	}
}

// TestGenerateConstraints: SGLang's sampling_params.json_schema (as a
// string, SGLang's form), regex and ebnf on /generate.
func TestGenerateConstraints(t *testing.T) {
	ts, _ := newServer(t)
	validator := compileValidator(t, personSchema)
	schema := `{"type":"object","properties":{"name":{"type":"string","maxLength":10},"age":{"type":"integer","minimum":0,"maximum":120},"pet":{"enum":["cat","dog","fish"]}},"required":["name","age","pet"],"additionalProperties":false}`
	status, out := call(t, "POST", ts.URL+"/generate", map[string]any{
		"text": "Lily", "sampling_params": map[string]any{"json_schema": schema, "max_new_tokens": 300, "temperature": 0},
	})
	if status != 200 {
		t.Fatalf("json_schema: %d %v", status, out)
	}
	validateJSON(t, validator, out["text"].(string))

	ebnf := "root ::= animal \" \" verb \" \" [a-z]{2,6} \".\"\nanimal ::= \"cat\" | \"dog\"\nverb ::= \"ran\" | \"sat\"\n"
	status, out = call(t, "POST", ts.URL+"/generate", map[string]any{
		"text": "Lily", "sampling_params": map[string]any{"ebnf": ebnf, "max_new_tokens": 40, "temperature": 1, "sampling_seed": 5},
	})
	if status != 200 {
		t.Fatalf("ebnf: %d %v", status, out)
	}
	if text := out["text"].(string); !regexp.MustCompile(`^(cat|dog) (ran|sat) [a-z]{2,6}\.$`).MatchString(text) {
		t.Errorf("ebnf output %q", text)
	}
}
