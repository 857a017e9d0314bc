package tokenizer

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// piece is one unit of pre-tokenized text; the model encodes each piece on
// its own.
type piece struct {
	text string
	// atStart: the piece begins at offset 0 of the original input, which
	// Metaspace's prepend_scheme "first" needs to know.
	atStart bool
}

// preTokenizer splits (and may rewrite) pieces, as Hugging Face's
// pre_tokenizers do.
type preTokenizer interface {
	preTokenize(pieces []piece) []piece
}

type preTokenizerSeq []preTokenizer

func (s preTokenizerSeq) preTokenize(pieces []piece) []piece {
	for _, p := range s {
		pieces = p.preTokenize(pieces)
	}
	return pieces
}

// splitBehavior says what happens to the matched delimiters of a split.
type splitBehavior int

const (
	splitRemoved splitBehavior = iota
	splitIsolated
	splitMergedWithPrevious
	splitMergedWithNext
	splitContiguous
)

func parseSplitBehavior(s string) (splitBehavior, error) {
	switch strings.ToLower(s) {
	case "removed":
		return splitRemoved, nil
	case "isolated":
		return splitIsolated, nil
	case "merged_with_previous", "mergedwithprevious":
		return splitMergedWithPrevious, nil
	case "merged_with_next", "mergedwithnext":
		return splitMergedWithNext, nil
	case "contiguous":
		return splitContiguous, nil
	}
	return 0, fmt.Errorf("unsupported split behavior %q (supported: Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous)", s)
}

// span is a [start, end) byte range of a piece and whether it matched.
type span struct {
	start, end int
	match      bool
}

// spansFromMatches covers all of a text of length n with alternating
// non-match / match spans.
func spansFromMatches(n int, matches [][2]int, invert bool) []span {
	spans := make([]span, 0, 2*len(matches)+1)
	prev := 0
	for _, m := range matches {
		if prev != m[0] {
			spans = append(spans, span{prev, m[0], invert})
		}
		spans = append(spans, span{m[0], m[1], !invert})
		prev = m[1]
	}
	if prev != n {
		spans = append(spans, span{prev, n, invert})
	}
	return spans
}

// spansFromRunes makes every rune that satisfies pred its own match, like
// Hugging Face's char-predicate patterns.
func spansFromRunes(s string, pred func(rune) bool) []span {
	var spans []span
	last := 0
	for i, r := range s {
		if pred(r) {
			if last < i {
				spans = append(spans, span{last, i, false})
			}
			end := i + utf8.RuneLen(r)
			spans = append(spans, span{i, end, true})
			last = end
		}
	}
	if last < len(s) {
		spans = append(spans, span{last, len(s), false})
	}
	return spans
}

// applySplit turns spans into pieces under the given behaviour, dropping
// removed and empty ones, and appends them to out.
func applySplit(p piece, spans []span, behavior splitBehavior, out []piece) []piece {
	type cut struct {
		start, end int
		remove     bool
	}
	var cuts []cut
	switch behavior {
	case splitRemoved:
		for _, s := range spans {
			cuts = append(cuts, cut{s.start, s.end, s.match})
		}
	case splitIsolated:
		for _, s := range spans {
			cuts = append(cuts, cut{s.start, s.end, false})
		}
	case splitContiguous:
		prevMatch := false
		for _, s := range spans {
			if s.match == prevMatch && len(cuts) > 0 {
				cuts[len(cuts)-1].end = s.end
			} else {
				cuts = append(cuts, cut{s.start, s.end, false})
			}
			prevMatch = s.match
		}
	case splitMergedWithPrevious:
		prevMatch := false
		for _, s := range spans {
			if s.match && !prevMatch && len(cuts) > 0 {
				cuts[len(cuts)-1].end = s.end
			} else {
				cuts = append(cuts, cut{s.start, s.end, false})
			}
			prevMatch = s.match
		}
	case splitMergedWithNext:
		// Walk backwards so a match joins the span that follows it.
		prevMatch := false
		for i := len(spans) - 1; i >= 0; i-- {
			s := spans[i]
			if s.match && !prevMatch && len(cuts) > 0 {
				cuts[len(cuts)-1].start = s.start
			} else {
				cuts = append(cuts, cut{s.start, s.end, false})
			}
			prevMatch = s.match
		}
		for i, j := 0, len(cuts)-1; i < j; i, j = i+1, j-1 {
			cuts[i], cuts[j] = cuts[j], cuts[i]
		}
	}
	for _, c := range cuts {
		if c.remove || c.start == c.end {
			continue
		}
		out = append(out, piece{text: p.text[c.start:c.end], atStart: p.atStart && c.start == 0})
	}
	return out
}

