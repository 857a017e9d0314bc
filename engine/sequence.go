package engine

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/gosling-ai/gosling/engine/runner"
	"github.com/gosling-ai/gosling/engine/sched"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/sample"
	"github.com/gosling-ai/gosling/tokenizer"
	"github.com/gosling-ai/gosling/vision"
)

// request is the scheduler's view of a Request. The embedded mailbox is
// shared with the Generate goroutine; the rest belongs to the scheduler.
type request struct {
	Request
	// Req is the scheduler's part: tokens (prompt and output in one
	// slice), KV sequence, prefix-cache pin.
	sched.Req
	imageLayout
	sampler *sample.Sampler
	stream  *tokenizer.DecodeStream // nil without a tokenizer
	stops   *sample.StopChecker
	// constraint is the grammar state of a Request.Grammar (nil: none).
	constraint *constraint
	out        output  // what the result reports beyond the tokens
	spec       specReq // speculative decoding's state (zero when off)
	ended      bool    // finished: its result is built and its KV released
	drawChunk  int     // overlap: its chunk in the step that draws its newest in-flight token
	mailbox
}

// output is what a request has produced beyond its tokens, gathered for
// its Result.
type output struct {
	text           []byte
	matchedStop    any
	logprobs       []float32
	topLogprobs    [][]sample.TokenLogprob
	promptLogprobs []*float32 // computed at the first prefill only
}

// specReq is a request's speculative-decoding state.
type specReq struct {
	steps    int          // steps that verified a draft tree for it
	accepted int          // drafted tokens accepted in them
	draftSeq *kvcache.Seq // STANDALONE: its sequence in the draft model's cache
	draftLen int          // tokens of Tokens in the draft model's cache
	// EAGLE: the target's features of tokens eagleFrom.. that the head's
	// cache does not hold yet, eagleDrafter.width values per token.
	eagleFeat []float32
	eagleFrom int
}

// mailbox is what the scheduler and a request's Generate goroutine
// share: cancellation, the deltas streamed so far, and the result, which
// Generate reads once finished is closed.
type mailbox struct {
	cancelled atomic.Bool
	finished  chan struct{}
	notify    chan struct{} // capacity 1: "deltas are pending"
	mu        sync.Mutex
	pending   []Delta
	result    *Result
	err       error
}

func (e *Engine) newRequest(req Request) (*request, error) {
	if err := req.Sampling.Validate(); err != nil {
		return nil, err
	}
	ids := slices.Clone(req.InputIDs)
	imgs, err := e.PrepareImages(req.Images, vision.Options{})
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		if e.tok == nil {
			return nil, fmt.Errorf("this model has no tokenizer: give the prompt as token ids, or load one with --tokenizer PATH")
		}
		var fits bool
		if ids, fits = e.tok.EncodeLimit(e.ExpandImageText(req.Prompt, imgs), true, e.cfg.ContextLength); !fits {
			return nil, fmt.Errorf("the prompt has more than %d tokens, the context length", e.cfg.ContextLength)
		}
	}
	layout, ids, err := e.prepareImages(imgs, ids)
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("the prompt is empty (and the tokenizer adds no BOS token)")
	}
	vocab := e.model.Config().VocabSize
	for _, id := range ids {
		if id < 0 || id >= vocab {
			return nil, fmt.Errorf("prompt token id %d is outside the vocabulary [0, %d)", id, vocab)
		}
	}
	if len(ids) >= e.cfg.ContextLength && req.Sampling.MaxNewTokens > 0 || len(ids) > e.cfg.ContextLength {
		if n := layout.imageTokens(); n > 0 {
			return nil, fmt.Errorf("the prompt has %d tokens (%d of them for %d images), the context length is %d", len(ids), n, len(req.Images), e.cfg.ContextLength)
		}
		return nil, fmt.Errorf("the prompt has %d tokens, the context length is %d", len(ids), e.cfg.ContextLength)
	}
	if req.TopLogprobs < 0 {
		return nil, fmt.Errorf("top_logprobs must be >= 0, got %d", req.TopLogprobs)
	}
	if len(req.Sampling.Stop) > 0 && e.tok == nil {
		return nil, fmt.Errorf("stop strings need a tokenizer; this model has none")
	}
	// The prompt's capacity is capped so that the first output token
	// appended to Tokens copies it: the sampler and the detokenizer keep
	// ids as the prompt.
	ids = ids[:len(ids):len(ids)]
	r := &request{
		Request:     req,
		imageLayout: *layout,
		Req: sched.Req{Tokens: ids, NumPrompt: len(ids), Keys: layout.promptKeys, Spans: layout.spans,
			ScorePrompt: req.PromptLogprobs},
		sampler: sample.NewSampler(req.Sampling, ids),
		stops:   sample.NewStopChecker(req.Sampling.Stop),
		mailbox: mailbox{finished: make(chan struct{}), notify: make(chan struct{}, 1)},
	}
	if e.tok != nil {
		r.stream = e.tok.NewDecodeStreamAfter(ids, req.Sampling.SkipSpecialTokens)
		for _, id := range req.Sampling.KeepSpecial {
			r.stream.Keep(id)
		}
	}
	if req.Grammar != nil {
		c, err := e.newConstraint(req.Grammar, req.Sampling)
		if err != nil {
			return nil, err
		}
		r.constraint = c
	}
	return r, nil
}

// Sched is r's scheduler state.
func (r *request) Sched() *sched.Req { return &r.Req }

// outputIDs are the tokens generated so far (nil: none).
func (r *request) outputIDs() []int {
	if r.NumOutput() == 0 {
		return nil
	}
	return r.Tokens[r.NumPrompt:]
}

func (m *mailbox) cancel() { m.cancelled.Store(true) }

func (m *mailbox) push(d Delta) {
	m.mu.Lock()
	m.pending = append(m.pending, d)
	m.mu.Unlock()
	select {
	case m.notify <- struct{}{}:
	default:
	}
}

func (m *mailbox) takeDeltas() []Delta {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.pending
	m.pending = nil
	return d
}

// The runner's view of r (runner.Request): it builds batches and draws
// tokens through these and sees nothing else of r.

// NumImages is how many image inputs r's prompt holds.
func (r *request) NumImages() int { return len(r.images) }

// Image is r's i-th image input: the tokens it fills and its embeddings.
func (r *request) Image(i int) (model.ImageSpan, []float32) {
	return r.images[i].span, r.images[i].embeds
}

// MRope is r's prompt M-RoPE streams (nil: none) and the position offset
// of the tokens after the prompt.
func (r *request) MRope() ([]int32, int) { return r.mrope, r.ropeDelta }

// Sampler draws r's tokens on the host.
func (r *request) Sampler() *sample.Sampler { return r.sampler }

// Constraint is r's grammar state; nil (not a nil *constraint) without a
// grammar.
func (r *request) Constraint() runner.Constraint {
	if r.constraint == nil {
		return nil
	}
	return r.constraint
}

// WantsLogprobs reports whether r returns logprobs of its output tokens.
func (r *request) WantsLogprobs() bool { return r.Logprobs || r.TopLogprobs > 0 }
