package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/sample"
	"github.com/gosling-ai/gosling/vision"
)

// OneBatchOptions describe the static batches: like SGLang's
// bench_one_batch, every request of a batch has InputLen random prompt
// tokens and generates exactly OutputLen tokens, all submitted at once.
type OneBatchOptions struct {
	Batches   []int
	InputLen  int
	OutputLen int
	Seed      uint64
	// Probe, when set, measures the read bandwidth right before and right
	// after each batch; the decode roofline uses the larger.
	Probe *BandwidthProbe
	// Repeat runs the whole list of batch sizes this many times (0: once),
	// interleaved, and reports for each size its medians (medianRun), with
	// the ranges: on a shared machine whose bandwidth and spare cores come
	// and go, every size then meets the same states.
	Repeat int
	// ProfileKernels runs each batch size once more after the timed runs
	// with every device operation timed (engine.StartKernelProfile), and
	// attaches the per-operation times to its result.
	ProfileKernels bool
	// Images, decoded, go with every request of a batch (a
	// vision-language model): each prompt is the images' placeholders,
	// one run per view between the model's markers, then InputLen random
	// text tokens. Each batch size then runs a second time with text
	// tokens in the images' place (OneBatchReport.Vision.WithoutImages).
	// The radix cache is off, so every request encodes its images.
	Images []engine.Image
}

// BatchResult is one batch size's figures. Prefill counts from submission
// until every request has its first token; decode is the window after
// that, in which all requests decode together, until the last finishes.
type BatchResult struct {
	Batch          int     `json:"batch"`
	PrefillSeconds float64 `json:"prefill_s"`
	PrefillTokS    float64 `json:"prefill_tok_per_s"`
	PrefillGFLOPs  float64 `json:"prefill_gflop_per_s"`
	PrefillOfPeak  float64 `json:"prefill_fraction_of_fma_peak"`
	DecodeTokS     float64 `json:"decode_tok_per_s"`
	DecodeStepMs   float64 `json:"decode_ms_per_step"`
	ReadGBs        float64 `json:"read_gb_per_s"` // next to this batch: max of before and after
	// StepWeightBytes is what a decode step of this batch reads of the
	// weights: all of them for a dense model; for a mixture of experts
	// the dense ones and the routed experts its tokens choose, expected
	// under uniform routing (engine.WeightBytes.PerStep).
	StepWeightBytes int64   `json:"decode_weight_bytes_per_step"`
	RooflineTokS    float64 `json:"decode_roofline_tok_per_s"` // weights only
	OfRoofline      float64 `json:"decode_fraction_of_roofline"`
	RooflineKVTokS  float64 `json:"decode_roofline_with_kv_tok_per_s"`
	DecodedInWindow int     `json:"decode_tokens_measured"`
	// DecodeHostGapUs is the mean host time between a step's tokens being
	// drawn and the next decode forward starting (engine.Stats).
	DecodeHostGapUs float64 `json:"decode_host_gap_us_per_step"`
	// SpecAcceptLength is speculative decoding's mean tokens per verify
	// step over this batch (0 without speculation).
	SpecAcceptLength float64 `json:"spec_accept_length,omitempty"`
	// With Repeat, the decode figures above are the median run's by
	// decode tok/s, the prefill figures the median run's by prefill tok/s;
	// these are the number of runs and the ranges.
	Runs           int     `json:"runs"`
	DecodeTokSMin  float64 `json:"decode_tok_per_s_min"`
	DecodeTokSMax  float64 `json:"decode_tok_per_s_max"`
	PrefillTokSMin float64 `json:"prefill_tok_per_s_min"`
	PrefillTokSMax float64 `json:"prefill_tok_per_s_max"`
	// KernelProfile is the profiled extra run's per-operation GPU times
	// (OneBatchOptions.ProfileKernels).
	KernelProfile *device.Profile `json:"kernel_profile,omitempty"`
	// With images: the vision tower's time over the batch's images
	// (engine.Stats.ImageEncodeTime: every request's own, one after
	// another, before the prefill forward that reads them), the images
	// it encoded per second (pan-and-scan crops each count), and the
	// prefill's time less it, over which
	// PrefillGFLOPs counts the language model's FLOPs. They are the run's
	// whose prefill figures are reported.
	VisionEncodeSeconds    float64 `json:"vision_encode_s,omitempty"`
	VisionImagesPerS       float64 `json:"vision_images_per_s,omitempty"`
	LanguagePrefillSeconds float64 `json:"language_prefill_s,omitempty"`
}

