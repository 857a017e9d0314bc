package tokenizer

// TokenBytes returns the bytes id adds to decoded text in the middle of a
// sequence (no first-token rule such as SentencePiece's leading-space strip
// applies), raw: a byte-level or <0xNN> token that is part of a UTF-8
// character gives its bytes, not U+FFFD. Constrained decoding matches
// grammars against these bytes. ok is false for special tokens (they are
// control, not text), for unassigned ids and for tokens that decode to
// nothing.
func (t *Tokenizer) TokenBytes(id int) (b []byte, ok bool) {
	if t.IsSpecial(id) {
		return nil, false
	}
	s, ok := t.decodeToken(id, false)
	if !ok || s == "" {
		return nil, false
	}
	if _, added := t.addedByID[id]; added {
		// Added tokens decode as their content (the decoder chain's
		// byte-level step passes them verbatim too).
		return []byte(s), true
	}
	for _, step := range t.decoder.steps {
		switch step.(type) {
		case byteLevelStep:
			b = appendByteLevelDecoded(nil, s)
			return b, len(b) > 0
		case byteFallbackStep:
			if by, isByte := parseByteToken(s); isByte {
				return []byte{by}, true
			}
		}
	}
	out := t.decoder.decode([]string{s}, true)
	if t.cleanUpSpaces {
		// clean_up_tokenization rewrites " ." and the like across token
		// boundaries; per token it is the identity on text without those
		// patterns, which is what the grammar can rely on.
		out = cleanUpTokenization(out)
	}
	return []byte(out), out != ""
}
