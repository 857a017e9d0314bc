package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ServingReport is one serving run. The names of the JSON fields are those
// of SGLang's bench_serving output where it has the figure.
type ServingReport struct {
	Backend         string   `json:"backend"`
	BaseURL         string   `json:"base_url"`
	Model           string   `json:"model,omitempty"`
	RadixCache      string   `json:"radix_cache,omitempty"` // "on", "off", or "" when the server does not say
	NumPrompts      int      `json:"num_prompts"`
	RequestRate     jsonRate `json:"request_rate"`    // "inf" for all at once
	MaxConcurrency  int      `json:"max_concurrency"` // 0: no cap
	InputLen        int      `json:"random_input_len"`
	OutputLen       int      `json:"random_output_len"`
	RangeRatio      float64  `json:"random_range_ratio"`
	SharedPrefixLen int      `json:"shared_prefix_len"`
	Dataset         string   `json:"dataset_name"`
	DatasetPath     string   `json:"dataset_path,omitempty"`
	// TextPrompts: prompts were sent as text, their lengths measured by
	// the tokenizer; else as token ids.
	TextPrompts bool `json:"text_prompts"`

	Completed int `json:"completed"`
	Failed    int `json:"failed"`
	// Errors are the distinct messages of failed requests (at most 5).
	Errors            []string `json:"errors,omitempty"`
	Duration          float64  `json:"duration"` // seconds, first send to last token
	TotalInputTokens  int      `json:"total_input_tokens"`
	TotalOutputTokens int      `json:"total_output_tokens"`
	RequestThroughput float64  `json:"request_throughput"` // completed requests/s
	InputThroughput   float64  `json:"input_throughput"`   // tokens/s
	OutputThroughput  float64  `json:"output_throughput"`
	TotalThroughput   float64  `json:"total_throughput"`
	// Concurrency is the mean number of requests in flight: the sum of
	// the E2E latencies over the duration.
	Concurrency float64 `json:"concurrency"`

	// CachedTokens are prompt tokens the server served from its prefix
	// cache, as its responses report them; CacheHitRate is their share of
	// the prompt tokens of this run.
	CachedTokens int     `json:"cached_tokens"`
	CacheHitRate float64 `json:"cache_hit_rate"`
	// The server's own gauge (gosling:cache_hit_rate, since it started)
	// before and after the run; null when /metrics has none.
	ServerCacheHitRateBefore *float64 `json:"server_cache_hit_rate_before"`
	ServerCacheHitRateAfter  *float64 `json:"server_cache_hit_rate_after"`

	MeanE2EMs    float64 `json:"mean_e2e_latency_ms"`
	MedianE2EMs  float64 `json:"median_e2e_latency_ms"`
	P99E2EMs     float64 `json:"p99_e2e_latency_ms"`
	MeanTTFTMs   float64 `json:"mean_ttft_ms"`
	MedianTTFTMs float64 `json:"median_ttft_ms"`
	P99TTFTMs    float64 `json:"p99_ttft_ms"`
	// TPOT is a request's (E2E − TTFT) / (output tokens − 1).
	MeanTPOTMs   float64 `json:"mean_tpot_ms"`
	MedianTPOTMs float64 `json:"median_tpot_ms"`
	P99TPOTMs    float64 `json:"p99_tpot_ms"`
	MeanITLMs    float64 `json:"mean_itl_ms"`
	MedianITLMs  float64 `json:"median_itl_ms"`
	P99ITLMs     float64 `json:"p99_itl_ms"`

	// Per request in dataset order, with --output-details: prompt tokens
	// (the client's count), the output tokens asked for and those the
	// server reported, the prompt tokens it reported, TTFT in seconds
	// (SGLang's unit here), and the error ("" when it succeeded).
	InputLens          []int     `json:"input_lens,omitempty"`
	ExpectedOutputLens []int     `json:"expected_output_lens,omitempty"`
	OutputLens         []int     `json:"output_lens,omitempty"`
	ServerInputLens    []int     `json:"server_input_lens,omitempty"`
	TTFTs              []float64 `json:"ttfts,omitempty"`
	RequestErrors      []string  `json:"request_errors,omitempty"`
}

