package bench

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestArrivalOffsetsPoisson(t *testing.T) {
	const n, rate = 20000, 50.0
	at := arrivalOffsets(n, rate, 7)
	if at[0] != 0 {
		t.Errorf("the first request is sent at %v, want 0", at[0])
	}
	gaps := make([]float64, n-1)
	for i := 1; i < n; i++ {
		if at[i] < at[i-1] {
			t.Fatalf("arrival %d at %v precedes arrival %d at %v", i, at[i], i-1, at[i-1])
		}
		gaps[i-1] = (at[i] - at[i-1]).Seconds()
	}
	// Exponential gaps of rate λ: mean 1/λ and standard deviation 1/λ;
	// with 20 000 of them both are within 3% (about 4 standard errors).
	mean := sum(gaps) / float64(len(gaps))
	variance := 0.0
	for _, g := range gaps {
		variance += (g - mean) * (g - mean)
	}
	sd := math.Sqrt(variance / float64(len(gaps)-1))
	if math.Abs(mean*rate-1) > 0.03 {
		t.Errorf("mean gap %.5fs, want %.5fs", mean, 1/rate)
	}
	if math.Abs(sd/mean-1) > 0.03 {
		t.Errorf("coefficient of variation %.3f, want 1 (exponential gaps)", sd/mean)
	}
	// Memorylessness: the share of gaps above the mean is e^-1.
	above := 0
	for _, g := range gaps {
		if g > 1/rate {
			above++
		}
	}
	if frac := float64(above) / float64(len(gaps)); math.Abs(frac-math.Exp(-1)) > 0.015 {
		t.Errorf("%.3f of the gaps exceed 1/λ, want %.3f", frac, math.Exp(-1))
	}
	if again := arrivalOffsets(n, rate, 7); !slices.Equal(at, again) {
		t.Errorf("the same seed gave another schedule")
	}
	if other := arrivalOffsets(n, rate, 8); slices.Equal(at, other) {
		t.Errorf("another seed gave the same schedule")
	}
	for _, r := range []float64{math.Inf(1), 0} {
		for i, d := range arrivalOffsets(5, r, 1) {
			if d != 0 {
				t.Errorf("rate %v: request %d sent at %v, want all at once", r, i, d)
			}
		}
	}
}

func TestPercentile(t *testing.T) {
	for _, c := range []struct {
		values []float64
		p      float64
		want   float64
	}{
		// numpy.percentile (linear) gives these.
		{[]float64{1, 2, 3, 4}, 50, 2.5},
		{[]float64{1, 2, 3, 4}, 99, 3.97},
		{[]float64{1, 2, 3, 4}, 0, 1},
		{[]float64{1, 2, 3, 4}, 100, 4},
		{[]float64{15, 20, 35, 40, 50}, 40, 29},
		{[]float64{15, 20, 35, 40, 50}, 50, 35},
		{[]float64{7}, 99, 7},
		{nil, 50, 0},
	} {
		if got := percentile(c.values, c.p); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("percentile(%v, %v) = %v, want %v", c.values, c.p, got, c.want)
		}
	}
	values := make([]float64, 100) // 100, 99, ..., 1: unsorted on purpose
	for i := range values {
		values[i] = float64(100 - i)
	}
	mean, median, p99 := meanMedianP99(values)
	if mean != 50.5 || median != 50.5 || math.Abs(p99-99.01) > 1e-9 {
		t.Errorf("mean, median, p99 of 1..100 = %v, %v, %v; want 50.5, 50.5, 99.01", mean, median, p99)
	}
	if values[0] != 100 {
		t.Errorf("meanMedianP99 sorted its argument")
	}
}

