package engine_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/grammar"
	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/model/random"
	"github.com/gosling-ai/gosling/tensor"
)

// TestConstrainedGeneration runs stories260K (which knows nothing of JSON)
// under a JSON Schema and a regex, greedy and sampled, batched together:
// every output must validate (checked by santhosh-tekuri/jsonschema) or
// match, and finish because the grammar completed.
func TestConstrainedGeneration(t *testing.T) {
	e := newEngine(t, engine.Config{ModelPath: shared.Path(t, "models/stories260K/stories260K.gguf")})
	results := constrainedStories(t, e)
	// On the CPU the host sampler draws every token, masked.
	drawn := 0
	for _, res := range results {
		drawn += len(res.OutputIDs)
	}
	if got := e.Stats().HostConstrainedDraws; got < drawn {
		t.Errorf("%d constrained draws on the host for %d tokens", got, drawn)
	}
}

// constrainedStories runs TestConstrainedGeneration's requests on e (a
// stories260K engine) and checks their outputs.
func constrainedStories(t *testing.T, e *engine.Engine) []*engine.Result {
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
	validator := schemaValidator(t, schemaText)
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
	reqs := make([]engine.Request, len(jobs))
	for i, j := range jobs {
		p := greedy(400)
		p.Temperature = j.temp
		p.Seed = &j.seed
		reqs[i] = engine.Request{Prompt: "Lily", Sampling: p, Grammar: jsonC}
		if j.regex {
			reqs[i].Grammar = regexC
		}
	}
	results := generateRequests(t, e, reqs)
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
	return results
}

// TestConstrainedWithSpeculation: with speculative decoding on, a
// constrained request still only emits what its grammar allows.
func TestConstrainedWithSpeculation(t *testing.T) {
	model := shared.Path(t, "models/stories260K/stories260K.gguf")
	e := newEngine(t, engine.Config{ModelPath: model, SpeculativeAlgorithm: "STANDALONE", SpeculativeDraftModelPath: model, SpeculativeNumSteps: 3, SpeculativeEagleTopk: 1})
	c, re := storiesRegex(t, e)
	res, err := e.Generate(context.Background(), engine.Request{Prompt: "Lily", Sampling: greedy(60), Grammar: c})
	if err != nil {
		t.Fatal(err)
	}
	if !re.MatchString(res.Text) || res.FinishReason != engine.FinishStop {
		t.Errorf("%q (%s) does not match %s", res.Text, res.FinishReason, re)
	}
}

// storiesRegex is a short sentence's regex compiled for e's vocabulary,
// and the same regex anchored for checking outputs.
func storiesRegex(t *testing.T, e *engine.Engine) (*grammar.Compiled, *regexp.Regexp) {
	t.Helper()
	vocab, err := e.GrammarVocab()
	if err != nil {
		t.Fatal(err)
	}
	re := `(Lily|Tom) (saw|had) (a|an) [a-z]{2,8}\.`
	g, err := grammar.Regex(re)
	if err != nil {
		t.Fatal(err)
	}
	return grammar.Compile(g, vocab), regexp.MustCompile("^" + re + "$")
}

