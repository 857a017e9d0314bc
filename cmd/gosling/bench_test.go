package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// TestModelRandomAndBench writes a small random model with the CLI, then
// serves it converted to bf16 and quantised to Q8_0 in `bench one-batch`.
func TestModelRandomAndBench(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tiny.bin")
	out, stderr, err := run(t, "", "model", "random", "--shape", "stories260K", "--layers", "2", "--hidden", "96",
		"--format", "llama2c", "--out", path)
	if err != nil || !strings.Contains(out, "wrote") {
		t.Fatalf("model random: %v\n%s%s", err, out, stderr)
	}
	for _, args := range [][]string{{"--dtype", "bfloat16", "--repeat", "3"}, {"--quantization", "q8_0"}} {
		out, stderr, err = run(t, "", append([]string{"bench", "one-batch", "--model-path", path, "--batch", "1,3",
			"--input-len", "8", "--output-len", "4", "--buffer-mib", "8", "--runs", "1", "--fma-ms", "20", "--json"}, args...)...)
		if err != nil {
			t.Fatalf("bench one-batch %v: %v\n%s", args, err, stderr)
		}
		var rep struct {
			WeightBytes int64 `json:"weight_bytes_per_token"`
			Results     []struct {
				Batch      int     `json:"batch"`
				DecodeTokS float64 `json:"decode_tok_per_s"`
				Roofline   float64 `json:"decode_roofline_tok_per_s"`
				Runs       int     `json:"runs"`
				Min        float64 `json:"decode_tok_per_s_min"`
				Max        float64 `json:"decode_tok_per_s_max"`
			} `json:"results"`
		}
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("bench one-batch %v printed no JSON: %v\n%s", args, err, out)
		}
		if len(rep.Results) != 2 || rep.Results[1].Batch != 3 || rep.Results[1].DecodeTokS <= 0 || rep.Results[0].Roofline <= 0 || rep.WeightBytes <= 0 {
			t.Errorf("bench one-batch %v: %s", args, out)
		}
		wantRuns := 1
		if len(args) > 2 {
			wantRuns = 3
		}
		for _, r := range rep.Results {
			if r.Runs != wantRuns || r.Min > r.DecodeTokS || r.DecodeTokS > r.Max {
				t.Errorf("bench one-batch %v: batch %d has %d runs (want %d), median %v outside [%v, %v]", args, r.Batch, r.Runs, wantRuns, r.DecodeTokS, r.Min, r.Max)
			}
		}
	}
	if _, stderr, err = run(t, "", "bench", "one-batch", "--model-path", path, "--repeat", "0"); err == nil || !strings.Contains(stderr, "--repeat") {
		t.Errorf("--repeat 0 was accepted or not explained: %s", stderr)
	}
	out, _, err = run(t, "", "bench", "roofline", "--buffer-mib", "8", "--runs", "1", "--fma-ms", "20")
	if err != nil || !strings.Contains(out, "GB/s") || !strings.Contains(out, "GFLOP/s") {
		t.Errorf("bench roofline: %v\n%s", err, out)
	}
	if _, stderr, err = run(t, "", "model", "random", "--shape", "nope", "--out", path); err == nil || !strings.Contains(stderr, "presets") {
		t.Errorf("an unknown shape was accepted or not explained: %s", stderr)
	}
}
