package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/sample"
)

// POST /v1/completions (OpenAI's legacy completions)

type completionRequest struct {
	openaiCommon
	Prompt    json.RawMessage `json:"prompt"`
	MaxTokens *int            `json:"max_tokens"`
	Echo      bool            `json:"echo"`
	Logprobs  *int            `json:"logprobs"`
	Suffix    json.RawMessage `json:"suffix"`
	BestOf    *int            `json:"best_of"`
}

type completion struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	Usage   *usage             `json:"usage,omitempty"`
}

type completionChoice struct {
	Index        int                 `json:"index"`
	Text         string              `json:"text"`
	Logprobs     *completionLogprobs `json:"logprobs"`
	FinishReason *string             `json:"finish_reason"`
	MatchedStop  any                 `json:"matched_stop,omitempty"` // SGLang extension
}

// completionLogprobs is the legacy logprobs shape. text_offset counts
// characters from the start of the choice's text (echoed prompt included).
type completionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []*float32           `json:"token_logprobs"`
	TopLogprobs   []map[string]float32 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

const (
	defaultCompletionTokens = 16 // OpenAI's default max_tokens for completions
	maxLegacyLogprobs       = 20 // OpenAI allows 5; vLLM and SGLang allow more
)

// promptInput is one prompt of a request, tokenized.
type promptInput struct {
	text string // the text as sent; "" for token ids
	ids  []int
}

func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	var req completionRequest
	if err := decodeBody(r, &req); err != nil {
		writeError(w, err)
		return
	}
	n, err := req.check(s)
	if err != nil {
		writeError(w, err)
		return
	}
	if !isNull(req.Suffix) {
		writeError(w, badRequest("suffix", codeUnsupported, "suffix (insertion) is not supported; leave it out"))
		return
	}
	if req.BestOf != nil && *req.BestOf != 1 {
		writeError(w, badRequest("best_of", codeUnsupported, "best_of is not supported; use n"))
		return
	}
	topN := 0
	if req.Logprobs != nil {
		topN = *req.Logprobs
		if topN < 0 || topN > maxLegacyLogprobs {
			writeError(w, badRequest("logprobs", codeInvalidValue, "logprobs must be between 0 and %d, got %d", maxLegacyLogprobs, topN))
			return
		}
	}
	prompts, err := s.parsePrompts(req.Prompt, "prompt", n)
	if err != nil {
		writeError(w, err)
		return
	}
	base, err := req.params(s.baseParams(), "")
	if err != nil {
		writeError(w, err)
		return
	}
	constraint, err := req.grammar(s)
	if err != nil {
		writeError(w, err)
		return
	}
	var reqs []engine.Request
	promptTokens := 0
	for _, p := range prompts {
		maxNew, err := s.maxNewTokens(req.MaxTokens, defaultCompletionTokens, len(p.ids), "max_tokens")
		if err != nil {
			writeError(w, err)
			return
		}
		params := base
		params.MaxNewTokens = maxNew
		if err := validateParams(params, ""); err != nil {
			writeError(w, err)
			return
		}
		promptTokens += len(p.ids)
		for j := range n {
			params.Seed = seedAt(req.Seed, j)
			reqs = append(reqs, engine.Request{InputIDs: p.ids, Sampling: params, Grammar: constraint,
				Logprobs: req.Logprobs != nil, TopLogprobs: topN, PromptLogprobs: req.Echo && req.Logprobs != nil})
		}
	}

	parsed(r)
	id := newID("cmpl-")
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	ctx, untrack, err := s.track(ctx, id, "")
	if err != nil {
		writeError(w, err)
		return
	}
	defer untrack()
	head := completion{ID: id, Object: "text_completion", Created: time.Now().Unix(), Model: s.opts.ServedModelName}
	lc := legacyOpts{echo: req.Echo, logprobs: req.Logprobs != nil, skipSpecial: base.SkipSpecialTokens}
	if req.Stream {
		s.streamCompletions(ctx, newSSEWriter(w, cancel), head, reqs, prompts, n, lc, promptTokens, req.includeUsage())
		return
	}
	results, genErr := s.runAll(ctx, reqs, nil)
	if genErr != nil {
		writeError(w, genErr)
		return
	}
	resp := head
	completionTokens, cached := 0, 0
	for i, res := range results {
		p := prompts[i/n]
		text := res.Text
		var lp *completionLogprobs
		if lc.logprobs {
			lp = &completionLogprobs{Tokens: []string{}, TokenLogprobs: []*float32{}, TopLogprobs: []map[string]float32{}, TextOffset: []int{}}
		}
		offset := 0
		if lc.echo {
			echo := s.promptText(p, lc.skipSpecial)
			text = echo + text
			if lp != nil {
				s.appendLegacy(lp, res.PromptIDs, nil, res.PromptLogprobs, nil, &offset, lc.skipSpecial)
				// The prompt's token texts can be longer than its text: a
				// SentencePiece tokenizer encodes a dummy leading space that
				// decoding strips. Those extra characters are at the start.
				if extra := offset - utf8.RuneCountInString(echo); extra > 0 {
					for j := range lp.TextOffset {
						lp.TextOffset[j] = max(lp.TextOffset[j]-extra, 0)
					}
				}
				offset = utf8.RuneCountInString(echo)
			}
		}
		if lp != nil {
			s.appendLegacy(lp, res.OutputIDs, res.PromptIDs, float32Ptrs(res.OutputLogprobs), res.TopLogprobs, &offset, lc.skipSpecial)
		}
		reason := res.FinishReason
		resp.Choices = append(resp.Choices, completionChoice{Index: i, Text: text, Logprobs: lp, FinishReason: &reason, MatchedStop: res.MatchedStop})
		completionTokens += len(res.OutputIDs)
		if i%n == 0 {
			cached += res.CachedTokens
		}
	}
	resp.Usage = newUsage(promptTokens, completionTokens, cached)
	writeJSON(w, http.StatusOK, resp)
}

