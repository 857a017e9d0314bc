package grammar

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// EBNF compiles a grammar in the GBNF dialect that llama.cpp and XGrammar
// (SGLang's ebnf field) share:
//
//	root  ::= greeting " " name ("!" | ".")?
//	name  ::= [A-Z] [a-z]* | "you"
//	# comments run to the end of the line
//
// Terms: "literals" and 'literals' with \n \t \r \\ \" \' \xHH \uHHHH
// escapes, [character classes] with ranges and ^ negation, rule names,
// groups, and the postfix operators * + ? {m} {m,} {m,n}. Rules may be
// recursive but not left-recursive. The start rule is "root".
func EBNF(source string) (*Grammar, error) {
	p := &ebnfParser{src: source, b: newBuilder(), rules: map[string]int32{}}
	defined := map[string]bool{}
	for {
		p.skipSpace(true)
		if p.pos >= len(p.src) {
			break
		}
		name := p.name()
		if name == "" {
			return nil, p.errorf("expected a rule name")
		}
		p.skipSpace(true)
		if !strings.HasPrefix(p.src[p.pos:], "::=") {
			return nil, p.errorf("expected ::= after %q", name)
		}
		p.pos += 3
		body, err := p.alternatives()
		if err != nil {
			return nil, err
		}
		if defined[name] {
			return nil, p.errorf("rule %q is defined twice", name)
		}
		defined[name] = true
		p.b.define(p.rule(name), body)
	}
	root, ok := p.rules["root"]
	if !ok || !defined["root"] {
		return nil, fmt.Errorf("ebnf: the grammar has no root rule (root ::= ...)")
	}
	for name := range p.rules {
		if !defined[name] {
			return nil, fmt.Errorf("ebnf: rule %q is used but not defined", name)
		}
	}
	g, err := p.b.build(root)
	if err != nil {
		return nil, fmt.Errorf("ebnf: %w", err)
	}
	return g, nil
}

type ebnfParser struct {
	src   string
	pos   int
	b     *builder
	rules map[string]int32
}

func (p *ebnfParser) errorf(format string, args ...any) error {
	line := 1 + strings.Count(p.src[:min(p.pos, len(p.src))], "\n")
	return fmt.Errorf("ebnf line %d: %s", line, fmt.Sprintf(format, args...))
}

func (p *ebnfParser) rule(name string) int32 {
	if id, ok := p.rules[name]; ok {
		return id
	}
	id := p.b.declare(name)
	p.rules[name] = id
	return id
}

// skipSpace skips blanks and comments; newlines only when newlines is set
// (inside a rule a newline may end it, see alternatives).
func (p *ebnfParser) skipSpace(newlines bool) {
	for p.pos < len(p.src) {
		c := p.src[p.pos]
		switch {
		case c == ' ' || c == '\t' || c == '\r':
			p.pos++
		case c == '\n' && newlines:
			p.pos++
		case c == '#':
			for p.pos < len(p.src) && p.src[p.pos] != '\n' {
				p.pos++
			}
		default:
			return
		}
	}
}

