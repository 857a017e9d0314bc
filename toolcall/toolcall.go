// Package toolcall reads the tool calls a model writes in its own format
// (Qwen/Hermes <tool_call> blocks, Mistral's [TOOL_CALLS] list, Llama 3's
// JSON, DeepSeek-V3's <｜tool▁call▁begin｜> blocks) out of its output,
// whole or streamed piece by piece, and gives the grammar that forces calls
// in that format (tool_choice "required" or a named function).
package toolcall

import (
	"crypto/rand"
	"encoding/hex"
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

// Delta is a streamed piece of call Index. A call's first delta carries
// its Name; every delta carries the next piece of the arguments text, so
// the pieces of a call concatenate to its Arguments.
type Delta struct {
	Index     int
	Name      string // in the call's first delta only
	Arguments string
}

// Format is one model family's tool-call syntax.
type Format struct {
	Name   string
	Syntax grammar.ToolCallSyntax
	// Start is the text that opens the calls; content before it is text.
	Start string
	// scan reads the calls in text (which begins with Start).
	scan func(text string) scanned
	// shortIDs: the family's templates take back only call ids of nine
	// letters and digits (Mistral's raise an error on any other).
	shortIDs bool
}

// CallID returns a new id for a call in this format: OpenAI's "call_"
// and 32 hex digits, or nine letters and digits where the family's chat
// templates ask for them, so that a client can send the call back in the
// conversation as it got it.
func (f *Format) CallID() string {
	if f.shortIDs {
		const alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
		var b [9]byte
		rand.Read(b[:])
		for i := range b {
			b[i] = alnum[int(b[i])%len(alnum)]
		}
		return string(b[:])
	}
	var b [16]byte
	rand.Read(b[:])
	return "call_" + hex.EncodeToString(b[:])
}

// DeepSeek-V3's markers: tokens of its vocabulary that decode as text.
const (
	dsCallsBegin = "<｜tool▁calls▁begin｜>"
	dsCallsEnd   = "<｜tool▁calls▁end｜>"
	dsCallBegin  = "<｜tool▁call▁begin｜>"
	dsCallEnd    = "<｜tool▁call▁end｜>"
	dsSep        = "<｜tool▁sep｜>"
)

var formats = map[string]*Format{
	// Qwen 2.5/3 and Hermes: one <tool_call> block per call.
	"hermes": {Name: "hermes", Start: "<tool_call>", scan: scanHermes, Syntax: grammar.ToolCallSyntax{
		CallBegin: "<tool_call>\n", CallEnd: "\n</tool_call>", Sep: "\n", ArgsKey: "arguments"}},
	// Mistral: [TOOL_CALLS] followed by a JSON list.
	"mistral": {Name: "mistral", Start: "[TOOL_CALLS]", scan: scanMistral, shortIDs: true, Syntax: grammar.ToolCallSyntax{
		ListBegin: "[TOOL_CALLS] [", ListEnd: "]", Sep: ", ", ArgsKey: "arguments"}},
	// Llama 3.1/3.2 JSON tool calling: the whole reply is the call(s).
	"llama3": {Name: "llama3", Start: "{", scan: scanLlama3, Syntax: grammar.ToolCallSyntax{Sep: "; ", ArgsKey: "parameters"}},
	// DeepSeek-V3: the function's name bare, its arguments in a json code
	// block, each call in tool-call markers, all in tool-calls markers.
	"deepseekv3": {Name: "deepseekv3", Start: dsCallsBegin, scan: scanDeepSeekV3, Syntax: grammar.ToolCallSyntax{
		ListBegin: dsCallsBegin, ListEnd: dsCallsEnd, CallBegin: dsCallBegin + "function" + dsSep,
		NameEnd: "\n```json\n", CallEnd: "\n```" + dsCallEnd, Sep: "\n"}},
}

func init() {
	formats["qwen25"] = formats["hermes"]
	formats["qwen3"] = formats["hermes"]
}

// Lookup returns the named format (hermes, qwen25, qwen3, mistral, llama3,
// deepseekv3).
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
	case strings.Contains(template, dsCallsBegin) && strings.Contains(template, "```json"):
		return formats["deepseekv3"]
	case strings.Contains(template, "<|python_tag|>") || strings.Contains(template, "ipython"):
		return formats["llama3"]
	}
	return nil
}

// partial is one call as far as the text goes.
type partial struct {
	name     string
	named    bool   // name is complete
	args     string // the arguments text so far; all of it once argsDone
	argsDone bool
	done     bool // the call's closing syntax was read
}