type legacyOpts struct {
	echo, logprobs, skipSpecial bool
}

// streamCompletions streams text_completion chunks: per choice the echoed
// prompt (when asked), the text as it is produced, a last chunk with the
// finish reason; then the usage chunk if asked for, and [DONE].
func (s *Server) streamCompletions(ctx context.Context, sse *sseWriter, head completion, reqs []engine.Request,
	prompts []promptInput, n int, lc legacyOpts, promptTokens int, includeUsage bool) {
	chunk := func(c completionChoice) completion {
		out := head
		out.Choices = []completionChoice{c}
		return out
	}
	echoes := make([]func(), len(reqs)) // each choice's echoed prompt, sent once
	for i := range reqs {
		offset := 0 // characters of this choice's text sent so far
		echoed := !lc.echo
		sendEcho := func() {
			if !echoed {
				echoed = true
				text := s.promptText(prompts[i/n], lc.skipSpecial)
				offset = utf8.RuneCountInString(text)
				sse.send(chunk(completionChoice{Index: i, Text: text}))
			}
		}
		pieces := s.texts.stream(reqs[i].InputIDs)
		reqs[i].OnDelta = func(d engine.Delta) {
			sendEcho()
			c := completionChoice{Index: i, Text: d.Text}
			if lc.logprobs && len(d.IDs) > 0 {
				c.Logprobs = &completionLogprobs{}
				s.appendLegacyPieces(c.Logprobs, d.IDs, pieces.pushAll(d.IDs), float32Ptrs(d.Logprobs), d.TopLogprobs, &offset, lc.skipSpecial)
			} else {
				offset += utf8.RuneCountInString(d.Text)
			}
			if d.Text == "" && c.Logprobs == nil {
				return
			}
			sse.send(chunk(c))
		}
		echoes[i] = sendEcho
	}
	completion, cached := 0, 0
	if _, err := s.runAll(ctx, reqs, func(i int, res *engine.Result) {
		echoes[i]()
		reason := res.FinishReason
		sse.send(chunk(completionChoice{Index: i, FinishReason: &reason, MatchedStop: res.MatchedStop}))
		completion += len(res.OutputIDs)
		if i%n == 0 {
			cached += res.CachedTokens
		}
	}); err != nil {
		sse.fail(err)
		return
	}
	if includeUsage {
		out := head
		out.Choices = []completionChoice{}
		out.Usage = newUsage(promptTokens, completion, cached)
		sse.send(out)
	}
	sse.done()
}

// promptText is the prompt as echoed: the client's text, or the decoded ids.
func (s *Server) promptText(p promptInput, skipSpecial bool) string {
	if p.ids != nil && p.text == "" && s.eng.Tokenizer() != nil {
		return s.eng.Tokenizer().Decode(p.ids, skipSpecial)
	}
	return p.text
}

