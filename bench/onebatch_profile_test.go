package bench

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/engine"
)

// TestOneBatchProfile runs bench one-batch in-process so that
// `go test -cpuprofile` can profile a decode: set GOSLING_ONEBATCH_MODEL
// to a model path (and optionally GOSLING_ONEBATCH_BATCH=1,8,32,
// GOSLING_ONEBATCH_DTYPE, GOSLING_ONEBATCH_QUANT, GOSLING_ONEBATCH_IN and
// _OUT for the prompt and output lengths, 16 and 128 by default,
// GOSLING_ONEBATCH_PAGE for the page size). Skipped
// otherwise; it
// prints figures and asserts nothing about speed.
func TestOneBatchProfile(t *testing.T) {
	path := os.Getenv("GOSLING_ONEBATCH_MODEL")
	if path == "" {
		t.Skip("GOSLING_ONEBATCH_MODEL not set")
	}
	batches := []int{32}
	if s := os.Getenv("GOSLING_ONEBATCH_BATCH"); s != "" {
		batches = batches[:0]
		for _, f := range strings.Split(s, ",") {
			b, err := strconv.Atoi(f)
			if err != nil {
				t.Fatal(err)
			}
			batches = append(batches, b)
		}
	}
	cfg := engine.Config{ModelPath: path, DType: os.Getenv("GOSLING_ONEBATCH_DTYPE"), Quantization: os.Getenv("GOSLING_ONEBATCH_QUANT"),
		AttentionBackend: os.Getenv("GOSLING_ONEBATCH_ATTN")}
	if ps := envInt(t, "GOSLING_ONEBATCH_PAGE", 0); ps > 0 {
		cfg.PageSize, cfg.PageSizeSet = ps, true
	}
	in, out := envInt(t, "GOSLING_ONEBATCH_IN", 16), envInt(t, "GOSLING_ONEBATCH_OUT", 128)
	rep, err := OneBatch(context.Background(), cfg, OneBatchOptions{Batches: batches, InputLen: in, OutputLen: out}, Roofline{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Results {
		t.Logf("batch %d: decode %.1f tok/s, %.2f ms/step", r.Batch, r.DecodeTokS, r.DecodeStepMs)
	}
}

func envInt(t *testing.T, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, s, err)
	}
	return v
}
