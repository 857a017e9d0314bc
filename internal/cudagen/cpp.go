package cudagen

import (
	"fmt"
	"strconv"
	"strings"
)

// A small C preprocessor, enough to expand gosling's kernel files the way
// NVRTC does for one architecture: object- and function-like macros with
// # and ##, #if/#ifdef/#elif/#else/#endif over integer expressions, and
// #include of the headers it is given. What it leaves is scanned for the
// extern "C" __global__ kernels and their parameter lists.

type tokKind int

const (
	tIdent tokKind = iota
	tNumber
	tString
	tPunct
)

type token struct {
	kind tokKind
	text string
	hide []string // macros whose expansion produced this token (not expanded again)
}

func (t token) hidden(name string) bool {
	for _, h := range t.hide {
		if h == name {
			return true
		}
	}
	return false
}

var puncts3 = []string{"...", "<<=", ">>="}
var puncts2 = []string{"##", "->", "<<", ">>", "<=", ">=", "==", "!=", "&&", "||", "::", "++", "--", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^="}

func isIdentStart(c byte) bool { return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isIdentChar(c byte) bool  { return isIdentStart(c) || c >= '0' && c <= '9' }

// lex splits one line (comments already removed) into tokens.
func lex(s string) ([]token, error) {
	var out []token
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v':
			i++
		case isIdentStart(c):
			j := i + 1
			for j < len(s) && isIdentChar(s[j]) {
				j++
			}
			out = append(out, token{kind: tIdent, text: s[i:j]})
			i = j
		case c >= '0' && c <= '9' || c == '.' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9':
			j := i + 1
			for j < len(s) {
				if (s[j] == '+' || s[j] == '-') && strings.ContainsRune("eEpP", rune(s[j-1])) {
					j++
				} else if isIdentChar(s[j]) || s[j] == '.' {
					j++
				} else {
					break
				}
			}
			out = append(out, token{kind: tNumber, text: s[i:j]})
			i = j
		case c == '"' || c == '\'':
			j := i + 1
			for j < len(s) && s[j] != c {
				if s[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(s) {
				return nil, fmt.Errorf("unterminated literal in %q", s)
			}
			out = append(out, token{kind: tString, text: s[i : j+1]})
			i = j + 1
		default:
			n := 1
			for _, p := range puncts3 {
				if strings.HasPrefix(s[i:], p) {
					n = 3
				}
			}
			if n == 1 {
				for _, p := range puncts2 {
					if strings.HasPrefix(s[i:], p) {
						n = 2
					}
				}
			}
			out = append(out, token{kind: tPunct, text: s[i : i+n]})
			i += n
		}
	}
	return out, nil
}

// logicalLines joins backslash-continued lines and blanks out comments,
// keeping string and character literals intact.
func logicalLines(src string) []string {
	src = strings.ReplaceAll(src, "\\\r\n", "")
	src = strings.ReplaceAll(src, "\\\n", "")
	var b strings.Builder
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == '"' || c == '\'':
			j := i + 1
			for j < len(src) && src[j] != c && src[j] != '\n' {
				if src[j] == '\\' {
					j++
				}
				j++
			}
			j = min(j+1, len(src))
			b.WriteString(src[i:j])
			i = j
		case strings.HasPrefix(src[i:], "//"):
			for i < len(src) && src[i] != '\n' {
				i++
			}
		case strings.HasPrefix(src[i:], "/*"):
			end := strings.Index(src[i+2:], "*/")
			if end < 0 {
				end = len(src) - i - 2
			}
			// Keep the comment's newlines so that directives stay on lines of their own.
			b.WriteString(" " + strings.Repeat("\n", strings.Count(src[i:i+2+end], "\n")))
			i += end + 4
		default:
			b.WriteByte(c)
			i++
		}
	}
	return strings.Split(b.String(), "\n")
}

type macro struct {
	fn     bool
	params []string
	body   []token
}

// preprocessor expands one translation unit.
type preprocessor struct {
	macros  map[string]*macro
	headers map[string]string // #include "name" resolves here
	out     []token
	depth   int
}

