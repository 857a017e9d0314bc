package tokenizer

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
	window      []string // token strings since the last cut
	cont        bool     // a cut happened: the window continues earlier text
	// uncleaned: decoded text held back from clean-up until the text after
	// it shows whether a clean-up pattern spans the join.
	uncleaned string
}

// NewDecodeStream starts a stream; skipSpecialTokens is as for Decode.
func (t *Tokenizer) NewDecodeStream(skipSpecialTokens bool) *DecodeStream {
	return &DecodeStream{t: t, skipSpecial: skipSpecialTokens}
}

// Push adds one id and returns the text that became final ("" if none).
func (s *DecodeStream) Push(id int) string {
	return s.cleanUp(s.push(id), false)
}

func (s *DecodeStream) push(id int) string {
	tok, ok := s.t.decodeToken(id, s.skipSpecial)
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
	return text
}

// Flush returns whatever is still held back (an unfinished character decodes
// as U+FFFD, exactly as Decode would) and resets the stream.
func (s *DecodeStream) Flush() string {
	out := ""
	if len(s.window) > 0 {
		out = s.t.decoder.decode(s.window, s.cont)
	}
	s.window = s.window[:0]
	s.cont = false
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
