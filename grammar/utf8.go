package grammar

import (
	"unicode/utf8"
)

// runeRange is the closed range [lo, hi] of code points.
type runeRange struct{ lo, hi rune }

// utf8Node matches the UTF-8 encoding of any code point in the ranges
// (surrogates excluded: they have no UTF-8 encoding).
func utf8Node(ranges []runeRange) *node {
	var branches []*node
	for _, r := range ranges {
		for _, seq := range utf8Sequences(r.lo, r.hi, nil) {
			parts := make([]*node, len(seq))
			for i, br := range seq {
				parts[i] = byteClass(br)
			}
			branches = append(branches, seq2(parts))
		}
	}
	return alt(branches...)
}

func seq2(parts []*node) *node { return seq(parts...) }

// utf8Sequences appends to out the byte-range sequences whose union is the
// encodings of [lo, hi]: each sequence has one range per byte of a fixed
// encoded length, as in RE2's and Rust's utf8-ranges.
func utf8Sequences(lo, hi rune, out [][]byteRange) [][]byteRange {
	if lo > hi || lo > utf8.MaxRune {
		return out
	}
	hi = min(hi, utf8.MaxRune)
	// Split around the surrogates and at encoded-length boundaries.
	if lo < 0xD800 && hi > 0xDFFF {
		out = utf8Sequences(lo, 0xD7FF, out)
		return utf8Sequences(0xE000, hi, out)
	}
	if lo >= 0xD800 && lo <= 0xDFFF {
		lo = 0xE000
	}
	if hi >= 0xD800 && hi <= 0xDFFF {
		hi = 0xD7FF
	}
	if lo > hi {
		return out
	}
	for _, max := range []rune{0x7F, 0x7FF, 0xFFFF} {
		if lo <= max && hi > max {
			out = utf8Sequences(lo, max, out)
			return utf8Sequences(max+1, hi, out)
		}
	}
	if hi <= 0x7F {
		return append(out, []byteRange{{byte(lo), byte(hi)}})
	}
	n := utf8.RuneLen(lo)
	for i := 1; i < n; i++ {
		m := rune(1)<<(6*i) - 1
		if lo&^m != hi&^m {
			if lo&m != 0 {
				out = utf8Sequences(lo, lo|m, out)
				return utf8Sequences((lo|m)+1, hi, out)
			}
			if hi&m != m {
				out = utf8Sequences(lo, (hi&^m)-1, out)
				return utf8Sequences(hi&^m, hi, out)
			}
		}
	}
	var a, b [4]byte
	utf8.EncodeRune(a[:], lo)
	utf8.EncodeRune(b[:], hi)
	seq := make([]byteRange, n)
	for i := range n {
		seq[i] = byteRange{a[i], b[i]}
	}
	return append(out, seq)
}
