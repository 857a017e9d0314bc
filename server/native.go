package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/sample"
)

// POST /generate, SGLang's native generation route.

type generateRequest struct {
	Text                 json.RawMessage `json:"text"`      // a string or a list of strings
	InputIDs             json.RawMessage `json:"input_ids"` // token ids or a list of token-id lists
	SamplingParams       json.RawMessage `json:"sampling_params"`
	Stream               bool            `json:"stream"`
	ReturnLogprob        bool            `json:"return_logprob"`
	LogprobStartLen      *int            `json:"logprob_start_len"`
	TopLogprobsNum       int             `json:"top_logprobs_num"`
	ReturnTextInLogprobs bool            `json:"return_text_in_logprobs"`
	Rid                  json.RawMessage `json:"rid"`                 // a string, or a list for a batch
	ImageData            json.RawMessage `json:"image_data"`          // per prompt: an image or a list of images
	VideoData            json.RawMessage `json:"video_data"`          // per prompt: a video (its frames) or a list of videos
	MMProcessorKwargs    json.RawMessage `json:"mm_processor_kwargs"` // image processor settings for every prompt's images
	LoraPath             json.RawMessage `json:"lora_path"`           // refused: no LoRA adapters
}

// nativeSampling is SGLang's sampling_params.
type nativeSampling struct {
	samplingFields
	MaxNewTokens *int            `json:"max_new_tokens"`
	MinNewTokens json.RawMessage `json:"min_new_tokens"` // refused unless 0
	SamplingSeed *int64          `json:"sampling_seed"`
	N            *int            `json:"n"`
	constraintFields
}

const defaultNativeMaxNewTokens = 128 // SGLang's default max_new_tokens

type generateOutput struct {
	Index     *int         `json:"index,omitempty"` // which batch item a streamed chunk belongs to
	Text      string       `json:"text"`
	OutputIDs []int        `json:"output_ids"`
	MetaInfo  generateMeta `json:"meta_info"`
}

// logprobEntry is SGLang's [logprob, token_id, text]: text is null unless
// return_text_in_logprobs; logprob is null for the first prompt token.
type logprobEntry [3]any

type generateMeta struct {
	ID               string         `json:"id"`
	FinishReason     map[string]any `json:"finish_reason"` // null until the last chunk
	PromptTokens     int            `json:"prompt_tokens"`
	CompletionTokens int            `json:"completion_tokens"`
	CachedTokens     int            `json:"cached_tokens"`
	E2ELatency       float64        `json:"e2e_latency"`
	// Speculative decoding (SGLang's spec_verify_ct): verify steps and the
	// mean tokens each emitted; absent without speculation.
	SpecVerifyCt        int               `json:"spec_verify_ct,omitempty"`
	SpecAcceptLength    float64           `json:"spec_accept_length,omitempty"`
	InputTokenLogprobs  *[]logprobEntry   `json:"input_token_logprobs,omitempty"`
	OutputTokenLogprobs *[]logprobEntry   `json:"output_token_logprobs,omitempty"`
	InputTopLogprobs    *[]any            `json:"input_top_logprobs,omitempty"`
	OutputTopLogprobs   *[][]logprobEntry `json:"output_top_logprobs,omitempty"`
}

// nativeItem is one prompt of a (batch) /generate request.
type nativeItem struct {
	rid string
	req engine.Request
}

