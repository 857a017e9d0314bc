package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/gosling-ai/gosling/grammar"
	"github.com/gosling-ai/gosling/tokenizer"
)

type grammarCmd struct {
	Tokenizer  string `help:"Tokenizer: tokenizer.json, its directory, a .gguf, or a llama2.c tokenizer .bin." type:"path" required:""`
	JSONSchema string `help:"A JSON Schema file." type:"path" xor:"grammar" required:""`
	Regex      string `help:"A regular expression the whole text must match." xor:"grammar" required:""`
	EBNF       string `help:"An EBNF (GBNF) grammar file; the start rule is root." name:"ebnf" type:"path" xor:"grammar" required:""`
	JSONObject bool   `help:"Any JSON object (response_format json_object)." name:"json-object" xor:"grammar" required:""`
	JSON       bool   `help:"Add compile_us (grammar compile time, with the split of its start position) to every output line."`
}

// Run compiles the grammar against the tokenizer, then checks JSON lines
// {"text": ...} from stdin token by token: whether each token of the
// text's encoding is allowed by the mask before it and the text is
// complete. A grammar that does not compile exits with status 2 and one
// line naming the reason.
func (c *grammarCmd) Run() error {
	tok, err := tokenizer.Load(c.Tokenizer)
	if err != nil {
		return err
	}
	vocab := grammar.TokenizerVocab(tok, tok.VocabSize()) // once per tokenizer, not per grammar
	start := time.Now()
	g, err := c.compile()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gosling: grammar:", err)
		os.Exit(2)
	}
	compiled := grammar.Compile(g, vocab)
	compiled.Warm() // the start position's split, as the server computes it before the first step
	compileUS := time.Since(start).Microseconds()
	mask := make([]uint64, compiled.Vocab().MaskWords())
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 64<<20), 64<<20)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	for line := 1; in.Scan(); line++ {
		if len(in.Bytes()) == 0 {
			continue
		}
		var rec struct {
			Text *string `json:"text"`
		}
		if err := json.Unmarshal(in.Bytes(), &rec); err != nil || rec.Text == nil {
			return fmt.Errorf("stdin line %d: expected {\"text\": ...}", line)
		}
		ids := tok.Encode(*rec.Text, false)
		m := compiled.NewMatcher()
		res := grammarResult{MaskUS: []float64{}}
		for i, id := range ids {
			st := time.Now()
			m.FillMask(mask)
			res.MaskUS = append(res.MaskUS, float64(time.Since(st).Nanoseconds())/1e3)
			if !grammar.MaskAllows(mask, id) || !m.AcceptToken(id) {
				res.RejectedAt = &i
				break
			}
		}
		if res.RejectedAt == nil && !m.CanEnd() {
			n := len(ids) // every token allowed, but the text is incomplete
			res.RejectedAt = &n
		}
		res.Accepted = res.RejectedAt == nil
		if c.JSON {
			res.CompileUS = &compileUS
		}
		if err := enc.Encode(res); err != nil {
			return err
		}
	}
	return in.Err()
}

type grammarResult struct {
	Accepted   bool      `json:"accepted"`
	RejectedAt *int      `json:"rejected_at_token"`
	MaskUS     []float64 `json:"mask_us"`
	CompileUS  *int64    `json:"compile_us,omitempty"`
}

func (c *grammarCmd) compile() (*grammar.Grammar, error) {
	switch {
	case c.JSONSchema != "":
		data, err := os.ReadFile(c.JSONSchema)
		if err != nil {
			return nil, err
		}
		return grammar.JSONSchema(data, grammar.JSONOptions{})
	case c.EBNF != "":
		data, err := os.ReadFile(c.EBNF)
		if err != nil {
			return nil, err
		}
		return grammar.EBNF(string(data))
	case c.JSONObject:
		return grammar.JSONObject(grammar.JSONOptions{}), nil
	}
	return grammar.Regex(c.Regex)
}