func isNameByte(c byte) bool {
	return c == '-' || c == '_' || c == '.' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func (p *ebnfParser) name() string {
	start := p.pos
	for p.pos < len(p.src) && isNameByte(p.src[p.pos]) {
		p.pos++
	}
	return p.src[start:p.pos]
}

// atRuleStart reports whether the text at the position starts the next
// rule ("name ::="), which ends the current one.
func (p *ebnfParser) atRuleStart() bool {
	save := p.pos
	defer func() { p.pos = save }()
	p.skipSpace(true)
	if p.name() == "" {
		return false
	}
	p.skipSpace(true)
	return strings.HasPrefix(p.src[p.pos:], "::=")
}

func (p *ebnfParser) alternatives() (*node, error) {
	var alts []*node
	for {
		s, err := p.sequence()
		if err != nil {
			return nil, err
		}
		alts = append(alts, s)
		p.skipSpace(false)
		save := p.pos
		p.skipSpace(true)
		if p.pos < len(p.src) && p.src[p.pos] == '|' {
			p.pos++
			continue
		}
		p.pos = save
		return alt(alts...), nil
	}
}

func (p *ebnfParser) sequence() (*node, error) {
	var parts []*node
	for {
		p.skipSpace(false)
		if p.pos >= len(p.src) {
			break
		}
		c := p.src[p.pos]
		if c == '\n' {
			// A newline continues the rule unless the next line starts a
			// new rule or the input ends.
			if p.atRuleStart() {
				break
			}
			save := p.pos
			p.skipSpace(true)
			if p.pos >= len(p.src) || p.src[p.pos] == '|' || p.src[p.pos] == ')' {
				p.pos = save
				break
			}
			continue
		}
		if c == '|' || c == ')' {
			break
		}
		t, err := p.term()
		if err != nil {
			return nil, err
		}
		t, err = p.postfix(t)
		if err != nil {
			return nil, err
		}
		parts = append(parts, t)
	}
	return seq(parts...), nil
}

func (p *ebnfParser) term() (*node, error) {
	c := p.src[p.pos]
	switch {
	case c == '"' || c == '\'':
		return p.literal(c)
	case c == '[':
		return p.class()
	case c == '(':
		p.pos++
		n, err := p.alternatives()
		if err != nil {
			return nil, err
		}
		p.skipSpace(true)
		if p.pos >= len(p.src) || p.src[p.pos] != ')' {
			return nil, p.errorf("expected )")
		}
		p.pos++
		return n, nil
	case c == '.':
		p.pos++
		return utf8Node(anyRune), nil
	case isNameByte(c):
		return ref(p.rule(p.name())), nil
	}
	return nil, p.errorf("unexpected %q", c)
}

func (p *ebnfParser) postfix(n *node) (*node, error) {
	for p.pos < len(p.src) {
		switch p.src[p.pos] {
		case '*':
			n = star(n)
		case '+':
			n = plus(n)
		case '?':
			n = opt(n)
		case '{':
			end := strings.IndexByte(p.src[p.pos:], '}')
			if end < 0 {
				return nil, p.errorf("unclosed {")
			}
			spec := p.src[p.pos+1 : p.pos+end]
			lo, hi, err := parseRepeat(spec)
			if err != nil {
				return nil, p.errorf("%v", err)
			}
			if hi >= 0 && hi*n.size() > maxRuleStates || lo*n.size() > maxRuleStates {
				return nil, p.errorf("repetition {%s} is too large", spec)
			}
			n = repeat(n, lo, hi)
			p.pos += end
		default:
			return n, nil
		}
		p.pos++
	}
	return n, nil
}

func parseRepeat(spec string) (lo, hi int, err error) {
	a, b, comma := strings.Cut(spec, ",")
	lo, err = strconv.Atoi(strings.TrimSpace(a))
	if err != nil || lo < 0 {
		return 0, 0, fmt.Errorf("bad repetition {%s}", spec)
	}
	if !comma {
		return lo, lo, nil
	}
	if strings.TrimSpace(b) == "" {
		return lo, -1, nil
	}
	hi, err = strconv.Atoi(strings.TrimSpace(b))
	if err != nil || hi < lo {
		return 0, 0, fmt.Errorf("bad repetition {%s}", spec)
	}
	return lo, hi, nil
}

// char reads one possibly escaped character.
func (p *ebnfParser) char() (rune, error) {
	if p.pos >= len(p.src) {
		return 0, p.errorf("unexpected end of input")
	}
	c := p.src[p.pos]
	if c != '\\' {
		r, size := utf8.DecodeRuneInString(p.src[p.pos:])
		p.pos += size
		return r, nil
	}
	if p.pos+1 >= len(p.src) {
		return 0, p.errorf("unfinished escape")
	}
	e := p.src[p.pos+1]
	p.pos += 2
	switch e {
	case 'n':
		return '\n', nil
	case 't':
		return '\t', nil
	case 'r':
		return '\r', nil
	case 'x', 'u', 'U':
		n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
		if p.pos+n > len(p.src) {
			return 0, p.errorf("unfinished \\%c escape", e)
		}
		v, err := strconv.ParseUint(p.src[p.pos:p.pos+n], 16, 32)
		if err != nil {
			return 0, p.errorf("bad \\%c escape", e)
		}
		p.pos += n
		return rune(v), nil
	}
	return rune(e), nil // \\ \" \' \[ \] \- and the like
}

func (p *ebnfParser) literal(quote byte) (*node, error) {
	p.pos++
	var parts []*node
	for {
		if p.pos >= len(p.src) {
			return nil, p.errorf("unclosed string")
		}
		if p.src[p.pos] == quote {
			p.pos++
			return seq(parts...), nil
		}
		r, err := p.char()
		if err != nil {
			return nil, err
		}
		parts = append(parts, lit(string(r)))
	}
}

func (p *ebnfParser) class() (*node, error) {
	p.pos++
	negate := false
	if p.pos < len(p.src) && p.src[p.pos] == '^' {
		negate = true
		p.pos++
	}
	var ranges []runeRange
	for {
		if p.pos >= len(p.src) {
			return nil, p.errorf("unclosed [")
		}
		if p.src[p.pos] == ']' {
			p.pos++
			break
		}
		lo, err := p.char()
		if err != nil {
			return nil, err
		}
		hi := lo
		if p.pos+1 < len(p.src) && p.src[p.pos] == '-' && p.src[p.pos+1] != ']' {
			p.pos++
			if hi, err = p.char(); err != nil {
				return nil, err
			}
			if hi < lo {
				return nil, p.errorf("bad range %q-%q", lo, hi)
			}
		}
		ranges = append(ranges, runeRange{lo, hi})
	}
	if negate {
		ranges = complementRunes(ranges)
	}
	return utf8Node(ranges), nil
}

// complementRunes is every code point outside ranges.
func complementRunes(ranges []runeRange) []runeRange {
	out := anyRune
	for _, r := range ranges {
		var next []runeRange
		for _, x := range out {
			if r.hi < x.lo || r.lo > x.hi {
				next = append(next, x)
				continue
			}
			if x.lo < r.lo {
				next = append(next, runeRange{x.lo, r.lo - 1})
			}
			if r.hi < x.hi {
				next = append(next, runeRange{r.hi + 1, x.hi})
			}
		}
		out = next
	}
	return out
}