func (s *Server) handleGenerate(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var req generateRequest
	if err := decodeBody(r, &req); err != nil {
		writeError(w, err)
		return
	}
	items, batch, err := s.nativeItems(&req)
	if err != nil {
		writeError(w, err)
		return
	}
	parsed(r)
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	ctxs := make([]context.Context, len(items))
	for i, it := range items {
		param := "rid"
		if batch {
			param = fmt.Sprintf("rid[%d]", i)
		}
		c, untrack, err := s.track(ctx, it.rid, param)
		if err != nil {
			writeError(w, err)
			return
		}
		defer untrack()
		ctxs[i] = c
	}
	var sse *sseWriter
	if req.Stream {
		sse = newSSEWriter(w, cancel)
	}
	outs := make([]generateOutput, len(items))
	errs := make([]error, len(items))
	var wg sync.WaitGroup
	for i, it := range items {
		var index *int
		if batch {
			index = &i
		}
		if sse != nil {
			var text []byte
			var ids []int
			var lps []float32
			var tops [][]sample.TokenLogprob
			it.req.OnDelta = func(d engine.Delta) {
				if d.Text == "" && len(d.IDs) == 0 {
					return
				}
				text = append(text, d.Text...)
				ids = append(ids, d.IDs...)
				lps = append(lps, d.Logprobs...)
				tops = append(tops, d.TopLogprobs...)
				partial := &engine.Result{PromptIDs: it.req.InputIDs, OutputIDs: ids, Text: string(text), OutputLogprobs: lps, TopLogprobs: tops}
				out := s.nativeOutput(it, &req, partial, start)
				out.Index = index
				sse.send(out)
			}
		}
		wg.Go(func() {
			defer s.recoverTo(&errs[i])
			res, err := s.generate(ctxs[i], it.req)
			if err != nil {
				errs[i] = err
				return
			}
			outs[i] = s.nativeOutput(it, &req, res, start)
			outs[i].MetaInfo.FinishReason = finishReason(ctxs[i], res)
			if sse != nil {
				out := outs[i]
				out.Index = index
				sse.send(out)
			}
		})
	}
	wg.Wait()
	if err := firstError(errs); err != nil {
		if sse != nil {
			sse.fail(err)
		} else {
			writeError(w, err)
		}
		return
	}
	if sse != nil {
		sse.done()
		return
	}
	if batch {
		writeJSON(w, http.StatusOK, outs)
		return
	}
	writeJSON(w, http.StatusOK, outs[0])
}

