package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/internal/shared"
)

// TestServingEndToEnd runs the load generator through both backends
// against stories260K served in this process, and checks that every
// request succeeded with the lengths it asked for.
func TestServingEndToEnd(t *testing.T) {
	servingModel := shared.Path(t, "models/stories260K/stories260K.gguf")
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	base, stop, err := StartServer(engine.Config{ModelPath: servingModel, MaxRunningRequests: 8}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := &servingClient{base: base, http: http.DefaultClient}
	info, err := c.modelInfo(ctx)
	if err != nil || info.VocabSize <= 0 {
		t.Fatalf("get_model_info: %+v, %v", info, err)
	}

	for _, backend := range []string{"gosling", "openai"} {
		t.Run(backend, func(t *testing.T) {
			o := ServingOptions{BaseURL: base, Backend: backend, NumPrompts: 8, InputLen: 48, OutputLen: 12, RangeRatio: 0.5,
				SharedPrefixLen: 24, RequestRate: 200, MaxConcurrency: 4, Seed: 5}
			rep, results, err := runServing(ctx, o)
			if err != nil {
				t.Fatal(err)
			}
			prompts := randomPrompts(o, info.VocabSize)
			wantIn, wantOut := 0, 0
			for i, r := range results {
				p := prompts[i]
				wantIn += len(p.ids)
				wantOut += p.outputLen
				if r.err != nil {
					t.Errorf("request %d failed: %v", i, r.err)
					continue
				}
				if r.promptLen != len(p.ids) || r.serverPrompt != len(p.ids) || r.outputLen != p.outputLen {
					t.Errorf("request %d: prompt %d tokens (server: %d), output %d; want %d and %d",
						i, r.promptLen, r.serverPrompt, r.outputLen, len(p.ids), p.outputLen)
				}
				// The native stream says how many tokens each event brings,
				// so there is one ITL per token after the first; an openai
				// chunk may hold several tokens or none.
				if backend == "gosling" && len(r.itls) != p.outputLen-1 {
					t.Errorf("request %d: %d ITLs for %d tokens", i, len(r.itls), p.outputLen)
				}
				if r.ttft <= 0 || r.e2e < r.ttft || len(r.itls) == 0 || len(r.itls) > p.outputLen-1 {
					t.Errorf("request %d: TTFT %v, E2E %v, %d ITLs", i, r.ttft, r.e2e, len(r.itls))
				}
			}
			if rep.Completed != o.NumPrompts || rep.Failed != 0 || rep.TotalInputTokens != wantIn || rep.TotalOutputTokens != wantOut {
				t.Errorf("report: %d completed, %d failed %q, %d input and %d output tokens; want %d, 0, %d and %d",
					rep.Completed, rep.Failed, rep.Errors, rep.TotalInputTokens, rep.TotalOutputTokens, o.NumPrompts, wantIn, wantOut)
			}
			// Four requests wait for the first four, whose prompts are
			// cached by then: the shared prefix is a hit for them.
			if rep.CachedTokens < 4*o.SharedPrefixLen || rep.RadixCache != "on" {
				t.Errorf("%d cached prompt tokens (radix cache %q); want at least %d", rep.CachedTokens, rep.RadixCache, 4*o.SharedPrefixLen)
			}
			if b, a := rep.ServerCacheHitRateBefore, rep.ServerCacheHitRateAfter; b == nil || a == nil || *a <= 0 {
				t.Errorf("/metrics cache hit rate before %v, after %v", b, a)
			}
			if rep.MeanTTFTMs <= 0 || rep.MeanITLMs <= 0 || rep.P99E2EMs < rep.MedianE2EMs || rep.OutputThroughput <= 0 {
				t.Errorf("figures: %+v", rep)
			}

			var out bytes.Buffer
			rep.Print(&out)
			if !strings.Contains(out.String(), "Successful requests:                     8\n") {
				t.Errorf("the table lacks the count of requests:\n%s", out.String())
			}
			raw, err := json.Marshal(rep)
			if err != nil {
				t.Fatal(err)
			}
			var back ServingReport
			if err := json.Unmarshal(raw, &back); err != nil || back.Completed != rep.Completed || back.RequestRate != 200 {
				t.Errorf("JSON round trip: %v\n%s", err, raw)
			}
		})
	}
}