// scanned is what a format's scanner read from the calls' text.
type scanned struct {
	calls []partial
	// content is text among the calls that is not a call (a Hermes block
	// that does not parse, text between blocks).
	content string
	// closed: the calls' syntax ended (a list's closing bracket, the
	// end marker); for formats without one, the text ended after a call.
	closed bool
	// bad: the text breaks the syntax; what did not parse is content.
	bad bool
}

// valid: every call is complete with JSON arguments.
func (sc scanned) valid() bool {
	if sc.bad || !sc.closed || len(sc.calls) == 0 {
		return false
	}
	for _, p := range sc.calls {
		if !p.done || !json.Valid([]byte(p.args)) {
			return false
		}
	}
	return true
}

// Parse splits a finished output into its text and its tool calls. Text
// that looks like calls but does not parse stays text.
func (f *Format) Parse(text string) (content string, calls []Call) {
	i := f.start(text)
	if i < 0 {
		return text, nil
	}
	sc := f.scan(text[i:])
	if !sc.valid() {
		return text, nil
	}
	for _, p := range sc.calls {
		calls = append(calls, Call{Name: p.name, Arguments: p.args})
	}
	before := text[:i]
	if f.Name == "llama3" {
		before = "" // blank or <|python_tag|>
	}
	return strings.TrimSpace(before + sc.content), calls
}

// start is where the calls begin in text, -1 when they do not. Llama 3's
// calls are the whole reply (after an optional <|python_tag|>).
func (f *Format) start(text string) int {
	i := strings.Index(text, f.Start)
	if i < 0 || f.Name == "llama3" && !llamaLead(text[:i]) {
		return -1
	}
	return i
}

func llamaLead(s string) bool {
	s = strings.TrimSpace(s)
	return s == "" || s == "<|python_tag|>"
}

// Streamer splits streamed output: text before the calls goes out as it
// comes (holding back what could be the start of the calls' marker), and
// each call goes out as it is written: its name once complete, then its
// arguments piece by piece.
type Streamer struct {
	f       *Format
	text    strings.Builder
	emitted int  // bytes of text sent as content
	inCalls bool // the marker was seen at emitted: the rest is calls
	sent    []int
}

// NewStreamer starts a stream.
func (f *Format) NewStreamer() *Streamer { return &Streamer{f: f} }

// Push adds a delta and returns the content that became final and the
// call pieces written so far.
func (s *Streamer) Push(delta string) (content string, deltas []Delta) {
	s.text.WriteString(delta)
	all := s.text.String()
	if !s.inCalls {
		if i := s.f.start(all[s.emitted:]); i >= 0 && (s.f.Name != "llama3" || llamaLead(all[:s.emitted+i])) {
			content = all[s.emitted : s.emitted+i]
			if s.f.Name == "llama3" {
				content = "" // the optional <|python_tag|> is not text
			}
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
			if s.f.Name == "llama3" && strings.HasPrefix("<|python_tag|>", strings.TrimSpace(all[s.emitted:])) {
				end = s.emitted // leading space or tag before a possible "{"
			}
			content = all[s.emitted:end]
			s.emitted = end
			return content, nil
		}
	}
	return content, s.diff(s.f.scan(all[s.emitted:]))
}

// diff returns the pieces of sc not sent yet. Calls go out in order, each
// once its name is complete and its arguments have begun: a name followed
// by what cannot be arguments stays text.
func (s *Streamer) diff(sc scanned) []Delta {
	var out []Delta
	for i, p := range sc.calls {
		if i == len(s.sent) {
			if !p.named || p.args == "" {
				break
			}
			out = append(out, Delta{Index: i, Name: p.name, Arguments: p.args})
			s.sent = append(s.sent, len(p.args))
			continue
		}
		if len(p.args) > s.sent[i] {
			out = append(out, Delta{Index: i, Arguments: p.args[s.sent[i]:]})
			s.sent[i] = len(p.args)
		}
	}
	return out
}

// Finish returns what is left: the held-back text, or the last call
// pieces and any text among the calls. When the calls do not parse and
// none went out, their text is content.
func (s *Streamer) Finish() (content string, deltas []Delta) {
	all := s.text.String()
	rest := all[s.emitted:]
	if !s.inCalls {
		return rest, nil
	}
	sc := s.f.scan(rest)
	if len(s.sent) == 0 && !sc.valid() {
		return rest, nil
	}
	return sc.content, s.diff(sc)
}

// Calls is the number of calls given out so far.
func (s *Streamer) Calls() int { return len(s.sent) }

