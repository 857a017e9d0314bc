package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gosling-ai/gosling/tokenizer"
)

// Serving load generator: SGLang's bench_serving with its random and
// sharegpt datasets. Requests arrive as a Poisson process (or all at
// once), optionally capped at a number in flight; each streams its output
// and is timed from the client's side. Output tokens are counted from
// what the server reports (usage, meta_info), never assumed.

// ServingOptions describe the load.
type ServingOptions struct {
	BaseURL string // the server, e.g. http://127.0.0.1:30000
	// Backend is "gosling" (SGLang's native streaming POST /generate),
	// "openai" (streaming POST /v1/completions) or "openai-chat" (POST
	// /v1/chat/completions, the prompt as the user's message; needs a
	// tokenizer); prompts are token ids without a tokenizer, text with one.
	Backend string
	Model   string // openai: the model name (default: the first of /v1/models)

	NumPrompts int
	// Dataset is "random" (default) or "sharegpt" (DatasetPath, a
	// ShareGPT-style JSON file; needs Tokenizer).
	Dataset     string
	DatasetPath string
	// ShareGPTOutputLen fixes every sharegpt request's output length
	// (0: the length of the conversation's reply).
	ShareGPTOutputLen int
	// Tokenizer, when set, makes random prompts text whose lengths it
	// measures (special tokens included), as the server will; nil: random
	// prompts are token ids.
	Tokenizer *tokenizer.Tokenizer
	// Details keeps each request's lengths, TTFT and error in the report.
	Details bool
	// Each prompt has a length drawn uniformly from
	// [max(InputLen·RangeRatio, 1), InputLen], each output likewise from
	// OutputLen (SGLang's random dataset); RangeRatio 1 fixes the lengths.
	InputLen   int
	OutputLen  int
	RangeRatio float64
	// SharedPrefixLen tokens, the same for every prompt, start each
	// prompt, so the prefix cache can serve them. They count in the
	// prompt's length, which is at least SharedPrefixLen+1.
	SharedPrefixLen int

	// RequestRate is the mean of the Poisson arrivals in requests per
	// second; +Inf (or 0) sends every request at once.
	RequestRate float64
	// MaxConcurrency caps the requests in flight (0: no cap). A request
	// that arrives at the cap waits; its timings start when it is sent.
	MaxConcurrency int
	Seed           uint64
	// VocabSize bounds the random token ids (0: the server's vocab_size
	// from /get_model_info).
	VocabSize  int
	FlushCache bool      // POST /flush_cache before the run
	Progress   io.Writer // a progress bar goes here; nil: none
	Client     *http.Client
}

func (o *ServingOptions) check() error {
	switch {
	case o.Backend != "gosling" && o.Backend != "openai" && o.Backend != "openai-chat":
		return fmt.Errorf("backend must be gosling, openai or openai-chat, got %q", o.Backend)
	case o.Backend == "openai-chat" && o.Tokenizer == nil:
		return fmt.Errorf("--backend openai-chat sends text: it needs a tokenizer (--tokenizer, or --model-path)")
	case o.Dataset != "random" && o.Dataset != "sharegpt":
		return fmt.Errorf("--dataset-name must be random or sharegpt, got %q", o.Dataset)
	case o.Dataset == "sharegpt" && (o.DatasetPath == "" || o.Tokenizer == nil):
		return fmt.Errorf("--dataset-name sharegpt needs --dataset-path and a tokenizer (--tokenizer, or --model-path) to count tokens")
	case o.Dataset == "random" && o.DatasetPath != "":
		return fmt.Errorf("--dataset-path is for --dataset-name sharegpt")
	case o.NumPrompts <= 0:
		return fmt.Errorf("--num-prompts must be positive, got %d", o.NumPrompts)
	case o.InputLen <= 0 || o.OutputLen <= 0:
		return fmt.Errorf("--random-input-len and --random-output-len must be positive, got %d and %d", o.InputLen, o.OutputLen)
	case o.RangeRatio < 0 || o.RangeRatio > 1:
		return fmt.Errorf("--random-range-ratio must be in [0, 1], got %g", o.RangeRatio)
	case o.SharedPrefixLen < 0 || o.SharedPrefixLen >= o.InputLen:
		return fmt.Errorf("--shared-prefix-len must be in [0, --random-input-len), got %d with --random-input-len %d", o.SharedPrefixLen, o.InputLen)
	case o.RequestRate < 0 || math.IsNaN(o.RequestRate):
		return fmt.Errorf("--request-rate must be positive (or inf), got %g", o.RequestRate)
	case o.MaxConcurrency < 0:
		return fmt.Errorf("--max-concurrency must be positive (or 0: no cap), got %d", o.MaxConcurrency)
	}
	return nil
}

// servingPrompt is one request of the dataset: token ids, or text of
// promptLen tokens.
type servingPrompt struct {
	ids       []int
	text      string
	promptLen int
	outputLen int
}

