// Package toolcall reads the tool calls a model writes in its own format
// (Qwen/Hermes <tool_call> blocks, Mistral's [TOOL_CALLS] list, Llama 3's
// JSON) out of its output, whole or streamed, and gives the grammar that
// forces calls in that format (tool_choice "required" or a named function).
package toolcall

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/gosling-ai/gosling/grammar"
)

// Call is one parsed tool call: a function name and its arguments as JSON
// text (what OpenAI's function.arguments carries).
type Call struct {
	Name      string
	Arguments string
}

// Format is one model family's tool-call syntax.
type Format struct {
	Name   string
	Syntax grammar.ToolCallSyntax
	// Start is the text that opens the calls; content before it is text.
	Start string
}

var formats = map[string]*Format{
	// Qwen 2.5/3 and Hermes: one <tool_call> block per call.
	"hermes": {Name: "hermes", Start: "<tool_call>", Syntax: grammar.ToolCallSyntax{
		CallBegin: "<tool_call>\n", CallEnd: "\n</tool_call>", Sep: "\n", ArgsKey: "arguments"}},
	// Mistral: [TOOL_CALLS] followed by a JSON list.
	"mistral": {Name: "mistral", Start: "[TOOL_CALLS]", Syntax: grammar.ToolCallSyntax{
		ListBegin: "[TOOL_CALLS] [", ListEnd: "]", Sep: ", ", ArgsKey: "arguments"}},
	// Llama 3.1/3.2 JSON tool calling: the whole reply is the call(s).
	"llama3": {Name: "llama3", Start: "{", Syntax: grammar.ToolCallSyntax{Sep: "; ", ArgsKey: "parameters"}},
}

func init() {
	formats["qwen25"] = formats["hermes"]
	formats["qwen3"] = formats["hermes"]
}

// Lookup returns the named format (hermes, qwen25, qwen3, mistral, llama3).
func Lookup(name string) (*Format, error) {
	if f, ok := formats[name]; ok {
		return f, nil
	}
	var names []string
	for n := range formats {
		names = append(names, n)
	}
	sort.Strings(names)
	return nil, fmt.Errorf("unknown tool-call parser %q; choose one of %s", name, strings.Join(names, ", "))
}

// Detect picks the format a chat template renders tool calls in, nil when
// it shows none.
func Detect(template string) *Format {
	switch {
	case strings.Contains(template, "<tool_call>"):
		return formats["hermes"]
	case strings.Contains(template, "[TOOL_CALLS]"):
		return formats["mistral"]
	case strings.Contains(template, "<|python_tag|>") || strings.Contains(template, "ipython"):
		return formats["llama3"]
	}
	return nil
}

// Parse splits a finished output into its text and its tool calls. Text
// that looks like a call but does not parse stays text.
func (f *Format) Parse(text string) (content string, calls []Call) {
	switch f.Name {
	case "hermes":
		var out strings.Builder
		rest := text
		for {
			i := strings.Index(rest, "<tool_call>")
			if i < 0 {
				out.WriteString(rest)
				break
			}
			j := strings.Index(rest[i:], "</tool_call>")
			if j < 0 {
				out.WriteString(rest)
				break
			}
			body := rest[i+len("<tool_call>") : i+j]
			if c, ok := f.parseCall(body); ok {
				out.WriteString(rest[:i])
				calls = append(calls, c)
			} else {
				out.WriteString(rest[:i+j+len("</tool_call>")])
			}
			rest = rest[i+j+len("</tool_call>"):]
		}
		return strings.TrimSpace(out.String()), calls
	case "mistral":
		i := strings.Index(text, "[TOOL_CALLS]")
		if i < 0 {
			return text, nil
		}
		var list []json.RawMessage
		if json.Unmarshal([]byte(strings.TrimSpace(text[i+len("[TOOL_CALLS]"):])), &list) != nil {
			return text, nil
		}
		for _, raw := range list {
			c, ok := f.parseCall(string(raw))
			if !ok {
				return text, nil
			}
			calls = append(calls, c)
		}
		return strings.TrimSpace(text[:i]), calls
	default: // llama3
		body := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(text), "<|python_tag|>"))
		if !strings.HasPrefix(body, "{") {
			return text, nil
		}
		for _, part := range strings.Split(body, "; ") {
			c, ok := f.parseCall(part)
			if !ok {
				return text, nil
			}
			calls = append(calls, c)
		}
		return "", calls
	}
}

// parseCall reads {"name": ..., "<args key>": {...}}.
func (f *Format) parseCall(body string) (Call, bool) {
	var raw map[string]json.RawMessage
	if json.Unmarshal([]byte(strings.TrimSpace(body)), &raw) != nil {
		return Call{}, false
	}
	var name string
	if json.Unmarshal(raw["name"], &name) != nil || name == "" {
		return Call{}, false
	}
	args, ok := raw[f.Syntax.ArgsKey]
	if !ok {
		args, ok = raw["arguments"]
	}
	if !ok || len(args) == 0 || args[0] != '{' {
		return Call{}, false
	}
	return Call{Name: name, Arguments: string(args)}, true
}

// Streamer splits streamed output: text before the calls goes out as it
// comes (holding back what could be the start of the calls' marker), and
// calls are released as they complete (Hermes blocks one by one, other
// formats at the end).
type Streamer struct {
	f       *Format
	text    strings.Builder
	emitted int  // bytes of text sent as content
	inCalls bool // the marker was seen: the rest is calls
	done    int  // calls already released
}

// NewStreamer starts a stream.
func (f *Format) NewStreamer() *Streamer { return &Streamer{f: f} }

// Push adds a delta and returns the content that became final and the
// calls that completed.
func (s *Streamer) Push(delta string) (content string, calls []Call) {
	s.text.WriteString(delta)
	all := s.text.String()
	if !s.inCalls {
		if i := strings.Index(all[s.emitted:], s.f.Start); i >= 0 && (s.f.Name != "llama3" || strings.TrimSpace(all[:s.emitted+i]) == "") {
			content = all[s.emitted : s.emitted+i]
			s.emitted += i
			s.inCalls = true
		} else {
			// Hold back a tail that could begin the marker.
			end := len(all)
			for k := min(len(s.f.Start)-1, end-s.emitted); k > 0; k-- {
				if strings.HasSuffix(all, s.f.Start[:k]) {
					end -= k
					break
				}
			}
			if s.f.Name == "llama3" && strings.TrimSpace(all[s.emitted:]) == "" {
				end = s.emitted // leading space before a possible "{"
			}
			content = all[s.emitted:end]
			s.emitted = end
			return content, nil
		}
	}
	if s.f.Name != "hermes" {
		return content, nil
	}
	_, parsed := s.f.Parse(all[s.emitted:])
	calls = parsed[s.done:]
	s.done = len(parsed)
	return content, calls
}

// Finish returns what is left: the held-back text, or the calls (and, if
// the calls did not parse, their text as content).
func (s *Streamer) Finish() (content string, calls []Call) {
	all := s.text.String()
	rest := all[s.emitted:]
	if !s.inCalls {
		return rest, nil
	}
	text, parsed := s.f.Parse(rest)
	if len(parsed) == 0 && s.done == 0 {
		return rest, nil
	}
	return text, parsed[min(s.done, len(parsed)):]
}