// scanHermes reads <tool_call> blocks; text between them is content, and
// so is a block that does not parse.
func scanHermes(text string) scanned {
	const open, close = "<tool_call>", "</tool_call>"
	var sc scanned
	var content strings.Builder
	pos := 0
	for {
		j := strings.Index(text[pos:], open)
		if j < 0 {
			content.WriteString(text[pos:])
			sc.closed = true
			break
		}
		content.WriteString(text[pos : pos+j])
		block := pos + j
		p, end, st := scanObjectCall(text, block+len(open), []string{"arguments", "parameters"})
		if st == scanDone {
			end = skipWS(text, end)
			switch {
			case strings.HasPrefix(text[end:], close):
				p.done = true
				sc.calls = append(sc.calls, p)
				pos = end + len(close)
				continue
			case strings.HasPrefix(close, text[end:]):
				st = scanPending
			default:
				st = scanBad
			}
		}
		if st == scanPending {
			sc.calls = append(sc.calls, p)
			break
		}
		// A block that is not a call is text, up to its end.
		k := strings.Index(text[block:], close)
		if k < 0 {
			content.WriteString(text[block:])
			sc.bad = true
			break
		}
		content.WriteString(text[block : block+k+len(close)])
		pos = block + k + len(close)
	}
	sc.content = content.String()
	return sc
}

// scanMistral reads [TOOL_CALLS] [{...}, {...}].
func scanMistral(text string) scanned {
	i := skipWS(text, len("[TOOL_CALLS]"))
	if i == len(text) {
		return scanned{}
	}
	if text[i] != '[' {
		return scanned{bad: true}
	}
	return scanObjectList(text, i+1, []string{"arguments", "parameters"}, ',', ']')
}

// scanLlama3 reads {...}; {...} after an optional <|python_tag|>.
func scanLlama3(text string) scanned {
	return scanObjectList(text, 0, []string{"parameters", "arguments"}, ';', 0)
}

// scanObjectList reads JSON-object calls from text[i:] separated by sep
// and ended by closer, or by the end of the text when closer is 0.
func scanObjectList(text string, i int, argsKeys []string, sep, closer byte) scanned {
	var sc scanned
	for {
		p, end, st := scanObjectCall(text, i, argsKeys)
		if st == scanBad {
			sc.bad = true
			return sc
		}
		p.done = st == scanDone
		if p.named || p.done {
			sc.calls = append(sc.calls, p)
		}
		if st == scanPending {
			return sc
		}
		i = skipWS(text, end)
		switch {
		case i == len(text):
			sc.closed = closer == 0
			return sc
		case text[i] == sep:
			i++
		case closer != 0 && text[i] == closer:
			sc.closed = skipWS(text, i+1) == len(text)
			sc.bad = !sc.closed
			return sc
		default:
			sc.bad = true
			return sc
		}
	}
}

// scanDeepSeekV3 reads
//
//	<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
//	```json
//	{...}
//	```<｜tool▁call▁end｜> ... <｜tool▁calls▁end｜>
//
// with calls separated by optional whitespace.
func scanDeepSeekV3(text string) scanned {
	var sc scanned
	i := len(dsCallsBegin)
	// expect reports whether text[i:] starts with lit; pending when the
	// text ends inside it.
	expect := func(lit string) (ok, pending bool) {
		if strings.HasPrefix(text[i:], lit) {
			i += len(lit)
			return true, false
		}
		return false, strings.HasPrefix(lit, text[i:])
	}
	for {
		i = skipWS(text, i)
		if ok, pending := expect(dsCallsEnd); ok {
			sc.closed = skipWS(text, i) == len(text)
			sc.bad = !sc.closed
			return sc
		} else if pending {
			return sc
		}
		if ok, pending := expect(dsCallBegin); !ok {
			sc.bad = !pending
			return sc
		}
		sep := strings.Index(text[i:], dsSep)
		if sep < 0 {
			sc.bad = strings.ContainsAny(text[i:], "\n{")
			return sc
		}
		i += sep + len(dsSep)
		nl := strings.IndexByte(text[i:], '\n')
		if nl < 0 {
			return sc
		}
		p := partial{name: strings.TrimSpace(text[i : i+nl]), named: true}
		if p.name == "" {
			sc.bad = true
			return sc
		}
		i += nl + 1
		if ok, pending := expect("```json\n"); !ok {
			if pending {
				sc.calls = append(sc.calls, p)
			}
			sc.bad = !pending
			return sc
		}
		i = skipWS(text, i)
		if i == len(text) {
			sc.calls = append(sc.calls, p)
			return sc
		}
		if text[i] != '{' {
			sc.bad = true
			return sc
		}
		end, complete, ok := valueEnd(text, i)
		if !ok {
			sc.bad = true
			return sc
		}
		p.args, p.argsDone = text[i:end], complete
		if !complete {
			sc.calls = append(sc.calls, p)
			return sc
		}
		i = skipWS(text, end)
		for _, lit := range []string{"```", dsCallEnd} {
			if ok, pending := expect(lit); !ok {
				sc.calls = append(sc.calls, p)
				sc.bad = !pending
				return sc
			}
			i = skipWS(text, i)
		}
		p.done = true
		sc.calls = append(sc.calls, p)
	}
}

