package server

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/gosling-ai/gosling/grammar"
	"github.com/gosling-ai/gosling/reasoning"
	"github.com/gosling-ai/gosling/toolcall"
)

// Tool calling and reasoning on /v1/chat/completions. The tools are
// rendered through the chat template; the model writes calls in its
// family's syntax (toolcall.Format, from --tool-call-parser or detected in
// the template), which is parsed out of the reply into tool_calls.
// tool_choice "required" and a named function are enforced by a grammar
// of that syntax whose arguments follow each function's schema.
// --reasoning-parser splits <think> blocks into reasoning_content.

type toolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function toolFunction `json:"function"`
}

type toolFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// toolCallDelta is a streamed piece of a call: the first has the id, type
// and name, the others only the index and the next arguments piece.
type toolCallDelta struct {
	Index    int               `json:"index"`
	ID       string            `json:"id,omitempty"`
	Type     string            `json:"type,omitempty"`
	Function toolFunctionDelta `json:"function"`
}

type toolFunctionDelta struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// toolPlan is what a chat request's tools ask of the generation.
type toolPlan struct {
	render  json.RawMessage   // tools for the template (nil: none)
	format  *toolcall.Format  // nil: replies are not parsed for calls
	grammar *grammar.Compiled // forced calls, or nil
	// keep: the format's opening marker when the tokenizer has it as a
	// special token (Mistral's [TOOL_CALLS] is a control token), kept in
	// the output text that the parser reads even when special tokens are
	// skipped.
	keep []int
}

// resolveOutputParsers sets the tool-call and reasoning parsers from the
// options, detecting the tool-call syntax in the chat template when unset.
func (s *Server) resolveOutputParsers() error {
	if s.opts.ToolCallParser != "" {
		f, err := toolcall.Lookup(s.opts.ToolCallParser)
		if err != nil {
			return err
		}
		s.toolFormat = f
	} else {
		source := s.opts.ChatTemplate
		if data, err := os.ReadFile(source); err == nil {
			source = string(data)
		}
		if source == "" && s.eng.Tokenizer() != nil {
			source = s.eng.Tokenizer().ChatTemplateSource()
		}
		s.toolFormat = toolcall.Detect(source)
	}
	if s.opts.ReasoningParser != "" {
		p, err := reasoning.Lookup(s.opts.ReasoningParser)
		if err != nil {
			return err
		}
		s.reasoning = p
	}
	return nil
}

// planTools checks tools, tool_choice and parallel_tool_calls.
func (s *Server) planTools(tools, choice json.RawMessage, parallel *bool) (*toolPlan, *apiError) {
	plan := &toolPlan{}
	if isNull(tools) {
		if !isNull(choice) {
			return nil, badRequest("tool_choice", codeInvalidValue, "tool_choice is only allowed when tools are given")
		}
		if parallel != nil {
			return nil, badRequest("parallel_tool_calls", codeInvalidValue, "parallel_tool_calls is only allowed when tools are given")
		}
		return plan, nil
	}
	var list []json.RawMessage
	if json.Unmarshal(tools, &list) != nil {
		return nil, wrongType("tools", "a list of tools", rawKind(tools))
	}
	if len(list) == 0 {
		return nil, badRequest("tools", codeInvalidValue, "tools must not be empty; leave the field out instead")
	}
	specs := make([]grammar.ToolSpec, len(list))
	for i, raw := range list {
		at := fmt.Sprintf("tools[%d]", i)
		var t struct {
			Type     string `json:"type"`
			Function *struct {
				Name       string          `json:"name"`
				Parameters json.RawMessage `json:"parameters"`
			} `json:"function"`
		}
		if json.Unmarshal(raw, &t) != nil {
			return nil, wrongType(at, "an object", rawKind(raw))
		}
		if t.Type != "function" {
			return nil, badRequest(at+".type", codeInvalidValue, `%s.type must be "function", got %q`, at, t.Type)
		}
		if t.Function == nil || t.Function.Name == "" {
			return nil, badRequest(at+".function.name", codeMissing, "%s.function.name is required", at)
		}
		specs[i] = grammar.ToolSpec{Name: t.Function.Name}
		if !isNull(t.Function.Parameters) {
			specs[i].Parameters = t.Function.Parameters
		}
	}
	mode := "auto"
	var named string
	if !isNull(choice) {
		if str, ok := decodeAs[string](choice); ok {
			if str != "none" && str != "auto" && str != "required" {
				return nil, badRequest("tool_choice", codeInvalidValue, `tool_choice must be "none", "auto", "required" or {"type": "function", "function": {"name": ...}}, got %q`, str)
			}
			mode = str
		} else {
			var obj struct {
				Type     string `json:"type"`
				Function struct {
					Name string `json:"name"`
				} `json:"function"`
			}
			if json.Unmarshal(choice, &obj) != nil || obj.Type != "function" || obj.Function.Name == "" {
				return nil, badRequest("tool_choice", codeInvalidValue, `tool_choice must be "none", "auto", "required" or {"type": "function", "function": {"name": ...}}`)
			}
			mode, named = "named", obj.Function.Name
			found := false
			for _, sp := range specs {
				if sp.Name == named {
					found = true
				}
			}
			if !found {
				return nil, badRequest("tool_choice", codeInvalidValue, "tool_choice names the function %q, which is not in tools", named)
			}
		}
	}
	if mode == "none" {
		return plan, nil // the model is not told of the tools
	}
	plan.render = tools
	plan.format = s.toolFormat
	if tok := s.eng.Tokenizer(); s.toolFormat != nil && tok != nil {
		if id, ok := tok.TokenID(s.toolFormat.Start); ok && tok.IsSpecial(id) {
			plan.keep = []int{id}
		}
	}
	if mode == "auto" {
		return plan, nil
	}
	if s.toolFormat == nil {
		return nil, badRequest("tool_choice", codeUnsupported, "tool_choice %q needs the model's tool-call syntax, and its chat template shows none; start the server with --tool-call-parser", mode)
	}
	forced := specs
	if mode == "named" {
		forced = nil
		for _, sp := range specs {
			if sp.Name == named {
				forced = append(forced, sp)
			}
		}
	}
	par := mode == "required" && (parallel == nil || *parallel)
	key := fmt.Sprintf("tools\x00%s\x00%v\x00%s\x00%s", s.toolFormat.Name, par, named, tools)
	if c := s.grammars.get(key); c != nil {
		plan.grammar = c
		return plan, nil
	}
	g, err := grammar.ToolCalls(forced, s.toolFormat.Syntax, par, grammar.JSONOptions{MaxWhitespace: generationWhitespace})
	if err != nil {
		code := codeInvalidValue
		if _, ok := err.(*grammar.UnsupportedError); ok || strings.Contains(err.Error(), "unsupported") {
			code = codeUnsupported
		}
		return nil, badRequest("tools", code, "tools: %v", err)
	}
	vocab, verr := s.eng.GrammarVocab()
	if verr == nil && len(plan.keep) > 0 {
		// The marker is a control token: the grammar spells it with that
		// id (as the model was trained to write it) or as text.
		vocab, verr = vocab.WithSpecial(map[int]string{plan.keep[0]: s.toolFormat.Start})
	}
	if verr != nil {
		return nil, badRequest("tool_choice", codeUnsupported, "%v", verr)
	}
	plan.grammar = grammar.Compile(g, vocab)
	plan.grammar.Warm() // as compileConstraint does
	s.grammars.put(key, plan.grammar)
	return plan, nil
}