// details keeps each request's figures.
func (rep *ServingReport) details(prompts []servingPrompt, results []requestResult) {
	for i, r := range results {
		msg := ""
		if r.err != nil {
			msg = r.err.Error()
		}
		rep.InputLens = append(rep.InputLens, prompts[i].length())
		rep.ExpectedOutputLens = append(rep.ExpectedOutputLens, prompts[i].outputLen)
		rep.OutputLens = append(rep.OutputLens, r.outputLen)
		rep.ServerInputLens = append(rep.ServerInputLens, r.serverPrompt)
		rep.TTFTs = append(rep.TTFTs, r.ttft.Seconds())
		rep.RequestErrors = append(rep.RequestErrors, msg)
	}
}

// jsonRate is a request rate that writes +Inf as "inf" (JSON has no
// infinity).
type jsonRate float64

func (r jsonRate) MarshalJSON() ([]byte, error) {
	if math.IsInf(float64(r), 1) {
		return []byte(`"inf"`), nil
	}
	return json.Marshal(float64(r))
}

func (r *jsonRate) UnmarshalJSON(b []byte) error {
	if string(b) == `"inf"` {
		*r = jsonRate(math.Inf(1))
		return nil
	}
	var v float64
	err := json.Unmarshal(b, &v)
	*r = jsonRate(v)
	return err
}

func (r jsonRate) String() string {
	if math.IsInf(float64(r), 1) {
		return "inf"
	}
	return strconv.FormatFloat(float64(r), 'g', -1, 64)
}

// summarize fills the figures from the requests of a run that took duration.
func (rep *ServingReport) summarize(results []requestResult, duration time.Duration) {
	var e2e, ttft, tpot, itl []float64
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	seen := map[string]bool{}
	for _, r := range results {
		if r.err != nil {
			rep.Failed++
			if msg := r.err.Error(); !seen[msg] && len(rep.Errors) < 5 {
				seen[msg] = true
				rep.Errors = append(rep.Errors, msg)
			}
			continue
		}
		rep.Completed++
		rep.TotalInputTokens += r.promptLen
		rep.TotalOutputTokens += r.outputLen
		rep.CachedTokens += r.cached
		e2e = append(e2e, ms(r.e2e))
		ttft = append(ttft, ms(r.ttft))
		if r.outputLen > 1 {
			tpot = append(tpot, ms(r.e2e-r.ttft)/float64(r.outputLen-1))
		}
		for _, d := range r.itls {
			itl = append(itl, ms(d))
		}
	}
	rep.Duration = duration.Seconds()
	if rep.Duration > 0 {
		rep.RequestThroughput = float64(rep.Completed) / rep.Duration
		rep.InputThroughput = float64(rep.TotalInputTokens) / rep.Duration
		rep.OutputThroughput = float64(rep.TotalOutputTokens) / rep.Duration
		rep.TotalThroughput = rep.InputThroughput + rep.OutputThroughput
		rep.Concurrency = sum(e2e) / 1e3 / rep.Duration
	}
	if rep.TotalInputTokens > 0 {
		rep.CacheHitRate = float64(rep.CachedTokens) / float64(rep.TotalInputTokens)
	}
	rep.MeanE2EMs, rep.MedianE2EMs, rep.P99E2EMs = meanMedianP99(e2e)
	rep.MeanTTFTMs, rep.MedianTTFTMs, rep.P99TTFTMs = meanMedianP99(ttft)
	rep.MeanTPOTMs, rep.MedianTPOTMs, rep.P99TPOTMs = meanMedianP99(tpot)
	rep.MeanITLMs, rep.MedianITLMs, rep.P99ITLMs = meanMedianP99(itl)
}

func sum(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s
}

func meanMedianP99(v []float64) (mean, median, p99 float64) {
	if len(v) == 0 {
		return 0, 0, 0
	}
	sorted := slices.Clone(v)
	slices.Sort(sorted)
	return sum(v) / float64(len(v)), percentile(sorted, 50), percentile(sorted, 99)
}