// Preprocess expands src as NVRTC would with the given macros defined
// (name → value) and the given headers available to #include "name". It
// returns the tokens left.
func Preprocess(name, src string, defines map[string]string, headers map[string]string) ([]token, error) {
	p := &preprocessor{macros: map[string]*macro{}, headers: headers}
	for k, v := range defines {
		body, err := lex(v)
		if err != nil {
			return nil, err
		}
		p.macros[k] = &macro{body: body}
	}
	if err := p.file(name, src); err != nil {
		return nil, err
	}
	return p.out, nil
}

type cond struct{ active, taken, parent bool }

func (p *preprocessor) file(name, src string) error {
	p.depth++
	defer func() { p.depth-- }()
	if p.depth > 20 {
		return fmt.Errorf("%s: #include nested too deep", name)
	}
	var conds []cond
	active := func() bool { return len(conds) == 0 || conds[len(conds)-1].active }
	var pending []token // text lines not yet expanded
	flush := func() {
		p.out = append(p.out, p.expand(pending)...)
		pending = nil
	}
	for n, line := range logicalLines(src) {
		fail := func(format string, args ...any) error {
			return fmt.Errorf("%s:%d: %s", name, n+1, fmt.Sprintf(format, args...))
		}
		trimmed := strings.TrimSpace(line)
		if !strings.HasPrefix(trimmed, "#") {
			if active() {
				ts, err := lex(line)
				if err != nil {
					return fail("%v", err)
				}
				pending = append(pending, ts...)
			}
			continue
		}
		ts, err := lex(trimmed[1:])
		if err != nil {
			return fail("%v", err)
		}
		if len(ts) == 0 {
			continue
		}
		dir, rest := ts[0].text, ts[1:]
		switch dir {
		case "if", "ifdef", "ifndef":
			c := cond{parent: active()}
			if c.parent {
				var v bool
				switch dir {
				case "if":
					x, err := p.eval(rest)
					if err != nil {
						return fail("#if: %v", err)
					}
					v = x != 0
				case "ifdef", "ifndef":
					if len(rest) != 1 {
						return fail("#%s wants one name", dir)
					}
					_, def := p.macros[rest[0].text]
					v = def == (dir == "ifdef")
				}
				c.active, c.taken = v, v
			}
			conds = append(conds, c)
		case "elif":
			if len(conds) == 0 {
				return fail("#elif without #if")
			}
			c := &conds[len(conds)-1]
			if c.parent && !c.taken {
				x, err := p.eval(rest)
				if err != nil {
					return fail("#elif: %v", err)
				}
				c.active = x != 0
				c.taken = c.active
			} else {
				c.active = false
			}
		case "else":
			if len(conds) == 0 {
				return fail("#else without #if")
			}
			c := &conds[len(conds)-1]
			c.active = c.parent && !c.taken
			c.taken = true
		case "endif":
			if len(conds) == 0 {
				return fail("#endif without #if")
			}
			conds = conds[:len(conds)-1]
		default:
			if !active() {
				continue
			}
			flush()
			switch dir {
			case "define":
				if err := p.define(trimmed[1:]); err != nil {
					return fail("%v", err)
				}
			case "undef":
				if len(rest) == 1 {
					delete(p.macros, rest[0].text)
				}
			case "include":
				if len(rest) != 1 || rest[0].kind != tString || rest[0].text[0] != '"' {
					return fail("only #include \"name\" is supported")
				}
				h := strings.Trim(rest[0].text, `"`)
				text, ok := p.headers[h]
				if !ok {
					return fail("#include %q: no such header", h)
				}
				if err := p.file(h, text); err != nil {
					return err
				}
			case "pragma", "line", "error", "warning":
			default:
				return fail("unknown directive #%s", dir)
			}
		}
	}
	if len(conds) != 0 {
		return fmt.Errorf("%s: unterminated #if", name)
	}
	flush()
	return nil
}

