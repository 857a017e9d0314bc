package server

import (
	"context"
	"fmt"
	"net/http"
	"sync"

	"github.com/gosling-ai/gosling/engine"
)

// Per-request bounds. A request body is small next to what it can make the
// server hold: every prompt is tokenized (tens of bytes per input byte while
// it runs), and each of its n choices is a sequence with its own copy of
// the prompt's ids, sampler and stream. These limits are checked before that
// work is done, so the memory one request takes is bounded by them, not by
// what the client sent.

const (
	defaultMaxRequestSequences = 1024
	defaultMaxRequestTokens    = 1 << 20
)

// requestBudget is what one request may still make the server hold.
type requestBudget struct {
	s      *Server
	copies int // the choices per prompt: each holds the prompt's ids
	left   int // prompt tokens × copies still allowed
}

// newBudget checks a request of prompts prompts with n choices each against
// --max-request-sequences; promptParam names the prompt field in errors.
func (s *Server) newBudget(prompts, n int, promptParam string) (*requestBudget, *apiError) {
	if seqs := prompts * n; seqs > s.opts.MaxRequestSequences {
		param, what := promptParam, fmt.Sprintf("%d prompts", prompts)
		if n > 1 {
			param, what = "n", fmt.Sprintf("%d prompts × n %d", prompts, n)
		}
		return nil, tooMuch(param, "this request asks for %d sequences (%s); the server's limit is %d per request (--max-request-sequences): send fewer prompts or a smaller n",
			seqs, what, s.opts.MaxRequestSequences)
	}
	return &requestBudget{s: s, copies: n, left: s.opts.MaxRequestTokens}, nil
}

// take counts a prompt of count tokens (held once per choice) against
// --max-request-tokens.
func (b *requestBudget) take(count int, param string) *apiError {
	if count*b.copies > b.left {
		return b.exceeded(param)
	}
	b.left -= count * b.copies
	return nil
}

// expandImages expands the image placeholders of a tokenized prompt to
// the images' lengths, counting the image tokens against the budget and
// the context.
func (b *requestBudget) expandImages(ids []int, images []engine.Image, param string) ([]int, *apiError) {
	if len(images) == 0 {
		return ids, nil
	}
	out, err := b.s.eng.ExpandImageTokens(ids, images)
	if err != nil {
		return nil, badRequest(param, codeInvalidValue, "%v", err)
	}
	if ctxLen := b.s.eng.Settings().ContextLength; len(out) > ctxLen {
		return nil, badRequest("", codeContextExceeded,
			"%s has %d tokens with its images (%d without), but this model's context length is %d tokens; send fewer or smaller images, or a shorter prompt",
			param, len(out), len(ids), ctxLen)
	}
	if apiErr := b.take(len(out)-len(ids), param); apiErr != nil {
		return nil, apiErr
	}
	return out, nil
}

func (b *requestBudget) exceeded(param string) *apiError {
	return tooMuch(param, "this request's prompts come to more than %d tokens (prompt tokens × n), the server's limit per request (--max-request-tokens): send fewer or shorter prompts",
		b.s.opts.MaxRequestTokens)
}

// encode tokenizes one text prompt with special tokens, stopping as soon as
// it is longer than the context or than what the request may still hold.
func (b *requestBudget) encode(text, param string, addSpecialTokens bool) ([]int, *apiError) {
	tok := b.s.eng.Tokenizer()
	if tok == nil {
		return nil, badRequest(param, codeInvalidValue, "this model has no tokenizer, so %s must be token ids (or start the server with --tokenizer PATH)", param)
	}
	ctxLen := b.s.eng.Settings().ContextLength
	limit := min(ctxLen, b.left/b.copies)
	ids, ok := tok.EncodeLimit(text, addSpecialTokens, limit)
	if !ok {
		if limit == ctxLen {
			return nil, badRequest("", codeContextExceeded,
				"%s has more than %d tokens, but this model's context length is %d tokens; shorten the prompt", param, ctxLen, ctxLen)
		}
		return nil, b.exceeded(param)
	}
	if len(ids) == 0 {
		return nil, badRequest(param, codeInvalidValue, "%s is empty (and the tokenizer adds no BOS token); send some text", param)
	}
	return ids, b.take(len(ids), param)
}

func tooMuch(param, format string, args ...any) *apiError {
	return badRequest(param, codeRequestLimit, format, args...)
}

// largeBody is the body size from which requests pass through the gate.
const largeBody = 1 << 20

// bodyGate bounds the bytes of large request bodies being decoded and
// tokenized at once to MaxRequestBytes. While a request parses, its body
// is held two or three times over (the bytes, the decoded strings, a
// rendered chat prompt) and its tokenization takes more: a few concurrent
// maximal bodies would otherwise take gigabytes. Requests wait their turn;
// small bodies never wait.
type bodyGate struct {
	mu      sync.Mutex
	free    int64
	changed chan struct{} // closed (and replaced) when free grows
}

func newBodyGate(capacity int64) *bodyGate {
	return &bodyGate{free: capacity, changed: make(chan struct{})}
}

// admit waits until n bytes are free (n at most the capacity) and returns
// the function that gives them back; it is safe to call more than once.
func (g *bodyGate) admit(ctx context.Context, n int64) (release func(), err error) {
	for {
		g.mu.Lock()
		if g.free >= n {
			g.free -= n
			g.mu.Unlock()
			var once sync.Once
			return func() { once.Do(func() { g.give(n) }) }, nil
		}
		changed := g.changed
		g.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (g *bodyGate) give(n int64) {
	g.mu.Lock()
	g.free += n
	close(g.changed)
	g.changed = make(chan struct{})
	g.mu.Unlock()
}

type parsedKey struct{}

// admitBody passes a large request through the gate. The returned context
// carries the release, which a handler calls through parsed once the
// request is tokenized; done releases at the latest when the handler ends.
func (s *Server) admitBody(r *http.Request) (ctx context.Context, done func(), err error) {
	size := r.ContentLength
	if size < 0 {
		size = s.opts.MaxRequestBytes // unknown: it may be as large as allowed
	}
	if size < largeBody {
		return r.Context(), func() {}, nil
	}
	release, err := s.bodies.admit(r.Context(), min(size, s.opts.MaxRequestBytes))
	if err != nil {
		return nil, nil, err
	}
	return context.WithValue(r.Context(), parsedKey{}, release), release, nil
}

// parsed tells the gate that r's body has been decoded and its prompts
// tokenized: what remains is in proportion to its tokens.
func parsed(r *http.Request) {
	if release, ok := r.Context().Value(parsedKey{}).(func()); ok {
		release()
	}
}