// VisionReport describes a run with images (OneBatchOptions.Images).
type VisionReport struct {
	Images           []string `json:"images"` // each image's W×H
	ViewsPerRequest  int      `json:"views_per_request"`
	ImageTokens      int      `json:"image_tokens_per_request"`
	TextTokens       int      `json:"text_tokens_per_request"` // random text and the images' markers
	PromptTokens     int      `json:"prompt_tokens_per_request"`
	PreprocessSecond float64  `json:"preprocess_s"` // the images' preprocessing, once, outside the timed batches
	// WithoutImages are the same batches with random text tokens in the
	// images' place: prompts of the same length, no vision tower.
	WithoutImages []BatchResult `json:"without_images"`
}

// OneBatchReport is a whole run.
type OneBatchReport struct {
	Model        string `json:"model"`
	WeightDType  string `json:"weight_dtype"`
	Quantization string `json:"quantization"`
	// TPSize is the tensor-parallel ranks; the byte and FLOP counts are
	// then one rank's share, and the roofline one device's.
	TPSize      int   `json:"tp_size"`
	WeightBytes int64 `json:"weight_bytes_per_token"`
	// A mixture of experts' routed experts (included in WeightBytes), their
	// count per layer and per token, and what one token's forward reads:
	// the dense weights and its experts. Zero for dense models.
	RoutedExpertBytes int64 `json:"routed_expert_bytes"`
	Experts           int   `json:"experts"`
	ExpertsPerToken   int   `json:"experts_per_token"`
	ActiveWeightBytes int64 `json:"active_weight_bytes_per_token"`
	// DeviceWeightBytes is the memory the device holds for the weights
	// as served (engine.DeviceWeightBytes; 0 where it does not say).
	DeviceWeightBytes int64         `json:"device_weight_bytes"`
	KVBytesPerContext int64         `json:"kv_bytes_per_context_token"`
	FLOPsPerToken     float64       `json:"linear_flops_per_token"`
	InputLen          int           `json:"input_len"`
	OutputLen         int           `json:"output_len"`
	Roofline          Roofline      `json:"roofline"`
	Results           []BatchResult `json:"results"`
	// DecodeGraphs are the decode steps of the run (the warm-up's too,
	// profiled ones not) by CUDA graph path, all zero without graphs;
	// RankGraphs the same for each tensor-parallel rank of this process.
	DecodeGraphs engine.GraphCounts   `json:"decode_graph_steps"`
	RankGraphs   []engine.GraphCounts `json:"rank_graph_steps,omitempty"`
	// VerifyGraphs and DraftGraphs are the same for speculative decoding's
	// verify steps and its drafter's steps (zero without).
	VerifyGraphs engine.GraphCounts `json:"verify_graph_steps"`
	DraftGraphs  engine.GraphCounts `json:"draft_graph_steps"`
	// Vision is set when the requests carry images; Results are then the
	// batches with images.
	Vision *VisionReport `json:"vision,omitempty"`
}