// nativeItems reads the prompts, sampling parameters and rids of a
// /generate request into engine requests; batch reports a list input.
func (s *Server) nativeItems(req *generateRequest) ([]nativeItem, bool, *apiError) {
	var prompts []promptInput
	var images [][]engine.Image
	var batch bool
	imageOpts, apiErr := s.imageOptions(req.MMProcessorKwargs)
	if apiErr != nil {
		return nil, false, apiErr
	}
	// promptImages reads and prepares prompt i's images: their crops
	// change its text, and their tokens count against the context.
	promptImages := func(i int) ([]engine.Image, *apiError) {
		imgs, err := s.imageData(req.ImageData, req.VideoData, i, batch)
		if err != nil {
			return nil, err
		}
		imgs, err = s.prepareImages(imgs, imageOpts, indexed("image_data", i, batch))
		images = append(images, imgs)
		return imgs, err
	}
	switch {
	case !isNull(req.Text) && !isNull(req.InputIDs):
		return nil, false, badRequest("input_ids", codeInvalidValue, "give either text or input_ids, not both")
	case !isNull(req.Text):
		var texts []string
		if one, ok := decodeAs[string](req.Text); ok {
			texts = []string{one}
		} else if list, ok := decodeAs[[]string](req.Text); ok {
			texts, batch = list, true
		} else {
			return nil, false, wrongType("text", "a string or a list of strings", rawKind(req.Text))
		}
		budget, err := s.newBudget(len(texts), 1, "text")
		if err != nil {
			return nil, false, err
		}
		for i, t := range texts {
			imgs, err := promptImages(i)
			if err != nil {
				return nil, false, err
			}
			at := indexed("text", i, batch)
			ids, err := budget.encode(s.eng.ExpandImageText(t, imgs), at, true)
			if err != nil {
				return nil, false, err
			}
			if ids, err = budget.expandImages(ids, imgs, at); err != nil {
				return nil, false, err
			}
			prompts = append(prompts, promptInput{text: t, ids: ids})
		}
	case !isNull(req.InputIDs):
		var lists [][]int
		if ids, ok := decodeAs[[]int](req.InputIDs); ok {
			lists = [][]int{ids}
		} else if batchIDs, ok := decodeAs[[][]int](req.InputIDs); ok {
			lists, batch = batchIDs, true
		} else {
			return nil, false, wrongType("input_ids", "a list of token ids or a list of token-id lists", rawKind(req.InputIDs))
		}
		budget, err := s.newBudget(len(lists), 1, "input_ids")
		if err != nil {
			return nil, false, err
		}
		for i, ids := range lists {
			at := indexed("input_ids", i, batch)
			if err := s.checkIDs(ids, at); err != nil {
				return nil, false, err
			}
			if err := budget.take(len(ids), at); err != nil {
				return nil, false, err
			}
			imgs, err := promptImages(i)
			if err != nil {
				return nil, false, err
			}
			if ids, err = budget.expandImages(ids, imgs, at); err != nil {
				return nil, false, err
			}
			prompts = append(prompts, promptInput{ids: ids})
		}
	default:
		return nil, false, badRequest("text", codeMissing, "give the prompt as text or input_ids")
	}
	if batch && len(prompts) == 0 {
		return nil, false, badRequest("text", codeInvalidValue, "the batch is empty; give at least one prompt")
	}

	sampling, err := perItem[nativeSampling](req.SamplingParams, "sampling_params", len(prompts), batch)
	if err != nil {
		return nil, false, err
	}
	rids, err := perItem[string](req.Rid, "rid", len(prompts), batch)
	if err != nil {
		return nil, false, err
	}
	if !isNull(req.LoraPath) {
		return nil, false, badRequest("lora_path", codeUnsupported, "lora_path is not supported: this server serves no LoRA adapters")
	}
	if req.TopLogprobsNum < 0 || req.TopLogprobsNum > maxTopLogprobs {
		return nil, false, badRequest("top_logprobs_num", codeInvalidValue, "top_logprobs_num must be between 0 and %d, got %d", maxTopLogprobs, req.TopLogprobsNum)
	}
	start := -1
	if req.LogprobStartLen != nil {
		start = *req.LogprobStartLen
	}
	items := make([]nativeItem, len(prompts))
	for i, p := range prompts {
		sp := sampling[i]
		prefix := "sampling_params."
		if err := sp.unsupported(prefix); err != nil {
			return nil, false, err
		}
		params, err := sp.params(s.baseParams(), prefix)
		if err != nil {
			return nil, false, err
		}
		spec, err := constraintOf(&sp.constraintFields, nil, prefix)
		if err != nil {
			return nil, false, err
		}
		constraint, err := s.compileConstraint(spec)
		if err != nil {
			return nil, false, err
		}
		if params.MaxNewTokens, err = s.maxNewTokens(sp.MaxNewTokens, defaultNativeMaxNewTokens, len(p.ids), prefix+"max_new_tokens"); err != nil {
			return nil, false, err
		}
		params.Seed = seedAt(sp.SamplingSeed, 0)
		if err := validateParams(params, prefix); err != nil {
			return nil, false, err
		}
		if req.ReturnLogprob && start >= len(p.ids) {
			return nil, false, badRequest("logprob_start_len", codeInvalidValue,
				"logprob_start_len %d is not below the prompt length %d", start, len(p.ids))
		}
		rid := rids[i]
		if rid == "" {
			rid = newID("")
		}
		items[i] = nativeItem{rid: rid, req: engine.Request{InputIDs: p.ids, Sampling: params, Grammar: constraint,
			Logprobs: req.ReturnLogprob, TopLogprobs: topIf(req.ReturnLogprob, req.TopLogprobsNum),
			PromptLogprobs: req.ReturnLogprob && start >= 0, Images: images[i]}}
	}
	return items, batch, nil
}

func topIf(on bool, n int) int {
	if on {
		return n
	}
	return 0
}

func indexed(param string, i int, batch bool) string {
	if batch {
		return fmt.Sprintf("%s[%d]", param, i)
	}
	return param
}

func (sp *nativeSampling) unsupported(prefix string) *apiError {
	if sp.N != nil && *sp.N != 1 {
		return badRequest(prefix+"n", codeUnsupported, "%sn must be 1; send a batch of prompts instead", prefix)
	}
	return refuseMinTokens(sp.MinNewTokens, prefix+"min_new_tokens")
}

