package main

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/internal/shared"
)

// TestEagleGenerate: `gosling model eagle` writes a random EAGLE-3 head
// for stories260K, and `gosling generate` drafting with it prints run.c's
// greedy continuation; a wrong speculative flag stops it with a message
// naming the flag.
func TestEagleGenerate(t *testing.T) {
	target := shared.Path(t, "models/stories260K/stories260K.gguf")
	head := filepath.Join(t.TempDir(), "eagle3")
	// stories260K has 5 layers: SGLang's default (outputs of layers 1, 1
	// and 1) would repeat one, so the head names its own.
	if _, stderr, err := run(t, "", "model", "eagle", "--target", target, "--eagle3", "--draft-vocab", "256",
		"--aux-layer-ids", "0,2,3", "--out", head); err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	args := []string{"generate", "--model-path", target, "--input-ids", "1", "--max-new-tokens", "256", "--temperature", "0",
		"--json", "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", head}
	out, stderr, err := run(t, "", args...)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	var res struct {
		OutputIDs []int              `json:"output_ids"`
		Usage     map[string]float64 `json:"usage"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if !slices.Equal(res.OutputIDs, storiesGolden(t)) {
		t.Fatalf("output_ids differ from golden_greedy.json:\n got %v", res.OutputIDs)
	}
	if res.Usage["spec_verify_steps"] == 0 || res.Usage["spec_accept_length"] < 1 {
		t.Fatalf("no verify steps reported: %v", res.Usage)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--speculative-eagle-topk", "0"}, "--speculative-eagle-topk must be at least 1"},
		{[]string{"--speculative-num-steps", "2", "--speculative-eagle-topk", "2", "--speculative-num-draft-tokens", "9"}, "--speculative-num-draft-tokens 9 is more than a EAGLE3 tree"},
		{[]string{"--speculative-algorithm", "EAGLE"}, "needs a LlamaForCausalLMEagle head"},
	} {
		a := append(slices.Clone(args), c.args...)
		if _, stderr, err := run(t, "", a...); err == nil || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: err %v, stderr does not mention %q:\n%s", c.args, err, c.want, stderr)
		}
	}
	if _, stderr, err := run(t, "", "generate", "--model-path", target, "--input-ids", "1", "--speculative-algorithm", "EAGLE3"); err == nil ||
		!strings.Contains(stderr, "needs --speculative-draft-model-path") {
		t.Errorf("EAGLE3 without a head: err %v\n%s", err, stderr)
	}
}