// length is the prompt's length in tokens.
func (p servingPrompt) length() int {
	if p.ids != nil {
		return len(p.ids)
	}
	return p.promptLen
}

// firstRandomID keeps prompts clear of the ids that are special in
// llama-family vocabularies (<unk>, <s>, </s>); a prompt needs none, and an
// end-of-sequence token inside one is not what a benchmark means to send.
const firstRandomID = 3

// randomPrompts draws the dataset. The shared prefix and every prompt come
// from one seeded stream, so a seed gives the same prompts on any server.
func randomPrompts(o ServingOptions, vocab int) []servingPrompt {
	rng := rand.New(rand.NewPCG(o.Seed, 1))
	token := func() int { return firstRandomID + rng.IntN(max(vocab-firstRandomID, 1)) }
	prefix := make([]int, o.SharedPrefixLen)
	for i := range prefix {
		prefix[i] = token()
	}
	prompts := make([]servingPrompt, o.NumPrompts)
	for i := range prompts {
		n := max(lengthIn(rng, o.InputLen, o.RangeRatio), o.SharedPrefixLen+1)
		ids := make([]int, n)
		copy(ids, prefix)
		for j := len(prefix); j < n; j++ {
			ids[j] = token()
		}
		prompts[i] = servingPrompt{ids: ids, outputLen: lengthIn(rng, o.OutputLen, o.RangeRatio)}
	}
	return prompts
}

// lengthIn draws uniformly from [max(int(n·ratio), 1), n].
func lengthIn(rng *rand.Rand, n int, ratio float64) int {
	lo := min(max(int(float64(n)*ratio), 1), n)
	return lo + rng.IntN(n-lo+1)
}

// arrivalOffsets are the send times of n requests after the start: a
// Poisson process of rate requests per second (exponential gaps, the first
// request at 0), or all at 0 when rate is +Inf or 0.
func arrivalOffsets(n int, rate float64, seed uint64) []time.Duration {
	out := make([]time.Duration, n)
	if rate == 0 || math.IsInf(rate, 1) {
		return out
	}
	rng := rand.New(rand.NewPCG(seed, 2))
	at := 0.0
	for i := 1; i < n; i++ {
		at += rng.ExpFloat64() / rate
		out[i] = time.Duration(at * float64(time.Second))
	}
	return out
}

// requestResult is one request as the client saw it.
type requestResult struct {
	err          error
	promptLen    int // tokens sent
	serverPrompt int // prompt tokens the server reported (0: not reported)
	outputLen    int // tokens generated, as the server reported them
	cached       int // prompt tokens the server took from its prefix cache
	ttft, e2e    time.Duration
	itls         []time.Duration // between tokens after the first
}

// RunServing measures the server at o.BaseURL.
func RunServing(ctx context.Context, o ServingOptions) (*ServingReport, error) {
	rep, _, err := runServing(ctx, o)
	return rep, err
}

