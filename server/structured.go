package server

import (
	"container/list"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/gosling-ai/gosling/grammar"
)

// Structured output: OpenAI's response_format and SGLang's json_schema,
// regex and ebnf (sampling_params on /generate, top-level extras on /v1)
// compile to a grammar that constrains the request's tokens. Compiled
// grammars are cached by their text, so that the vocabulary splits they
// accumulate (grammar.Compiled) serve every later request with the same
// constraint.

// constraintFields are SGLang's constraint parameters.
type constraintFields struct {
	JSONSchema    json.RawMessage `json:"json_schema"` // a schema, or a string holding one
	Regex         json.RawMessage `json:"regex"`
	EBNF          json.RawMessage `json:"ebnf"`
	StructuralTag json.RawMessage `json:"structural_tag"`
}

// generationWhitespace bounds whitespace in generated JSON (one line break
// between at most this many blanks): a sampled model could otherwise fill
// its budget with newlines. Eight levels of two-space indentation fit.
const generationWhitespace = 16

// grammarCacheSize is how many compiled constraints the server keeps.
const grammarCacheSize = 64

type grammarCache struct {
	mu      sync.Mutex
	entries map[string]*list.Element // key → element holding *grammarEntry
	lru     list.List
}

type grammarEntry struct {
	key      string
	compiled *grammar.Compiled
}

func (c *grammarCache) get(key string) *grammar.Compiled {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.entries[key]; ok {
		c.lru.MoveToFront(el)
		return el.Value.(*grammarEntry).compiled
	}
	return nil
}

func (c *grammarCache) put(key string, g *grammar.Compiled) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[string]*list.Element{}
	}
	if _, ok := c.entries[key]; ok {
		return
	}
	c.entries[key] = c.lru.PushFront(&grammarEntry{key: key, compiled: g})
	if c.lru.Len() > grammarCacheSize {
		old := c.lru.Back()
		c.lru.Remove(old)
		delete(c.entries, old.Value.(*grammarEntry).key)
	}
}

// constraintSpec is one request's constraint before compilation.
type constraintSpec struct {
	param string // the request field it came from, for errors
	kind  string // "json_schema", "json_object", "regex", "ebnf"
	text  string
	opts  grammar.JSONOptions
}

// constraintOf reads the constraint fields of a request; prefix is
// prepended to parameter names ("sampling_params." on /generate).
// responseFormat is OpenAI's field (nil on /generate). At most one
// constraint may be given.
func constraintOf(cf *constraintFields, responseFormat json.RawMessage, prefix string) (*constraintSpec, *apiError) {
	var specs []*constraintSpec
	if !isNull(cf.StructuralTag) {
		return nil, badRequest(prefix+"structural_tag", codeUnsupported, "%sstructural_tag is not supported; use json_schema, regex or response_format", prefix)
	}
	if !isNull(cf.JSONSchema) {
		text := string(cf.JSONSchema)
		if s, ok := decodeAs[string](cf.JSONSchema); ok {
			text = s // SGLang sends the schema as a JSON string
		}
		specs = append(specs, &constraintSpec{param: prefix + "json_schema", kind: "json_schema", text: text})
	}
	if !isNull(cf.Regex) {
		re, ok := decodeAs[string](cf.Regex)
		if !ok {
			return nil, wrongType(prefix+"regex", "a string", rawKind(cf.Regex))
		}
		specs = append(specs, &constraintSpec{param: prefix + "regex", kind: "regex", text: re})
	}
	if !isNull(cf.EBNF) {
		g, ok := decodeAs[string](cf.EBNF)
		if !ok {
			return nil, wrongType(prefix+"ebnf", "a string", rawKind(cf.EBNF))
		}
		specs = append(specs, &constraintSpec{param: prefix + "ebnf", kind: "ebnf", text: g})
	}
	if !isNull(responseFormat) {
		spec, err := responseFormatSpec(responseFormat)
		if err != nil {
			return nil, err
		}
		if spec != nil {
			specs = append(specs, spec)
		}
	}
	switch len(specs) {
	case 0:
		return nil, nil
	case 1:
		return specs[0], nil
	}
	return nil, badRequest(specs[1].param, codeInvalidValue, "give only one of json_schema, regex, ebnf and response_format (got %s and %s)", specs[0].param, specs[1].param)
}

