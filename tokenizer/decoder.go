package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// decodeState travels along a decoder chain.
type decodeState struct {
	// cont: the tokens continue text decoded before (a DecodeStream window
	// after a cut), so first-token rules must not fire again.
	cont bool
	// fused: an earlier step joined all tokens into one string.
	fused bool
}

// decodeStep is one of Hugging Face's decoders: it maps a list of token
// strings to a new list; the chain's result is the concatenation.
type decodeStep interface {
	apply(tokens []string, st *decodeState) []string
}

// settler is implemented by steps whose output for the last tokens may still
// change when more tokens arrive; settled reports whether a window of tokens
// ends at a point where its text is final and a stream may cut.
type settler interface {
	settled(window []string) bool
}

// decoderChain is the decode pipeline; an empty chain joins tokens with
// spaces (Hugging Face's behaviour without a decoder).
type decoderChain struct {
	steps []decodeStep
	// streamOnlyAtFlush: some step's output near the end of the text can
	// change in ways the stream cannot bound, so a DecodeStream holds
	// everything back until Flush.
	streamOnlyAtFlush bool
}

func newDecoderChain(steps ...decodeStep) *decoderChain {
	c := &decoderChain{steps: steps}
	fused := false
	for _, s := range steps {
		switch s := s.(type) {
		case fuseStep, byteLevelStep:
			fused = true
		case replaceStep:
			// After fusing, a multi-rune match could straddle two tokens.
			if lit, ok := s.pattern.(literalPattern); fused && (!ok || utf8.RuneCountInString(string(lit)) > 1) {
				c.streamOnlyAtFlush = true
			}
		case stripStep:
			// Trailing strips of the fused text depend on the very end.
			if fused && s.stop > 0 {
				c.streamOnlyAtFlush = true
			}
		}
	}
	return c
}

func (c *decoderChain) decode(tokens []string, cont bool) string {
	if len(c.steps) == 0 {
		joined := strings.Join(tokens, " ")
		if cont && len(tokens) > 0 {
			joined = " " + joined
		}
		return joined
	}
	st := decodeState{cont: cont}
	tokens = append([]string(nil), tokens...) // steps rewrite in place
	for _, s := range c.steps {
		tokens = s.apply(tokens, &st)
	}
	return strings.Join(tokens, "")
}

func (c *decoderChain) settled(window []string) bool {
	for _, s := range c.steps {
		if st, ok := s.(settler); ok && !st.settled(window) {
			return false
		}
	}
	return true
}

// replaceStep replaces a pattern in every token (Replace "▁" -> " ").
type replaceStep struct {
	pattern pattern
	content string
}

func (r replaceStep) apply(tokens []string, _ *decodeState) []string {
	for i, t := range tokens {
		tokens[i] = replaceAll(t, r.pattern, r.content)
	}
	return tokens
}

// byteFallbackStep turns runs of "<0xNN>" tokens into the text they spell.
// A run that is not valid UTF-8 becomes one U+FFFD per byte, as in the
// reference.
type byteFallbackStep struct{}

func parseByteToken(t string) (byte, bool) {
	if len(t) != 6 || !strings.HasPrefix(t, "<0x") || t[5] != '>' {
		return 0, false
	}
	hi, ok1 := hexVal(t[3])
	lo, ok2 := hexVal(t[4])
	return hi<<4 | lo, ok1 && ok2
}

func hexVal(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

func (byteFallbackStep) apply(tokens []string, _ *decodeState) []string {
	out := tokens[:0:0]
	var run []byte
	flush := func() {
		if len(run) == 0 {
			return
		}
		if utf8.Valid(run) {
			out = append(out, string(run))
		} else {
			for range run {
				out = append(out, "\uFFFD")
			}
		}
		run = run[:0]
	}
	for _, t := range tokens {
		if b, ok := parseByteToken(t); ok {
			run = append(run, b)
			continue
		}
		flush()
		out = append(out, t)
	}
	flush()
	return out
}

func (byteFallbackStep) settled(window []string) bool {
	_, isByte := parseByteToken(window[len(window)-1])
	return !isByte
}

// fuseStep joins all tokens into one.
type fuseStep struct{}

func (fuseStep) apply(tokens []string, st *decodeState) []string {
	st.fused = true
	return []string{strings.Join(tokens, "")}
}

// stripStep removes up to start leading and stop trailing copies of content
// from every token.
type stripStep struct {
	content     rune
	start, stop int
}

func (s stripStep) apply(tokens []string, st *decodeState) []string {
	for i, t := range tokens {
		start := s.start
		if st.fused && st.cont {
			start = 0 // the text's real beginning was decoded earlier
		}
		for n := 0; n < start && t != ""; n++ {
			r, size := utf8.DecodeRuneInString(t)
			if r != s.content {
				break
			}
			t = t[size:]
		}
		for n := 0; n < s.stop && t != ""; n++ {
			r, size := utf8.DecodeLastRuneInString(t)
			if r != s.content {
				break
			}
			t = t[:len(t)-size]
		}
		tokens[i] = t
	}
	return tokens
}

// byteLevelStep maps byte-level runes back to bytes and decodes the whole
// byte string once, so characters split over tokens come out whole.
type byteLevelStep struct{}

func (byteLevelStep) apply(tokens []string, st *decodeState) []string {
	st.fused = true
	var raw []byte
	for _, t := range tokens {
		raw = appendByteLevelDecoded(raw, t)
	}
	return []string{string(appendLossyUTF8(nil, raw))}
}

func (byteLevelStep) settled(window []string) bool {
	// Only the last three bytes can hold an unfinished character.
	var tail []byte
	for i := len(window) - 1; i >= 0 && len(tail) < 4; i-- {
		tail = append(appendByteLevelDecoded(nil, window[i]), tail...)
	}
	return !endsInPartialUTF8(tail)
}

// metaspaceStep turns the replacement rune back into spaces, dropping it
// from the first token when a prefix was prepended at encode time.
type metaspaceStep struct {
	replacement rune
	scheme      prependScheme
}

func (m metaspaceStep) apply(tokens []string, st *decodeState) []string {
	for i, t := range tokens {
		first := i == 0 && !st.cont && m.scheme != prependNever
		var b strings.Builder
		for _, r := range t {
			switch {
			case r != m.replacement:
				b.WriteRune(r)
			case !first:
				b.WriteByte(' ')
			}
		}
		tokens[i] = b.String()
	}
	return tokens
}

// llama2cStep reproduces run.c's decode: a piece that follows BOS loses its
// leading space. The first piece of a sequence is treated as following an
// implicit BOS, so that decoding generated ids alone matches.
type llama2cStep struct{ bos string }

func (l llama2cStep) apply(tokens []string, st *decodeState) []string {
	prev := ""
	for i, t := range tokens {
		afterBOS := (i == 0 && !st.cont) || (i > 0 && prev == l.bos)
		prev = t
		if afterBOS && strings.HasPrefix(t, " ") {
			tokens[i] = t[1:]
		}
	}
	return tokens
}

// settled forbids a cut right after BOS: the next piece's strip depends on it.
func (l llama2cStep) settled(window []string) bool {
	return window[len(window)-1] != l.bos
}
