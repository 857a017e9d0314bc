package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/grammar"
	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/model/random"
	"github.com/gosling-ai/gosling/sample"
	"github.com/gosling-ai/gosling/tensor"
)

// TestMistralControlMarker: with a Mistral tokenizer whose [TOOL_CALLS]
// is a control token (the shared Mistral tokenizer with v3's control
// tokens added, as its tokenizer.json lists them), a reply that opens
// with that token id is read as a tool call although the output text
// skips special tokens; without the kept marker the same ids decode to a
// bare list, which is not a call. With the token as plain text (the
// shared tokenizer as it is), nothing is kept.
func TestMistralControlMarker(t *testing.T) {
	tools := json.RawMessage(`[{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
		"properties": {"city": {"type": "string"}}, "required": ["city"]}}}]`)
	for _, control := range []bool{true, false} {
		s, eng, marker := mistralServer(t, control)
		plan, apiErr := s.planTools(tools, nil, nil)
		if apiErr != nil {
			t.Fatal(apiErr)
		}
		if plan.format == nil || plan.format.Name != "mistral" {
			t.Fatalf("control %v: format %+v, want mistral detected from the template", control, plan.format)
		}
		tok := eng.Tokenizer()
		if !control {
			if len(plan.keep) != 0 {
				t.Errorf("[TOOL_CALLS] is text in this tokenizer, but the plan keeps ids %v", plan.keep)
			}
			continue
		}
		if len(plan.keep) != 1 || plan.keep[0] != marker || !tok.IsSpecial(marker) {
			t.Fatalf("plan keeps %v, want the control token %d", plan.keep, marker)
		}
		prompt := tok.Encode("[INST] What is the weather in Paris? [/INST]", true)
		reply := append([]int{marker}, tok.Encode(` [{"name": "get_weather", "arguments": {"city": "Paris"}}]`, false)...)
		for _, keep := range [][]int{plan.keep, nil} {
			// The engine's detokenizer for a request whose sampling
			// params keep these ids (engine/sequence.go).
			stream := tok.NewDecodeStreamAfter(prompt, true)
			for _, id := range keep {
				stream.Keep(id)
			}
			sh := s.newReplyShaper(plan, true)
			var text strings.Builder
			var calls []toolCallDelta
			for i, id := range reply {
				piece := stream.Push(id)
				if i == len(reply)-1 {
					piece += stream.Flush()
				}
				text.WriteString(piece)
				_, _, cs := sh.push(piece, i == len(reply)-1)
				calls = append(calls, cs...)
			}
			whole := s.newReplyShaper(plan, true).message(text.String())
			if keep == nil {
				if len(calls) != 0 || len(whole.ToolCalls) != 0 || strings.Contains(text.String(), "[TOOL_CALLS]") {
					t.Errorf("marker skipped: text %q read as calls %+v / %+v", text.String(), calls, whole.ToolCalls)
				}
				continue
			}
			if len(whole.ToolCalls) != 1 || whole.ToolCalls[0].Function.Name != "get_weather" || whole.ToolCalls[0].Function.Arguments != `{"city": "Paris"}` {
				t.Errorf("text %q: calls %+v", text.String(), whole.ToolCalls)
			}
			args := ""
			for _, c := range calls {
				args += c.Function.Arguments
			}
			if len(calls) == 0 || calls[0].Function.Name != "get_weather" || args != `{"city": "Paris"}` {
				t.Errorf("streamed: %+v (arguments %q)", calls, args)
			}
		}
	}
}

