package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/internal/shared"
)

var binary string

// TestMain builds the real binary once; the tests run it as a user would.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "gosling-cli")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "gosling")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		os.Stderr.Write(out)
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func run(t *testing.T, stdin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	if strings.Contains(e.String(), "goroutine ") || strings.Contains(e.String(), "panic:") {
		t.Fatalf("gosling %v panicked:\n%s", args, e.String())
	}
	return o.String(), e.String(), err
}

// storiesGolden is run.c's greedy continuation of stories260K from BOS.
func storiesGolden(t *testing.T) []int {
	return shared.StoriesGolden(t)
}

func TestGenerateGoldenJSON(t *testing.T) {
	golden := struct{ OutputIDs []int }{storiesGolden(t)}
	out, stderr, err := run(t, "", "generate", "--model-path", shared.Path(t, "models/stories260K/stories260K.gguf"),
		"--input-ids", "1", "--max-new-tokens", "256", "--temperature", "0", "--json", "--page-size", "16")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	var res struct {
		OutputIDs []int  `json:"output_ids"`
		Text      string `json:"text"`
		Usage     struct {
			TokensPerSecond float64 `json:"tokens_per_second"`
		} `json:"usage"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if !slices.Equal(res.OutputIDs, golden.OutputIDs) {
		t.Fatalf("output_ids differ from golden_greedy.json:\n got %v\nwant %v", res.OutputIDs, golden.OutputIDs)
	}
}

func TestPromptLogprobsJSON(t *testing.T) {
	dir := shared.Path(t, "models/reference-tiny/llama_gqa")
	var ref struct {
		InputIDs       []int     `json:"input_ids"`
		PromptLogprobs []float64 `json:"prompt_logprobs"`
	}
	data, _ := os.ReadFile(filepath.Join(dir, "reference.json"))
	json.Unmarshal(data, &ref)
	ids := make([]string, len(ref.InputIDs))
	for i, id := range ref.InputIDs {
		ids[i] = itoa(id)
	}
	out, stderr, err := run(t, "", "generate", "--model-path", dir, "--input-ids", strings.Join(ids, ","),
		"--max-new-tokens", "0", "--prompt-logprobs", "--json")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	var res struct {
		OutputIDs      []int      `json:"output_ids"`
		PromptLogprobs []*float64 `json:"prompt_logprobs"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	if len(res.OutputIDs) != 0 || len(res.PromptLogprobs) != len(ref.InputIDs) || res.PromptLogprobs[0] != nil {
		t.Fatalf("want no output and %d prompt logprobs with a null first; got %d outputs, %d logprobs", len(ref.InputIDs), len(res.OutputIDs), len(res.PromptLogprobs))
	}
	for i, want := range ref.PromptLogprobs {
		if got := *res.PromptLogprobs[i+1]; got-want > 2e-4 || want-got > 2e-4 {
			t.Errorf("position %d: %v, want %v", i+1, got, want)
		}
	}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

func TestTokenizeRoundTrip(t *testing.T) {
	tok := shared.Path(t, "tokenizers/llama3")
	out, stderr, err := run(t, "{\"text\": \"Hello world\"}\n", "tokenize", "--tokenizer", tok)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	var enc struct {
		IDs []int `json:"ids"`
	}
	json.Unmarshal([]byte(out), &enc)
	if !slices.Equal(enc.IDs, []int{9906, 1917}) {
		t.Fatalf("ids %v, want [9906 1917]", enc.IDs)
	}
	out, stderr, err = run(t, out, "tokenize", "--tokenizer", tok, "--decode")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	if strings.TrimSpace(out) != `{"text":"Hello world"}` {
		t.Fatalf("decoded %s", out)
	}
}

func TestBadInputsFailClearly(t *testing.T) {
	tmp := t.TempDir()
	corrupt := filepath.Join(tmp, "model.gguf")
	lonely := filepath.Join(tmp, "lonely.bin") // a llama2.c checkpoint without a tokenizer beside it
	if abs, err := filepath.Abs(shared.Path(t, "models/stories260K/stories260K.bin")); err == nil {
		os.Symlink(abs, lonely)
	}
	os.WriteFile(corrupt, []byte("GGUF\x03\x00\x00\x00\xff"), 0o644)
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"missing model", []string{"generate", "--model-path", "/nonexistent/model", "--prompt", "hi"}, "/nonexistent/model"},
		{"truncated gguf", []string{"generate", "--model-path", corrupt, "--prompt", "hi"}, corrupt},
		{"no prompt", []string{"generate", "--model-path", shared.Path(t, "models/stories260K/stories260K.gguf")}, "give a prompt"},
		{"bad ids", []string{"generate", "--model-path", shared.Path(t, "models/stories260K/stories260K.gguf"), "--input-ids", "1,x"}, "not a token id"},
		{"unknown backend", []string{"generate", "--model-path", shared.Path(t, "models/stories260K/stories260K.gguf"), "--prompt", "hi", "--attention-backend", "nope"}, "unknown attention backend"},
		{"bad page size", []string{"generate", "--model-path", shared.Path(t, "models/stories260K/stories260K.gguf"), "--prompt", "hi", "--page-size", "-2"}, "page-size"},
		{"llama2c without tokenizer, text prompt", []string{"generate", "--model-path", lonely, "--prompt", "hi"}, "tokenizer"},
		{"EAGLE without a head", []string{"serve", "--model-path", shared.Path(t, "models/stories260K/stories260K.gguf"), "--speculative-algorithm", "EAGLE3"},
			"--speculative-algorithm EAGLE3 needs --speculative-draft-model-path"},
		{"draft with another tokenizer", []string{"generate", "--model-path", shared.Path(t, "models/stories260K/stories260K.gguf"), "--prompt", "hi",
			"--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", shared.Path(t, "models/aidreams260K/aidreams260K.bin")},
			"--speculative-draft-model-path needs a model with the target's tokenizer"},
		{"speculative top-k 0", []string{"generate", "--model-path", shared.Path(t, "models/stories260K/stories260K.gguf"), "--prompt", "hi",
			"--speculative-algorithm", "NGRAM", "--speculative-eagle-topk", "0"}, "--speculative-eagle-topk must be at least 1"},
		{"verify-step flags without --verify-steps", []string{"bench", "speculative", "--model-path", shared.Path(t, "models/stories260K/stories260K.gguf"),
			"--speculative-algorithm", "NGRAM", "--batch", "1"}, "go with --verify-steps"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, stderr, err := run(t, "", c.args...)
			if err == nil {
				t.Fatalf("gosling %v succeeded", c.args)
			}
			if !strings.Contains(stderr, c.want) {
				t.Fatalf("stderr does not mention %q:\n%s", c.want, stderr)
			}
		})
	}
}

