package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gosling-ai/gosling/bench"
	"github.com/gosling-ai/gosling/internal/shared"
)

// startServe runs 'gosling serve' on a free port and returns its URL; the
// process is stopped (SIGINT, a graceful shutdown) when the test ends.
func startServe(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"serve", "--port", "0"}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		if err := cmd.Wait(); err != nil {
			t.Errorf("gosling serve exited with %v", err)
		}
	})
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		re := regexp.MustCompile(`on (http://[^ ]+) `)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
				break
			}
		}
		io.Copy(io.Discard, stderr) // keep the pipe drained
	}()
	select {
	case url := <-found:
		return url
	case <-time.After(time.Minute):
		t.Fatal("gosling serve did not say where it listens within a minute")
	}
	return ""
}

// serverCounter reads a counter of the server's /metrics.
func serverCounter(t *testing.T, base, name string) int {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && strings.HasPrefix(f[0], name) && !strings.HasPrefix(f[0], "#") {
			v, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				t.Fatal(err)
			}
			return int(v)
		}
	}
	t.Fatalf("/metrics has no %s", name)
	return 0
}

// TestBenchServingAgainstServe drives a real 'gosling serve' process on
// stories260K with 'gosling bench serving' through both backends and
// both datasets, and checks the results against the server's own counts.
func TestBenchServingAgainstServe(t *testing.T) {
	modelPath := shared.Path(t, "models/stories260K/stories260K.gguf")
	// The model has no chat template; this one makes a chat the message.
	base := startServe(t, "--model-path", modelPath, "--page-size", "16", "--max-running-requests", "8",
		"--chat-template", "{% for m in messages %}{{ m['content'] }}{% endfor %}")
	var info struct {
		DisableOverlapSchedule *bool `json:"disable_overlap_schedule"`
	}
	resp, err := http.Get(base + "/get_server_info")
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&info)
	resp.Body.Close()
	if err != nil || info.DisableOverlapSchedule == nil || *info.DisableOverlapSchedule {
		t.Errorf("/get_server_info: disable_overlap_schedule %v (%v); want false, the default", info.DisableOverlapSchedule, err)
	}
	dir := t.TempDir()
	conversations := []map[string]any{}
	for i, p := range []string{"Once upon a time, there was a little girl named Lily.", "Tom had a red ball. He liked to play with it every day.",
		"The sun was hot and the birds sang.", "One day, a cat found a big box in the garden.", "Mom said, let us go to the park today.",
		"", "Sue and Ben were friends. They liked to run and jump."} {
		conversations = append(conversations, map[string]any{"id": fmt.Sprint(i), "conversations": []map[string]string{
			{"from": "human", "value": p}, {"from": "gpt", "value": strings.Repeat("They were happy. ", 1+i%3)}}})
	}
	conversations = append(conversations, map[string]any{"conversations": []map[string]string{{"from": "human", "value": "alone"}}})
	raw, _ := json.Marshal(conversations)
	sharegpt := filepath.Join(dir, "sharegpt.json")
	if err := os.WriteFile(sharegpt, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	outFile := filepath.Join(dir, "results.jsonl")
	runs := []struct {
		name string
		args []string
	}{
		{"random/openai", []string{"--backend", "openai", "--num-prompts", "12", "--random-input-len", "40", "--random-output-len", "16",
			"--random-range-ratio", "0.5", "--request-rate", "40", "--max-concurrency", "4"}},
		{"random/gosling", []string{"--backend", "gosling", "--num-prompts", "10", "--random-input-len", "24", "--random-output-len", "12",
			"--random-range-ratio", "1", "--request-rate", "inf"}},
		{"sharegpt/openai", []string{"--backend", "openai", "--dataset-name", "sharegpt", "--dataset-path", sharegpt, "--num-prompts", "6"}},
		{"sharegpt/openai-chat", []string{"--backend", "openai-chat", "--dataset-name", "sharegpt", "--dataset-path", sharegpt, "--num-prompts", "6",
			"--sharegpt-output-len", "9", "--max-concurrency", "2"}},
	}
	for i, r := range runs {
		genBefore, promptBefore := serverCounter(t, base, "gosling:generation_tokens_total"), serverCounter(t, base, "gosling:prompt_tokens_total")
		args := append([]string{"bench", "serving", "--base-url", base, "--tokenizer", modelPath, "--output-file", outFile,
			"--output-details", "--disable-progress", "--seed", "3"}, r.args...)
		out, stderr, err := run(t, "", args...)
		if err != nil {
			t.Fatalf("%s: %v\n%s", r.name, err, stderr)
		}
		if !strings.Contains(out, "Successful requests:") || !strings.Contains(out, "Median TPOT (ms):") {
			t.Errorf("%s: the table is missing rows:\n%s", r.name, out)
		}
		lines := readLines(t, outFile)
		if len(lines) != i+1 {
			t.Fatalf("%s: %d lines in --output-file, want %d (one appended per run)", r.name, len(lines), i+1)
		}
		var res bench.ServingReport
		if err := json.Unmarshal([]byte(lines[i]), &res); err != nil {
			t.Fatal(err)
		}
		chat := strings.HasSuffix(r.name, "chat") // the template's rendering is the server's to count
		checkServingResult(t, r.name, res, chat)
		// The server counted what the client counted, plus the warm-up
		// request: 16 prompt tokens, 4 generated.
		gen := serverCounter(t, base, "gosling:generation_tokens_total") - genBefore
		prompt := serverCounter(t, base, "gosling:prompt_tokens_total") - promptBefore
		if gen != res.TotalOutputTokens+4 || prompt != res.TotalInputTokens+16 && !chat {
			t.Errorf("%s: the server generated %d tokens from %d prompt tokens; the client counted %d from %d, plus a warm-up of 4 from 16",
				r.name, gen, prompt, res.TotalOutputTokens, res.TotalInputTokens)
		}
		if strings.HasPrefix(r.name, "sharegpt") {
			// The conversation without a reply and the empty prompt (BOS
			// alone) are passed over: six of eight remain.
			if res.Dataset != "sharegpt" || slices.Contains(res.InputLens, 1) {
				t.Errorf("sharegpt: dataset %q, input lengths %v", res.Dataset, res.InputLens)
			}
		}
	}

	// More prompts than usable conversations is an error, not a shorter run.
	out, stderr, err := run(t, "", "bench", "serving", "--base-url", base, "--backend", "openai", "--dataset-name", "sharegpt",
		"--dataset-path", sharegpt, "--num-prompts", "7", "--tokenizer", modelPath, "--disable-progress")
	if err == nil || !strings.Contains(stderr, "usable conversations") {
		t.Errorf("asking for more conversations than usable: %v\n%s%s", err, out, stderr)
	}
	if _, stderr, err = run(t, "", "bench", "serving", "--base-url", base, "--dataset-name", "sharegpt", "--dataset-path", sharegpt); err == nil ||
		!strings.Contains(stderr, "--tokenizer") {
		t.Errorf("sharegpt without a tokenizer: %v\n%s", err, stderr)
	}
	if _, stderr, err = run(t, "", "bench", "serving", "--base-url", base, "--backend", "openai-chat", "--num-prompts", "2"); err == nil ||
		!strings.Contains(stderr, "tokenizer") {
		t.Errorf("openai-chat without a tokenizer: %v\n%s", err, stderr)
	}
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(data)), "\n")
}

