// Package tokenizer turns text into token ids and back, exactly as the
// reference implementations do, for three vocabulary sources:
//
//   - Hugging Face tokenizer.json (+ tokenizer_config.json): byte-level BPE
//     (Llama 3, Qwen, DeepSeek) and SentencePiece-style BPE with byte
//     fallback (Llama 2, Mistral);
//   - GGUF metadata (tokenizer.ggml.*), "llama" and "gpt2" models;
//   - llama2.c tokenizer.bin files, encoded as karpathy's run.c does.
//
// All three are assembled from the same parts, in Hugging Face's order:
//
//	added tokens (raw) → normalizer → added tokens (normalized) →
//	pre-tokenizer → model (BPE) → post-processor
//
// and decoding runs a chain of decoder steps. A Tokenizer is immutable after
// loading and safe for concurrent use.
package tokenizer

// Tokenizer encodes and decodes text for one vocabulary.
type Tokenizer struct {
	pieces []string       // id -> vocabulary string, added tokens included
	vocab  map[string]int // the model's vocabulary

	addedByID      map[int]*addedToken
	addedByContent map[string]int
	rawMatcher     *addedMatcher // added tokens matched in the raw input
	normMatcher    *addedMatcher // added tokens matched after normalization
	// decodeAs holds the decode string of added tokens whose normalized form
	// differs from their content (the reference decodes the normalized form).
	decodeAs map[int]string

	normalizer normalizer // nil: identity
	preTok     preTokenizer
	model      model
	post       postProcessor // nil: nothing added
	decoder    *decoderChain
	// cleanUpSpaces applies transformers' clean_up_tokenization to decoded
	// text, as tokenizer_config.json's clean_up_tokenization_spaces asks.
	cleanUpSpaces bool

	special        []bool // by id: skipped by Decode(skipSpecialTokens=true)
	bos, eos       int
	chatTemplate   string
	specialStrings map[string]string
}

// postProcessor adds special tokens around an encoded sequence.
type postProcessor interface {
	process(ids []int) []int
}

// templatePost is Hugging Face's TemplateProcessing for single sequences
// (also used for BertProcessing and RobertaProcessing).
type templatePost struct {
	items []templateItem
}

type templateItem struct {
	ids      []int // special token ids
	sequence bool  // the encoded text goes here
}

func (t templatePost) process(ids []int) []int {
	out := make([]int, 0, len(ids)+4)
	for _, it := range t.items {
		if it.sequence {
			out = append(out, ids...)
		} else {
			out = append(out, it.ids...)
		}
	}
	return out
}

type postSeq []postProcessor

func (s postSeq) process(ids []int) []int {
	for _, p := range s {
		ids = p.process(ids)
	}
	return ids
}

// bosEosPost adds BOS and/or EOS (-1: not added): tokenizer_config.json's
// add_bos_token / add_eos_token, GGUF's flags, llama2.c's BOS.
type bosEosPost struct{ bos, eos int }

func (p bosEosPost) process(ids []int) []int {
	out := make([]int, 0, len(ids)+2)
	if p.bos >= 0 {
		out = append(out, p.bos)
	}
	out = append(out, ids...)
	if p.eos >= 0 {
		out = append(out, p.eos)
	}
	return out
}

// newTokenizer sets the defaults the loaders then fill in.
func newTokenizer() *Tokenizer {
	return &Tokenizer{
		addedByID:      map[int]*addedToken{},
		addedByContent: map[string]int{},
		decodeAs:       map[int]string{},
		decoder:        newDecoderChain(),
		bos:            -1,
		eos:            -1,
		specialStrings: map[string]string{},
	}
}

// addAddedToken registers an added token; call finishAdded afterwards.
func (t *Tokenizer) addAddedToken(tok *addedToken) {
	t.addedByID[tok.id] = tok
	t.addedByContent[tok.content] = tok.id
}

// finishAdded sizes the id tables and builds the added-token matchers.
func (t *Tokenizer) finishAdded() {
	var raw, norm []*addedToken
	for id, tok := range t.addedByID {
		for id >= len(t.pieces) {
			t.pieces = append(t.pieces, "")
		}
		t.pieces[id] = tok.content
		// Normalized tokens get their own pass even without a normalizer:
		// the raw pass runs first and can claim overlapping text.
		if tok.normalized {
			norm = append(norm, tok)
			if t.normalizer != nil {
				if n := t.normalizer.normalize(tok.content); n != tok.content {
					t.decodeAs[id] = n
				}
			}
		} else {
			raw = append(raw, tok)
		}
	}
	t.special = make([]bool, len(t.pieces))
	for id, tok := range t.addedByID {
		t.special[id] = tok.special
	}
	t.rawMatcher = newAddedMatcher(raw, func(a *addedToken) string { return a.content })
	t.normMatcher = newAddedMatcher(norm, func(a *addedToken) string {
		if n, ok := t.decodeAs[a.id]; ok {
			return n
		}
		return a.content
	})
}

