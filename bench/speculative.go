package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/sample"
)

// SpeculativeOptions describe one greedy request decoded with and without
// speculative decoding (gosling bench speculative).
type SpeculativeOptions struct {
	// Prompt is text (the model's tokenizer encodes it), or InputIDs.
	Prompt    string
	InputIDs  []int
	OutputLen int
	// Copy makes the workload one where copying pays: the prompt, the
	// plain greedy continuation of it (OutputLen tokens), and the prompt
	// again, which the model then tends to continue as before.
	Copy bool
	// Repeat is how many timed runs of each mode (after one warm-up run);
	// the median is reported.
	Repeat int
}

// SpeculativeRun is one mode's figures: decode is from the first output
// token to the last, so the prefill (from the radix cache after the
// warm-up) is not in it.
type SpeculativeRun struct {
	Mode          string  `json:"mode"` // "plain" or the algorithm
	OutputTokens  int     `json:"output_tokens"`
	DecodeSeconds float64 `json:"decode_s"`
	DecodeTokS    float64 `json:"decode_tok_per_s"`
	// AcceptLength is the mean tokens per verify step (accepted drafts
	// plus the target's token); VerifySteps how many steps verified.
	AcceptLength float64 `json:"spec_accept_length,omitempty"`
	VerifySteps  int     `json:"spec_verify_steps,omitempty"`
	// SameAsPlain: the output equals the plain run's, token for token.
	SameAsPlain bool `json:"same_as_plain"`
	// Divergence is where the output first parts from the plain run's
	// (nil when it does not).
	Divergence *Divergence `json:"divergence,omitempty"`
	// Graphs are the engine's steps by CUDA graph path over all its runs
	// (warm-up included): decode, verify and the drafter's; zero without
	// graphs.
	Graphs *SpecGraphs `json:"graphs,omitempty"`
}

// SpecGraphs are a run's steps by CUDA graph path.
type SpecGraphs struct {
	Decode engine.GraphCounts `json:"decode"`
	Verify engine.GraphCounts `json:"verify"`
	Draft  engine.GraphCounts `json:"draft"`
}

// Divergence is the first output token where a speculative run differs
// from the plain one, and how close the plain run was to a tie there:
// greedy verification reproduces plain decoding exactly only up to the
// rounding of a batched verify step against a one-token decode step, so
// a divergence at a near-tie is rounding, and one at a wide margin a bug.
type Divergence struct {
	Position int `json:"position"` // index into the output
	Plain    int `json:"plain_token"`
	Got      int `json:"token"`
	// Margin is the plain model's log-probability of its token minus
	// that of its runner-up at Position, from a rescoring plain run with
	// top log-probabilities (-1 when that run could not say).
	Margin float64 `json:"plain_top2_margin"`
}

// SpeculativeReport is the comparison of the two modes on one prompt.
type SpeculativeReport struct {
	Workload     string           `json:"workload"` // "copy" or "prompt"
	PromptTokens int              `json:"prompt_tokens"`
	Runs         []SpeculativeRun `json:"runs"`
}

