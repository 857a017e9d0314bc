package tokenizer

import (
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// addedToken is a token matched as a whole in the text before the model sees
// it: special tokens such as "<|eot_id|>" and user-added words.
type addedToken struct {
	id      int
	content string
	special bool
	// lstrip/rstrip: the match swallows whitespace on that side.
	lstrip, rstrip bool
	// singleWord: only match when not inside a word.
	singleWord bool
	// normalized: matched in the normalized text (against the normalized
	// content) instead of the raw input.
	normalized bool
}

// segment is a run of text to encode, or an added token already resolved.
type segment struct {
	text  string
	id    int // -1 for text
	start int // byte offset in the string that was split
}

// addedMatcher finds added tokens leftmost-longest, like the Aho-Corasick
// automaton (MatchKind::LeftmostLongest) Hugging Face builds.
type addedMatcher struct {
	// byFirstByte holds candidate tokens per first byte, longest first.
	byFirstByte [256][]matchCandidate
	empty       bool
}

type matchCandidate struct {
	text  string
	token *addedToken
}

func newAddedMatcher(tokens []*addedToken, textOf func(*addedToken) string) *addedMatcher {
	m := &addedMatcher{empty: true}
	for _, t := range tokens {
		text := textOf(t)
		if text == "" {
			continue
		}
		m.empty = false
		m.byFirstByte[text[0]] = append(m.byFirstByte[text[0]], matchCandidate{text, t})
	}
	for i := range m.byFirstByte {
		c := m.byFirstByte[i]
		sort.SliceStable(c, func(a, b int) bool { return len(c[a].text) > len(c[b].text) })
	}
	return m
}

// split cuts s into text segments and added-token segments.
func (m *addedMatcher) split(s string) []segment {
	if m == nil || m.empty {
		return []segment{{text: s, id: -1}}
	}
	var out []segment
	textStart := 0 // start of the pending text segment
	for i := 0; i < len(s); {
		c := m.longestAt(s, i)
		if c == nil {
			i++
			continue
		}
		start, stop := i, i+len(c.text)
		t := c.token
		if t.singleWord {
			before := start == 0 || !endsWithWordRune(s[:start])
			after := stop == len(s) || !startsWithWordRune(s[stop:])
			if !before || !after {
				// Like the automaton's iterator, resume after the rejected match.
				i = stop
				continue
			}
		}
		if t.lstrip {
			start = max(len(strings.TrimRightFunc(s[:start], unicode.IsSpace)), textStart)
		}
		if t.rstrip {
			stop = len(s) - len(strings.TrimLeftFunc(s[stop:], unicode.IsSpace))
		}
		if textStart < start {
			out = append(out, segment{text: s[textStart:start], id: -1, start: textStart})
		}
		out = append(out, segment{id: t.id, start: start})
		textStart, i = stop, stop
	}
	if textStart < len(s) {
		out = append(out, segment{text: s[textStart:], id: -1, start: textStart})
	}
	return out
}

func (m *addedMatcher) longestAt(s string, i int) *matchCandidate {
	for k := range m.byFirstByte[s[i]] {
		c := &m.byFirstByte[s[i]][k]
		if strings.HasPrefix(s[i:], c.text) {
			return c
		}
	}
	return nil
}

func endsWithWordRune(s string) bool {
	r, _ := utf8.DecodeLastRuneInString(s)
	return s != "" && isWordRune(r)
}

func startsWithWordRune(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return s != "" && isWordRune(r)
}
