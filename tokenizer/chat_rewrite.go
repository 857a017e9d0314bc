package tokenizer

// A source-to-source pass that rewrites the Jinja expressions gonja's parser
// gets wrong into equivalent ones it gets right, before compiling:
//
//   - Conditional expressions inside other expressions. gonja parses
//     "A if C else B" only as the whole of a {{ }} or {% set %}; Gemma 3's
//     '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "")
//     fails to compile. Each such conditional becomes
//     (((C) and [(A)]) or [(B)])[0], which gonja evaluates with the same
//     laziness: A only when C is true, B only when it is false.
//   - The right operand of in / not in. gonja reads it as a single primary,
//     so 'user' in messages|map(attribute='role')|list tested membership in
//     messages; the operand is parenthesised.
//   - dict(k=v, ...), whose keyword order gonja loses; it becomes a literal.
//   - A trailing comma in a list or dict literal, which gonja rejects.
//   - A line break between "{%" and the tag's name, after which gonja finds
//     no name.
//   - String literals with escapes ('\\', '\x41', 'it\'s'), which gonja
//     decodes its own way; see canonicalString.
//
// Only tags that need it are touched; every other byte of the template,
// whitespace control included, is left as it was.

import (
	"strings"
)

// rewriteTemplate applies the pass to a whole template.
func rewriteTemplate(source string) string {
	var out strings.Builder
	pos := 0
	for {
		start := indexJinjaTag(source, pos)
		if start < 0 {
			out.WriteString(source[pos:])
			return out.String()
		}
		out.WriteString(source[pos:start])
		kind := source[start+1]
		if kind == '#' {
			end := strings.Index(source[start:], "#}")
			if end < 0 {
				out.WriteString(source[start:])
				return out.String()
			}
			out.WriteString(source[start : start+end+2])
			pos = start + end + 2
			continue
		}
		bodyStart := start + 2
		if bodyStart < len(source) && (source[bodyStart] == '-' || source[bodyStart] == '+') {
			bodyStart++
		}
		tokens, bodyEnd, tagEnd, ok := scanJinjaTag(source, bodyStart, kind)
		if !ok {
			// Unterminated: gonja will report it.
			out.WriteString(source[start:])
			return out.String()
		}
		// gonja finds no tag name after a line break ("{%-\n set x = 1 %}"):
		// the break moves to the end of the tag, keeping the line count.
		var movedLead string
		if len(tokens) > 0 && strings.Contains(tokens[0].lead, "\n") {
			movedLead, tokens[0].lead = tokens[0].lead, " "
		}
		out.WriteString(source[start:bodyStart])
		out.WriteString(rewriteTag(kind, tokens))
		out.WriteString(movedLead)
		out.WriteString(source[bodyEnd:tagEnd])
		pos = tagEnd
		if kind == '%' && len(tokens) > 0 && tokens[0].is("raw") {
			// Copy the raw block through untouched.
			end := indexEndRaw(source, pos)
			if end < 0 {
				out.WriteString(source[pos:])
				return out.String()
			}
			out.WriteString(source[pos:end])
			pos = end
		}
	}
}

// rewriteTag rewrites the expressions of one tag's tokens.
func rewriteTag(kind byte, tokens []jinjaToken) string {
	var out string
	switch {
	case kind == '{':
		out = rewriteTopLevel(tokens, false)
	case len(tokens) == 0:
		return ""
	case tokens[0].is("if") || tokens[0].is("elif"):
		out = renderJinjaTokens(tokens[:1]) + rewriteElements(tokens[1:], false)
	case tokens[0].is("set"):
		assign := indexJinjaTopLevel(tokens, 0, "=")
		if assign < 0 {
			return renderJinjaTokens(tokens)
		}
		out = renderJinjaTokens(tokens[:assign+1]) + rewriteTopLevel(tokens[assign+1:], true)
	case tokens[0].is("for"):
		out = rewriteFor(tokens)
	default:
		return renderJinjaTokens(tokens)
	}
	return out
}