// OneBatch loads the model once and runs each batch size through it.
// cfg.DisableRadixCache is forced on: every prompt must be computed.
func OneBatch(ctx context.Context, cfg engine.Config, o OneBatchOptions, roof Roofline) (*OneBatchReport, error) {
	if o.InputLen <= 0 || o.OutputLen <= 1 {
		return nil, fmt.Errorf("input length must be at least 1 and output length at least 2, got %d and %d", o.InputLen, o.OutputLen)
	}
	cfg.DisableRadixCache = true
	maxBatch := 0
	for _, b := range o.Batches {
		if b <= 0 {
			return nil, fmt.Errorf("batch sizes must be positive, got %d", b)
		}
		maxBatch = max(maxBatch, b)
	}
	if cfg.MaxRunningRequests < maxBatch {
		cfg.MaxRunningRequests = maxBatch
	}
	// Each image view's placeholder sits between two markers.
	views, imageTokens := 0, 0
	if len(o.Images) > 0 {
		var err error
		if views, imageTokens, err = engine.ImagePromptTokens(cfg, o.Images); err != nil {
			return nil, fmt.Errorf("--image: %w", err)
		}
	}
	if cfg.ContextLength <= 0 {
		// Speed does not depend on what the positions were trained for.
		// The KV cache holds MaxRunningRequests contexts; a whole number
		// of pages each (page sizes chosen for the user divide 64), so
		// that no request of the batch is retracted for the page a
		// context's tail leaves part empty.
		page := 64
		if cfg.PageSizeSet && cfg.PageSize > 0 {
			page = cfg.PageSize
		}
		need := o.InputLen + 2*views + imageTokens + o.OutputLen
		cfg.ContextLength = (need + page - 1) / page * page
		cfg.AllowLongerContext = true
	}
	e, err := engine.New(cfg)
	if err != nil {
		return nil, err
	}
	defer e.Close()
	mc := e.ModelConfig()
	wb := e.WeightBytes()
	rep := &OneBatchReport{
		Model: cfg.ModelPath, WeightDType: orDefault(cfg.DType, "auto"), Quantization: orDefault(cfg.Quantization, "none"), TPSize: e.Settings().TPSize,
		WeightBytes: wb.Total, DeviceWeightBytes: e.DeviceWeightBytes(), KVBytesPerContext: kvBytes(mc, e.Settings().KVCacheDType),
		FLOPsPerToken: linearFLOPs(mc, true), InputLen: o.InputLen, OutputLen: o.OutputLen, Roofline: roof,
	}
	if wb.Routed > 0 {
		rep.RoutedExpertBytes, rep.Experts, rep.ExpertsPerToken = wb.Routed, wb.Experts, wb.ExpertsPerToken
		rep.ActiveWeightBytes = wb.ActivePerToken()
	}
	text := batchInput{text: o.InputLen, prompt: o.InputLen}
	in := text
	if len(o.Images) > 0 {
		if in, rep.Vision, err = imageInput(e, o.Images, o.InputLen, views, imageTokens); err != nil {
			return nil, err
		}
		text = batchInput{text: in.prompt, prompt: in.prompt}
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0x5eed))
	// Warm up: fault the weights in, size the scratch buffers (the vision
	// tower's too).
	warm := batchInput{text: min(o.InputLen, 16), prompt: min(o.InputLen, 16)}
	if in.images != nil {
		warm = in
	}
	if _, err := runBatch(ctx, e, rng, mc, 1, warm, 2); err != nil {
		return nil, err
	}
	measure := func(b int, in batchInput) (BatchResult, error) {
		bw := roof.ReadGBs
		if o.Probe != nil {
			bw = o.Probe.ReadGBs()
		}
		before, statsBefore := e.SpecStats(), e.Stats()
		r, err := runBatch(ctx, e, rng, mc, b, in, o.OutputLen)
		if err != nil {
			return r, err
		}
		st := e.Stats()
		if st.DecodeGaps > statsBefore.DecodeGaps {
			r.DecodeHostGapUs = float64(st.DecodeGapTime-statsBefore.DecodeGapTime) / float64(st.DecodeGaps-statsBefore.DecodeGaps) / 1e3
		}
		after := e.SpecStats()
		r.SpecAcceptLength = engine.SpecStats{VerifySteps: after.VerifySteps - before.VerifySteps,
			AcceptedTokens: after.AcceptedTokens - before.AcceptedTokens}.AcceptLength()
		if o.Probe != nil {
			bw = max(bw, o.Probe.ReadGBs())
		}
		r.ReadGBs = bw
		languageSeconds := r.PrefillSeconds
		if in.images != nil {
			encoded := st.ImagesEncoded - statsBefore.ImagesEncoded
			if want := b * in.views; encoded != want {
				return r, fmt.Errorf("batch %d encoded %d images, want %d (%d per request)", b, encoded, want, in.views)
			}
			r.VisionEncodeSeconds = (st.ImageEncodeTime - statsBefore.ImageEncodeTime).Seconds()
			r.VisionImagesPerS = float64(encoded) / r.VisionEncodeSeconds
			r.LanguagePrefillSeconds = r.PrefillSeconds - r.VisionEncodeSeconds
			languageSeconds = r.LanguagePrefillSeconds
		}
		prefillFLOPs := float64(b*in.prompt)*linearFLOPs(mc, false) + float64(b)*attentionFLOPs(mc, in.prompt)
		r.PrefillGFLOPs = prefillFLOPs / languageSeconds / 1e9
		if roof.FMAGFLOPs > 0 {
			r.PrefillOfPeak = r.PrefillGFLOPs / roof.FMAGFLOPs
		}
		r.StepWeightBytes = wb.PerStep(b)
		if bw > 0 && r.StepWeightBytes > 0 {
			r.RooflineTokS = float64(b) * bw * 1e9 / float64(r.StepWeightBytes)
			r.OfRoofline = r.DecodeTokS / r.RooflineTokS
			// Each step also reads every request's KV cache, mid-decode
			// about prompt + OutputLen/2 tokens long.
			kv := float64(b) * float64(rep.KVBytesPerContext) * float64(in.prompt+o.OutputLen/2)
			r.RooflineKVTokS = float64(b) * bw * 1e9 / (float64(r.StepWeightBytes) + kv)
		}
		return r, nil
	}
	// Each batch size once more, untimed: the first forward of a shape
	// tunes cuBLASLt for it (blaslt_tune.go) and captures the decode graph
	// of its size, which the timed runs must not count.
	for _, b := range o.Batches {
		if _, err := runBatch(ctx, e, rng, mc, b, in, min(o.OutputLen, 4)); err != nil {
			return nil, err
		}
	}
	runs := make([][]BatchResult, len(o.Batches))
	textRuns := make([][]BatchResult, len(o.Batches))
	for range max(1, o.Repeat) {
		for i, b := range o.Batches {
			r, err := measure(b, in)
			if err != nil {
				return nil, err
			}
			runs[i] = append(runs[i], r)
			if rep.Vision == nil {
				continue
			}
			if r, err = measure(b, text); err != nil {
				return nil, err
			}
			textRuns[i] = append(textRuns[i], r)
		}
	}
	for i, rs := range runs {
		rep.Results = append(rep.Results, medianRun(rs))
		if rep.Vision != nil {
			rep.Vision.WithoutImages = append(rep.Vision.WithoutImages, medianRun(textRuns[i]))
		}
	}
	st := e.Stats()
	rep.DecodeGraphs, rep.VerifyGraphs, rep.DraftGraphs = st.GraphPaths()
	rep.RankGraphs = st.RankGraphs
	if o.ProfileKernels {
		for i, b := range o.Batches {
			if err := e.StartKernelProfile(); err != nil {
				return nil, err
			}
			_, err := runBatch(ctx, e, rng, mc, b, in, o.OutputLen)
			prof, perr := e.StopKernelProfile()
			if err = errors.Join(err, perr); err != nil {
				return nil, err
			}
			rep.Results[i].KernelProfile = &prof
		}
	}
	return rep, nil
}

