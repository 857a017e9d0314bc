package engine

import (
	"errors"
	"fmt"
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
// waiting for one. The runner applies the mask where the request is
// sampled: on the host, or in the device's sampling kernel (the bitmask
// goes up with the step's sampling parameters).

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
	if c.Vocab().Base() != v {
		return nil, errors.New("the grammar was compiled against another vocabulary (use Engine.GrammarVocab, or one it spells special tokens of)")
	}
	ends := slices.Clone(p.StopTokenIDs)
	if !p.IgnoreEOS {
		ends = append(ends, e.eosIDs...)
	}
	return &constraint{matcher: c.NewMatcher(), mask: make([]uint64, v.MaskWords()), ends: ends}, nil
}

// Allowed is the mask of the tokens the grammar allows next, end tokens
// included where it can end (runner.Constraint), waiting for the one
// Prefetch started; false when it allows none.
func (c *constraint) Allowed() ([]uint64, bool) {
	if c.ready == nil {
		c.fill()
	} else {
		<-c.ready
		c.ready = nil
	}
	for _, w := range c.mask {
		if w != 0 {
			return c.mask, true
		}
	}
	return c.mask, false
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
