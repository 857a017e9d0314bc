package grammar

import (
	"fmt"
	"strings"
)

// ToolSpec is a function a model may call: its name and the JSON Schema of
// its arguments (nil: any JSON object).
type ToolSpec struct {
	Name       string
	Parameters []byte
}

// ToolCallSyntax is how a model family writes its tool calls:
//
//	ListBegin CallBegin {"name": "f", "<ArgsKey>": {...}} CallEnd Sep CallBegin ... CallEnd ListEnd
//
// or, when ArgsKey is empty, each call as CallBegin f NameEnd {...} CallEnd
// (the name bare, as DeepSeek-V3 writes it).
type ToolCallSyntax struct {
	ListBegin, ListEnd string
	CallBegin, CallEnd string
	Sep                string
	ArgsKey            string // "arguments", or "parameters" for Llama 3
	NameEnd            string // after a bare name
}

// MaxParallelCalls bounds the calls of one reply: without a bound a
// sampled model that rarely draws end-of-sequence writes calls until its
// token budget runs out.
const MaxParallelCalls = 8

// ToolCalls is the grammar of one call (parallel false) or one or more
// calls of the given tools, each call's arguments valid against its
// function's schema. Tool choice "required" and a named function are both
// this grammar (a named function is a one-tool list).
func ToolCalls(tools []ToolSpec, syntax ToolCallSyntax, parallel bool, opts JSONOptions) (*Grammar, error) {
	if len(tools) == 0 {
		return nil, fmt.Errorf("no tools to call")
	}
	c := &schemaCompiler{b: newBuilder(), opts: opts, refRules: map[string]int32{}, shared: map[string]int32{}, inlining: map[string]int{}}
	root := c.b.declare("root")
	var calls []*node
	for _, t := range tools {
		var args *node
		if t.Parameters == nil {
			args = c.anyObject()
		} else {
			doc, err := parseOrdered(t.Parameters)
			if err != nil {
				return nil, fmt.Errorf("function %q: parameters are not valid JSON: %w", t.Name, err)
			}
			// $refs resolve inside each function's own schema.
			c.doc = doc
			c.refRules = map[string]int32{}
			if args, err = c.schema(doc, "#"); err != nil {
				return nil, fmt.Errorf("function %q: %w", t.Name, err)
			}
			if args.kind == nNone {
				return nil, fmt.Errorf("function %q: the parameters schema admits no value", t.Name)
			}
		}
		args = ref(c.b.rule("args "+t.Name, args))
		if syntax.ArgsKey == "" {
			if t.Name == "" || strings.ContainsAny(t.Name, " \t\r\n<`") {
				return nil, fmt.Errorf("function name %q cannot be written bare in this tool-call syntax", t.Name)
			}
			calls = append(calls, seq(lit(syntax.CallBegin+t.Name+syntax.NameEnd), args, lit(syntax.CallEnd)))
		} else {
			calls = append(calls, seq(lit(syntax.CallBegin), lit(`{"name": `+quoteJSON(t.Name)+`, "`+syntax.ArgsKey+`": `), args, lit("}"), lit(syntax.CallEnd)))
		}
	}
	call := ref(c.b.rule("call", alt(calls...)))
	body := call
	if parallel {
		body = seq(call, repeat(seq(lit(syntax.Sep), call), 0, MaxParallelCalls-1))
	}
	c.b.define(root, seq(lit(syntax.ListBegin), body, lit(syntax.ListEnd)))
	return c.b.build(root)
}