// percentile is numpy's default percentile (linear interpolation between
// the two nearest ranks) of ascending values, p in [0, 100]: the numbers
// are comparable with SGLang's.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := p / 100 * float64(len(sorted)-1)
	lo := int(math.Floor(rank))
	hi := min(lo+1, len(sorted)-1)
	return sorted[lo] + (rank-float64(lo))*(sorted[hi]-sorted[lo])
}

// Print writes the report as bench_serving's table.
func (rep *ServingReport) Print(w io.Writer) {
	line := func(name string, format string, v ...any) {
		fmt.Fprintf(w, "%-40s %s\n", name+":", fmt.Sprintf(format, v...))
	}
	section := func(title string) {
		const width = 50
		pad := width - len(title)
		left := pad / 2
		fmt.Fprintf(w, "%s%s%s\n", strings.Repeat("-", left), title, strings.Repeat("-", pad-left))
	}
	fmt.Fprintln(w, strings.Repeat("=", 12)+" Serving Benchmark Result "+strings.Repeat("=", 12))
	line("Backend", "%s", rep.Backend)
	if rep.Dataset != "" {
		line("Dataset", "%s", rep.Dataset)
	}
	line("Traffic request rate", "%s", rep.RequestRate)
	if rep.MaxConcurrency > 0 {
		line("Max request concurrency", "%d", rep.MaxConcurrency)
	} else {
		line("Max request concurrency", "not set")
	}
	if rep.SharedPrefixLen > 0 {
		line("Shared prefix length", "%d", rep.SharedPrefixLen)
	}
	if rep.RadixCache != "" {
		line("Radix cache", "%s", rep.RadixCache)
	}
	line("Successful requests", "%d", rep.Completed)
	line("Failed requests", "%d", rep.Failed)
	for _, e := range rep.Errors {
		fmt.Fprintf(w, "  error: %s\n", e)
	}
	line("Benchmark duration (s)", "%.2f", rep.Duration)
	line("Total input tokens", "%d", rep.TotalInputTokens)
	line("Total generated tokens", "%d", rep.TotalOutputTokens)
	line("Request throughput (req/s)", "%.2f", rep.RequestThroughput)
	line("Input token throughput (tok/s)", "%.2f", rep.InputThroughput)
	line("Output token throughput (tok/s)", "%.2f", rep.OutputThroughput)
	line("Total token throughput (tok/s)", "%.2f", rep.TotalThroughput)
	line("Concurrency", "%.2f", rep.Concurrency)
	line("Cached prompt tokens", "%d", rep.CachedTokens)
	line("Cache hit rate (this run)", "%.3f", rep.CacheHitRate)
	line("Server cache hit rate before/after", "%s / %s", optional(rep.ServerCacheHitRateBefore), optional(rep.ServerCacheHitRateAfter))
	section("End-to-End Latency")
	line("Mean E2E Latency (ms)", "%.2f", rep.MeanE2EMs)
	line("Median E2E Latency (ms)", "%.2f", rep.MedianE2EMs)
	line("P99 E2E Latency (ms)", "%.2f", rep.P99E2EMs)
	section("Time to First Token")
	line("Mean TTFT (ms)", "%.2f", rep.MeanTTFTMs)
	line("Median TTFT (ms)", "%.2f", rep.MedianTTFTMs)
	line("P99 TTFT (ms)", "%.2f", rep.P99TTFTMs)
	section("Time per Output Token (excl. 1st token)")
	line("Mean TPOT (ms)", "%.2f", rep.MeanTPOTMs)
	line("Median TPOT (ms)", "%.2f", rep.MedianTPOTMs)
	line("P99 TPOT (ms)", "%.2f", rep.P99TPOTMs)
	section("Inter-Token Latency")
	line("Mean ITL (ms)", "%.2f", rep.MeanITLMs)
	line("Median ITL (ms)", "%.2f", rep.MedianITLMs)
	line("P99 ITL (ms)", "%.2f", rep.P99ITLMs)
	fmt.Fprintln(w, strings.Repeat("=", 50))
}

func optional(v *float64) string {
	if v == nil {
		return "n/a"
	}
	return strconv.FormatFloat(*v, 'f', 3, 64)
}
