package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// Bounded encoding. Encoding holds the whole text in several forms at once
// (normalized copy, pre-token pieces, BPE symbols): tens of bytes per input
// byte. A server that must refuse a prompt longer than its context should
// not pay that for a 30 MB prompt, so EncodeLimit first counts tokens over
// bounded chunks and stops as soon as the count is certainly past the
// limit; only a text that may fit is encoded whole, which keeps the ids
// exactly those of Encode.

// limitChunkBytes is the size of the chunks the count runs over: large
// enough that the tokens a cut adds are noise, small enough that one
// chunk's encoding memory is a few megabytes.
const limitChunkBytes = 64 << 10

// cutSlack bounds the tokens one cut can add to the chunked count: a cut
// splits one pre-token (or one added-token string) into two, and a chunk
// start may gain a prepended "▁". The chunked count is compared against
// the limit plus this slack per cut, so a text that fits is never refused.
const cutSlack = 16

// EncodeLimit is Encode for a text that may hold at most maxTokens tokens
// (special tokens included). ok is false, and ids nil, when the text holds
// more: then its memory cost was bounded by one chunk, not by the text.
func (t *Tokenizer) EncodeLimit(text string, addSpecialTokens bool, maxTokens int) (ids []int, ok bool) {
	if len(text) > limitChunkBytes {
		count, cuts := 0, 0
		for rest := text; rest != ""; cuts++ {
			chunk := rest[:chunkCut(rest, limitChunkBytes)]
			rest = rest[len(chunk):]
			count += len(t.Encode(chunk, false))
			if count > maxTokens+cutSlack*(cuts+1) {
				return nil, false
			}
		}
	}
	ids = t.Encode(text, addSpecialTokens)
	if len(ids) > maxTokens {
		return nil, false
	}
	return ids, true
}

// chunkCut returns where to end the chunk at the start of s, at most limit
// bytes in: after the last newline of the chunk's second half, else after
// its last space, else at a character boundary; the whole of s when it is
// short enough.
func chunkCut(s string, limit int) int {
	if len(s) <= limit {
		return len(s)
	}
	window := s[limit/2 : limit]
	if i := strings.LastIndexByte(window, '\n'); i >= 0 {
		return limit/2 + i + 1
	}
	if i := strings.LastIndexByte(window, ' '); i >= 0 {
		return limit/2 + i + 1
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	if cut == 0 {
		return limit // not UTF-8 at all: any byte boundary will do
	}
	return cut
}