// define parses "define NAME body" or "define NAME(params) body".
func (p *preprocessor) define(line string) error {
	s := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "define"))
	i := 0
	for i < len(s) && isIdentChar(s[i]) {
		i++
	}
	name := s[:i]
	if name == "" {
		return fmt.Errorf("#define without a name")
	}
	m := &macro{}
	rest := s[i:]
	if strings.HasPrefix(rest, "(") { // function-like only without a space before (
		end := strings.IndexByte(rest, ')')
		if end < 0 {
			return fmt.Errorf("#define %s: unclosed parameter list", name)
		}
		m.fn = true
		for _, prm := range strings.Split(rest[1:end], ",") {
			if prm = strings.TrimSpace(prm); prm != "" {
				if prm == "..." {
					return fmt.Errorf("#define %s: variadic macros are not supported", name)
				}
				m.params = append(m.params, prm)
			}
		}
		rest = rest[end+1:]
	}
	body, err := lex(rest)
	if err != nil {
		return err
	}
	m.body = body
	p.macros[name] = m
	return nil
}

// expand macro-expands ts. The stream is kept reversed, so that an
// expansion pushes its tokens back in front of the rest for rescanning.
func (p *preprocessor) expand(ts []token) []token {
	stack := make([]token, len(ts))
	for i, t := range ts {
		stack[len(ts)-1-i] = t
	}
	var out []token
	push := func(body []token) {
		for i := len(body) - 1; i >= 0; i-- {
			stack = append(stack, body[i])
		}
	}
	for len(stack) > 0 {
		t := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		m, ok := p.macros[t.text]
		if t.kind != tIdent || !ok || t.hidden(t.text) {
			out = append(out, t)
			continue
		}
		hide := append(append([]string(nil), t.hide...), t.text)
		if !m.fn {
			push(p.subst(m, nil, hide))
			continue
		}
		if len(stack) == 0 || stack[len(stack)-1].text != "(" {
			out = append(out, t)
			continue
		}
		// Collect the arguments: balanced parentheses, split at top-level commas.
		stack = stack[:len(stack)-1]
		var args [][]token
		var cur []token
		depth := 0
		closed := false
		for len(stack) > 0 {
			a := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if a.kind == tPunct {
				switch a.text {
				case "(":
					depth++
				case ")":
					if depth == 0 {
						closed = true
					}
					depth--
				case ",":
					if depth == 0 {
						args = append(args, cur)
						cur = nil
						continue
					}
				}
			}
			if closed {
				break
			}
			cur = append(cur, a)
		}
		if len(cur) > 0 || len(args) > 0 || len(m.params) > 0 {
			args = append(args, cur)
		}
		if len(args) != len(m.params) {
			// Left as is: the compiler will say what is wrong.
			out = append(out, t)
			continue
		}
		push(p.subst(m, args, hide))
	}
	return out
}

// subst is m's body with args in place of its parameters, # and ##
// applied, every token marked with hide.
func (p *preprocessor) subst(m *macro, args [][]token, hide []string) []token {
	param := func(t token) int {
		if t.kind != tIdent {
			return -1
		}
		for i, n := range m.params {
			if n == t.text {
				return i
			}
		}
		return -1
	}
	body := m.body
	var out []token
	pasteNext := false
	for i := 0; i < len(body); i++ {
		t := body[i]
		if t.text == "##" && t.kind == tPunct {
			pasteNext = true
			continue
		}
		var piece []token
		if t.text == "#" && t.kind == tPunct && m.fn && i+1 < len(body) && param(body[i+1]) >= 0 {
			var sb []string
			for _, a := range args[param(body[i+1])] {
				sb = append(sb, a.text)
			}
			piece = []token{{kind: tString, text: strconv.Quote(strings.Join(sb, " "))}}
			i++
		} else if k := param(t); k >= 0 {
			raw := i+1 < len(body) && body[i+1].text == "##" || pasteNext
			if raw {
				piece = append([]token(nil), args[k]...)
			} else {
				piece = p.expand(args[k])
			}
		} else {
			piece = []token{{kind: t.kind, text: t.text}}
		}
		if pasteNext && len(out) > 0 && len(piece) > 0 {
			joined := out[len(out)-1].text + piece[0].text
			if lt, err := lex(joined); err == nil && len(lt) == 1 {
				out[len(out)-1] = lt[0]
			} else {
				out[len(out)-1] = token{kind: tPunct, text: joined}
			}
			piece = piece[1:]
		}
		pasteNext = false
		out = append(out, piece...)
	}
	for i := range out {
		out[i].hide = append(append([]string(nil), out[i].hide...), hide...)
	}
	return out
}