// TestModelKV: the MLA latent cache of DeepSeek-V3's published shape holds
// kv_lora_rank + rope dims = 576 values per token per layer (61 layers,
// bf16: 70,272 bytes), against 128 heads × (192 + 128) for standard MHA.
func TestModelKV(t *testing.T) {
	out, stderr, err := run(t, "", "model", "kv", "--json", shared.Path(t, "configs/deepseek-v3"), shared.Path(t, "configs/llama-3.1-8b"))
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	var rows []struct {
		Values int `json:"values_per_token_per_layer"`
		Bytes  int `json:"bytes_per_token"`
		MHA    int `json:"mha_bytes_per_token"`
	}
	dec := json.NewDecoder(strings.NewReader(out))
	for dec.More() {
		var r struct {
			Values int `json:"values_per_token_per_layer"`
			Bytes  int `json:"bytes_per_token"`
			MHA    int `json:"mha_bytes_per_token"`
		}
		if err := dec.Decode(&r); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, r)
	}
	if len(rows) != 2 || rows[0].Values != 512+64 || rows[0].Bytes != 61*576*2 || rows[0].MHA != 61*128*(192+128)*2 {
		t.Fatalf("deepseek-v3: %+v", rows)
	}
	if rows[1].Bytes != 32*8*128*2*2 { // llama-3.1-8b: 32 layers, 8 KV heads × 128, K and V, bf16
		t.Fatalf("llama-3.1-8b: %+v", rows[1])
	}
}
