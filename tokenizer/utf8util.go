package tokenizer

import (
	"unicode/utf8"
)

// GPT-2's byte-level alphabet: every byte gets a printable stand-in rune so
// that BPE vocabularies never contain raw control bytes or spaces. Printable
// Latin-1 bytes map to themselves; the other 68 bytes map to U+0100.. in byte
// order. Hugging Face's ByteLevel pre-tokenizer and decoder use the same table.
var (
	byteToRune [256]rune
	runeToByte = map[rune]byte{}
)

func init() {
	printable := func(b int) bool {
		return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
	}
	next := rune(256)
	for b := 0; b < 256; b++ {
		if printable(b) {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = next
			next++
		}
		runeToByte[byteToRune[b]] = byte(b)
	}
}

// byteLevelEncode maps every byte of s to its stand-in rune.
func byteLevelEncode(s string) string {
	buf := make([]byte, 0, len(s)*2)
	for i := 0; i < len(s); i++ {
		buf = utf8.AppendRune(buf, byteToRune[s[i]])
	}
	return string(buf)
}

// appendByteLevelDecoded appends the bytes a byte-level token stands for. A
// token with any rune outside the alphabet (an added token such as
// "<｜User｜>") is appended verbatim, as Hugging Face's ByteLevel decoder does.
func appendByteLevelDecoded(dst []byte, token string) []byte {
	start := len(dst)
	for _, r := range token {
		b, ok := runeToByte[r]
		if !ok {
			return append(dst[:start], token...)
		}
		dst = append(dst, b)
	}
	return dst
}

// utf8SeqLen returns the length of the sequence a lead byte starts and the
// valid range of its second byte (the Unicode "well-formed" table); n == 0
// means the byte cannot start a sequence.
func utf8SeqLen(lead byte) (n int, lo, hi byte) {
	switch {
	case lead < 0x80:
		return 1, 0, 0
	case lead >= 0xC2 && lead <= 0xDF:
		return 2, 0x80, 0xBF
	case lead == 0xE0:
		return 3, 0xA0, 0xBF
	case lead == 0xED:
		return 3, 0x80, 0x9F
	case lead >= 0xE1 && lead <= 0xEF:
		return 3, 0x80, 0xBF
	case lead == 0xF0:
		return 4, 0x90, 0xBF
	case lead >= 0xF1 && lead <= 0xF3:
		return 4, 0x80, 0xBF
	case lead == 0xF4:
		return 4, 0x80, 0x8F
	}
	return 0, 0, 0
}

// validPrefixLen returns how many bytes of b, starting at its first byte,
// belong to one (possibly incomplete) well-formed sequence, and the length the
// full sequence would have.
func validPrefixLen(b []byte) (have, need int) {
	n, lo, hi := utf8SeqLen(b[0])
	if n <= 1 {
		return 1, n
	}
	have = 1
	for have < n && have < len(b) {
		c := b[have]
		if have == 1 {
			if c < lo || c > hi {
				break
			}
		} else if c < 0x80 || c > 0xBF {
			break
		}
		have++
	}
	return have, n
}

// appendLossyUTF8 converts bytes to text the way Rust's
// String::from_utf8_lossy does: each maximal invalid subpart (a lead byte and
// the continuation bytes that were still acceptable) becomes one U+FFFD. Go's
// own conversions replace byte by byte, which would disagree with the
// reference decoders on truncated sequences.
func appendLossyUTF8(dst []byte, b []byte) []byte {
	for len(b) > 0 {
		if b[0] < utf8.RuneSelf {
			dst = append(dst, b[0])
			b = b[1:]
			continue
		}
		have, need := validPrefixLen(b)
		if need > 1 && have == need {
			dst = append(dst, b[:have]...)
		} else {
			dst = append(dst, "\uFFFD"...)
		}
		b = b[have:]
	}
	return dst
}

// endsInPartialUTF8 reports whether b ends with the start of a well-formed
// sequence that more bytes could still complete; decoded text for that tail
// is not final yet.
func endsInPartialUTF8(b []byte) bool {
	for back := 1; back <= 3 && back <= len(b); back++ {
		i := len(b) - back
		if b[i] < 0x80 {
			return false
		}
		if b[i] >= 0xC0 { // a lead byte: the last sequence starts here
			have, need := validPrefixLen(b[i:])
			return have == len(b)-i && have < need
		}
	}
	return false
}