// rewriteTopLevel rewrites the expression of {{ }} or of set's right-hand
// side, where gonja does handle a single "A if C else B" itself (set only
// with its else).
func rewriteTopLevel(tokens []jinjaToken, elseRequired bool) string {
	cond := indexJinjaTopLevel(tokens, 0, "if")
	if cond >= 0 && indexJinjaTopLevel(tokens, 0, ",") < 0 {
		elseAt := indexJinjaTopLevel(tokens, cond+1, "else")
		if (elseAt < 0 && !elseRequired) || (elseAt >= 0 && indexJinjaTopLevel(tokens, elseAt+1, "if") < 0) {
			// Not chained: only the operands need the pass.
			parts := rewriteSimple(tokens[:cond])
			if elseAt < 0 {
				return parts + renderJinjaTokens(tokens[cond:cond+1]) + rewriteSimple(tokens[cond+1:])
			}
			return parts + renderJinjaTokens(tokens[cond:cond+1]) + rewriteSimple(tokens[cond+1:elseAt]) +
				renderJinjaTokens(tokens[elseAt:elseAt+1]) + rewriteSimple(tokens[elseAt+1:])
		}
	}
	return rewriteElements(tokens, false)
}

// rewriteFor rewrites "for TARGETS in ITER [if COND] [recursive]": the
// top-level "in" and "if" are the loop's own keywords.
func rewriteFor(tokens []jinjaToken) string {
	in := indexJinjaTopLevel(tokens, 1, "in")
	if in < 0 {
		return renderJinjaTokens(tokens)
	}
	end := len(tokens)
	if end > in+1 && tokens[end-1].is("recursive") {
		end--
	}
	filter := indexJinjaTopLevel(tokens, in+1, "if")
	out := renderJinjaTokens(tokens[:in+1])
	if filter < 0 {
		out += rewriteSimple(tokens[in+1 : end])
	} else {
		out += rewriteSimple(tokens[in+1:filter]) + renderJinjaTokens(tokens[filter:filter+1]) +
			rewriteElements(tokens[filter+1:end], false)
	}
	return out + renderJinjaTokens(tokens[end:])
}

// rewriteElements rewrites a list of elements: inside brackets they are
// separated by "," ":" and "=" (call keywords, dict items, slices); at the
// top of a tag by "," only.
func rewriteElements(tokens []jinjaToken, inBrackets bool) string {
	var out strings.Builder
	start, depth := 0, 0
	for i, token := range tokens {
		switch token.text {
		case "(", "[", "{":
			depth++
			continue
		case ")", "]", "}":
			depth--
			continue
		case ",":
		case ":", "=":
			if !inBrackets {
				continue
			}
		default:
			continue
		}
		if depth != 0 {
			continue
		}
		out.WriteString(rewriteElement(tokens[start:i]))
		out.WriteString(renderJinjaTokens(tokens[i : i+1]))
		start = i + 1
	}
	out.WriteString(rewriteElement(tokens[start:]))
	return out.String()
}

// rewriteElement rewrites one element: a conditional expression, or an
// expression without one.
func rewriteElement(tokens []jinjaToken) string {
	cond := indexJinjaTopLevel(tokens, 0, "if")
	if cond <= 0 {
		return rewriteSimple(tokens)
	}
	elseAt := indexJinjaTopLevel(tokens, cond+1, "else")
	conditionEnd, alternative := len(tokens), "none"
	if elseAt >= 0 {
		conditionEnd = elseAt
		alternative = rewriteElement(tokens[elseAt+1:])
		if strings.TrimSpace(alternative) == "" {
			return renderJinjaTokens(tokens) // malformed: leave it to gonja's error
		}
	}
	if conditionEnd == cond+1 {
		return renderJinjaTokens(tokens)
	}
	// The element's own lead stays in front; spaces and tabs before the
	// operands go, newlines stay so that gonja's line numbers still match.
	lead := tokens[0].lead
	value := strings.TrimPrefix(rewriteSimple(tokens[:cond]), lead)
	condition := strings.TrimLeft(rewriteSimple(tokens[cond+1:conditionEnd]), " \t")
	alternative = strings.TrimLeft(alternative, " \t")
	return lead + "(((" + condition + ") and [(" + value + ")]) or [(" + alternative + ")])[0]"
}

