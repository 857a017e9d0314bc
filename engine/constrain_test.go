package engine_test

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/grammar"
	"github.com/gosling-ai/gosling/internal/shared"
)

// TestConstrainedGeneration runs stories260K (which knows nothing of JSON)
// under a JSON Schema and a regex, greedy and sampled, batched together:
// every output must validate (checked by santhosh-tekuri/jsonschema) or
// match, and finish because the grammar completed.
func TestConstrainedGeneration(t *testing.T) {
	e := newEngine(t, engine.Config{ModelPath: shared.Path(t, "models/stories260K/stories260K.gguf")})
	vocab, err := e.GrammarVocab()
	if err != nil {
		t.Fatal(err)
	}
	schemaText := `{"type":"object","properties":{
		"name":{"type":"string","maxLength":12},
		"age":{"type":"integer","minimum":0,"maximum":99},
		"pet":{"enum":["cat","dog"]},
		"tags":{"type":"array","items":{"type":"string","pattern":"^[a-z]{1,5}$"},"maxItems":2}},
		"required":["name","age","pet"],"additionalProperties":false}`
	g, err := grammar.JSONSchema([]byte(schemaText), grammar.JSONOptions{MaxWhitespace: 4})
	if err != nil {
		t.Fatal(err)
	}
	schemaDoc, err := jsonschema.UnmarshalJSON(strings.NewReader(schemaText))
	if err != nil {
		t.Fatal(err)
	}
	jc := jsonschema.NewCompiler()
	if err := jc.AddResource("schema.json", schemaDoc); err != nil {
		t.Fatal(err)
	}
	validator, err := jc.Compile("schema.json")
	if err != nil {
		t.Fatal(err)
	}
	re := `(Once|One day), [a-z]{2,8} (saw|had) (a|an) (cat|dog)\.`
	rg, err := grammar.Regex(re)
	if err != nil {
		t.Fatal(err)
	}
	jsonC, regexC := grammar.Compile(g, vocab), grammar.Compile(rg, vocab)
	matcher := regexp.MustCompile("^" + re + "$")

	type job struct {
		regex bool
		temp  float64
		seed  uint64
	}
	var jobs []job
	for seed := range uint64(4) {
		for _, temp := range []float64{0, 1} {
			jobs = append(jobs, job{false, temp, seed}, job{true, temp, seed})
		}
	}
	results := make([]*engine.Result, len(jobs))
	errs := make(chan error, len(jobs))
	for i, j := range jobs {
		go func() {
			p := greedy(400)
			p.Temperature = j.temp
			p.Seed = &j.seed
			req := engine.Request{Prompt: "Lily", Sampling: p, Grammar: jsonC}
			if j.regex {
				req.Grammar = regexC
			}
			res, err := e.Generate(context.Background(), req)
			results[i] = res
			errs <- err
		}()
	}
	for range jobs {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for i, j := range jobs {
		res := results[i]
		if res.FinishReason != engine.FinishStop {
			t.Errorf("%+v: finish %q after %d tokens: %q", j, res.FinishReason, len(res.OutputIDs), res.Text)
			continue
		}
		if j.regex {
			if !matcher.MatchString(res.Text) {
				t.Errorf("%+v: %q does not match %s", j, res.Text, re)
			}
			continue
		}
		inst, err := jsonschema.UnmarshalJSON(strings.NewReader(res.Text))
		if err != nil {
			t.Errorf("%+v: not JSON: %q: %v", j, res.Text, err)
			continue
		}
		if err := validator.Validate(inst); err != nil {
			t.Errorf("%+v: %q does not validate: %v", j, res.Text, err)
		}
		var v map[string]any
		if json.Unmarshal([]byte(res.Text), &v) != nil {
			t.Errorf("%+v: %q", j, res.Text)
		}
	}
	t.Logf("json, greedy: %s", results[0].Text)
	t.Logf("regex, T=1: %s", results[3].Text)
}

// TestConstrainedWithSpeculation: with speculative decoding on, a
// constrained request still only emits what its grammar allows.
func TestConstrainedWithSpeculation(t *testing.T) {
	model := shared.Path(t, "models/stories260K/stories260K.gguf")
	e := newEngine(t, engine.Config{ModelPath: model, SpeculativeAlgorithm: "STANDALONE", SpeculativeDraftModelPath: model, SpeculativeNumSteps: 3, SpeculativeEagleTopk: 1})
	vocab, err := e.GrammarVocab()
	if err != nil {
		t.Fatal(err)
	}
	re := `(Lily|Tom) (saw|had) (a|an) [a-z]{2,8}\.`
	g, err := grammar.Regex(re)
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.Generate(context.Background(), engine.Request{Prompt: "Lily", Sampling: greedy(60), Grammar: grammar.Compile(g, vocab)})
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile("^"+re+"$").MatchString(res.Text) || res.FinishReason != engine.FinishStop {
		t.Errorf("%q (%s) does not match %s", res.Text, res.FinishReason, re)
	}
}
