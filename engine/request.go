package engine

import (
	"github.com/gosling-ai/gosling/grammar"
	"github.com/gosling-ai/gosling/sample"
)

// Request is one generation request.
type Request struct {
	// Prompt is text, encoded with the tokenizer's special tokens (BOS);
	// InputIDs, when set, are used as they are and Prompt is ignored.
	Prompt   string
	InputIDs []int
	Sampling sample.Params
	// Logprobs returns the log-probability of each generated token, and
	// TopLogprobs the N most likely alternatives at each step.
	Logprobs    bool
	TopLogprobs int
	// PromptLogprobs scores the prompt: element i of Result.PromptLogprobs
	// is log p(prompt[i] | prompt[:i]); element 0 is nil.
	PromptLogprobs bool
	// Images are the prompt's images, one per image placeholder run in
	// order (a run of one placeholder token expands to the image's length).
	Images []Image
	// Grammar, when set, constrains the output to the grammar's language
	// (structured output); it must be compiled against GrammarVocab.
	Grammar *grammar.Compiled
	// OnDelta, when set, receives the output as it is produced. It is
	// called from the Generate goroutine, never from the scheduler.
	OnDelta func(Delta)
}

// Delta is a piece of streamed output.
type Delta struct {
	Text        string
	IDs         []int
	Logprobs    []float32
	TopLogprobs [][]sample.TokenLogprob
}

// Finish reasons, as in the OpenAI API.
const (
	FinishStop   = "stop"   // EOS, a stop token or a stop string
	FinishLength = "length" // max_new_tokens or the context limit
	FinishAbort  = "abort"  // cancelled by the client
)

// Result is a finished request.
type Result struct {
	PromptIDs      []int
	OutputIDs      []int
	Text           string
	FinishReason   string
	MatchedStop    any // the stop token id (int) or stop string that ended it
	OutputLogprobs []float32
	TopLogprobs    [][]sample.TokenLogprob
	PromptLogprobs []*float32
	CachedTokens   int
	// Speculative decoding: the steps that verified drafts for this
	// request and the drafted tokens they accepted (accept length:
	// (SpecAcceptedTokens+SpecVerifySteps)/SpecVerifySteps).
	SpecVerifySteps    int
	SpecAcceptedTokens int
}

// RequestError is a request the engine refuses because of the request
// itself (bad sampling values, a prompt longer than the context, more KV
// than the cache can ever hold): a client error, HTTP 400 in a server.
type RequestError struct{ Err error }

func (e *RequestError) Error() string { return e.Err.Error() }
func (e *RequestError) Unwrap() error { return e.Err }

func badRequest(err error) error {
	if err == nil {
		return nil
	}
	return &RequestError{Err: err}
}
