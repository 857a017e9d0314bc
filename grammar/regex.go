package grammar

import (
	"errors"
	"fmt"
	"regexp/syntax"
	"unicode"
)

// Regular expressions are parsed with Go's regexp/syntax (RE2 syntax, which
// JSON Schema patterns and SGLang's regex field mostly share) and compiled
// to nodes over characters; encode turns a set of characters into bytes:
// their UTF-8 for a bare regex, their JSON string forms (escapes included)
// for a JSON Schema pattern.
type charEncoder func(ranges []runeRange) *node

// UnsupportedError is a construct the grammar engine does not implement:
// Keyword names it (a JSON Schema keyword, "regex", "ebnf"), Reason says
// why. Servers answer it with a 400 naming the keyword.
type UnsupportedError struct {
	Keyword string
	Reason  string
}

func (e *UnsupportedError) Error() string {
	if e.Reason == "" {
		return fmt.Sprintf("unsupported: %s", e.Keyword)
	}
	return fmt.Sprintf("unsupported %s: %s", e.Keyword, e.Reason)
}

// anyRune is every code point.
var anyRune = []runeRange{{0, unicode.MaxRune}}

// regexNode compiles pattern. With search, the pattern need only match
// somewhere in the text (JSON Schema's "pattern"), unless anchored with ^
// and $; otherwise it must match the whole text (a "regex" constraint, in
// which ^ and $ at the ends are allowed and mean nothing more).
func regexNode(pattern string, search bool, encode charEncoder, keyword string) (*node, error) {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		var se *syntax.Error
		if errors.As(err, &se) && se.Code == syntax.ErrInvalidPerlOp || errors.As(err, &se) && se.Code == syntax.ErrInvalidNamedCapture {
			// Lookarounds and backreferences: valid elsewhere, not here.
			return nil, &UnsupportedError{Keyword: keyword, Reason: fmt.Sprintf("%q uses a construct RE2 syntax lacks (lookaround, backreference): %v", pattern, err)}
		}
		return nil, fmt.Errorf("%s %q does not compile: %v", keyword, pattern, err)
	}
	re = re.Simplify()
	rc := regexCompiler{encode: encode, keyword: keyword}
	return rc.top(re, search)
}

type regexCompiler struct {
	encode  charEncoder
	keyword string
}

// top handles anchors, which are only allowed at the ends of the pattern
// or of its top-level alternatives.
func (rc *regexCompiler) top(re *syntax.Regexp, search bool) (*node, error) {
	if re.Op == syntax.OpAlternate && !anchored(re) {
		// One search around the whole alternation: a search per branch
		// makes the automaton track every branch's progress at once (its
		// states the product of the branches').
		n, err := rc.node(re)
		if err != nil {
			return nil, err
		}
		if search {
			n = seq(star(rc.encode(anyRune)), n, star(rc.encode(anyRune)))
		}
		return n, nil
	}
	if re.Op == syntax.OpAlternate {
		var branches []*node
		for _, sub := range re.Sub {
			n, err := rc.top(sub, search)
			if err != nil {
				return nil, err
			}
			branches = append(branches, n)
		}
		return alt(branches...), nil
	}
	if re.Op == syntax.OpCapture {
		return rc.top(re.Sub[0], search)
	}
	parts := []*syntax.Regexp{re}
	if re.Op == syntax.OpConcat {
		parts = re.Sub
	}
	startAnchored, endAnchored := false, false
	for len(parts) > 0 && isBeginAnchor(parts[0].Op) {
		startAnchored = true
		parts = parts[1:]
	}
	for len(parts) > 0 && isEndAnchor(parts[len(parts)-1].Op) {
		endAnchored = true
		parts = parts[:len(parts)-1]
	}
	var nodes []*node
	if search && !startAnchored {
		nodes = append(nodes, star(rc.encode(anyRune)))
	}
	for _, p := range parts {
		n, err := rc.node(p)
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, n)
	}
	if search && !endAnchored {
		nodes = append(nodes, star(rc.encode(anyRune)))
	}
	return seq(nodes...), nil
}

// anchored reports whether re has a ^ or $ anywhere.
func anchored(re *syntax.Regexp) bool {
	if isBeginAnchor(re.Op) || isEndAnchor(re.Op) {
		return true
	}
	for _, s := range re.Sub {
		if anchored(s) {
			return true
		}
	}
	return false
}

func isBeginAnchor(op syntax.Op) bool { return op == syntax.OpBeginText || op == syntax.OpBeginLine }
func isEndAnchor(op syntax.Op) bool   { return op == syntax.OpEndText || op == syntax.OpEndLine }

func (rc *regexCompiler) node(re *syntax.Regexp) (*node, error) {
	switch re.Op {
	case syntax.OpNoMatch:
		return none(), nil
	case syntax.OpEmptyMatch:
		return empty(), nil
	case syntax.OpLiteral:
		parts := make([]*node, len(re.Rune))
		for i, r := range re.Rune {
			ranges := []runeRange{{r, r}}
			if re.Flags&syntax.FoldCase != 0 {
				for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
					ranges = append(ranges, runeRange{f, f})
				}
			}
			parts[i] = rc.encode(ranges)
		}
		return seq(parts...), nil
	case syntax.OpCharClass:
		var ranges []runeRange
		for i := 0; i+1 < len(re.Rune); i += 2 {
			ranges = append(ranges, runeRange{re.Rune[i], re.Rune[i+1]})
		}
		return rc.encode(ranges), nil
	case syntax.OpAnyCharNotNL:
		return rc.encode([]runeRange{{0, '\n' - 1}, {'\n' + 1, unicode.MaxRune}}), nil
	case syntax.OpAnyChar:
		return rc.encode(anyRune), nil
	case syntax.OpCapture:
		return rc.node(re.Sub[0])
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
		sub, err := rc.node(re.Sub[0])
		if err != nil {
			return nil, err
		}
		switch re.Op {
		case syntax.OpStar:
			return star(sub), nil
		case syntax.OpPlus:
			return plus(sub), nil
		case syntax.OpQuest:
			return opt(sub), nil
		}
		if re.Max >= 0 && re.Max*sub.size() > maxRuleStates {
			return nil, &UnsupportedError{Keyword: rc.keyword, Reason: fmt.Sprintf("the repetition {%d,%d} is too large", re.Min, re.Max)}
		}
		return repeat(sub, re.Min, re.Max), nil
	case syntax.OpConcat, syntax.OpAlternate:
		var kids []*node
		for _, s := range re.Sub {
			n, err := rc.node(s)
			if err != nil {
				return nil, err
			}
			kids = append(kids, n)
		}
		if re.Op == syntax.OpConcat {
			return seq(kids...), nil
		}
		return alt(kids...), nil
	case syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText, syntax.OpEndText:
		return nil, &UnsupportedError{Keyword: rc.keyword, Reason: "anchors (^, $) are only supported at the start and end of the pattern"}
	case syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return nil, &UnsupportedError{Keyword: rc.keyword, Reason: `word boundaries (\b, \B) are not supported`}
	}
	return nil, &UnsupportedError{Keyword: rc.keyword, Reason: fmt.Sprintf("regular-expression operator %v is not supported", re.Op)}
}

// Regex compiles a regular expression that the whole output must match.
func Regex(pattern string) (*Grammar, error) {
	n, err := regexNode(pattern, false, utf8Node, "regex")
	if err != nil {
		return nil, err
	}
	b := newBuilder()
	root := b.rule("root", n)
	return b.build(root)
}