// mistralServer is a server over a random model with the shared Mistral
// tokenizer and its v3 tool template; with control, v3's control tokens
// are added to the tokenizer (random.AddControlTokens) and marker is
// [TOOL_CALLS]'s id (-1 without).
func mistralServer(t *testing.T, control bool) (s *Server, eng *engine.Engine, marker int) {
	t.Helper()
	tmpl, err := os.ReadFile(filepath.Join("testdata", "templates", "mistral_v3_tools.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "random")
	shape := random.Presets["stories260K"]
	shape.Vocab, shape.Layers = 32768, 1
	if err := random.Write(dir, random.Options{Shape: shape, Format: "hf", DType: tensor.F32, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	if err := random.CopyTokenizer(dir, shared.Path(t, "tokenizers/mistral")); err != nil {
		t.Fatal(err)
	}
	marker = -1
	if control {
		ids, err := random.AddControlTokens(dir, []string{"[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_CALLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]"})
		if err != nil {
			t.Fatal(err)
		}
		marker = ids[2]
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	eng, err = engine.New(engine.Config{ModelPath: dir, MaxRunningRequests: 2, KVCacheTokens: 4096, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	s, err = New(eng, Options{ChatTemplate: string(tmpl), ServedModelName: "random", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return s, eng, marker
}

// TestMistralControlMarkerForced: tool_choice "required" and a named
// function with a Mistral tokenizer whose [TOOL_CALLS] is a control token.
// The forced grammar may open the call with the control token's id (as
// the model was trained to write it) or spell the marker as text; after
// the id, a call valid against the schema is accepted to its end. Over
// HTTP, the replies of a random model under the grammar (each opening
// with either) parse into calls whose arguments validate.
func TestMistralControlMarkerForced(t *testing.T) {
	s, eng, marker := mistralServer(t, true)
	tools := json.RawMessage(`[{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
		"properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"], "additionalProperties": false}}}]`)
	tok := eng.Tokenizer()
	base, err := eng.GrammarVocab()
	if err != nil {
		t.Fatal(err)
	}
	if len(base.Token(marker)) != 0 {
		t.Fatalf("the engine's vocabulary spells the control token %d: %q", marker, base.Token(marker))
	}
	for _, choice := range []string{`"required"`, `{"type": "function", "function": {"name": "get_weather"}}`} {
		plan, apiErr := s.planTools(tools, json.RawMessage(choice), nil)
		if apiErr != nil {
			t.Fatal(apiErr)
		}
		if plan.grammar == nil || plan.grammar.Vocab().Base() != base {
			t.Fatalf("%s: no forced grammar over the engine's vocabulary", choice)
		}
		m := plan.grammar.NewMatcher()
		mask := make([]uint64, base.MaskWords())
		m.FillMask(mask)
		bracket := -1 // the token "[", which spells the marker as text
		for id := range base.Size() {
			if string(base.Token(id)) == "[" {
				bracket = id
			}
		}
		if !grammar.MaskAllows(mask, marker) || !grammar.MaskAllows(mask, bracket) {
			t.Fatalf("%s: the first mask allows the control token: %v, \"[\" (%d): %v", choice, grammar.MaskAllows(mask, marker), bracket, grammar.MaskAllows(mask, bracket))
		}
		// SentencePiece's dummy prefix spells the blank after the marker.
		reply := append([]int{marker}, tok.Encode(`[{"name": "get_weather", "arguments": {"city": "Paris"}}]`, false)...)
		for i, id := range reply {
			m.FillMask(mask)
			if !grammar.MaskAllows(mask, id) || !m.AcceptToken(id) {
				t.Fatalf("%s: token %d %q (%d of the reply) refused", choice, id, base.Token(id), i)
			}
		}
		if !m.CanEnd() {
			t.Errorf("%s: the call is not complete after the reply", choice)
		}
	}

	validator := jsonschema.NewCompiler()
	if err := validator.AddResource("args.json", map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string", "maxLength": 12}},
		"required": []any{"city"}, "additionalProperties": false}); err != nil {
		t.Fatal(err)
	}
	args, err := validator.Compile("args.json")
	if err != nil {
		t.Fatal(err)
	}
	validArgs := func(what, text string) {
		t.Helper()
		inst, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
		if err == nil {
			err = args.Validate(inst)
		}
		if err != nil {
			t.Errorf("%s: arguments %q: %v", what, text, err)
		}
	}

	// Generated under the grammar (random weights, sampled): replies open
	// with the control token or with "[", and both read as the call.
	one := false
	plan, apiErr := s.planTools(tools, json.RawMessage(`"required"`), &one)
	if apiErr != nil {
		t.Fatal(apiErr)
	}
	prompt := tok.Encode("[INST] What is the weather in Paris? [/INST]", true)
	withMarker := 0
	for seed := range uint64(8) {
		p := sample.DefaultParams()
		p.MaxNewTokens, p.Seed, p.KeepSpecial = 300, &seed, plan.keep
		res, err := eng.Generate(context.Background(), engine.Request{InputIDs: prompt, Sampling: p, Grammar: plan.grammar})
		if err != nil {
			t.Fatal(err)
		}
		if res.OutputIDs[0] == marker {
			withMarker++
		}
		msg := s.newReplyShaper(plan, true).message(res.Text)
		if len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Function.Name != "get_weather" {
			t.Errorf("seed %d: %q (first id %d) is not one call: %+v", seed, res.Text, res.OutputIDs[0], msg.ToolCalls)
			continue
		}
		validArgs(fmt.Sprintf("seed %d", seed), msg.ToolCalls[0].Function.Arguments)
	}
	if withMarker == 0 {
		t.Errorf("no reply of 8 opened with the control token %d", marker)
	}
	t.Logf("%d of 8 replies opened with the control token", withMarker)

	ts := httptest.NewServer(s)
	defer ts.Close()
	for seed := range 4 {
		for _, choice := range []string{`"required"`, `{"type": "function", "function": {"name": "get_weather"}}`} {
			body := fmt.Sprintf(`{"model": "random", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": %s,
				"tool_choice": %s, "parallel_tool_calls": false, "temperature": 1, "seed": %d, "max_tokens": 300}`, tools, choice, seed)
			resp, err := http.Post(ts.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var out struct {
				Choices []struct {
					FinishReason string `json:"finish_reason"`
					Message      struct {
						Content   *string    `json:"content"`
						ToolCalls []toolCall `json:"tool_calls"`
					} `json:"message"`
				} `json:"choices"`
			}
			if resp.StatusCode != http.StatusOK || json.Unmarshal(data, &out) != nil || len(out.Choices) != 1 {
				t.Fatalf("seed %d %s: %d %s", seed, choice, resp.StatusCode, data)
			}
			c := out.Choices[0]
			if c.FinishReason != "tool_calls" || len(c.Message.ToolCalls) != 1 || c.Message.ToolCalls[0].Function.Name != "get_weather" {
				t.Errorf("seed %d %s: %s", seed, choice, data)
				continue
			}
			validArgs(fmt.Sprintf("seed %d %s", seed, choice), c.Message.ToolCalls[0].Function.Arguments)
		}
	}
}