// Speculative runs o's request greedily on an engine of cfg without
// speculation, then on one with cfg's (one engine at a time, so that a
// GPU holds one), and reports both.
func Speculative(ctx context.Context, cfg engine.Config, o SpeculativeOptions) (*SpeculativeReport, error) {
	if cfg.SpeculativeAlgorithm == "" {
		return nil, fmt.Errorf("bench speculative compares against a speculative run: give --speculative-algorithm")
	}
	if o.OutputLen < 1 || o.Repeat < 1 {
		return nil, fmt.Errorf("bench speculative: output length %d and repeats %d must be positive", o.OutputLen, o.Repeat)
	}
	plainCfg := cfg
	plainCfg.SpeculativeAlgorithm, plainCfg.SpeculativeDraftModelPath = "", ""
	plainCfg.SpeculativeNumSteps, plainCfg.SpeculativeEagleTopk, plainCfg.SpeculativeNumDraftTokens = 0, 0, 0
	rep := &SpeculativeReport{Workload: "prompt"}
	var want []int
	var req engine.Request
	for _, mode := range []struct {
		name string
		cfg  engine.Config
	}{{"plain", plainCfg}, {cfg.SpeculativeAlgorithm, cfg}} {
		e, err := engine.New(mode.cfg)
		if err != nil {
			return nil, err
		}
		if want == nil {
			req, err = speculativeRequest(ctx, e, o)
			if err != nil {
				e.Close()
				return nil, err
			}
			if o.Copy {
				rep.Workload = "copy"
			}
		}
		run, out, err := timeGreedy(ctx, e, req, o.Repeat)
		st := e.Stats()
		var g SpecGraphs
		if g.Decode, g.Verify, g.Draft = st.GraphPaths(); g != (SpecGraphs{}) {
			run.Graphs = &g
		}
		e.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", mode.name, err)
		}
		if want == nil {
			want = out
			rep.PromptTokens = len(req.InputIDs)
		}
		run.Mode, run.SameAsPlain = mode.name, slices.Equal(out, want)
		if !run.SameAsPlain {
			if run.Divergence, err = diverge(ctx, plainCfg, req, want, out); err != nil {
				return nil, err
			}
		}
		rep.Runs = append(rep.Runs, run)
	}
	return rep, nil
}

// diverge finds where got first parts from want (the plain output) and
// rescores the plain run with top-2 log-probabilities for the margin
// there, on a fresh plain engine (the speculative one is closed, so a GPU
// holds one engine at a time).
func diverge(ctx context.Context, plainCfg engine.Config, req engine.Request, want, got []int) (*Divergence, error) {
	i := firstDifference(want, got)
	d := &Divergence{Position: i, Plain: -1, Got: -1, Margin: -1}
	if i < len(want) {
		d.Plain = want[i]
	}
	if i < len(got) {
		d.Got = got[i]
	}
	e, err := engine.New(plainCfg)
	if err != nil {
		return nil, err
	}
	defer e.Close()
	r := req
	r.Logprobs, r.TopLogprobs = true, 2
	res, err := e.Generate(ctx, r)
	if err != nil {
		return nil, fmt.Errorf("rescoring the plain run: %w", err)
	}
	if i < len(res.TopLogprobs) && i < len(res.OutputIDs) && res.OutputIDs[i] == d.Plain {
		d.Margin = top2Margin(res.TopLogprobs[i])
	}
	return d, nil
}

// firstDifference is the first index where a and b differ (the shorter
// length when one is a prefix of the other).
func firstDifference(a, b []int) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// top2Margin is the gap between the two most likely tokens' log-probs
// (-1 with fewer than two).
func top2Margin(top []sample.TokenLogprob) float64 {
	if len(top) < 2 {
		return -1
	}
	a, b := float64(top[0].Logprob), float64(top[1].Logprob)
	return max(a, b) - min(a, b)
}

// speculativeRequest is o's greedy request as token ids (for Copy, the
// prompt, e's continuation of it and the prompt again).
func speculativeRequest(ctx context.Context, e *engine.Engine, o SpeculativeOptions) (engine.Request, error) {
	ids := o.InputIDs
	if ids == nil {
		tok := e.Tokenizer()
		if tok == nil {
			return engine.Request{}, fmt.Errorf("the model has no tokenizer for a text prompt: give token ids")
		}
		ids = tok.Encode(o.Prompt, true)
	}
	p := sample.DefaultParams()
	p.Temperature, p.MaxNewTokens, p.IgnoreEOS = 0, o.OutputLen, true
	if o.Copy {
		res, err := e.Generate(ctx, engine.Request{InputIDs: ids, Sampling: p})
		if err != nil {
			return engine.Request{}, err
		}
		ids = slices.Concat(ids, res.OutputIDs, ids)
	}
	return engine.Request{InputIDs: ids, Sampling: p}, nil
}

