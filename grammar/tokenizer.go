package grammar

import "github.com/gosling-ai/gosling/tokenizer"

// TokenizerVocab is t's vocabulary as bytes (tokenizer.TokenBytes), size
// ids wide: a model's vocabulary may be larger than its tokenizer's (the
// extra ids are never allowed).
func TokenizerVocab(t *tokenizer.Tokenizer, size int) *Vocab {
	tokens := make([][]byte, t.VocabSize())
	for id := range tokens {
		if b, ok := t.TokenBytes(id); ok {
			tokens[id] = b
		}
	}
	v := NewVocab(tokens, size)
	v.plain() // here, not in the first request's first mask
	return v
}
