package tokenizer

import (
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

// normalizer rewrites the text of one segment (the text between two added
// tokens) before pre-tokenization, as Hugging Face's normalizers do.
type normalizer interface {
	normalize(s string) string
}

type normalizerSeq []normalizer

func (n normalizerSeq) normalize(s string) string {
	for _, step := range n {
		s = step.normalize(s)
	}
	return s
}

type unicodeForm struct{ form norm.Form }

func (n unicodeForm) normalize(s string) string { return n.form.String(s) }

// prependNormalizer adds a prefix to non-empty segments (SentencePiece's
// "dummy prefix" when the prefix is "▁").
type prependNormalizer struct{ prefix string }

func (n prependNormalizer) normalize(s string) string {
	if s == "" {
		return s
	}
	return n.prefix + s
}

type replaceNormalizer struct {
	pattern pattern
	content string
}

func (n replaceNormalizer) normalize(s string) string {
	return replaceAll(s, n.pattern, n.content)
}

// replaceAll substitutes content literally (no $1 expansion), as Hugging
// Face's NormalizedString::replace does.
func replaceAll(s string, p pattern, content string) string {
	if lit, ok := p.(literalPattern); ok {
		return strings.ReplaceAll(s, string(lit), content)
	}
	matches := p.findAll(s)
	if len(matches) == 0 {
		return s
	}
	var b strings.Builder
	prev := 0
	for _, m := range matches {
		b.WriteString(s[prev:m[0]])
		b.WriteString(content)
		prev = m[1]
	}
	b.WriteString(s[prev:])
	return b.String()
}

// lowercaseNormalizer maps rune by rune with the full Unicode mapping; the only
// rune whose full lowercase differs from Go's simple one is U+0130.
type lowercaseNormalizer struct{}

func (lowercaseNormalizer) normalize(s string) string {
	return strings.Map(unicode.ToLower, strings.ReplaceAll(s, "\u0130", "i\u0307"))
}

type stripNormalizer struct{ left, right bool }

func (n stripNormalizer) normalize(s string) string {
	if n.left {
		s = strings.TrimLeftFunc(s, unicode.IsSpace)
	}
	if n.right {
		s = strings.TrimRightFunc(s, unicode.IsSpace)
	}
	return s
}

// stripAccentsNormalizer drops combining marks; it is meant to follow NFD.
type stripAccentsNormalizer struct{}

func (stripAccentsNormalizer) normalize(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.Is(unicode.Mn, r) {
			return -1
		}
		return r
	}, s)
}

// nmtNormalizer drops ASCII control characters and maps exotic spaces to ' '
// (SentencePiece's NMT rule set).
type nmtNormalizer struct{}

func (nmtNormalizer) normalize(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 0x01 && r <= 0x08, r == 0x0B, r >= 0x0E && r <= 0x1F, r == 0x7F, r == 0x8F, r == 0x9F:
			return -1
		case r == 0x09, r == 0x0A, r == 0x0C, r == 0x0D, r == 0x1680, r >= 0x200B && r <= 0x200F,
			r == 0x2028, r == 0x2029, r == 0x2581, r == 0xFEFF, r == 0xFFFD:
			return ' '
		}
		return r
	}, s)
}