// splitPre is Hugging Face's Split pre-tokenizer.
type splitPre struct {
	pattern  pattern
	behavior splitBehavior
	invert   bool
}

func (s splitPre) preTokenize(pieces []piece) []piece {
	out := make([]piece, 0, len(pieces))
	for _, p := range pieces {
		spans := spansFromMatches(len(p.text), s.pattern.findAll(p.text), s.invert)
		out = applySplit(p, spans, s.behavior, out)
	}
	return out
}

// runeSplitPre splits on runes satisfying a predicate (Digits, Punctuation,
// WhitespaceSplit).
type runeSplitPre struct {
	pred     func(rune) bool
	behavior splitBehavior
}

func (s runeSplitPre) preTokenize(pieces []piece) []piece {
	out := make([]piece, 0, len(pieces))
	for _, p := range pieces {
		out = applySplit(p, spansFromRunes(p.text, s.pred), s.behavior, out)
	}
	return out
}

// gpt2Pattern is the split regex GPT-2 introduced and Hugging Face's
// ByteLevel pre-tokenizer hard-codes.
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

var gpt2Regex = mustCompileRegex(gpt2Pattern)

// byteLevelPre optionally splits with the GPT-2 regex, then rewrites every
// byte as its stand-in rune so that the BPE sees the byte-level alphabet.
type byteLevelPre struct {
	addPrefixSpace bool
	useRegex       bool
}

func (b byteLevelPre) preTokenize(pieces []piece) []piece {
	out := make([]piece, 0, len(pieces))
	for _, p := range pieces {
		if b.addPrefixSpace && !strings.HasPrefix(p.text, " ") {
			p.text = " " + p.text
		}
		start := len(out)
		if b.useRegex {
			out = applySplit(p, spansFromMatches(len(p.text), gpt2Regex.findAll(p.text), false), splitIsolated, out)
		} else if p.text != "" {
			out = append(out, p)
		}
		for i := start; i < len(out); i++ {
			out[i].text = byteLevelEncode(out[i].text)
		}
	}
	return out
}

type prependScheme int

const (
	prependAlways prependScheme = iota
	prependFirst
	prependNever
)

// metaspacePre replaces spaces with the replacement rune (▁), prepends one to
// the text, and splits before every replacement rune.
type metaspacePre struct {
	replacement string
	scheme      prependScheme
	split       bool
}

func (m metaspacePre) preTokenize(pieces []piece) []piece {
	out := make([]piece, 0, len(pieces))
	repl, _ := utf8.DecodeRuneInString(m.replacement)
	for _, p := range pieces {
		p.text = strings.ReplaceAll(p.text, " ", m.replacement)
		if !strings.HasPrefix(p.text, m.replacement) {
			if m.scheme == prependAlways || (m.scheme == prependFirst && p.atStart) {
				p.text = m.replacement + p.text
			}
		}
		if !m.split {
			if p.text != "" {
				out = append(out, p)
			}
			continue
		}
		out = applySplit(p, spansFromRunes(p.text, func(r rune) bool { return r == repl }), splitMergedWithNext, out)
	}
	return out
}

// whitespacePre keeps runs of word runes and runs of other non-space runes
// (the regex \w+|[^\w\s]+), dropping whitespace.
type whitespacePre struct{}

func (whitespacePre) preTokenize(pieces []piece) []piece {
	var out []piece
	for _, p := range pieces {
		const none, word, other = 0, 1, 2
		runStart, runKind := 0, none
		flush := func(end int) {
			if runKind != none && end > runStart {
				out = append(out, piece{text: p.text[runStart:end], atStart: p.atStart && runStart == 0})
			}
		}
		for i, r := range p.text {
			kind := other
			if unicode.IsSpace(r) {
				kind = none
			} else if isWordRune(r) {
				kind = word
			}
			if kind != runKind {
				flush(i)
				runStart, runKind = i, kind
			}
		}
		flush(len(p.text))
	}
	return out
}

// isWordRune is \w in Rust's regex crate: alphabetic, marks, decimal digits,
// connector punctuation and the joiners.
func isWordRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.Is(unicode.Nl, r) || unicode.IsMark(r) ||
		unicode.Is(unicode.Nd, r) || unicode.Is(unicode.Pc, r) || r == 0x200C || r == 0x200D
}

// isPunctuationRune is Hugging Face's punctuation test: ASCII punctuation
// (which includes symbols such as $ + < = > ^ ` | ~) or Unicode P*.
func isPunctuationRune(r rune) bool {
	if r < 0x80 {
		return r > ' ' && r < 0x7F && !(r >= '0' && r <= '9') && !(r >= 'a' && r <= 'z') && !(r >= 'A' && r <= 'Z')
	}
	return unicode.IsPunct(r)
}
