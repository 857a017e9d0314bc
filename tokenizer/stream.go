package tokenizer

import (
	"slices"
	"unicode/utf8"
)

// DecodeStream detokenizes one id at a time for streaming output.
//
// Push returns only text that is final: never half a UTF-8 character (a
// character may be spread over several byte-level or <0xNN> tokens) and never
// text a later token could still change (the leading-space strip on the first
// token). Concatenating every Push result and Flush equals
// Decode(allIDs, skipSpecialTokens).
//
// It keeps a window of tokens since the last cut and re-decodes that window
// on each Push. When the window ends where the decoder chain is settled (no
// partial character or byte run pending) and decodes to some text, that text
// is returned and the window is cut, so the work per token stays constant.
// After a cut the chain decodes as a continuation: first-token rules do not
// fire again. That is exact because every decoder step is either per token
// or a concatenation that restarts cleanly at a settled point; chains where
// that fails (a regex Replace after fusing) only produce text at Flush.
type DecodeStream struct {
	t           *Tokenizer
	skipSpecial bool
	// keep: special ids decoded as text even when skipSpecial (a
	// tool-call marker the caller parses).
	keep   []int
	window []string // token strings since the last cut
	cont   bool     // a cut happened: the window continues earlier text
	// uncleaned: decoded text held back from clean-up until the text after
	// it shows whether a clean-up pattern spans the join.
	uncleaned string
	// inContext: the window starts with context tokens (see
	// NewDecodeStreamAfter) whose text, contextText, is not output.
	inContext   bool
	contextText string
}

// NewDecodeStream starts a stream; skipSpecialTokens is as for Decode.
func (t *Tokenizer) NewDecodeStream(skipSpecialTokens bool) *DecodeStream {
	return &DecodeStream{t: t, skipSpecial: skipSpecialTokens}
}

// NewDecodeStreamAfter starts a stream for the ids that follow context (the
// prompt of a generation), as the incremental detokenizers of vLLM and
// SGLang do: the first id then decodes as the continuation of a text, not as
// its start. A SentencePiece decoder strips the leading space of the first
// token only, so a generation whose first token is "▁little" reads
// " little", and prompt + output reads as Decode(context + ids). Only the
// last few ids of context are decoded: they settle the chain.
func (t *Tokenizer) NewDecodeStreamAfter(context []int, skipSpecialTokens bool) *DecodeStream {
	s := t.NewDecodeStream(skipSpecialTokens)
	// Start at a character: a run of byte tokens that begins mid-character
	// decodes as U+FFFD throughout. A character has at most three
	// continuation bytes; ids that are not UTF-8 at all are not followed.
	start := max(0, len(context)-contextTokens)
	for back := 0; back < utf8.UTFMax-1 && start > 0 && t.continuationByte(context[start]); back++ {
		start--
	}
	for _, id := range context[start:] {
		s.push(id)
	}
	// Context the window still holds is not final (half a character, a
	// token whose successor it changes, such as llama2c's BOS): it stays,
	// so that the output decodes after it, and its own text is cut from
	// the output's first text.
	if len(s.window) > 0 {
		s.contextText = t.decoder.decode(s.window, s.cont)
		s.inContext = true
	}
	return s
}

// continuationByte reports whether id is a byte-fallback token ("<0xNN>")
// that continues a UTF-8 character.
func (t *Tokenizer) continuationByte(id int) bool {
	tok, ok := t.decodeToken(id, false)
	if !ok {
		return false
	}
	b, isByte := parseByteToken(tok)
	return isByte && !utf8.RuneStart(b)
}

// contextTokens is how many ids of a stream's context are decoded. vLLM
// uses 5; a character spelled in byte tokens takes up to 4.
const contextTokens = 6

// Push adds one id and returns the text that became final ("" if none).
func (s *DecodeStream) Push(id int) string {
	return s.cleanUp(s.push(id), false)
}

// Keep makes the stream decode the special token id as text even when it
// skips special tokens: Mistral's [TOOL_CALLS] is a control token, and the
// tool-call parser reads it in the text.
func (s *DecodeStream) Keep(id int) { s.keep = append(s.keep, id) }

func (s *DecodeStream) push(id int) string {
	tok, ok := s.t.decodeToken(id, s.skipSpecial && !slices.Contains(s.keep, id))
	if !ok {
		return ""
	}
	s.window = append(s.window, tok)
	chain := s.t.decoder
	if chain.streamOnlyAtFlush || !chain.settled(s.window) {
		return ""
	}
	text := chain.decode(s.window, s.cont)
	if text == "" {
		// Nothing produced yet: a first-token rule (strip the leading
		// space) may still apply to the next token, so keep the window.
		return ""
	}
	s.window = s.window[:0]
	s.cont = true
	return s.afterContext(text)
}

// afterContext cuts the context's text from the first text decoded with it.
// Where a character spans the context's end, the text does not start with
// the context's (which ended in U+FFFD): only the common start is cut, and
// the output carries the whole character.
func (s *DecodeStream) afterContext(text string) string {
	if !s.inContext {
		return text
	}
	s.inContext = false
	n := 0
	for n < len(text) && n < len(s.contextText) && text[n] == s.contextText[n] {
		n++
	}
	for n > 0 && n < len(text) && !utf8.RuneStart(text[n]) {
		n--
	}
	return text[n:]
}

// Flush returns whatever is still held back (an unfinished character decodes
// as U+FFFD, exactly as Decode would) and resets the stream.
func (s *DecodeStream) Flush() string {
	out := ""
	if len(s.window) > 0 {
		out = s.afterContext(s.t.decoder.decode(s.window, s.cont))
	}
	s.window = s.window[:0]
	s.cont = false
	s.inContext = false
	return s.cleanUp(out, true)
}

// cleanUp applies the tokenizer's clean_up_tokenization to the stream,
// holding back a tail that a clean-up pattern could still span.
func (s *DecodeStream) cleanUp(text string, final bool) string {
	if !s.t.cleanUpSpaces {
		return text
	}
	s.uncleaned += text
	cut := len(s.uncleaned)
	if !final {
		cut = cleanUpSafeCut(s.uncleaned)
	}
	out := cleanUpTokenization(s.uncleaned[:cut])
	s.uncleaned = s.uncleaned[cut:]
	return out
}