// batchInput is what each request of a static batch carries.
type batchInput struct {
	prefix      []int          // the prompt's start: the images' placeholders
	images      []engine.Image // prepared
	views       int            // image views per request
	text        int            // random text tokens after the prefix
	prompt      int            // prompt tokens, the placeholders expanded
	imageTokens int            // of them, image placeholders
}

// imageInput prepares the images once (their preprocessing is not what
// the batches time) and lays out the prompts that carry them: for each
// view the model's start marker, one placeholder (the engine expands it
// to the view's length) and the end marker, then textLen random tokens.
// views and imageTokens are engine.ImagePromptTokens' count.
func imageInput(e *engine.Engine, imgs []engine.Image, textLen, views, imageTokens int) (batchInput, *VisionReport, error) {
	if !e.SupportsImages() {
		return batchInput{}, nil, fmt.Errorf("--image: model %s reads no images", e.ModelConfig().Architecture)
	}
	start := time.Now()
	prepared, err := e.PrepareImages(imgs, vision.Options{})
	if err != nil {
		return batchInput{}, nil, fmt.Errorf("--image: %w", err)
	}
	rep := &VisionReport{PreprocessSecond: time.Since(start).Seconds()}
	vc := e.ModelConfig().Vision
	in := batchInput{images: prepared, views: views, text: textLen, imageTokens: imageTokens}
	n := 0
	for _, img := range prepared {
		n += img.Views()
		for range img.Views() {
			for _, id := range []int{vc.StartTokenID, vc.ImageTokenID, vc.EndTokenID} {
				if id >= 0 {
					in.prefix = append(in.prefix, id)
				}
			}
		}
	}
	if n != views {
		return batchInput{}, nil, fmt.Errorf("--image: the images make %d views, %d were planned", n, views)
	}
	in.prompt = len(in.prefix) - views + imageTokens + textLen
	for _, img := range imgs {
		rep.Images = append(rep.Images, fmt.Sprintf("%dx%d", img.Decoded.W, img.Decoded.H))
	}
	rep.ViewsPerRequest, rep.ImageTokens, rep.PromptTokens = views, imageTokens, in.prompt
	rep.TextTokens = in.prompt - imageTokens
	return in, rep, nil
}

