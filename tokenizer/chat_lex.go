package tokenizer

// Reading Jinja source for the rewrite pass (chat_rewrite.go): finding tags,
// splitting their bodies into tokens the way Jinja's lexer does, and the
// string literals whose escapes gonja would misread.

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// jinjaToken is one token of a Jinja expression; lead is the whitespace
// before it, so that lead+text of consecutive tokens gives back the source.
type jinjaToken struct {
	lead, text string
}

func (t jinjaToken) is(text string) bool { return t.text == text }

// indexJinjaTag finds the next "{{", "{%" or "{#" at or after pos.
func indexJinjaTag(source string, pos int) int {
	for i := pos; i+1 < len(source); i++ {
		if source[i] == '{' && (source[i+1] == '{' || source[i+1] == '%' || source[i+1] == '#') {
			return i
		}
	}
	return -1
}

// indexEndRaw finds the {% endraw %} tag that closes a raw block.
func indexEndRaw(source string, pos int) int {
	for {
		start := strings.Index(source[pos:], "{%")
		if start < 0 {
			return -1
		}
		start += pos
		body := strings.TrimLeft(source[start+2:], "-+ \t\r\n")
		if strings.HasPrefix(body, "endraw") {
			return start
		}
		pos = start + 2
	}
}

// scanJinjaTag tokenizes a tag's body from pos up to its closing delimiter ("}}"
// or "%}", optionally preceded by "-" or "+"). As in Jinja's lexer, a closing
// delimiter inside open brackets is read as brackets. bodyEnd is where the
// closing delimiter (with its sign) starts, tagEnd where it ends.
func scanJinjaTag(source string, pos int, kind byte) (tokens []jinjaToken, bodyEnd, tagEnd int, ok bool) {
	closer := "}}"
	if kind == '%' {
		closer = "%}"
	}
	depth := 0
	for pos < len(source) {
		leadStart := pos
		for pos < len(source) && strings.IndexByte(" \t\r\n", source[pos]) >= 0 {
			pos++
		}
		if depth == 0 {
			rest := source[pos:]
			if strings.HasPrefix(rest, closer) {
				return tokens, leadStart, pos + 2, true
			}
			if len(rest) > 2 && (rest[0] == '-' || rest[0] == '+') && strings.HasPrefix(rest[1:], closer) {
				return tokens, leadStart, pos + 3, true
			}
		}
		if pos == len(source) {
			break
		}
		end := scanJinjaToken(source, pos)
		if end < 0 {
			return nil, 0, 0, false
		}
		text := source[pos:end]
		if (text[0] == '\'' || text[0] == '"') && hasMisreadEscape(text) {
			text, _ = canonicalString(text)
		}
		switch text {
		case "(", "[", "{":
			depth++
		case ")", "]", "}":
			depth = max(depth-1, 0)
		}
		tokens = append(tokens, jinjaToken{lead: source[leadStart:pos], text: text})
		pos = end
	}
	return nil, 0, 0, false
}

// scanJinjaToken returns the end of the token at pos, or -1 for an unterminated
// string.
func scanJinjaToken(source string, pos int) int {
	c := source[pos]
	switch {
	case c == '\'' || c == '"':
		for i := pos + 1; i < len(source); i++ {
			switch source[i] {
			case '\\':
				i++
			case c:
				return i + 1
			}
		}
		return -1
	case isJinjaNameByte(c, true):
		end := pos + 1
		for end < len(source) && isJinjaNameByte(source[end], false) {
			end++
		}
		return end
	case c >= '0' && c <= '9':
		end := pos + 1
		for end < len(source) && (isJinjaNameByte(source[end], false) || source[end] == '.') {
			end++
		}
		return end
	}
	for _, op := range []string{"**", "//", "==", "!=", "<=", ">="} {
		if strings.HasPrefix(source[pos:], op) {
			return pos + 2
		}
	}
	return pos + 1
}