// perItem reads a field that is one value for every item, or (in a batch)
// a list with one value per item.
func perItem[T any](raw json.RawMessage, param string, n int, batch bool) ([]T, *apiError) {
	out := make([]T, n)
	if isNull(raw) {
		return out, nil
	}
	var list []json.RawMessage
	if batch && json.Unmarshal(raw, &list) == nil {
		if len(list) != n {
			return nil, badRequest(param, codeInvalidValue, "%s has %d entries for a batch of %d prompts", param, len(list), n)
		}
		for i, item := range list {
			if err := unmarshalField(item, &out[i], fmt.Sprintf("%s[%d]", param, i)); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	var one T
	if err := unmarshalField(raw, &one, param); err != nil {
		return nil, err
	}
	for i := range out {
		out[i] = one
	}
	if _, isString := any(one).(string); isString && batch && n > 1 && !isNull(raw) {
		return nil, badRequest(param, codeInvalidValue, "%s must be a list with one unique id per prompt of the batch", param)
	}
	return out, nil
}

// unmarshalField decodes a nested field, naming it in type errors.
func unmarshalField(raw json.RawMessage, v any, param string) *apiError {
	err := json.Unmarshal(raw, v)
	if err == nil {
		return nil
	}
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		name := param
		if f := fieldPath(typeErr.Field); f != "" {
			name += "." + f
		}
		return wrongType(name, jsonTypeName(typeErr.Type), typeErr.Value)
	}
	return badRequest(param, codeInvalidJSON, "%s: %v", param, err)
}

// nativeOutput is SGLang's {text, output_ids, meta_info} for res.
func (s *Server) nativeOutput(it nativeItem, req *generateRequest, res *engine.Result, start time.Time) generateOutput {
	out := generateOutput{Text: res.Text, OutputIDs: res.OutputIDs, MetaInfo: generateMeta{
		ID: it.rid, PromptTokens: len(it.req.InputIDs), CompletionTokens: len(res.OutputIDs),
		CachedTokens: res.CachedTokens, E2ELatency: time.Since(start).Seconds(),
		SpecVerifyCt: res.SpecVerifySteps,
	}}
	if res.SpecVerifySteps > 0 {
		out.MetaInfo.SpecAcceptLength = float64(res.SpecAcceptedTokens+res.SpecVerifySteps) / float64(res.SpecVerifySteps)
	}
	if out.OutputIDs == nil {
		out.OutputIDs = []int{}
	}
	if !req.ReturnLogprob {
		return out
	}
	text := func(pieces []string, i int) any {
		if req.ReturnTextInLogprobs {
			return pieces[i]
		}
		return nil
	}
	var promptPieces, outPieces []string
	if req.ReturnTextInLogprobs {
		promptPieces, outPieces = s.texts.pieces(it.req.InputIDs, nil), s.texts.pieces(res.OutputIDs, it.req.InputIDs)
	}
	input := []logprobEntry{}
	var inputTop []any
	if it.req.PromptLogprobs {
		for i := *req.LogprobStartLen; i < len(it.req.InputIDs); i++ {
			var lp any
			if i < len(res.PromptLogprobs) && res.PromptLogprobs[i] != nil {
				lp = jsonLogprob(*res.PromptLogprobs[i])
			}
			input = append(input, logprobEntry{lp, it.req.InputIDs[i], text(promptPieces, i)})
			inputTop = append(inputTop, nil) // the engine scores prompts without alternatives
		}
	}
	output := []logprobEntry{}
	for i, id := range res.OutputIDs {
		var lp any
		if i < len(res.OutputLogprobs) {
			lp = jsonLogprob(res.OutputLogprobs[i])
		}
		output = append(output, logprobEntry{lp, id, text(outPieces, i)})
	}
	out.MetaInfo.InputTokenLogprobs, out.MetaInfo.OutputTokenLogprobs = &input, &output
	if it.req.TopLogprobs > 0 {
		outputTop := [][]logprobEntry{}
		for _, step := range res.TopLogprobs {
			row := []logprobEntry{}
			for _, alt := range step {
				var t any
				if req.ReturnTextInLogprobs {
					t = s.texts.single(alt.ID)
				}
				row = append(row, logprobEntry{jsonLogprob(alt.Logprob), alt.ID, t})
			}
			outputTop = append(outputTop, row)
		}
		if inputTop == nil {
			inputTop = []any{}
		}
		out.MetaInfo.InputTopLogprobs, out.MetaInfo.OutputTopLogprobs = &inputTop, &outputTop
	}
	return out
}

// finishReason is SGLang's finish_reason object.
func finishReason(ctx context.Context, res *engine.Result) map[string]any {
	switch res.FinishReason {
	case engine.FinishStop:
		return map[string]any{"type": "stop", "matched": res.MatchedStop}
	case engine.FinishLength:
		return map[string]any{"type": "length", "length": len(res.OutputIDs)}
	}
	msg := "aborted"
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		msg = cause.Error()
	}
	return map[string]any{"type": res.FinishReason, "message": msg}
}

func firstError(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