const (
	scanPending = iota // the text ends inside the call
	scanDone
	scanBad
)

// scanObjectCall reads a call written as a JSON object, {"name": "f",
// "<args key>": {...}} in any key order, from text[i:]. It returns the
// call as far as it goes and, when done, the index after the object.
// Arguments before the name are held (args stays empty) until the name.
func scanObjectCall(text string, i int, argsKeys []string) (p partial, end int, st int) {
	i = skipWS(text, i)
	if i == len(text) {
		return p, i, scanPending
	}
	if text[i] != '{' {
		return p, i, scanBad
	}
	i++
	var early string // arguments read before the name
	haveEarly := false
	for first := true; ; first = false {
		i = skipWS(text, i)
		if i == len(text) {
			return p, i, scanPending
		}
		if text[i] == '}' && first {
			return p, i, scanBad
		}
		if text[i] != '"' {
			return p, i, scanBad
		}
		e, complete, ok := valueEnd(text, i)
		if !ok {
			return p, i, scanBad
		}
		if !complete {
			return p, i, scanPending
		}
		var key string
		if json.Unmarshal([]byte(text[i:e]), &key) != nil {
			return p, i, scanBad
		}
		i = skipWS(text, e)
		if i == len(text) {
			return p, i, scanPending
		}
		if text[i] != ':' {
			return p, i, scanBad
		}
		i = skipWS(text, i+1)
		if i == len(text) {
			return p, i, scanPending
		}
		e, complete, ok = valueEnd(text, i)
		if !ok {
			return p, i, scanBad
		}
		switch {
		case key == "name":
			if text[i] != '"' {
				return p, i, scanBad
			}
			if !complete {
				return p, i, scanPending
			}
			if json.Unmarshal([]byte(text[i:e]), &p.name) != nil || p.name == "" {
				return p, i, scanBad
			}
			p.named = true
			if haveEarly {
				p.args, p.argsDone = early, true
			}
		case isArgsKey(key, argsKeys) && !p.argsDone:
			if text[i] != '{' {
				return p, i, scanBad
			}
			if p.named {
				p.args, p.argsDone = text[i:e], complete
			} else if complete {
				early, haveEarly = text[i:e], true
			}
			if !complete {
				return p, i, scanPending
			}
		default:
			if !complete {
				return p, i, scanPending
			}
		}
		i = skipWS(text, e)
		if i == len(text) {
			return p, i, scanPending
		}
		switch text[i] {
		case ',':
			i++
		case '}':
			if !p.named || !p.argsDone {
				return p, i, scanBad
			}
			return p, i + 1, scanDone
		default:
			return p, i, scanBad
		}
	}
}

func isArgsKey(k string, keys []string) bool {
	for _, x := range keys {
		if k == x {
			return true
		}
	}
	return false
}

func skipWS(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// valueEnd finds the end of the JSON value starting at s[i]: end is the
// index after it (len(s) when s ends first, complete false). ok is false
// when s[i:] cannot be a JSON value's beginning. Nesting and strings are
// followed; scalars are checked only for their characters (the complete
// arguments are checked with json.Valid).
func valueEnd(s string, i int) (end int, complete, ok bool) {
	switch c := s[i]; {
	case c == '"':
		for j := i + 1; j < len(s); j++ {
			switch s[j] {
			case '\\':
				j++
			case '"':
				return j + 1, true, true
			}
		}
		return len(s), false, true
	case c == '{' || c == '[':
		var closers []byte
		for j := i; j < len(s); j++ {
			switch ch := s[j]; ch {
			case '"':
				e, complete, _ := valueEnd(s, j)
				if !complete {
					return len(s), false, true
				}
				j = e - 1
			case '{':
				closers = append(closers, '}')
			case '[':
				closers = append(closers, ']')
			case '}', ']':
				if len(closers) == 0 || closers[len(closers)-1] != ch {
					return j, false, false
				}
				closers = closers[:len(closers)-1]
				if len(closers) == 0 {
					return j + 1, true, true
				}
			}
		}
		return len(s), false, true
	case c == '-' || c >= '0' && c <= '9':
		j := i
		for j < len(s) && strings.IndexByte("0123456789+-.eE", s[j]) >= 0 {
			j++
		}
		return j, j < len(s), true
	default:
		for _, lit := range []string{"true", "false", "null"} {
			rest := s[i:]
			if strings.HasPrefix(rest, lit) {
				return i + len(lit), true, true
			}
			if strings.HasPrefix(lit, rest) {
				return len(s), false, true
			}
		}
		return i, false, false
	}
}