func runServing(ctx context.Context, o ServingOptions) (*ServingReport, []requestResult, error) {
	if o.RequestRate == 0 {
		o.RequestRate = math.Inf(1)
	}
	if o.Dataset == "" {
		o.Dataset = "random"
	}
	if err := o.check(); err != nil {
		return nil, nil, err
	}
	o.BaseURL = strings.TrimRight(o.BaseURL, "/")
	if o.Client == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		// Keep a connection for every request that may be in flight, so
		// that no request of the measurement waits for a new connection.
		t.MaxIdleConns = 0
		t.MaxIdleConnsPerHost = max(o.MaxConcurrency, min(o.NumPrompts, 1024))
		o.Client = &http.Client{Transport: t}
		// Connections left idle (some dialled for a request that then took
		// another) would hold up a server's graceful shutdown.
		defer o.Client.CloseIdleConnections()
	}
	c := &servingClient{base: o.BaseURL, http: o.Client, backend: o.Backend, model: o.Model}
	info, err := c.modelInfo(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot reach the server at %s: %w (start one with 'gosling serve', or pass --model-path to start one in this process)", o.BaseURL, err)
	}
	vocab := o.VocabSize
	if vocab <= 0 && o.Tokenizer != nil {
		vocab = o.Tokenizer.VocabSize()
	}
	if vocab <= 0 {
		if vocab = info.VocabSize; vocab <= 0 {
			return nil, nil, fmt.Errorf("the server at %s does not report vocab_size in /get_model_info; pass --vocab-size or --tokenizer", o.BaseURL)
		}
	}
	if o.Dataset == "random" && info.ContextLength > 0 && o.InputLen+o.OutputLen > info.ContextLength {
		return nil, nil, fmt.Errorf("prompts of up to %d tokens plus outputs of up to %d exceed the server's context length %d; lower --random-input-len or --random-output-len",
			o.InputLen, o.OutputLen, info.ContextLength)
	}
	if o.Backend != "gosling" && c.model == "" {
		c.model = c.firstModel(ctx) // "" still works with gosling and SGLang
	}
	var prompts []servingPrompt
	switch {
	case o.Dataset == "sharegpt":
		if prompts, err = shareGPTPrompts(o, o.Tokenizer, info.ContextLength); err != nil {
			return nil, nil, err
		}
	case o.Tokenizer != nil:
		prompts = randomTextPrompts(o, o.Tokenizer)
	default:
		prompts = randomPrompts(o, vocab)
	}

	// Warm up with a short prompt of its own, kept out of the figures and
	// out of the dataset's prefix.
	warm := servingPrompt{ids: make([]int, min(16, max(o.InputLen, 1))), outputLen: max(min(4, o.OutputLen), 1)}
	for i := range warm.ids {
		warm.ids[i] = firstRandomID + (7*i)%max(vocab-firstRandomID, 1)
	}
	if o.Tokenizer != nil {
		ids := textTokens(o.Tokenizer)
		for i := range warm.ids {
			warm.ids[i] = ids[(7*i)%len(ids)]
		}
		text, n := textOf(o.Tokenizer, warm.ids, len(warm.ids), func() int { return ids[0] })
		warm = servingPrompt{text: text, promptLen: n, outputLen: warm.outputLen}
	}
	if r := c.send(ctx, warm); r.err != nil {
		return nil, nil, fmt.Errorf("warm-up request failed: %w", r.err)
	}
	if o.FlushCache {
		if err := c.flushCache(ctx); err != nil {
			return nil, nil, err
		}
	}
	rep := &ServingReport{Backend: o.Backend, BaseURL: o.BaseURL, Model: c.model, RadixCache: c.radixCache(ctx),
		NumPrompts: o.NumPrompts, RequestRate: jsonRate(o.RequestRate), MaxConcurrency: o.MaxConcurrency,
		InputLen: o.InputLen, OutputLen: o.OutputLen, RangeRatio: o.RangeRatio, SharedPrefixLen: o.SharedPrefixLen,
		Dataset: o.Dataset, DatasetPath: o.DatasetPath, TextPrompts: o.Tokenizer != nil}
	rep.ServerCacheHitRateBefore = c.cacheHitRate(ctx)

	results := make([]requestResult, len(prompts))
	var sem chan struct{}
	if o.MaxConcurrency > 0 {
		sem = make(chan struct{}, o.MaxConcurrency)
	}
	bar := newProgressBar(o.Progress, len(prompts))
	var wg sync.WaitGroup
	start := time.Now()
	for i, at := range arrivalOffsets(len(prompts), o.RequestRate, o.Seed) {
		if err := sleepUntil(ctx, start.Add(at)); err != nil {
			results[i] = requestResult{err: err} // the rest stay zero: failed too
			break
		}
		wg.Go(func() {
			defer bar.add()
			if sem != nil {
				select {
				case sem <- struct{}{}:
					defer func() { <-sem }()
				case <-ctx.Done():
					results[i] = requestResult{err: ctx.Err()}
					return
				}
			}
			results[i] = c.send(ctx, prompts[i])
		})
	}
	wg.Wait()
	duration := time.Since(start)
	bar.finish()
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("benchmark interrupted: %w", err)
	}
	rep.ServerCacheHitRateAfter = c.cacheHitRate(ctx)
	rep.summarize(results, duration)
	if o.Details {
		rep.details(prompts, results)
	}
	return rep, results, nil
}

func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// progressBar draws "NN% [####....] done/total" on one line, redrawn when
// the shown percentage changes (so a log file gets at most 100 updates).
type progressBar struct {
	w           io.Writer
	total, done int
	shown       int // requests done when it was drawn last; -1 before
	start       time.Time
	mu          sync.Mutex
}

func newProgressBar(w io.Writer, total int) *progressBar {
	p := &progressBar{w: w, total: total, shown: -1, start: time.Now()}
	if w != nil {
		p.draw()
	}
	return p
}

func (p *progressBar) add() {
	if p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done++
	if 100*p.done/p.total != 100*p.shown/p.total {
		p.draw()
	}
}

func (p *progressBar) draw() {
	const width = 40
	p.shown = p.done
	filled := width * p.done / p.total
	fmt.Fprintf(p.w, "\r%3d%% [%s%s] %d/%d requests, %.1fs", 100*p.done/p.total, strings.Repeat("#", filled), strings.Repeat(".", width-filled),
		p.done, p.total, time.Since(p.start).Seconds())
}

// finish ends the bar's line, drawing the last count if it is not shown.
func (p *progressBar) finish() {
	if p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shown != p.done {
		p.draw()
	}
	fmt.Fprintln(p.w)
}

// errNoDone is a stream that ended before its "data: [DONE]".
var errNoDone = errors.New("the stream ended without data: [DONE]")