// replyShaper turns a choice's generated text into the message fields:
// reasoning_content, content and tool_calls, whole or streamed.
type replyShaper struct {
	reasoning *reasoning.Streamer // nil: no reasoning split
	tools     *toolcall.Streamer  // nil: no tool-call parsing
	format    *toolcall.Format
	ids       []string // the id of each call given out
}

func (s *Server) newReplyShaper(plan *toolPlan, separateReasoning bool) *replyShaper {
	sh := &replyShaper{format: plan.format}
	if s.reasoning != nil && separateReasoning {
		sh.reasoning = s.reasoning.NewStreamer()
	}
	if plan.format != nil {
		sh.tools = plan.format.NewStreamer()
	}
	return sh
}

// calls is the number of tool calls given out so far.
func (sh *replyShaper) calls() int { return len(sh.ids) }

// split separates reasoning from the answer.
func (sh *replyShaper) split(text string, final bool) (reasoningText, answer string) {
	if sh.reasoning == nil {
		return "", text
	}
	reasoningText, answer = sh.reasoning.Push(text)
	if final {
		r, a := sh.reasoning.Finish()
		reasoningText += r
		answer += a
	}
	return reasoningText, answer
}

// push takes a text delta and returns the final parts: a call's first
// delta has its id, type and name, the next ones pieces of its arguments,
// as OpenAI streams them.
func (sh *replyShaper) push(text string, final bool) (reasoningText, content string, calls []toolCallDelta) {
	reasoningText, answer := sh.split(text, final)
	if sh.tools == nil {
		return reasoningText, answer, nil
	}
	content, deltas := sh.tools.Push(answer)
	if final {
		c, more := sh.tools.Finish()
		content += c
		deltas = append(deltas, more...)
	}
	for _, d := range deltas {
		cd := toolCallDelta{Index: d.Index, Function: toolFunctionDelta{Arguments: d.Arguments}}
		if d.Index == len(sh.ids) {
			sh.ids = append(sh.ids, sh.format.CallID())
			cd.ID, cd.Type, cd.Function.Name = sh.ids[d.Index], "function", d.Name
		}
		calls = append(calls, cd)
	}
	return reasoningText, content, calls
}

// message builds a whole reply.
func (sh *replyShaper) message(text string) chatMessage {
	r, answer := sh.split(text, true)
	c := answer
	var calls []toolCall
	if sh.format != nil {
		var parsed []toolcall.Call
		c, parsed = sh.format.Parse(answer)
		for _, p := range parsed {
			sh.ids = append(sh.ids, sh.format.CallID())
			calls = append(calls, toolCall{ID: sh.ids[len(sh.ids)-1], Type: "function", Function: toolFunction{Name: p.Name, Arguments: p.Arguments}})
		}
	}
	m := chatMessage{Role: "assistant"}
	if c != "" || len(calls) == 0 {
		m.Content = &c
	}
	if r != "" {
		m.ReasoningContent = &r
	}
	m.ToolCalls = calls
	return m
}