// Encode turns text into ids. With addSpecialTokens, the post-processor's
// tokens (usually BOS) are added. Added tokens written in the text, such as
// "<|im_start|>", are always recognised, as the reference does.
func (t *Tokenizer) Encode(text string, addSpecialTokens bool) []int {
	var ids []int
	for _, seg := range t.rawMatcher.split(text) {
		if seg.id >= 0 {
			ids = append(ids, seg.id)
			continue
		}
		normalized := seg.text
		if t.normalizer != nil {
			normalized = t.normalizer.normalize(normalized)
		}
		for _, sub := range t.normMatcher.split(normalized) {
			if sub.id >= 0 {
				ids = append(ids, sub.id)
				continue
			}
			if sub.text == "" {
				continue
			}
			pieces := []piece{{text: sub.text, atStart: seg.start == 0 && sub.start == 0}}
			if t.preTok != nil {
				pieces = t.preTok.preTokenize(pieces)
			}
			for _, p := range pieces {
				ids = t.model.tokenize(p.text, ids)
			}
		}
	}
	if addSpecialTokens && t.post != nil {
		ids = t.post.process(ids)
	}
	if ids == nil {
		ids = []int{}
	}
	return ids
}

// decodeToken returns the string the decoder chain sees for id; ok is false
// for ids that are out of range, unassigned or skipped.
func (t *Tokenizer) decodeToken(id int, skipSpecial bool) (string, bool) {
	if id < 0 || id >= len(t.pieces) {
		return "", false
	}
	if skipSpecial && t.special[id] {
		return "", false
	}
	if s, ok := t.decodeAs[id]; ok {
		return s, true
	}
	s := t.pieces[id]
	if s == "" {
		// An id no token has (a gap in the vocabulary) is skipped, as the
		// reference does; it must not count as a token for first-token rules.
		if _, added := t.addedByID[id]; !added {
			if vid, ok := t.vocab[""]; !ok || vid != id {
				return "", false
			}
		}
	}
	return s, true
}

// Decode turns ids back into text. Ids outside the vocabulary are ignored.
func (t *Tokenizer) Decode(ids []int, skipSpecialTokens bool) string {
	tokens := make([]string, 0, len(ids))
	for _, id := range ids {
		if s, ok := t.decodeToken(id, skipSpecialTokens); ok {
			tokens = append(tokens, s)
		}
	}
	text := t.decoder.decode(tokens, false)
	if t.cleanUpSpaces {
		text = cleanUpTokenization(text)
	}
	return text
}

// VocabSize is the number of ids, added tokens included.
func (t *Tokenizer) VocabSize() int { return len(t.pieces) }

// TokenString returns the raw vocabulary string of id ("" when out of range):
// byte-level runes such as "Ġ", "▁" for SentencePiece spaces, "<0x0A>".
func (t *Tokenizer) TokenString(id int) string {
	if id < 0 || id >= len(t.pieces) {
		return ""
	}
	return t.pieces[id]
}

// TokenID looks a string up among added tokens, then the vocabulary.
func (t *Tokenizer) TokenID(s string) (int, bool) {
	if id, ok := t.addedByContent[s]; ok {
		return id, true
	}
	id, ok := t.vocab[s]
	return id, ok
}

// BOS is the beginning-of-sequence id, -1 when the vocabulary has none.
func (t *Tokenizer) BOS() int { return t.bos }

// EOS is the end-of-sequence id, -1 when the vocabulary has none.
func (t *Tokenizer) EOS() int { return t.eos }

// IsSpecial reports whether Decode(…, skipSpecialTokens=true) drops id.
func (t *Tokenizer) IsSpecial(id int) bool {
	return id >= 0 && id < len(t.special) && t.special[id]
}

// ChatTemplateSource is the Jinja chat template shipped with the vocabulary,
// "" when there is none.
func (t *Tokenizer) ChatTemplateSource() string { return t.chatTemplate }

// SpecialTokenStrings maps names such as "bos_token" and "eos_token" to the
// token text. The map is a copy.
func (t *Tokenizer) SpecialTokenStrings() map[string]string {
	out := make(map[string]string, len(t.specialStrings))
	for k, v := range t.specialStrings {
		out[k] = v
	}
	return out
}