// schemaValidator compiles a JSON Schema with santhosh-tekuri/jsonschema,
// the validator outputs are checked against.
func schemaValidator(t *testing.T, schemaText string) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schemaText))
	if err != nil {
		t.Fatal(err)
	}
	jc := jsonschema.NewCompiler()
	if err := jc.AddResource("schema.json", doc); err != nil {
		t.Fatal(err)
	}
	v, err := jc.Compile("schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// randomWithTokenizer writes a random-weight model of stories260K's body
// with the vocabulary of ../shared/tokenizers/name (vocab ids) and that
// tokenizer beside it.
func randomWithTokenizer(t testing.TB, name string, vocab int) string {
	t.Helper()
	tokDir := shared.Path(t, "tokenizers/"+name)
	dir := filepath.Join(t.TempDir(), name+"-random")
	shape := random.Presets["stories260K"]
	shape.Vocab, shape.SeqLen, shape.Layers = vocab, 2048, 2
	if err := random.Write(dir, random.Options{Shape: shape, Format: "hf", DType: tensor.F32, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	if err := random.CopyTokenizer(dir, tokDir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestConstrainedRealVocab: random-weight models at the real vocabulary
// sizes of qwen3 (151,936 ids) and llama3 (128,256), whose next token is
// anything at all, generate under a JSON Schema, a regex and an EBNF
// grammar, greedy and sampled, batched: every output validates against the
// schema (santhosh-tekuri/jsonschema), matches the regex or parses by the
// EBNF's equivalent regex, and ends because the grammar completed.
func TestConstrainedRealVocab(t *testing.T) {
	constrainedRealVocab(t, "cpu", nil)
}

// constrainedRealVocab runs TestConstrainedRealVocab on device; check,
// when set, then looks at each engine.
func constrainedRealVocab(t *testing.T, device string, check func(*testing.T, *engine.Engine)) {
	schemaText := `{"type":"object","properties":{
		"id":{"type":"integer","minimum":-5,"maximum":5000},
		"name":{"type":"string","minLength":1,"maxLength":8},
		"score":{"type":"number","minimum":0,"maximum":1},
		"kind":{"enum":["a","b",null]},
		"tags":{"type":"array","items":{"type":"string","pattern":"^[a-z]{1,4}$"},"maxItems":3},
		"ok":{"type":"boolean"}},
		"required":["id","name","kind"],"additionalProperties":false}`
	validator := schemaValidator(t, schemaText)
	g, err := grammar.JSONSchema([]byte(schemaText), grammar.JSONOptions{MaxWhitespace: 4})
	if err != nil {
		t.Fatal(err)
	}
	re := `[A-Z][a-z]{1,6} (is|was) [0-9]{1,3}( years old)?\.`
	rg, err := grammar.Regex(re)
	if err != nil {
		t.Fatal(err)
	}
	ebnf := "root ::= item (\", \" item){0,2} \".\"\nitem ::= animal \" \" [0-9]{1,3}\nanimal ::= \"cat\" | \"dog\" | \"fox\"\n"
	eg, err := grammar.EBNF(ebnf)
	if err != nil {
		t.Fatal(err)
	}
	ebnfRe := regexp.MustCompile(`^(cat|dog|fox) [0-9]{1,3}(, (cat|dog|fox) [0-9]{1,3}){0,2}\.$`)
	reMatch := regexp.MustCompile("^" + re + "$")

	for _, tc := range []struct {
		name  string
		vocab int
	}{{"qwen3", 151936}, {"llama3", 128256}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, engine.Config{ModelPath: randomWithTokenizer(t, tc.name, tc.vocab), Device: device, MaxRunningRequests: 16, KVCacheTokens: 16 * 512})
			vocab, err := e.GrammarVocab()
			if err != nil {
				t.Fatal(err)
			}
			kinds := []struct {
				name string
				c    *grammar.Compiled
			}{{"json", grammar.Compile(g, vocab)}, {"regex", grammar.Compile(rg, vocab)}, {"ebnf", grammar.Compile(eg, vocab)}}
			type job struct {
				kind int
				temp float64
				seed uint64
			}
			var jobs []job
			for k := range kinds {
				for seed := range uint64(2) {
					for _, temp := range []float64{0, 1} {
						jobs = append(jobs, job{k, temp, seed})
					}
				}
			}
			reqs := make([]engine.Request, len(jobs))
			for i, j := range jobs {
				p := greedy(300)
				p.Temperature = j.temp
				p.Seed = &j.seed
				reqs[i] = engine.Request{Prompt: "Hello", Sampling: p, Grammar: kinds[j.kind].c}
			}
			results := generateRequests(t, e, reqs)
			for i, j := range jobs {
				res, what := results[i], kinds[j.kind].name
				if res.FinishReason != engine.FinishStop {
					t.Errorf("%s T=%v seed %d: finish %q after %d tokens: %q", what, j.temp, j.seed, res.FinishReason, len(res.OutputIDs), res.Text)
					continue
				}
				switch what {
				case "json":
					inst, err := jsonschema.UnmarshalJSON(strings.NewReader(res.Text))
					if err != nil {
						t.Errorf("T=%v seed %d: not JSON: %q: %v", j.temp, j.seed, res.Text, err)
					} else if err := validator.Validate(inst); err != nil {
						t.Errorf("T=%v seed %d: %q does not validate: %v", j.temp, j.seed, res.Text, err)
					}
				case "regex":
					if !reMatch.MatchString(res.Text) {
						t.Errorf("T=%v seed %d: %q does not match %s", j.temp, j.seed, res.Text, re)
					}
				case "ebnf":
					if !ebnfRe.MatchString(res.Text) {
						t.Errorf("T=%v seed %d: %q does not parse", j.temp, j.seed, res.Text)
					}
				}
			}
			t.Logf("json T=1: %q", results[1].Text)
			t.Logf("regex T=1: %q", results[5].Text)
			t.Logf("ebnf T=1: %q", results[9].Text)
			if check != nil {
				check(t, e)
			}
		})
	}
}

// TestStopTokenKeepsHeldText: text the detokenizer holds back (llama3's
// clean-up waits to see what follows " }}") is output when a stop token
// ends the request, as it is at any other finish. The grammar forces the
// text and then "!", which is a stop token here.
func TestStopTokenKeepsHeldText(t *testing.T) {
	e := newEngine(t, engine.Config{ModelPath: randomWithTokenizer(t, "llama3", 128256)})
	vocab, err := e.GrammarVocab()
	if err != nil {
		t.Fatal(err)
	}
	g, err := grammar.Regex(`Hello world \}\}!`)
	if err != nil {
		t.Fatal(err)
	}
	tok := e.Tokenizer()
	bang := tok.Encode("!", false)
	p := greedy(20)
	p.StopTokenIDs = bang
	res, err := e.Generate(context.Background(), engine.Request{Prompt: "Hi", Sampling: p, Grammar: grammar.Compile(g, vocab)})
	if err != nil {
		t.Fatal(err)
	}
	if res.FinishReason != engine.FinishStop || res.MatchedStop != bang[0] || res.Text != "Hello world }}" {
		t.Errorf("finish %q (stop %v), text %q after ids %v; want the text before the stop token", res.FinishReason, res.MatchedStop, res.Text, res.OutputIDs)
	}
}