// medianRun is the run with the median decode tok/s (the lower of the
// two middle ones for an even count), with the count and range of all;
// its prefill figures are those of the run with the median prefill tok/s.
func medianRun(rs []BatchResult) BatchResult {
	mid := (len(rs) - 1) / 2
	slices.SortFunc(rs, func(a, b BatchResult) int { return cmp.Compare(a.PrefillTokS, b.PrefillTokS) })
	p := rs[mid]
	prefillMin, prefillMax := rs[0].PrefillTokS, rs[len(rs)-1].PrefillTokS
	slices.SortFunc(rs, func(a, b BatchResult) int { return cmp.Compare(a.DecodeTokS, b.DecodeTokS) })
	m := rs[mid]
	m.PrefillSeconds, m.PrefillTokS, m.PrefillGFLOPs, m.PrefillOfPeak = p.PrefillSeconds, p.PrefillTokS, p.PrefillGFLOPs, p.PrefillOfPeak
	m.VisionEncodeSeconds, m.VisionImagesPerS, m.LanguagePrefillSeconds = p.VisionEncodeSeconds, p.VisionImagesPerS, p.LanguagePrefillSeconds
	m.Runs, m.DecodeTokSMin, m.DecodeTokSMax = len(rs), rs[0].DecodeTokS, rs[len(rs)-1].DecodeTokS
	m.PrefillTokSMin, m.PrefillTokSMax = prefillMin, prefillMax
	return m
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// runBatch submits b requests together and times them from their deltas.
// Every request's prompt is checked to hold in.prompt tokens, of them
// in.imageTokens image placeholders.
func runBatch(ctx context.Context, e *engine.Engine, rng *rand.Rand, mc *model.Config, b int, in batchInput, outputLen int) (BatchResult, error) {
	p := sample.DefaultParams()
	p.Temperature, p.MaxNewTokens, p.IgnoreEOS = 0, outputLen, true
	type timing struct {
		first time.Time
		times []time.Time // arrival of each token
	}
	timings := make([]timing, b)
	errs := make([]error, b)
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for i := range b {
		ids := append(slices.Clip(in.prefix), randomIDs(rng, mc, in.text)...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := engine.Request{InputIDs: ids, Images: in.images, Sampling: p, OnDelta: func(d engine.Delta) {
				now := time.Now()
				mu.Lock()
				for range d.IDs {
					timings[i].times = append(timings[i].times, now)
				}
				mu.Unlock()
			}}
			res, err := e.Generate(ctx, req)
			switch {
			case err != nil:
			case len(res.OutputIDs) != outputLen:
				err = fmt.Errorf("request generated %d tokens, want %d (finish reason %s)", len(res.OutputIDs), outputLen, res.FinishReason)
			case len(res.PromptIDs) != in.prompt:
				err = fmt.Errorf("request prompt has %d tokens, want %d", len(res.PromptIDs), in.prompt)
			case in.imageTokens > 0:
				if n := countID(res.PromptIDs, mc.Vision.ImageTokenID); n != in.imageTokens {
					err = fmt.Errorf("request prompt has %d image placeholders, want %d", n, in.imageTokens)
				}
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return BatchResult{}, err
		}
	}
	var allFirst, end time.Time
	for i := range timings {
		t := timings[i].times
		if len(t) == 0 {
			return BatchResult{}, fmt.Errorf("a request streamed no tokens")
		}
		if t[0].After(allFirst) {
			allFirst = t[0]
		}
		if t[len(t)-1].After(end) {
			end = t[len(t)-1]
		}
	}
	decoded := 0
	for i := range timings {
		for _, t := range timings[i].times {
			if t.After(allFirst) {
				decoded++
			}
		}
	}
	r := BatchResult{Batch: b, PrefillSeconds: allFirst.Sub(start).Seconds(), DecodedInWindow: decoded}
	r.PrefillTokS = float64(b*in.prompt) / r.PrefillSeconds
	if window := end.Sub(allFirst).Seconds(); window > 0 && decoded > 0 {
		r.DecodeTokS = float64(decoded) / window
		r.DecodeStepMs = window / float64(decoded) * float64(b) * 1e3
	}
	return r, nil
}

// randomIDs are n random prompt tokens, clear of <unk>, <s>, </s> and of
// a vision-language model's image, video and marker tokens (a stray
// placeholder would be an image without pixels).
func randomIDs(rng *rand.Rand, mc *model.Config, n int) []int {
	var special []int
	if vc := mc.Vision; vc != nil {
		special = []int{vc.ImageTokenID, vc.VideoTokenID, vc.StartTokenID, vc.EndTokenID}
	}
	ids := make([]int, n)
	for j := range ids {
		for {
			ids[j] = 3 + rng.IntN(mc.VocabSize-3)
			if !slices.Contains(special, ids[j]) {
				break
			}
		}
	}
	return ids
}

func countID(ids []int, id int) int {
	n := 0
	for _, x := range ids {
		if x == id {
			n++
		}
	}
	return n
}

// linearFLOPs is 2 × the multiply-adds of the linear layers for one token,
// with or without the output layer (prefill computes logits only for the
// last token of a prompt); a MoE layer counts the token's own experts.
func linearFLOPs(c *model.Config, withHead bool) float64 {
	h, hd := float64(c.HiddenSize), float64(c.HeadDim)
	q, kv := float64(c.NumHeads)*hd, float64(c.NumKVHeads)*hd
	attn := h*(q+2*kv) + q*h
	total := 0.0
	for i := range c.NumLayers {
		mlp := 3 * h * float64(c.IntermediateSize)
		if e := &c.MoE; e.IsMoELayer(i) {
			// The router, each token's experts and the shared expert.
			mlp = h*float64(e.NumRoutedExperts) + 3*h*float64(e.NumExpertsPerTok*e.IntermediateSize+e.SharedIntermediateSize)
		}
		total += attn + mlp
	}
	if withHead {
		total += h * float64(c.VocabSize)
	}
	return 2 * total
}

// attentionFLOPs is the causal attention of one n-token prompt: q·k and
// p·v over n(n+1)/2 pairs per head per layer.
func attentionFLOPs(c *model.Config, n int) float64 {
	pairs := float64(n) * float64(n+1) / 2
	return 4 * pairs * float64(c.HeadDim) * float64(c.NumHeads) * float64(c.NumLayers)
}

// kvBytes is the KV cache one context token occupies over all layers.
func kvBytes(c *model.Config, dtype string) int64 {
	elem := int64(4)
	switch strings.ToLower(dtype) {
	case "bf16", "bfloat16", "fp16", "float16":
		elem = 2
	case "fp8_e4m3", "fp8":
		elem = 1
	}
	return int64(c.NumLayers) * 2 * int64(c.NumKVHeads) * int64(c.HeadDim) * elem
}

// Print writes the report as a table.
func (r *OneBatchReport) Print(w io.Writer) {
	fmt.Fprintf(w, "model %s  weights %s", r.Model, r.WeightDType)
	if r.Quantization != "none" {
		fmt.Fprintf(w, " quantization %s", r.Quantization)
	}
	if r.TPSize > 1 {
		fmt.Fprintf(w, "  tp %d (per rank:)", r.TPSize)
	}
	held := ""
	if r.DeviceWeightBytes > 0 {
		held = fmt.Sprintf("  %.1f MB held by the device", float64(r.DeviceWeightBytes)/1e6)
	}
	if r.Experts == 0 {
		fmt.Fprintf(w, "  %.1f MB of weights per decode step%s  input %d  output %d\n", float64(r.WeightBytes)/1e6, held, r.InputLen, r.OutputLen)
	} else {
		fmt.Fprintf(w, "  %.1f MB of weights%s  input %d  output %d\n", float64(r.WeightBytes)/1e6, held, r.InputLen, r.OutputLen)
		fmt.Fprintf(w, "mixture of experts: %.1f MB of it routed experts (%d per layer, %d per token); one token's forward reads %.1f MB (the active weights); "+
			"a batch's roofline reads the dense weights and, under uniform routing, the experts its tokens choose:",
			float64(r.RoutedExpertBytes)/1e6, r.Experts, r.ExpertsPerToken, float64(r.ActiveWeightBytes)/1e6)
		for _, x := range r.Results {
			fmt.Fprintf(w, "  batch %d %.1f MB/step", x.Batch, float64(x.StepWeightBytes)/1e6)
		}
		fmt.Fprintln(w)
	}
	r.Roofline.Print(w)
	if v := r.Vision; v != nil {
		views := fmt.Sprintf("%d views", v.ViewsPerRequest)
		if v.ViewsPerRequest == 1 {
			views = "1 view"
		}
		fmt.Fprintf(w, "every request: images %s (%s, %d image tokens) and %d text tokens (random, and the images' markers): %d prompt tokens; prefill GFLOP/s below is the language model's, over the prefill less the vision encode\n",
			strings.Join(v.Images, ", "), views, v.ImageTokens, v.TextTokens, v.PromptTokens)
	}
	fmt.Fprintf(w, "%5s  %13s  %15s  %7s  %12s  %8s  %8s  %14s  %6s  %18s  %11s\n",
		"batch", "prefill tok/s", "prefill GFLOP/s", "of peak", "decode tok/s", "ms/step", "GB/s now", "roofline tok/s", "of it", "roofline +KV tok/s", "host µs/step")
	speculative := slices.ContainsFunc(r.Results, func(x BatchResult) bool { return x.SpecAcceptLength > 0 })
	for _, x := range r.Results {
		ofPeak := "      -" // no FMA peak measured (a GPU run)
		if r.Roofline.FMAGFLOPs > 0 {
			ofPeak = fmt.Sprintf("%6.1f%%", 100*x.PrefillOfPeak)
		}
		fmt.Fprintf(w, "%5d  %13.1f  %15.1f  %s  %12.1f  %8.2f  %8.1f  %14.1f  %5.1f%%  %18.1f  %11.1f\n",
			x.Batch, x.PrefillTokS, x.PrefillGFLOPs, ofPeak, x.DecodeTokS, x.DecodeStepMs, x.ReadGBs, x.RooflineTokS, 100*x.OfRoofline, x.RooflineKVTokS, x.DecodeHostGapUs)
	}
	for _, g := range []struct {
		what   string
		counts engine.GraphCounts
	}{{"decode", r.DecodeGraphs}, {"verify", r.VerifyGraphs}, {"draft", r.DraftGraphs}} {
		if g.counts == (engine.GraphCounts{}) {
			continue
		}
		fmt.Fprintf(w, "%s steps through CUDA graphs: %d replayed, %d captured, %d eager", g.what, g.counts.Replays, g.counts.Captures, g.counts.Eager)
		if g.what == "decode" {
			for i, rg := range r.RankGraphs {
				fmt.Fprintf(w, "; rank %d: %d/%d/%d", i, rg.Replays, rg.Captures, rg.Eager)
			}
		}
		if g.counts.EagerReason != "" {
			fmt.Fprintf(w, " (the latest eager: %s)", g.counts.EagerReason)
		}
		fmt.Fprintln(w)
	}
	if speculative {
		fmt.Fprint(w, "speculative decoding, mean tokens per verify step:")
		for _, x := range r.Results {
			fmt.Fprintf(w, "  batch %d %.2f", x.Batch, x.SpecAcceptLength)
		}
		fmt.Fprintln(w)
	}
	if len(r.Results) > 0 && r.Results[0].Runs > 1 {
		fmt.Fprintf(w, "medians of %d interleaved runs (prefill columns by prefill tok/s, decode columns by decode tok/s); ranges of all runs:", r.Results[0].Runs)
		for _, x := range r.Results {
			fmt.Fprintf(w, "  batch %d prefill %.1f-%.1f decode %.1f-%.1f", x.Batch, x.PrefillTokSMin, x.PrefillTokSMax, x.DecodeTokSMin, x.DecodeTokSMax)
		}
		fmt.Fprintln(w)
	}
	if v := r.Vision; v != nil {
		v.print(w, r.Results)
	}
	for _, x := range r.Results {
		if x.KernelProfile != nil {
			printProfile(w, x.Batch, x.KernelProfile)
		}
	}
}

// print writes the vision encode's share of each batch's prefill, next
// to the same batch without images.
func (v *VisionReport) print(w io.Writer, results []BatchResult) {
	fmt.Fprintf(w, "vision: images preprocessed once in %.1f ms, outside the timed batches; the radix cache is off, so every request encodes its images\n", v.PreprocessSecond*1e3)
	fmt.Fprintf(w, "%5s  %14s  %14s  %9s  %17s  %9s  %13s  |  %s\n", "batch", "image tok/req", "vision encode s", "images/s", "language prefill s", "prefill s", "prefill tok/s",
		fmt.Sprintf("without images (%d text tokens): prefill s, prefill tok/s, decode tok/s", v.PromptTokens))
	for i, x := range results {
		t := v.WithoutImages[i]
		fmt.Fprintf(w, "%5d  %14d  %14.3f  %9.2f  %17.3f  %9.3f  %13.1f  |  %9.3f  %13.1f  %12.1f\n", x.Batch, v.ImageTokens, x.VisionEncodeSeconds, x.VisionImagesPerS,
			x.LanguagePrefillSeconds, x.PrefillSeconds, x.PrefillTokS, t.PrefillSeconds, t.PrefillTokS, t.DecodeTokS)
	}
}

// printProfile writes a profiled batch's operations, per forward of each
// kind: the top ones by time and the rest summed.
func printProfile(w io.Writer, batch int, p *device.Profile) {
	const top = 25
	for _, f := range p.Forwards {
		if f.Count == 0 {
			continue
		}
		per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(f.Count) }
		fmt.Fprintf(w, "kernel profile, batch %d, %s: %d forwards; per forward %.1f µs of GPU time, operations %.1f µs, host enqueue %.1f µs",
			batch, f.Label, f.Count, per(f.GPU), per(f.Ops), per(f.Host))
		if f.Starved > 0 {
			fmt.Fprintf(w, " (%d forwards starved: their figures include launch gaps; the longest host wait, %.1f µs, came before %s)",
				f.Starved, float64(f.LongestWait.Nanoseconds())/1e3, f.LongestWaitBefore)
		}
		fmt.Fprintln(w)
		fmt.Fprintf(w, "  %10s  %6s  %10s  %s\n", "µs/forward", "of GPU", "calls/fwd", "operation")
		n := 0
		var rest time.Duration
		for _, op := range p.Ops {
			if op.Label != f.Label {
				continue
			}
			if n++; n > top {
				rest += op.Time
				continue
			}
			fmt.Fprintf(w, "  %10.1f  %5.1f%%  %10.1f  %s\n", per(op.Time), 100*float64(op.Time)/float64(f.GPU),
				float64(op.Calls)/float64(f.Count), op.Name)
		}
		if rest > 0 {
			fmt.Fprintf(w, "  %10.1f  %5.1f%%  %10s  (%d more operations)\n", per(rest), 100*float64(rest)/float64(f.GPU), "", n-top)
		}
	}
}

// Print writes the roofline in one line.
func (r Roofline) Print(w io.Writer) {
	if r.Device == "cuda" {
		fmt.Fprintf(w, "roofline: %s read bandwidth %.1f GB/s (best of %d read-only passes over %d MiB)\n",
			r.Kernels, r.ReadGBs, r.ReadRuns, r.BufferMiB)
		return
	}
	fmt.Fprintf(w, "roofline: read bandwidth %.2f GB/s (best of %d reads of %d MiB), FMA peak %.1f GFLOP/s; %d threads, kernels %s\n",
		r.ReadGBs, r.ReadRuns, r.BufferMiB, r.FMAGFLOPs, r.Threads, r.Kernels)
}
