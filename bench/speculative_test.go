package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/sample"
)

// TestSpeculativeBench: on the copy workload (stories260K, its own greedy
// continuation in the prompt), n-gram speculation reproduces the plain
// output and accepts drafts (more than one token per verify step); the
// plain run verifies nothing; the table names both modes. Speed is
// printed, never checked.
func TestSpeculativeBench(t *testing.T) {
	cfg := engine.Config{ModelPath: shared.Path(t, "models/stories260K/stories260K.gguf"), Device: "cpu", MaxRunningRequests: 2,
		ContextLength: 512, KVCacheTokens: 2048, SpeculativeAlgorithm: "NGRAM"}
	rep, err := Speculative(context.Background(), cfg, SpeculativeOptions{Prompt: "Lily saw a big dog", OutputLen: 96, Copy: true, Repeat: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Runs) != 2 || rep.Workload != "copy" {
		t.Fatalf("report %+v", rep)
	}
	plain, spec := rep.Runs[0], rep.Runs[1]
	if plain.Mode != "plain" || plain.VerifySteps != 0 || !plain.SameAsPlain {
		t.Errorf("plain run %+v", plain)
	}
	if spec.Mode != "NGRAM" || !spec.SameAsPlain || spec.VerifySteps == 0 || spec.AcceptLength <= 1 || spec.OutputTokens != 96 {
		t.Errorf("speculative run %+v: want the plain output, verify steps, accept length above 1 and 96 tokens", spec)
	}
	var out bytes.Buffer
	rep.Print(&out)
	t.Log("\n" + out.String())
	if !strings.Contains(out.String(), "NGRAM") || !strings.Contains(out.String(), "speed-up") {
		t.Errorf("table:\n%s", out.String())
	}
	cfg.SpeculativeAlgorithm = ""
	if _, err := Speculative(context.Background(), cfg, SpeculativeOptions{Prompt: "x", OutputLen: 4, Repeat: 1}); err == nil || !strings.Contains(err.Error(), "--speculative-algorithm") {
		t.Errorf("without an algorithm: %v", err)
	}
}

// TestVerifyStepsBench: the verify-step table has a row per batch size
// and verify size with the decode, chain and tree medians and their
// ratios (stories260K on the CPU); a plain engine is refused. Times are
// printed, never checked.
func TestVerifyStepsBench(t *testing.T) {
	cfg := engine.Config{ModelPath: shared.Path(t, "models/stories260K/stories260K.gguf"), Device: "cpu", MaxRunningRequests: 2,
		ContextLength: 256, KVCacheTokens: 2048, SpeculativeAlgorithm: "NGRAM"}
	rep, err := VerifySteps(context.Background(), cfg, VerifyStepOptions{Batches: []int{1, 2}, DraftTokens: []int{4, 8}, Context: 64, Repeat: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 4 {
		t.Fatalf("%d rows, want 4: %+v", len(rep.Rows), rep.Rows)
	}
	for i, x := range rep.Rows {
		if x.Batch != []int{1, 1, 2, 2}[i] || x.Tokens != []int{4, 8, 4, 8}[i] || x.DecodeMS <= 0 || x.ChainMS <= 0 || x.TreeMS <= 0 ||
			x.ChainRatio != x.ChainMS/x.DecodeMS || x.TreeRatio != x.TreeMS/x.DecodeMS {
			t.Errorf("row %d: %+v", i, x)
		}
	}
	var out bytes.Buffer
	rep.Print(&out)
	t.Log("\n" + out.String())
	if lines := strings.Split(strings.TrimSpace(out.String()), "\n"); len(lines) != 6 || !strings.Contains(lines[1], "chain/d") {
		t.Errorf("table:\n%s", out.String())
	}
	cfg.SpeculativeAlgorithm = ""
	if _, err := VerifySteps(context.Background(), cfg, VerifyStepOptions{Batches: []int{1}, DraftTokens: []int{4}, Context: 8, Repeat: 1}); err == nil ||
		!strings.Contains(err.Error(), "--speculative-algorithm") {
		t.Errorf("without an algorithm: %v", err)
	}
}

// TestDivergence: the first differing output token, the plain run's top-2
// margin, and the line the table prints for a run that parts from plain.
func TestDivergence(t *testing.T) {
	for _, tc := range []struct {
		a, b []int
		want int
	}{{[]int{1, 2, 3}, []int{1, 2, 3}, 3}, {[]int{1, 2, 3}, []int{1, 5, 3}, 1}, {[]int{1, 2}, []int{1, 2, 3}, 2}, {nil, []int{4}, 0}} {
		if got := firstDifference(tc.a, tc.b); got != tc.want {
			t.Errorf("firstDifference(%v, %v) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
	if m := top2Margin([]sample.TokenLogprob{{ID: 3, Logprob: -0.5}, {ID: 9, Logprob: -0.75}}); m != 0.25 {
		t.Errorf("margin %v, want 0.25", m)
	}
	if m := top2Margin([]sample.TokenLogprob{{ID: 3, Logprob: -0.5}}); m != -1 {
		t.Errorf("margin of one candidate %v, want -1", m)
	}
	rep := SpeculativeReport{Workload: "prompt", Runs: []SpeculativeRun{{Mode: "plain", SameAsPlain: true},
		{Mode: "NGRAM", Divergence: &Divergence{Position: 7, Plain: 11, Got: 12, Margin: 0.002}}}}
	var out bytes.Buffer
	rep.Print(&out)
	if !strings.Contains(out.String(), "NGRAM parts from plain at output token 7: 12 where plain has 11; plain's top-2 log-probability margin there 0.002") {
		t.Errorf("table:\n%s", out.String())
	}
}