// eval evaluates an #if expression: defined, integer literals and C's
// arithmetic, relational and logical operators; other names are 0.
func (p *preprocessor) eval(ts []token) (int64, error) {
	var pre []token
	for i := 0; i < len(ts); i++ {
		if ts[i].text != "defined" {
			pre = append(pre, ts[i])
			continue
		}
		var name string
		if i+1 < len(ts) && ts[i+1].text == "(" && i+3 < len(ts) && ts[i+3].text == ")" {
			name, i = ts[i+2].text, i+3
		} else if i+1 < len(ts) {
			name, i = ts[i+1].text, i+1
		}
		v := "0"
		if _, ok := p.macros[name]; ok {
			v = "1"
		}
		pre = append(pre, token{kind: tNumber, text: v})
	}
	e := &exprParser{ts: p.expand(pre)}
	v, err := e.binary(0)
	if err == nil && e.i != len(e.ts) {
		err = fmt.Errorf("unexpected %q", e.ts[e.i].text)
	}
	return v, err
}

type exprParser struct {
	ts []token
	i  int
}

var binPrec = map[string]int{
	"||": 1, "&&": 2, "|": 3, "^": 4, "&": 5, "==": 6, "!=": 6,
	"<": 7, ">": 7, "<=": 7, ">=": 7, "<<": 8, ">>": 8, "+": 9, "-": 9, "*": 10, "/": 10, "%": 10,
}

func (e *exprParser) binary(minPrec int) (int64, error) {
	l, err := e.unary()
	if err != nil {
		return 0, err
	}
	for e.i < len(e.ts) {
		op := e.ts[e.i].text
		prec, ok := binPrec[op]
		if !ok || prec <= minPrec {
			break
		}
		e.i++
		r, err := e.binary(prec)
		if err != nil {
			return 0, err
		}
		b := func(c bool) int64 {
			if c {
				return 1
			}
			return 0
		}
		switch op {
		case "||":
			l = b(l != 0 || r != 0)
		case "&&":
			l = b(l != 0 && r != 0)
		case "|":
			l |= r
		case "^":
			l ^= r
		case "&":
			l &= r
		case "==":
			l = b(l == r)
		case "!=":
			l = b(l != r)
		case "<":
			l = b(l < r)
		case ">":
			l = b(l > r)
		case "<=":
			l = b(l <= r)
		case ">=":
			l = b(l >= r)
		case "<<":
			l <<= r
		case ">>":
			l >>= r
		case "+":
			l += r
		case "-":
			l -= r
		case "*":
			l *= r
		case "/", "%":
			if r == 0 {
				return 0, fmt.Errorf("division by zero")
			}
			if op == "/" {
				l /= r
			} else {
				l %= r
			}
		}
	}
	return l, nil
}

func (e *exprParser) unary() (int64, error) {
	if e.i >= len(e.ts) {
		return 0, fmt.Errorf("expression ends early")
	}
	t := e.ts[e.i]
	e.i++
	switch {
	case t.text == "(":
		v, err := e.binary(0)
		if err != nil {
			return 0, err
		}
		if e.i >= len(e.ts) || e.ts[e.i].text != ")" {
			return 0, fmt.Errorf("missing )")
		}
		e.i++
		return v, nil
	case t.text == "!" || t.text == "-" || t.text == "~" || t.text == "+":
		v, err := e.unary()
		switch t.text {
		case "!":
			if v == 0 {
				return 1, err
			}
			return 0, err
		case "-":
			return -v, err
		case "~":
			return ^v, err
		}
		return v, err
	case t.kind == tNumber:
		return strconv.ParseInt(strings.TrimRight(t.text, "uUlL"), 0, 64)
	case t.kind == tIdent:
		return 0, nil
	}
	return 0, fmt.Errorf("unexpected %q", t.text)
}