// hasMisreadEscape reports whether a string literal holds an escape gonja
// decodes differently from Python: anything but \n, \t, \r, \" and \'.
func hasMisreadEscape(literal string) bool {
	for i := 1; i < len(literal)-1; i++ {
		if literal[i] == '\\' {
			if strings.IndexByte("ntr\"'", literal[i+1]) < 0 {
				return true
			}
			i++
		}
	}
	return false
}

// canonicalString rewrites a string literal that holds escapes into one that
// gonja reads as the same string. gonja's lexer ends '\\' early at its
// escaped backslash, and its parser decodes escapes with Go's rules; Jinja
// decodes them as Python's unicode-escape. The literal is decoded the Python
// way and written back with every character gonja could misread (backslash,
// quotes, control characters) as a \xHH escape, which both decode alike.
// ok is false for literals left as they are (\N{...}, malformed \x).
func canonicalString(literal string) (string, bool) {
	value, ok := pyUnescape(literal[1 : len(literal)-1])
	if !ok {
		return literal, false
	}
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range value {
		if r < 0x20 || r == 0x7f || r == '\\' || r == '"' || r == '\'' {
			fmt.Fprintf(&b, `\x%02x`, r)
		} else {
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String(), true
}

// pyUnescape decodes the escapes of a Python string literal's body.
func pyUnescape(body string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(body); i++ {
		if body[i] != '\\' || i+1 == len(body) {
			b.WriteByte(body[i])
			continue
		}
		i++
		switch c := body[i]; c {
		case '\n':
			// A backslash before a line break continues the line.
		case '\\', '\'', '"':
			b.WriteByte(c)
		case 'a':
			b.WriteByte('\a')
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'v':
			b.WriteByte('\v')
		case 'x', 'u', 'U':
			digits := map[byte]int{'x': 2, 'u': 4, 'U': 8}[c]
			if i+1+digits > len(body) {
				return "", false
			}
			code, err := strconv.ParseUint(body[i+1:i+1+digits], 16, 32)
			if err != nil || code > unicode.MaxRune {
				return "", false
			}
			b.WriteRune(rune(code))
			i += digits
		case '0', '1', '2', '3', '4', '5', '6', '7':
			end := i + 1
			for end < len(body) && end < i+3 && body[end] >= '0' && body[end] <= '7' {
				end++
			}
			code, _ := strconv.ParseUint(body[i:end], 8, 32)
			b.WriteRune(rune(code))
			i = end - 1
		case 'N':
			return "", false
		default:
			// Python keeps an unknown escape as it is.
			b.WriteByte('\\')
			b.WriteByte(c)
		}
	}
	return b.String(), true
}

func isJinjaNameByte(c byte, first bool) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (!first && c >= '0' && c <= '9') || c >= 0x80
}

// matchingJinjaBracket returns the index of the bracket closing tokens[open], or
// -1 when tokens[open] opens none or is never closed.
func matchingJinjaBracket(tokens []jinjaToken, open int) int {
	switch tokens[open].text {
	case "(", "[", "{":
	default:
		return -1
	}
	depth := 0
	for i := open; i < len(tokens); i++ {
		switch tokens[i].text {
		case "(", "[", "{":
			depth++
		case ")", "]", "}":
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

// indexJinjaTopLevel finds text outside brackets, at or after from.
func indexJinjaTopLevel(tokens []jinjaToken, from int, text string) int {
	depth := 0
	for i, token := range tokens {
		switch token.text {
		case "(", "[", "{":
			depth++
		case ")", "]", "}":
			depth--
		default:
			if i >= from && depth == 0 && token.text == text {
				return i
			}
		}
	}
	return -1
}

func renderJinjaTokens(tokens []jinjaToken) string {
	var b strings.Builder
	for _, token := range tokens {
		b.WriteString(token.lead)
		b.WriteString(token.text)
	}
	return b.String()
}
