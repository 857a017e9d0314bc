package engine

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/gosling-ai/gosling/grammar"
	"github.com/gosling-ai/gosling/sample"
)

// Constrained decoding (Request.Grammar): before each draw the request's
// matcher fills a bitmask of the tokens the grammar allows next, and the
// logits of the others become -Inf, so every sampling mode — greedy,
// temperature, top-k/p, min-p, penalties — only ever draws allowed tokens.
// End-of-sequence and stop tokens are allowed only where the grammar can
// end; once it can go no further, the request finishes ("stop") without
// waiting for one. Constrained requests sample on the host (their masks
// are host bitsets).

// constraint is one request's grammar state.
type constraint struct {
	matcher *grammar.Matcher
	mask    []uint64 // [MaskWords] scratch of the current step
	// ends are the ids that finish the request (EOS unless ignored, its
	// stop token ids), allowed where the grammar can end.
	ends []int
	// ready is closed when the mask that Prefetch started is in mask;
	// nil: none started. The matcher is not touched until it is.
	ready chan struct{}
}

// grammarVocab is the engine's vocabulary as the grammar sees it, built on
// first use (a walk over the tokenizer).
type grammarVocab struct {
	once  sync.Once
	vocab *grammar.Vocab
}

// GrammarVocab returns the vocabulary grammars must be compiled against
// (grammar.Compile) for this engine's requests, or an error when the model
// has no tokenizer.
func (e *Engine) GrammarVocab() (*grammar.Vocab, error) {
	if e.tok == nil {
		return nil, errors.New("constrained decoding needs a tokenizer; this model has none (load one with --tokenizer PATH)")
	}
	e.gvocab.once.Do(func() {
		e.gvocab.vocab = grammar.TokenizerVocab(e.tok, e.model.Config().VocabSize)
	})
	return e.gvocab.vocab, nil
}

func (e *Engine) newConstraint(c *grammar.Compiled, p sample.Params) (*constraint, error) {
	v, err := e.GrammarVocab()
	if err != nil {
		return nil, err
	}
	if c.Vocab() != v {
		return nil, errors.New("the grammar was compiled against another vocabulary (use Engine.GrammarVocab)")
	}
	ends := slices.Clone(p.StopTokenIDs)
	if !p.IgnoreEOS {
		ends = append(ends, e.eosIDs...)
	}
	return &constraint{matcher: c.NewMatcher(), mask: make([]uint64, v.MaskWords()), ends: ends}, nil
}

// Mask sets the logits of tokens the grammar forbids to -Inf (row is
// the request's own logits row). It reports false when no token at all is
// allowed.
func (c *constraint) Mask(row []float32) bool {
	if c.ready == nil {
		c.fill()
	} else {
		<-c.ready
		c.ready = nil
	}
	any := false
	negInf := float32(math.Inf(-1))
	for w := 0; w*64 < len(row); w++ {
		bits := uint64(0)
		if w < len(c.mask) {
			bits = c.mask[w]
		}
		if bits != 0 {
			any = true
		}
		if bits == math.MaxUint64 {
			continue
		}
		end := min(w*64+64, len(row))
		for id := w * 64; id < end; id++ {
			if bits&(1<<(id-w*64)) == 0 {
				row[id] = negInf
			}
		}
	}
	return any
}

// fill computes the mask of the matcher's position, end tokens included
// where the grammar can end.
func (c *constraint) fill() {
	c.matcher.FillMask(c.mask)
	if c.matcher.CanEnd() {
		for _, id := range c.ends {
			if id >= 0 && id/64 < len(c.mask) {
				c.mask[id/64] |= 1 << (id % 64)
			}
		}
	}
}

// Prefetch starts computing the next mask on its own goroutine, so that
// it runs while the step's forward does (the mask depends only on the
// tokens accepted so far); Mask then waits for it. A mask already
// started is kept.
func (c *constraint) Prefetch() {
	if c.ready != nil {
		return
	}
	ready := make(chan struct{})
	c.ready = ready
	go func() {
		c.fill()
		close(ready)
	}()
}

// settle waits for a prefetched mask, which reads the matcher, and drops
// it: the matcher is about to move.
func (c *constraint) settle() {
	if c.ready != nil {
		<-c.ready
		c.ready = nil
	}
}

// advanceConstraint moves r's matcher over an accepted token that is not
// an end token, reporting whether the grammar is now complete with
// nothing able to follow.
func (r *request) advanceConstraint(id int) (done bool, err error) {
	if r.constraint == nil {
		return false, nil
	}
	r.constraint.settle()
	m := r.constraint.matcher
	if !m.AcceptToken(id) {
		return false, fmt.Errorf("constrained decoding: token %d is not allowed by the grammar", id)
	}
	return m.Done(), nil
}