// appendLegacy adds ids, decoded as one text after context, to lp.
func (s *Server) appendLegacy(lp *completionLogprobs, ids, context []int, lps []*float32, tops [][]sample.TokenLogprob, offset *int, skipSpecial bool) {
	s.appendLegacyPieces(lp, ids, s.texts.pieces(ids, context), lps, tops, offset, skipSpecial)
}

func (s *Server) appendLegacyPieces(lp *completionLogprobs, ids []int, pieces []string, lps []*float32, tops [][]sample.TokenLogprob, offset *int, skipSpecial bool) {
	tok := s.eng.Tokenizer()
	for i, id := range ids {
		lp.Tokens = append(lp.Tokens, pieces[i])
		var v *float32
		if i < len(lps) && lps[i] != nil {
			x := jsonLogprob(*lps[i])
			v = &x
		}
		lp.TokenLogprobs = append(lp.TokenLogprobs, v)
		// Never null, unlike OpenAI's first echoed token: the official Go SDK
		// drops the whole list when one entry is null. Prompt tokens have no
		// alternatives (the engine scores only the prompt's own tokens).
		top := map[string]float32{}
		if i < len(tops) {
			for _, alt := range tops[i] {
				text := pieces[i]
				if alt.ID != id {
					text = s.texts.single(alt.ID)
				}
				top[text] = jsonLogprob(alt.Logprob)
			}
		}
		if v != nil { // as in OpenAI, the chosen token is always listed
			top[pieces[i]] = *v
		}
		lp.TopLogprobs = append(lp.TopLogprobs, top)
		lp.TextOffset = append(lp.TextOffset, *offset)
		// A skipped special token is not in the text, so it takes no room.
		if tok == nil || !skipSpecial || !tok.IsSpecial(id) {
			*offset += utf8.RuneCountInString(pieces[i])
		}
	}
}

func float32Ptrs(v []float32) []*float32 {
	out := make([]*float32, len(v))
	for i := range v {
		out[i] = &v[i]
	}
	return out
}

// parsePrompts reads OpenAI's prompt: a string, a list of strings, a list
// of token ids, or a list of token-id lists; each prompt will run n times.
func (s *Server) parsePrompts(raw json.RawMessage, param string, n int) ([]promptInput, *apiError) {
	if isNull(raw) {
		return nil, badRequest(param, codeMissing, "%s is required", param)
	}
	var texts []string
	var batch [][]int
	if one, ok := decodeAs[string](raw); ok {
		texts = []string{one}
	} else if list, ok := decodeAs[[]string](raw); ok {
		texts = list
	} else if ids, ok := decodeAs[[]int](raw); ok {
		batch = [][]int{ids}
	} else if lists, ok := decodeAs[[][]int](raw); ok {
		batch = lists
	} else {
		return nil, wrongType(param, "a string, a list of strings, a list of token ids or a list of token-id lists", rawKind(raw))
	}
	if len(texts) == 0 && len(batch) == 0 {
		return nil, badRequest(param, codeInvalidValue, "%s is an empty list; give at least one prompt", param)
	}
	budget, err := s.newBudget(len(texts)+len(batch), n, param)
	if err != nil {
		return nil, err
	}
	var out []promptInput
	for i, t := range texts {
		at := param
		if len(texts) > 1 {
			at = fmt.Sprintf("%s[%d]", param, i)
		}
		ids, err := budget.encode(t, at, true)
		if err != nil {
			return nil, err
		}
		out = append(out, promptInput{text: t, ids: ids})
	}
	for i, ids := range batch {
		at := param
		if len(batch) > 1 || len(ids) == 0 {
			at = fmt.Sprintf("%s[%d]", param, i)
		}
		if err := s.checkIDs(ids, at); err != nil {
			return nil, err
		}
		if err := budget.take(len(ids), at); err != nil {
			return nil, err
		}
		out = append(out, promptInput{ids: ids})
	}
	return out, nil
}

// decodeAs decodes raw as a T. Unlike json.Unmarshal into a shared
// variable, a failed attempt leaves nothing behind (Unmarshal fills what it
// can before it reports a type error).
func decodeAs[T any](raw json.RawMessage) (T, bool) {
	var v T
	if json.Unmarshal(raw, &v) != nil {
		var zero T
		return zero, false
	}
	return v, true
}
