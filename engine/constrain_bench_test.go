package engine_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/grammar"
	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/model/random"
	"github.com/gosling-ai/gosling/tensor"
)

// BenchmarkConstrainedDecode compares batch-32 decode throughput with
// every request constrained (a JSON Schema, masks over qwen3's 151,936-id
// vocabulary) against the same batch unconstrained, on a random-weight
// model of stories260K's body with qwen3's vocabulary and tokenizer. The
// grammar's vocabulary splits are warmed by one request first, as a
// server's grammar cache does for repeated schemas. Reports tok/s.
func BenchmarkConstrainedDecode(b *testing.B) {
	tokDir := shared.Path(b, "tokenizers/qwen3")
	dir := filepath.Join(b.TempDir(), "qwen3-random")
	shape := random.Presets["stories260K"]
	shape.Vocab, shape.SeqLen, shape.Layers = 151936, 2048, 2
	if err := random.Write(dir, random.Options{Shape: shape, Format: "hf", DType: tensor.F32, Seed: 1}); err != nil {
		b.Fatal(err)
	}
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		data, err := os.ReadFile(filepath.Join(tokDir, f))
		if err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			b.Fatal(err)
		}
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
	var free, constrained [2]float64
	for b.Loop() {
		n, d := run(false)
		free[0], free[1] = free[0]+float64(n), free[1]+d.Seconds()
		n, d = run(true)
		constrained[0], constrained[1] = constrained[0]+float64(n), constrained[1]+d.Seconds()
	}
	b.ReportMetric(free[0]/free[1], "free_tok/s")
	b.ReportMetric(constrained[0]/constrained[1], "constrained_tok/s")
	b.ReportMetric(100*(constrained[0]/constrained[1])/(free[0]/free[1]), "%_of_free")
}
