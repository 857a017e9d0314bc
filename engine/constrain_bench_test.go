package engine_test

import (
	"context"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/grammar"
	"github.com/gosling-ai/gosling/internal/cputime"
	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/model/random"
	"github.com/gosling-ai/gosling/tensor"
)

// BenchmarkConstrainedDecode compares batch-32 decode throughput with
// every request constrained (a JSON Schema, masks over qwen3's 151,936-id
// vocabulary) against the same batch unconstrained, on a random-weight
// model of stories260K's body with qwen3's vocabulary and tokenizer. The
// grammar's vocabulary splits are warmed by one request first, as a
// server's grammar cache does for repeated schemas. Each iteration is one
// repeat of both batches, in alternating order, so that a slow spell of
// the machine falls on both; it reports the median over repeats of the
// constrained/unconstrained ratio with its range, in wall time and in the
// process's CPU time (which other processes on a shared machine disturb
// less), the median tok/s of each, and the median load average over the
// repeats (each repeat's is logged with it).
//
//	go test ./engine -run '^$' -bench ConstrainedDecode -benchtime 7x -v
func BenchmarkConstrainedDecode(b *testing.B) {
	tokDir := shared.Path(b, "tokenizers/qwen3")
	dir := filepath.Join(b.TempDir(), "qwen3-random")
	shape := random.Presets["stories260K"]
	shape.Vocab, shape.SeqLen, shape.Layers = 151936, 2048, 2
	if err := random.Write(dir, random.Options{Shape: shape, Format: "hf", DType: tensor.F32, Seed: 1}); err != nil {
		b.Fatal(err)
	}
	if err := random.CopyTokenizer(dir, tokDir); err != nil {
		b.Fatal(err)
	}
	e := newEngine(b, engine.Config{ModelPath: dir, MaxRunningRequests: 32, KVCacheTokens: 32 * 256})
	vocab, err := e.GrammarVocab()
	if err != nil {
		b.Fatal(err)
	}
	g, err := grammar.JSONSchema([]byte(`{"type":"object","properties":{"name":{"type":"string"},"tags":{"type":"array","items":{"type":"string"}},
		"score":{"type":"number"}},"required":["name","tags","score"]}`), grammar.JSONOptions{MaxWhitespace: 4})
	if err != nil {
		b.Fatal(err)
	}
	compiled := grammar.Compile(g, vocab)
	const batch, maxNew = 32, 48
	run := func(constrained bool) (tokens int, elapsed time.Duration) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		start := time.Now()
		for i := range batch {
			wg.Go(func() {
				p := greedy(maxNew)
				p.Temperature = 1
				seed := uint64(i)
				p.Seed = &seed
				p.IgnoreEOS = !constrained
				req := engine.Request{InputIDs: []int{9707, 11, 1879}, Sampling: p}
				if constrained {
					req.Grammar = compiled
				}
				res, err := e.Generate(context.Background(), req)
				if err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				tokens += len(res.OutputIDs)
				mu.Unlock()
			})
		}
		wg.Wait()
		return tokens, time.Since(start)
	}
	run(true) // warm the grammar's vocabulary splits
	var free, constrained, ratio, cpuRatio, loads []float64
	for b.Loop() {
		var rate, cpuRate [2]float64
		load, _ := cputime.LoadAverage()
		loads = append(loads, load)
		order := []bool{false, true}
		if len(ratio)%2 == 1 {
			order = []bool{true, false}
		}
		for _, c := range order {
			startCPU := cputime.Process()
			n, d := run(c)
			k := 0
			if c {
				k = 1
			}
			rate[k] = float64(n) / d.Seconds()
			if cpu := (cputime.Process() - startCPU).Seconds(); cpu > 0 {
				cpuRate[k] = float64(n) / cpu
			}
		}
		free = append(free, rate[0])
		constrained = append(constrained, rate[1])
		ratio = append(ratio, 100*rate[1]/rate[0])
		if cpuRate[0] > 0 {
			cpuRatio = append(cpuRatio, 100*cpuRate[1]/cpuRate[0])
		}
		b.Logf("repeat %d (load average %.2f): free %.0f tok/s, constrained %.0f tok/s, %.1f%% (CPU time: %.1f%%)",
			len(ratio), load, rate[0], rate[1], ratio[len(ratio)-1], 100*cpuRate[1]/max(cpuRate[0], 1e-9))
	}
	b.ReportMetric(median(free), "free_tok/s")
	b.ReportMetric(median(constrained), "constrained_tok/s")
	b.ReportMetric(median(ratio), "%_of_free")
	b.ReportMetric(slices.Min(ratio), "%_of_free_min")
	b.ReportMetric(slices.Max(ratio), "%_of_free_max")
	if len(cpuRatio) > 0 {
		b.ReportMetric(median(cpuRatio), "%_of_free_cpu")
		b.ReportMetric(slices.Min(cpuRatio), "%_of_free_cpu_min")
		b.ReportMetric(slices.Max(cpuRatio), "%_of_free_cpu_max")
	}
	b.ReportMetric(median(loads), "load_avg")
}

// median of xs (the mean of the middle two for an even count).
func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