// timeGreedy runs req once to warm up, then repeat times, and returns the
// median run's figures and the output.
func timeGreedy(ctx context.Context, e *engine.Engine, req engine.Request, repeat int) (SpeculativeRun, []int, error) {
	var runs []SpeculativeRun
	var out []int
	for i := range repeat + 1 {
		var first time.Time
		r := req
		r.OnDelta = func(engine.Delta) {
			if first.IsZero() {
				first = time.Now()
			}
		}
		res, err := e.Generate(ctx, r)
		if err != nil {
			return SpeculativeRun{}, nil, err
		}
		end := time.Now()
		if i == 0 {
			out = res.OutputIDs
			continue // warm-up: graphs, tuning, the radix cache
		}
		run := SpeculativeRun{OutputTokens: len(res.OutputIDs), DecodeSeconds: end.Sub(first).Seconds(), VerifySteps: res.SpecVerifySteps}
		if run.DecodeSeconds > 0 {
			run.DecodeTokS = float64(len(res.OutputIDs)-1) / run.DecodeSeconds
		}
		if res.SpecVerifySteps > 0 {
			run.AcceptLength = float64(res.SpecAcceptedTokens+res.SpecVerifySteps) / float64(res.SpecVerifySteps)
		}
		runs = append(runs, run)
	}
	slices.SortFunc(runs, func(a, b SpeculativeRun) int {
		switch {
		case a.DecodeTokS < b.DecodeTokS:
			return -1
		case a.DecodeTokS > b.DecodeTokS:
			return 1
		}
		return 0
	})
	return runs[len(runs)/2], out, nil
}

// Print writes the comparison as a table.
func (r *SpeculativeReport) Print(w io.Writer) {
	fmt.Fprintf(w, "workload %s, %d prompt tokens, greedy (medians)\n", r.Workload, r.PromptTokens)
	fmt.Fprintf(w, "%-12s %8s %10s %12s %14s %12s %8s\n", "mode", "tokens", "decode s", "decode tok/s", "accept length", "verify steps", "= plain")
	var plain float64
	for _, x := range r.Runs {
		if x.Mode == "plain" {
			plain = x.DecodeTokS
		}
		accept := "-"
		if x.VerifySteps > 0 {
			accept = fmt.Sprintf("%.2f", x.AcceptLength)
		}
		fmt.Fprintf(w, "%-12s %8d %10.3f %12.1f %14s %12d %8v\n", x.Mode, x.OutputTokens, x.DecodeSeconds, x.DecodeTokS, accept, x.VerifySteps, x.SameAsPlain)
	}
	if len(r.Runs) == 2 && plain > 0 {
		fmt.Fprintf(w, "speed-up %.2fx\n", r.Runs[1].DecodeTokS/plain)
	}
	for _, x := range r.Runs {
		if g := x.Graphs; g != nil {
			fmt.Fprintf(w, "%s steps through CUDA graphs (replayed/captured/eager): decode %d/%d/%d, verify %d/%d/%d, draft %d/%d/%d\n", x.Mode,
				g.Decode.Replays, g.Decode.Captures, g.Decode.Eager, g.Verify.Replays, g.Verify.Captures, g.Verify.Eager, g.Draft.Replays, g.Draft.Captures, g.Draft.Eager)
			for _, k := range []struct {
				what   string
				counts engine.GraphCounts
			}{{"decode", g.Decode}, {"verify", g.Verify}, {"draft", g.Draft}} {
				if k.counts.EagerReason != "" {
					fmt.Fprintf(w, "  the latest eager %s step: %s\n", k.what, k.counts.EagerReason)
				}
			}
		}
	}
	for _, x := range r.Runs {
		if d := x.Divergence; d != nil {
			fmt.Fprintf(w, "%s parts from plain at output token %d: %d where plain has %d; plain's top-2 log-probability margin there %.3g\n",
				x.Mode, d.Position, d.Got, d.Plain, d.Margin)
		}
	}
}