func TestSummarize(t *testing.T) {
	ms := time.Millisecond
	results := []requestResult{
		{promptLen: 10, outputLen: 3, cached: 4, ttft: 10 * ms, e2e: 30 * ms, itls: []time.Duration{10 * ms, 10 * ms}},
		{promptLen: 20, outputLen: 5, ttft: 20 * ms, e2e: 60 * ms, itls: []time.Duration{10 * ms, 10 * ms, 10 * ms, 10 * ms}},
		{promptLen: 30, err: errNoDone},
		{promptLen: 30, err: errNoDone},
	}
	rep := &ServingReport{}
	rep.summarize(results, 2*time.Second)
	if rep.Completed != 2 || rep.Failed != 2 || len(rep.Errors) != 1 {
		t.Errorf("completed %d, failed %d, errors %q; want 2, 2 and one message", rep.Completed, rep.Failed, rep.Errors)
	}
	if rep.TotalInputTokens != 30 || rep.TotalOutputTokens != 8 || rep.CachedTokens != 4 {
		t.Errorf("tokens in %d, out %d, cached %d; want 30, 8, 4", rep.TotalInputTokens, rep.TotalOutputTokens, rep.CachedTokens)
	}
	if rep.RequestThroughput != 1 || rep.OutputThroughput != 4 || rep.InputThroughput != 15 {
		t.Errorf("throughputs %v req/s, %v in, %v out", rep.RequestThroughput, rep.InputThroughput, rep.OutputThroughput)
	}
	if rep.MeanTTFTMs != 15 || rep.MeanE2EMs != 45 || rep.MeanTPOTMs != 10 || rep.MeanITLMs != 10 {
		t.Errorf("mean TTFT %v, E2E %v, TPOT %v, ITL %v; want 15, 45, 10, 10", rep.MeanTTFTMs, rep.MeanE2EMs, rep.MeanTPOTMs, rep.MeanITLMs)
	}
	if math.Abs(rep.Concurrency-0.045) > 1e-12 || math.Abs(rep.CacheHitRate-4.0/30) > 1e-12 {
		t.Errorf("concurrency %v, cache hit rate %v", rep.Concurrency, rep.CacheHitRate)
	}
}

func TestTokenClock(t *testing.T) {
	start := time.Unix(0, 0)
	var r requestResult
	k := tokenClock{start: start, r: &r}
	k.arrived(start.Add(50*time.Millisecond), 2) // the first chunk: TTFT only
	k.arrived(start.Add(60*time.Millisecond), 0) // no new token: ignored
	k.arrived(start.Add(70*time.Millisecond), 1)
	k.arrived(start.Add(100*time.Millisecond), 3) // 30 ms over 3 tokens
	want := []time.Duration{20 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond}
	if r.ttft != 50*time.Millisecond || !slices.Equal(r.itls, want) {
		t.Errorf("TTFT %v, ITLs %v; want 50ms, %v", r.ttft, r.itls, want)
	}
}

func TestRandomPrompts(t *testing.T) {
	o := ServingOptions{NumPrompts: 200, InputLen: 40, OutputLen: 10, RangeRatio: 0.5, SharedPrefixLen: 16, Seed: 3}
	ps := randomPrompts(o, 100)
	for i, p := range ps {
		if n := len(p.ids); n < 20 || n > 40 {
			t.Fatalf("prompt %d has %d tokens, want 20..40", i, n)
		}
		if p.outputLen < 5 || p.outputLen > 10 {
			t.Fatalf("prompt %d asks for %d tokens, want 5..10", i, p.outputLen)
		}
		if !slices.Equal(p.ids[:16], ps[0].ids[:16]) {
			t.Fatalf("prompt %d does not start with the shared prefix", i)
		}
		for _, id := range p.ids {
			if id < firstRandomID || id >= 100 {
				t.Fatalf("prompt %d has token %d outside [%d, 100)", i, id, firstRandomID)
			}
		}
	}
	if slices.Equal(ps[0].ids[16:], ps[1].ids[16:]) {
		t.Errorf("two prompts share their suffix")
	}
	o.RangeRatio, o.SharedPrefixLen = 1, 0
	for i, p := range randomPrompts(o, 100) {
		if len(p.ids) != 40 || p.outputLen != 10 {
			t.Fatalf("range ratio 1: prompt %d has %d tokens and asks for %d, want 40 and 10", i, len(p.ids), p.outputLen)
		}
	}
}

func TestParseCacheHitRate(t *testing.T) {
	metrics := `# HELP gosling:cache_hit_rate Fraction of prompt tokens served from the prefix cache, since the start.
# TYPE gosling:cache_hit_rate gauge
gosling:cache_hit_rate_other{model_name="m"} 0.9
gosling:cache_hit_rate{model_name="m"} 0.25
`
	if v := parseCacheHitRate(strings.NewReader(metrics)); v == nil || *v != 0.25 {
		t.Errorf("gosling: got %v, want 0.25", v)
	}
	if v := parseCacheHitRate(strings.NewReader("sglang:cache_hit_rate 0.5\n")); v == nil || *v != 0.5 {
		t.Errorf("sglang without labels: got %v, want 0.5", v)
	}
	if v := parseCacheHitRate(strings.NewReader("gosling:num_running_reqs 1\n")); v != nil {
		t.Errorf("no gauge: got %v, want nil", *v)
	}
}
