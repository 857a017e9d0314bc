package main

import (
	"encoding/json"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/internal/shared"
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

// TestBenchOneBatchMoE: for a mixture of experts the report splits the
// weights into the dense ones and the routed experts, and each batch's
// roofline reads what its step reads: one token's experts at batch 1,
// more of them at batch 8, never more than all the weights.
func TestBenchOneBatchMoE(t *testing.T) {
	model := shared.Path(t, "models/reference-tiny/qwen3_moe")
	out, stderr, err := run(t, "", "bench", "one-batch", "--model-path", model, "--batch", "1,8", "--input-len", "8", "--output-len", "4",
		"--buffer-mib", "8", "--runs", "1", "--fma-ms", "20", "--json")
	if err != nil {
		t.Fatalf("bench one-batch: %v\n%s", err, stderr)
	}
	var rep struct {
		WeightBytes int64 `json:"weight_bytes_per_token"`
		Routed      int64 `json:"routed_expert_bytes"`
		Experts     int   `json:"experts"`
		PerToken    int   `json:"experts_per_token"`
		Active      int64 `json:"active_weight_bytes_per_token"`
		Roofline    struct {
			ReadGBs float64 `json:"read_gb_per_s"`
		} `json:"roofline"`
		Results []struct {
			Batch     int     `json:"batch"`
			StepBytes int64   `json:"decode_weight_bytes_per_step"`
			ReadGBs   float64 `json:"read_gb_per_s"`
			Roofline  float64 `json:"decode_roofline_tok_per_s"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("no JSON: %v\n%s", err, out)
	}
	if rep.Experts != 8 || rep.PerToken != 2 || rep.Routed <= 0 || rep.Routed >= rep.WeightBytes {
		t.Fatalf("experts %d top %d, routed %d of %d bytes", rep.Experts, rep.PerToken, rep.Routed, rep.WeightBytes)
	}
	if want := rep.WeightBytes - rep.Routed + rep.Routed*2/8; rep.Active != want {
		t.Errorf("active bytes per token %d, want %d (dense and 2 of 8 experts)", rep.Active, want)
	}
	if len(rep.Results) != 2 {
		t.Fatalf("%d results", len(rep.Results))
	}
	one, eight := rep.Results[0], rep.Results[1]
	if one.StepBytes != rep.Active || !(one.StepBytes < eight.StepBytes && eight.StepBytes < rep.WeightBytes) {
		t.Errorf("bytes per step %d (batch 1) and %d (batch 8), active %d, all %d", one.StepBytes, eight.StepBytes, rep.Active, rep.WeightBytes)
	}
	for _, r := range rep.Results {
		if want := float64(r.Batch) * r.ReadGBs * 1e9 / float64(r.StepBytes); math.Abs(r.Roofline-want) > 1e-6*want {
			t.Errorf("batch %d roofline %.1f tok/s, want %.1f from its %d bytes per step", r.Batch, r.Roofline, want, r.StepBytes)
		}
	}
}

// TestBenchAllReduce: the sweep doubles from --min-bytes to --max-bytes
// and reports nccl-tests' bus bandwidth (algbw · 2(n-1)/n); over NCCL
// without libnccl.so.2 it fails naming the library.
func TestBenchAllReduce(t *testing.T) {
	for _, ranks := range []int{2, 4} {
		out, stderr, err := run(t, "", "bench", "allreduce", "--backend", "local", "--ngpus", strconv.Itoa(ranks),
			"--min-bytes", "4K", "--max-bytes", "64K", "--dtype", "float32", "--iters", "3", "--json")
		if err != nil {
			t.Fatalf("%v\n%s", err, stderr)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 5 {
			t.Fatalf("%d sizes from 4K to 64K, want 5:\n%s", len(lines), out)
		}
		for i, line := range lines {
			var r struct {
				Bytes int64   `json:"bytes"`
				Count int     `json:"count"`
				AlgBW float64 `json:"alg_bw_gbs"`
				BusBW float64 `json:"bus_bw_gbs"`
			}
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatal(err)
			}
			want := float64(2*(ranks-1)) / float64(ranks) * r.AlgBW
			if r.Bytes != 4096<<i || r.Count != int(r.Bytes/4) || r.AlgBW <= 0 || math.Abs(r.BusBW-want) > 1e-9*want {
				t.Errorf("ranks %d size %d: %+v (bus bandwidth want %v)", ranks, i, r, want)
			}
		}
	}
	// The custom all-reduce is a GPU kernel: not over CPU ranks.
	if _, stderr, err := run(t, "", "bench", "allreduce", "--backend", "local", "--custom"); err == nil ||
		!strings.Contains(stderr, "the custom all-reduce runs on GPUs (backend nccl)") {
		t.Errorf("--custom over CPU ranks: %v, %q", err, stderr)
	}
	if _, stderr, err := run(t, "", "bench", "allreduce", "--backend", "local", "--graph"); err == nil ||
		!strings.Contains(stderr, "CUDA graphs are for GPUs (backend nccl)") {
		t.Errorf("--graph over CPU ranks: %v, %q", err, stderr)
	}
	_, stderr, err := run(t, "", "bench", "allreduce", "--ngpus", "2", "--max-bytes", "1M")
	if err == nil || !strings.Contains(stderr, "libnccl.so.2 not found") {
		t.Skipf("NCCL loads here (err %v)", err)
	}
	if !strings.Contains(stderr, "install NCCL") {
		t.Errorf("bench allreduce without NCCL says no more than %q", stderr)
	}
}
