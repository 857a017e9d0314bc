package server

import (
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/model/random"
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
	tmpl, err := os.ReadFile(filepath.Join("testdata", "templates", "mistral_v3_tools.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	tools := json.RawMessage(`[{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
		"properties": {"city": {"type": "string"}}, "required": ["city"]}}}]`)
	for _, control := range []bool{true, false} {
		dir := filepath.Join(t.TempDir(), "random")
		shape := random.Presets["stories260K"]
		shape.Vocab, shape.Layers = 32768, 1
		if err := random.Write(dir, random.Options{Shape: shape, Format: "hf", DType: tensor.F32, Seed: 1}); err != nil {
			t.Fatal(err)
		}
		if err := random.CopyTokenizer(dir, shared.Path(t, "tokenizers/mistral")); err != nil {
			t.Fatal(err)
		}
		marker := -1
		if control {
			ids, err := random.AddControlTokens(dir, []string{"[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_CALLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]"})
			if err != nil {
				t.Fatal(err)
			}
			marker = ids[2]
		}
		quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
		eng, err := engine.New(engine.Config{ModelPath: dir, MaxRunningRequests: 1, KVCacheTokens: 1024, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		defer eng.Close()
		s, err := New(eng, Options{ChatTemplate: string(tmpl), ServedModelName: "random", Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
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
