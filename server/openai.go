package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/grammar"
)

// Shared pieces of the OpenAI-compatible routes.

type usage struct {
	PromptTokens        int            `json:"prompt_tokens"`
	CompletionTokens    int            `json:"completion_tokens"`
	TotalTokens         int            `json:"total_tokens"`
	PromptTokensDetails *promptDetails `json:"prompt_tokens_details,omitempty"`
}

type promptDetails struct {
	CachedTokens int `json:"cached_tokens"` // prompt tokens served from the prefix cache
}

func newUsage(prompt, completion, cached int) *usage {
	return &usage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion,
		PromptTokensDetails: &promptDetails{CachedTokens: cached}}
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// openaiCommon are the fields every OpenAI generation route reads besides
// its prompt. Unsupported ones are read only to be refused: ignoring them
// would silently give the client something else than it asked for.
type openaiCommon struct {
	Model          string          `json:"model"`
	N              *int            `json:"n"`
	Seed           *int64          `json:"seed"`
	Stream         bool            `json:"stream"`
	StreamOptions  *streamOptions  `json:"stream_options"`
	ResponseFormat json.RawMessage `json:"response_format"`
	LogitBias      json.RawMessage `json:"logit_bias"`
	// SGLang's and vLLM's OpenAI-route extensions gosling does not have;
	// refused rather than ignored.
	MinTokens json.RawMessage `json:"min_tokens"`
	LoraPath  json.RawMessage `json:"lora_path"`
	samplingFields
	constraintFields // SGLang's extras: json_schema, regex, ebnf
}

const maxN = 128 // OpenAI's limit on n

// check validates the model name and the fields common to both routes and
// returns n.
func (c *openaiCommon) check(s *Server) (int, *apiError) {
	if err := s.checkModel(c.Model); err != nil {
		return 0, err
	}
	n := 1
	if c.N != nil {
		n = *c.N
	}
	if n < 1 || n > maxN {
		return 0, badRequest("n", codeInvalidValue, "n must be between 1 and %d, got %d", maxN, n)
	}
	if s := string(c.LogitBias); !isNull(c.LogitBias) && s != "{}" {
		return 0, badRequest("logit_bias", codeUnsupported, "logit_bias is not supported; leave it out")
	}
	if err := refuseMinTokens(c.MinTokens, "min_tokens"); err != nil {
		return 0, err
	}
	if !isNull(c.LoraPath) {
		return 0, badRequest("lora_path", codeUnsupported, "lora_path is not supported: this server serves no LoRA adapters")
	}
	if c.StreamOptions != nil && !c.Stream {
		return 0, badRequest("stream_options", codeInvalidValue, "stream_options is only allowed with \"stream\": true")
	}
	return n, nil
}

// grammar compiles the request's response_format or SGLang constraint
// (nil when it has none).
func (c *openaiCommon) grammar(s *Server) (*grammar.Compiled, *apiError) {
	spec, err := constraintOf(&c.constraintFields, c.ResponseFormat, "")
	if err != nil {
		return nil, err
	}
	return s.compileConstraint(spec)
}

func (c *openaiCommon) includeUsage() bool {
	return c.StreamOptions != nil && c.StreamOptions.IncludeUsage
}

func (s *Server) checkModel(model string) *apiError {
	if model == "" || model == s.opts.ServedModelName {
		return nil
	}
	return &apiError{Status: http.StatusNotFound, Type: "invalid_request_error", Param: "model", Code: codeModelNotFound,
		Message: fmt.Sprintf("the model %q does not exist; this server serves %q (see GET /v1/models)", model, s.opts.ServedModelName)}
}

// runAll runs reqs concurrently (the engine batches them) and returns the
// results in order, or the first error in that order. done, when not nil,
// is called with each request's result as soon as it finishes without
// error, one call at a time (a stream's last chunk of a choice and its
// share of the usage).
func (s *Server) runAll(ctx context.Context, reqs []engine.Request, done func(i int, res *engine.Result)) ([]*engine.Result, error) {
	results := make([]*engine.Result, len(reqs))
	errs := make([]error, len(reqs))
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i := range reqs {
		wg.Go(func() {
			defer s.recoverTo(&errs[i])
			results[i], errs[i] = s.generate(ctx, reqs[i])
			if errs[i] == nil && results[i].FinishReason == engine.FinishAbort {
				// "abort" is no OpenAI finish reason, and OpenAI clients
				// cannot tell a cut-off answer from a whole one: the
				// request fails instead.
				errs[i] = abortedError(ctx, results[i])
			}
			if errs[i] == nil && done != nil {
				mu.Lock()
				defer mu.Unlock()
				done(i, results[i])
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return results, nil
}

// abortedError is the OpenAI routes' answer to a generation aborted by
// /abort_request or a shutdown.
func abortedError(ctx context.Context, res *engine.Result) *apiError {
	why := "the server stopped it (shutting down)"
	if errors.Is(context.Cause(ctx), errAborted) {
		why = "it was aborted through /abort_request"
	}
	return serverError(http.StatusServiceUnavailable, codeAborted, "the request did not finish: %s after %d generated tokens", why, len(res.OutputIDs))
}

type modelCard struct {
	ID          string `json:"id"`
	Object      string `json:"object"`
	Created     int64  `json:"created"`
	OwnedBy     string `json:"owned_by"`
	Root        string `json:"root"`
	MaxModelLen int    `json:"max_model_len"` // vLLM and SGLang add it
}

func (s *Server) modelCard() modelCard {
	return modelCard{ID: s.opts.ServedModelName, Object: "model", Created: s.createdAt, OwnedBy: "gosling",
		Root: s.eng.Settings().ModelPath, MaxModelLen: s.eng.Settings().ContextLength}
}

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []modelCard{s.modelCard()}})
}

func (s *Server) handleModel(w http.ResponseWriter, r *http.Request) {
	if err := s.checkModel(r.PathValue("model")); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, s.modelCard())
}

// refuseMinTokens refuses a minimum output length other than 0 (a no-op):
// gosling cannot yet hold back end-of-sequence and stops before it.
func refuseMinTokens(raw json.RawMessage, param string) *apiError {
	if isNull(raw) || strings.TrimSpace(string(raw)) == "0" {
		return nil
	}
	return badRequest(param, codeUnsupported, "%s is not supported: generation may stop before it; leave it out or set 0", param)
}