// rewriteSimple rewrites an expression without a top-level conditional:
// bracket groups recursively, and the right operand of in.
func rewriteSimple(tokens []jinjaToken) string {
	var out strings.Builder
	for i := 0; i < len(tokens); i++ {
		token := tokens[i]
		switch token.text {
		case "(", "[", "{":
			closeAt := matchingJinjaBracket(tokens, i)
			if closeAt < 0 {
				out.WriteString(renderJinjaTokens(tokens[i:]))
				return out.String()
			}
			inner, droppedComma := tokens[i+1:closeAt], ""
			if token.text != "(" && len(inner) > 0 && inner[len(inner)-1].is(",") {
				// [1, 2,] and {'a': 1,}; the comma's lead stays, and with it the line numbers.
				droppedComma = inner[len(inner)-1].lead
				inner = inner[:len(inner)-1]
			}
			out.WriteString(renderJinjaTokens(tokens[i : i+1]))
			out.WriteString(rewriteElements(inner, true))
			out.WriteString(droppedComma)
			out.WriteString(renderJinjaTokens(tokens[closeAt : closeAt+1]))
			i = closeAt
		case "dict":
			if literal, closeAt, ok := dictCallAsLiteral(tokens, i); ok {
				out.WriteString(literal)
				i = closeAt
				continue
			}
			out.WriteString(renderJinjaTokens(tokens[i : i+1]))
		case "in":
			out.WriteString(renderJinjaTokens(tokens[i : i+1]))
			end := i + 1
			for end < len(tokens) && !endsJinjaInOperand(tokens[end].text) {
				if closeAt := matchingJinjaBracket(tokens, end); closeAt >= 0 {
					end = closeAt
				}
				end++
			}
			operand := tokens[i+1 : end]
			if isJinjaPrimary(operand) {
				out.WriteString(rewriteSimple(operand))
			} else {
				lead := operand[0].lead
				out.WriteString(lead + "(" + strings.TrimPrefix(rewriteSimple(operand), lead) + ")")
			}
			i = end - 1
		default:
			out.WriteString(renderJinjaTokens(tokens[i : i+1]))
		}
	}
	return out.String()
}

// dictCallAsLiteral turns the global call dict(k1=v1, k2=v2) at tokens[at]
// into the literal {'k1': v1, 'k2': v2}. Python keeps keyword order, and
// tool-call JSON built with dict(id=..., name=..., arguments=...)|tojson
// shows it; gonja hands keywords over in a Go map, a literal keeps its order.
func dictCallAsLiteral(tokens []jinjaToken, at int) (literal string, closeAt int, ok bool) {
	if at+1 >= len(tokens) || !tokens[at+1].is("(") || (at > 0 && tokens[at-1].is(".")) {
		return "", 0, false
	}
	closeAt = matchingJinjaBracket(tokens, at+1)
	if closeAt < 0 || closeAt == at+2 {
		return "", 0, false
	}
	var b strings.Builder
	b.WriteString(tokens[at].lead + "{")
	start := at + 2
	for start < closeAt {
		end := start
		for depth := 0; end < closeAt && (depth > 0 || !tokens[end].is(",")); end++ {
			switch tokens[end].text {
			case "(", "[", "{":
				depth++
			case ")", "]", "}":
				depth--
			}
		}
		item := tokens[start:end]
		if len(item) < 3 || !item[1].is("=") || !isJinjaNameByte(item[0].text[0], true) {
			return "", 0, false // positional arguments: leave the call to gonja
		}
		b.WriteString(item[0].lead + "'" + item[0].text + "': " + strings.TrimLeft(rewriteElement(item[2:]), " \t"))
		if end < closeAt {
			b.WriteString(renderJinjaTokens(tokens[end : end+1]))
		}
		start = end + 1
	}
	b.WriteString(tokens[closeAt].lead + "}")
	return b.String(), closeAt, true
}

// endsJinjaInOperand reports whether a token ends the right operand of
// in: an operator of lower precedence, or the end of a conditional.
func endsJinjaInOperand(text string) bool {
	switch text {
	case "and", "or", "not", "in", "is", "if", "else", "==", "!=", "<", ">", "<=", ">=", "recursive":
		return true
	}
	return false
}

// isJinjaPrimary reports whether tokens are one operand gonja reads whole: an
// atom followed by .name, [...] and (...) only.
func isJinjaPrimary(tokens []jinjaToken) bool {
	if len(tokens) == 0 {
		return true
	}
	i := 0
	if closeAt := matchingJinjaBracket(tokens, 0); closeAt >= 0 {
		i = closeAt + 1
	} else if first := tokens[0].text[0]; isJinjaNameByte(first, true) || first == '\'' || first == '"' || (first >= '0' && first <= '9') {
		i = 1
	} else {
		return false
	}
	for i < len(tokens) {
		switch {
		case tokens[i].is(".") && i+1 < len(tokens):
			i += 2
		case tokens[i].is("[") || tokens[i].is("("):
			closeAt := matchingJinjaBracket(tokens, i)
			if closeAt < 0 {
				return false
			}
			i = closeAt + 1
		default:
			return false
		}
	}
	return true
}