// checkServingResult: every request is accounted for, each got the
// output length it asked for (ignore_eos) as the server reported it, the
// server saw the prompt lengths the client measured, and the figures are
// ordered as statistics must be.
func checkServingResult(t *testing.T, name string, res bench.ServingReport, chat bool) {
	t.Helper()
	n := res.NumPrompts
	if res.Completed != n || res.Failed != 0 || len(res.OutputLens) != n || len(res.InputLens) != n || len(res.TTFTs) != n {
		t.Fatalf("%s: %d completed, %d failed of %d; %d per-request entries; errors %q", name, res.Completed, res.Failed, n, len(res.OutputLens), res.RequestErrors)
	}
	if !res.TextPrompts {
		t.Errorf("%s: prompts were not sent as text although a tokenizer was given", name)
	}
	sumIn, sumOut := 0, 0
	for i := range n {
		sumIn += res.InputLens[i]
		sumOut += res.OutputLens[i]
		if res.OutputLens[i] != res.ExpectedOutputLens[i] {
			t.Errorf("%s: request %d generated %d tokens, asked for %d", name, i, res.OutputLens[i], res.ExpectedOutputLens[i])
		}
		if res.ServerInputLens[i] != res.InputLens[i] && !chat || res.ServerInputLens[i] <= 0 {
			t.Errorf("%s: request %d: the server counted %d prompt tokens, the client %d", name, i, res.ServerInputLens[i], res.InputLens[i])
		}
		if res.TTFTs[i] <= 0 || res.RequestErrors[i] != "" {
			t.Errorf("%s: request %d: TTFT %v, error %q", name, i, res.TTFTs[i], res.RequestErrors[i])
		}
	}
	if sumIn != res.TotalInputTokens || sumOut != res.TotalOutputTokens {
		t.Errorf("%s: totals %d in, %d out; the requests sum to %d and %d", name, res.TotalInputTokens, res.TotalOutputTokens, sumIn, sumOut)
	}
	for _, m := range []struct {
		name              string
		mean, median, p99 float64
	}{{"TTFT", res.MeanTTFTMs, res.MedianTTFTMs, res.P99TTFTMs}, {"TPOT", res.MeanTPOTMs, res.MedianTPOTMs, res.P99TPOTMs},
		{"ITL", res.MeanITLMs, res.MedianITLMs, res.P99ITLMs}, {"E2E", res.MeanE2EMs, res.MedianE2EMs, res.P99E2EMs}} {
		if !(m.median > 0 && m.median <= m.p99 && m.mean > 0 && m.mean <= m.p99) {
			t.Errorf("%s: %s mean %v, median %v, p99 %v: not ordered", name, m.name, m.mean, m.median, m.p99)
		}
	}
	if !(res.MedianTTFTMs <= res.MedianE2EMs) || res.RequestThroughput <= 0 {
		t.Errorf("%s: median TTFT %v, median E2E %v, %v req/s", name, res.MedianTTFTMs, res.MedianE2EMs, res.RequestThroughput)
	}
	if tokens := res.OutputThroughput * res.Duration; int(tokens+0.5) != res.TotalOutputTokens {
		t.Errorf("%s: output throughput × duration = %v, want %d tokens", name, tokens, res.TotalOutputTokens)
	}
}