// responseFormatSpec reads OpenAI's response_format: text (no
// constraint), json_object, or json_schema {name, schema, strict}.
func responseFormatSpec(raw json.RawMessage) (*constraintSpec, *apiError) {
	var rf struct {
		Type       string          `json:"type"`
		JSONSchema json.RawMessage `json:"json_schema"`
	}
	if err := json.Unmarshal(raw, &rf); err != nil {
		return nil, wrongType("response_format", `an object such as {"type": "json_object"}`, rawKind(raw))
	}
	switch rf.Type {
	case "text":
		return nil, nil
	case "json_object":
		return &constraintSpec{param: "response_format", kind: "json_object"}, nil
	case "json_schema":
		var js struct {
			Name   string          `json:"name"`
			Schema json.RawMessage `json:"schema"`
			Strict *bool           `json:"strict"`
		}
		if err := json.Unmarshal(rf.JSONSchema, &js); err != nil || isNull(rf.JSONSchema) {
			return nil, badRequest("response_format.json_schema", codeMissing, `response_format.json_schema must be an object with "name" and "schema"`)
		}
		if js.Name == "" {
			return nil, badRequest("response_format.json_schema.name", codeMissing, "response_format.json_schema.name is required")
		}
		schema := string(js.Schema)
		if isNull(js.Schema) {
			schema = "{}" // OpenAI: without a schema any JSON is allowed
		}
		spec := &constraintSpec{param: "response_format.json_schema.schema", kind: "json_schema", text: schema}
		// strict: OpenAI requires additionalProperties false everywhere;
		// a schema that leaves it out gets it.
		spec.opts.StrictProperties = js.Strict != nil && *js.Strict
		return spec, nil
	}
	return nil, badRequest("response_format.type", codeInvalidValue, `response_format.type must be "text", "json_object" or "json_schema", got %q`, rf.Type)
}

// compileConstraint compiles spec against the engine's vocabulary, through
// the cache. Unsupported constructs and invalid grammars are 400s naming
// the field and the reason.
func (s *Server) compileConstraint(spec *constraintSpec) (*grammar.Compiled, *apiError) {
	if spec == nil {
		return nil, nil
	}
	key := fmt.Sprintf("%s\x00%v\x00%s", spec.kind, spec.opts.StrictProperties, spec.text)
	if c := s.grammars.get(key); c != nil {
		return c, nil
	}
	vocab, err := s.eng.GrammarVocab()
	if err != nil {
		return nil, badRequest(spec.param, codeUnsupported, "%v", err)
	}
	opts := spec.opts
	opts.MaxWhitespace = generationWhitespace
	var g *grammar.Grammar
	switch spec.kind {
	case "json_object":
		g = grammar.JSONObject(opts)
	case "json_schema":
		g, err = grammar.JSONSchema([]byte(spec.text), opts)
	case "regex":
		g, err = grammar.Regex(spec.text)
	case "ebnf":
		g, err = grammar.EBNF(spec.text)
	}
	if err != nil {
		var ue *grammar.UnsupportedError
		if errors.As(err, &ue) {
			return nil, badRequest(spec.param, codeUnsupported, "%s: %v", spec.param, err)
		}
		return nil, badRequest(spec.param, codeInvalidValue, "%s: %v", spec.param, err)
	}
	c := grammar.Compile(g, vocab)
	// The first step's vocabulary split is computed here, in the
	// handler, rather than in a decode step the whole batch waits on.
	c.Warm()
	s.grammars.put(key, c)
	return c, nil
}
