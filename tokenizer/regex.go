package tokenizer

import (
	"fmt"
	"strings"

	"github.com/dlclark/regexp2"
)

// pattern finds non-overlapping leftmost matches in a string, reporting byte
// offsets. Hugging Face compiles its Split/Replace patterns with Oniguruma, a
// backtracking engine with lookaround; Go's regexp has neither, so regex
// patterns go to regexp2 (a .NET-semantics backtracking engine) and literal
// patterns to strings.Index.
type pattern interface {
	// findAll returns [start, end) byte offsets of every match, in order.
	findAll(s string) [][2]int
}

type literalPattern string

func (p literalPattern) findAll(s string) [][2]int {
	if p == "" {
		return nil
	}
	var out [][2]int
	for off := 0; ; {
		i := strings.Index(s[off:], string(p))
		if i < 0 {
			return out
		}
		out = append(out, [2]int{off + i, off + i + len(p)})
		off += i + len(p)
	}
}

type regexPattern struct {
	source string
	re     *regexp2.Regexp
}

func compileRegex(source string) (*regexPattern, error) {
	re, err := regexp2.Compile(onigToRegexp2(source), regexp2.None)
	if err != nil {
		return nil, fmt.Errorf("compile regex %q: %w", source, err)
	}
	return &regexPattern{source: source, re: re}, nil
}

func mustCompileRegex(source string) *regexPattern {
	p, err := compileRegex(source)
	if err != nil {
		panic(err)
	}
	return p
}

func (p *regexPattern) findAll(s string) [][2]int {
	if s == "" {
		return nil
	}
	runes := []rune(s)
	// regexp2 reports rune indices; byteAt converts them back. Ranging
	// over s yields the runes of []rune(s) at their byte offsets: an
	// invalid byte is one U+FFFD there, but one byte long in s.
	byteAt := make([]int, 0, len(runes)+1)
	for off := range s {
		byteAt = append(byteAt, off)
	}
	byteAt = append(byteAt, len(s))

	var out [][2]int
	m, err := p.re.FindRunesMatch(runes)
	for err == nil && m != nil {
		out = append(out, [2]int{byteAt[m.Index], byteAt[m.Index+m.Length]})
		m, err = p.re.FindNextMatch(m)
	}
	// regexp2 only errors on a match timeout, which is never set here.
	return out
}

// onigToRegexp2 rewrites the one Oniguruma construct whose meaning differs in
// regexp2. Case-insensitive groups of plain letters, like the contraction
// group (?i:'s|'t|'re|'ve|'m|'ll|'d) of Llama 3 and Qwen, use Unicode case
// folding in Oniguruma (so "s" also matches "ſ" U+017F and "k" the Kelvin sign
// U+212A) but per-rune lowercasing in regexp2. Spelling the group out as
// explicit classes gives both engines the same set.
func onigToRegexp2(src string) string {
	const open = "(?i:"
	var b strings.Builder
	for {
		i := strings.Index(src, open)
		if i < 0 {
			b.WriteString(src)
			return b.String()
		}
		end := strings.IndexByte(src[i:], ')')
		body := ""
		if end > 0 {
			body = src[i+len(open) : i+end]
		}
		if end < 0 || !isPlainAlternation(body) {
			b.WriteString(src[:i+len(open)])
			src = src[i+len(open):]
			continue
		}
		b.WriteString(src[:i])
		b.WriteString("(?:")
		for _, r := range body {
			switch {
			case r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z':
				lower, upper := r|0x20, r&^0x20
				b.WriteByte('[')
				b.WriteRune(lower)
				b.WriteRune(upper)
				switch lower {
				case 's':
					b.WriteRune('\u017F')
				case 'k':
					b.WriteRune('\u212A')
				}
				b.WriteByte(']')
			default:
				b.WriteRune(r)
			}
		}
		b.WriteByte(')')
		src = src[i+end+1:]
	}
}

// isPlainAlternation reports whether a group body holds only ASCII letters,
// apostrophes and '|', the only shape onigToRegexp2 rewrites.
func isPlainAlternation(body string) bool {
	if body == "" {
		return false
	}
	for _, r := range body {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '\'' || r == '|') {
			return false
		}
	}
	return true
}
