package grammar

import (
	"fmt"
	"math/big"
	"strconv"
	"strings"
)

// maxCountedChars caps maxLength: a longer bound compiles as this one
// (every string it allows is valid; longer valid strings are refused).
// Counted characters are a chain of automaton states, one per character.
const maxCountedChars = 1024

// maxAnyOfBranches bounds the distribution of anyOf over sibling keywords
// (a product when several combine).
const maxAnyOfBranches = 256

// generate turns a normalised schema into a node.
func (c *schemaCompiler) generate(s *sch, path string) (*node, error) {
	if len(s.anyOfs) > 0 {
		list := s.anyOfs[0]
		rest := s.clone()
		rest.anyOfs = rest.anyOfs[1:]
		if len(list) > maxAnyOfBranches {
			return nil, &UnsupportedError{Keyword: "anyOf", Reason: fmt.Sprintf("more than %d branches at %s", maxAnyOfBranches, path)}
		}
		var branches []*node
		for i, b := range list {
			bpath := fmt.Sprintf("%s/anyOf/%d", path, i)
			if rest.trivial() && len(rest.anyOfs) == 0 {
				// Nothing to combine with: the branch compiles on its
				// own, and a $ref stays a rule reference (recursion).
				n, err := c.schema(b, bpath)
				if err != nil {
					return nil, err
				}
				branches = append(branches, n)
				continue
			}
			merged := rest.clone()
			if err := c.mergeSchema(merged, b, bpath); err != nil {
				return nil, err
			}
			n, err := c.generate(merged, bpath)
			if err != nil {
				return nil, err
			}
			branches = append(branches, n)
		}
		return alt(branches...), nil
	}
	types := s.effectiveTypes()
	if s.hasEnum {
		var branches []*node
		for _, v := range s.enum {
			if s.satisfiesScalar(v) {
				branches = append(branches, lit(marshalCompact(v)))
			}
		}
		return alt(branches...), nil
	}
	var branches []*node
	if types&tNull != 0 {
		branches = append(branches, lit("null"))
	}
	if types&tBool != 0 {
		branches = append(branches, lit("true"), lit("false"))
	}
	if types&(tNumber|tInteger) != 0 {
		n, err := c.number(s, types&tNumber == 0, path)
		if err != nil {
			return nil, err
		}
		branches = append(branches, n)
	}
	if types&tString != 0 {
		n, err := c.str(s, path)
		if err != nil {
			return nil, err
		}
		branches = append(branches, n)
	}
	if types&tArray != 0 {
		n, err := c.array(s, path)
		if err != nil {
			return nil, err
		}
		branches = append(branches, n)
	}
	if types&tObject != 0 {
		n, err := c.objectNode(s, path)
		if err != nil {
			return nil, err
		}
		branches = append(branches, n)
	}
	return alt(branches...), nil
}

// conjunction compiles the allOf of schemas (true when empty).
func (c *schemaCompiler) conjunction(list []any, path string) (*node, error) {
	var real []any
	for _, x := range list {
		if b, ok := x.(bool); ok {
			if !b {
				return none(), nil
			}
			continue
		}
		real = append(real, x)
	}
	switch len(real) {
	case 0:
		return c.anyValue(), nil
	case 1:
		return c.schema(real[0], path)
	}
	s := newSch(path)
	for _, x := range real {
		if err := c.mergeSchema(s, x, path); err != nil {
			return nil, err
		}
	}
	return c.generate(s, path)
}

// asRule wraps a large node in a rule so that copies of it (repetition,
// object member orders) are references, not copies.
func (c *schemaCompiler) asRule(n *node, name string) *node {
	if n.kind == nRef || n.size() < 24 {
		return n
	}
	return ref(c.b.rule(name, n))
}

func (c *schemaCompiler) str(s *sch, path string) (*node, error) {
	pats := append([]string(nil), s.patterns...)
	for _, f := range s.formats {
		pats = append(pats, formatPatterns[f])
	}
	switch {
	case len(pats) > 1:
		return nil, &UnsupportedError{Keyword: "pattern", Reason: fmt.Sprintf("several patterns/formats on one string at %s", path)}
	case len(pats) == 1:
		if s.minLen > 0 || s.maxLen >= 0 {
			kw := "minLength"
			if s.maxLen >= 0 {
				kw = "maxLength"
			}
			return nil, &UnsupportedError{Keyword: kw, Reason: fmt.Sprintf("combined with a pattern or format at %s", path)}
		}
		n, err := regexNode(pats[0], true, jsonEncoder, "pattern")
		if err != nil {
			return nil, err
		}
		return seq(lit(`"`), n, lit(`"`)), nil
	}
	if s.minLen == 0 && s.maxLen < 0 {
		return c.plainString(), nil
	}
	if s.minLen > maxCountedChars {
		return nil, &UnsupportedError{Keyword: "minLength", Reason: fmt.Sprintf("lengths above %d at %s", maxCountedChars, path)}
	}
	maxLen := s.maxLen
	if maxLen > maxCountedChars {
		maxLen = maxCountedChars // stricter, so still sound: see maxCountedChars
	}
	// The characters are inline, not a shared rule: a rule's end would be
	// a return to every one of the chain's states, and tokens spanning
	// characters would all be checked against each. Inline, the chain's
	// states share their vocabulary splits through their signatures.
	return seq(lit(`"`), repeat(jsonChar(false), s.minLen, maxLen), lit(`"`)), nil
}

func (c *schemaCompiler) array(s *sch, path string) (*node, error) {
	if s.maxItems == 0 {
		if s.minItems > 0 {
			return none(), nil
		}
		return seq(lit("["), c.ws(), lit("]")), nil
	}
	var elems []*node
	for i, p := range s.prefix {
		n, err := c.schema(p, fmt.Sprintf("%s/prefixItems/%d", path, i))
		if err != nil {
			return nil, err
		}
		elems = append(elems, c.asRule(n, fmt.Sprintf("%s/prefixItems/%d", path, i)))
	}
	rest, err := c.conjunction(s.items, path+"/items")
	if err != nil {
		return nil, err
	}
	rest = c.asRule(rest, path+"/items")
	sep := seq(c.ws(), lit(","), c.ws())
	if s.maxItems > 1000 || s.minItems > 1000 {
		return nil, &UnsupportedError{Keyword: "maxItems", Reason: fmt.Sprintf("counts above 1000 at %s", path)}
	}
	// tail(i): the elements after the first i, i >= 1.
	var tail func(i int) *node
	tail = func(i int) *node {
		if i < len(elems) {
			if s.maxItems >= 0 && i >= s.maxItems {
				return empty()
			}
			n := seq(sep, elems[i], tail(i+1))
			if i < s.minItems {
				return n
			}
			return opt(n)
		}
		maxRest := -1
		if s.maxItems >= 0 {
			maxRest = s.maxItems - i
		}
		return repeat(seq(sep, rest), max(s.minItems-i, 0), maxRest)
	}
	first := rest
	if len(elems) > 0 {
		first = elems[0]
	}
	body := seq(first, tail(1))
	if s.minItems == 0 {
		body = opt(body)
	}
	return seq(lit("["), c.ws(), body, c.ws(), lit("]")), nil
}

// objectNode emits the properties in order, optional ones skippable,
// then the additional properties.
func (c *schemaCompiler) objectNode(s *sch, path string) (*node, error) {
	// The union of the parts' properties, each with the conjunction of what
	// every part says of it.
	var names []string
	seen := map[string]bool{}
	for _, p := range s.objParts {
		for _, k := range p.props {
			if !seen[k] {
				seen[k] = true
				names = append(names, k)
			}
		}
	}
	for _, k := range s.required {
		if !seen[k] {
			seen[k] = true
			names = append(names, k)
		}
	}
	required := map[string]bool{}
	for _, k := range s.required {
		required[k] = true
	}
	type member struct {
		node     *node
		required bool
	}
	var present []member
	for _, k := range names {
		var conj []any
		for _, p := range s.objParts {
			if v, ok := p.schemas[k]; ok && containsString(p.props, k) {
				conj = append(conj, v)
			} else if p.addl != nil {
				conj = append(conj, p.addl)
			}
		}
		val, err := c.conjunction(conj, path+"/properties/"+k)
		if err != nil {
			return nil, err
		}
		if val.kind == nNone {
			if required[k] {
				return none(), nil
			}
			continue
		}
		val = c.asRule(val, path+"/properties/"+k)
		present = append(present, member{node: seq(lit(quoteJSON(k)), c.ws(), lit(":"), c.ws(), val), required: required[k]})
	}
	// Additional properties: allowed unless a part forbids them.
	var addlConj []any
	allowed := true
	for _, p := range s.objParts {
		switch a := p.addl.(type) {
		case nil:
		case bool:
			allowed = allowed && a
		default:
			addlConj = append(addlConj, a)
		}
	}
	var extra *node
	if allowed {
		val, err := c.conjunction(addlConj, path+"/additionalProperties")
		if err != nil {
			return nil, err
		}
		if val.kind != nNone {
			val = c.asRule(val, path+"/additionalProperties")
			extra = seq(c.otherKey(names), c.ws(), lit(":"), c.ws(), val)
			extra = c.asRule(extra, path+"/additionalProperties")
		}
	}
	var kids []*node
	var isRequired []bool
	for _, m := range present {
		kids = append(kids, m.node)
		isRequired = append(isRequired, m.required)
	}
	if len(present) > 200 {
		return nil, &UnsupportedError{Keyword: "properties", Reason: fmt.Sprintf("more than 200 properties at %s", path)}
	}
	body := members(kids, isRequired, seq(c.ws(), lit(","), c.ws()), extra)
	return seq(lit("{"), c.ws(), body, c.ws(), lit("}")), nil
}

// otherKey is a JSON string that is none of names, written without
// escapes (an escaped key could spell a name). It walks the names' trie
// character by character: leaving the trie frees the rest of the key, and
// the closing quote is allowed except where a name ends.
func (c *schemaCompiler) otherKey(names []string) *node {
	if len(names) == 0 {
		return c.sharedRule("plain key", func() *node { return seq(lit(`"`), star(utf8Node(keyChars)), lit(`"`)) })
	}
	// The rest of a key once it left the names: one shared rule, not a
	// copy per trie node.
	free := c.sharedRule("key tail", func() *node { return seq(star(utf8Node(keyChars)), lit(`"`)) })
	var walk func(prefix string, group []string) *node
	walk = func(prefix string, group []string) *node {
		children := map[rune][]string{}
		var order []rune
		isName := false
		for _, n := range group {
			rest := n[len(prefix):]
			if rest == "" {
				isName = true
				continue
			}
			r := []rune(rest)[0]
			if _, ok := children[r]; !ok {
				order = append(order, r)
			}
			children[r] = append(children[r], n)
		}
		var branches []*node
		if !isName {
			branches = append(branches, lit(`"`))
		}
		others := keyChars
		for _, r := range order {
			branches = append(branches, seq(lit(string(r)), walk(prefix+string(r), children[r])))
			others = subtractRune(others, r)
		}
		branches = append(branches, seq(c.keyCharsNode(others), free))
		return alt(branches...)
	}
	var keep []string
	for _, n := range names {
		if !strings.ContainsAny(n, "\"\\") && !hasControl(n) {
			keep = append(keep, n)
		}
	}
	return seq(lit(`"`), walk("", keep))
}

// keyCharsNode encodes a subset of keyChars; the non-ASCII part, almost
// always all of it, is a shared rule (a trie of names has a node per
// character, each needing "any other character").
func (c *schemaCompiler) keyCharsNode(rs []runeRange) *node {
	var ascii, rest []runeRange
	for _, r := range rs {
		if r.lo < 0x80 {
			ascii = append(ascii, runeRange{r.lo, min(r.hi, 0x7F)})
		}
		if r.hi >= 0x80 {
			rest = append(rest, runeRange{max(r.lo, 0x80), r.hi})
		}
	}
	var ranges []byteRange
	for _, r := range ascii {
		ranges = append(ranges, byteRange{byte(r.lo), byte(r.hi)})
	}
	var multi *node
	if len(rest) == 1 && rest[0] == (runeRange{0x80, 0x10FFFF}) {
		multi = c.sharedRule("non-ascii char", func() *node { return utf8Node(rest) })
	} else {
		multi = utf8Node(rest)
	}
	if len(ranges) == 0 {
		return multi
	}
	return alt(byteClass(ranges...), multi)
}

// keyChars are the characters of a key written without escapes.
var keyChars = []runeRange{{0x20, '"' - 1}, {'"' + 1, '\\' - 1}, {'\\' + 1, 0x10FFFF}}

func subtractRune(rs []runeRange, r rune) []runeRange {
	var out []runeRange
	for _, x := range rs {
		if r < x.lo || r > x.hi {
			out = append(out, x)
			continue
		}
		if x.lo < r {
			out = append(out, runeRange{x.lo, r - 1})
		}
		if r < x.hi {
			out = append(out, runeRange{r + 1, x.hi})
		}
	}
	return out
}

func hasControl(s string) bool {
	for _, r := range s {
		if r < 0x20 {
			return true
		}
	}
	return false
}

// number compiles integer or number with bounds. Bounds must be integers
// (after exclusivity) for numbers; integers take any bound.
func (c *schemaCompiler) number(s *sch, integer bool, path string) (*node, error) {
	if s.lower == nil && s.upper == nil {
		if integer {
			return seq(opt(lit("-")), uintNode()), nil
		}
		return numberNode(), nil
	}
	lo, loExcl, hi, hiExcl, ok := intBounds(s.lower, s.upper, integer)
	if !ok {
		kw := "minimum"
		if s.lower == nil || s.lower.v.IsInt() {
			kw = "maximum"
		}
		return nil, &UnsupportedError{Keyword: kw, Reason: fmt.Sprintf("non-integer or out-of-range bounds on a number at %s", path)}
	}
	if integer {
		return intRangeNode(lo, hi), nil
	}
	return decimalRangeNode(lo, loExcl, hi, hiExcl), nil
}

// intBounds converts bounds to int64s. For integers exclusivity is folded
// in (loExcl, hiExcl false); for numbers the bounds must be integers.
func intBounds(lower, upper *bound, integer bool) (lo *int64, loExcl bool, hi *int64, hiExcl bool, ok bool) {
	conv := func(b *bound, up bool) (*int64, bool, bool) {
		if b == nil {
			return nil, false, true
		}
		r := b.v
		if !integer && !r.IsInt() {
			return nil, false, false
		}
		q := new(big.Int)
		if up {
			q.Div(r.Num(), r.Denom()) // floor for positive denominators
		} else {
			q.Neg(r.Num())
			q.Div(q, r.Denom())
			q.Neg(q) // ceil
		}
		excl := b.exclusive
		if integer {
			if excl && r.IsInt() {
				if up {
					q.Sub(q, big.NewInt(1))
				} else {
					q.Add(q, big.NewInt(1))
				}
			}
			excl = false
		}
		if !q.IsInt64() || q.Int64() > 1e15 || q.Int64() < -1e15 {
			return nil, false, false
		}
		v := q.Int64()
		return &v, excl, true
	}
	var ok1, ok2 bool
	lo, loExcl, ok1 = conv(lower, false)
	hi, hiExcl, ok2 = conv(upper, true)
	return lo, loExcl, hi, hiExcl, ok1 && ok2
}

// intRangeNode matches the decimal integers in [lo, hi] (nil: unbounded),
// without leading zeros or "-0".
func intRangeNode(lo, hi *int64) *node {
	var branches []*node
	// Non-negative part: [max(lo,0), hi].
	if hi == nil || *hi >= 0 {
		a := int64(0)
		if lo != nil && *lo > 0 {
			a = *lo
		}
		branches = append(branches, uintRange(a, hi))
	}
	// Negative part: -y, y in [max(-hi,1), -lo].
	if lo == nil || *lo < 0 {
		a := int64(1)
		if hi != nil && -*hi > 1 {
			a = -*hi
		}
		var b *int64
		if lo != nil {
			v := -*lo
			b = &v
		}
		if b == nil || a <= *b {
			branches = append(branches, seq(lit("-"), uintRange(a, b)))
		}
	}
	return alt(branches...)
}

// uintRange matches [a, b] (b nil: unbounded), a >= 0.
func uintRange(a int64, b *int64) *node {
	if b != nil && a > *b {
		return none()
	}
	as := strconv.FormatInt(a, 10)
	var branches []*node
	if b == nil {
		for l := len(as); l <= len(as); l++ {
			branches = append(branches, sameLenRange(as, strings.Repeat("9", l)))
		}
		// Every number with more digits.
		branches = append(branches, seq(byteClass(byteRange{'1', '9'}), repeat(digit, len(as), -1)))
		return alt(branches...)
	}
	bs := strconv.FormatInt(*b, 10)
	for l := len(as); l <= len(bs); l++ {
		lo := "1" + strings.Repeat("0", l-1)
		if l == 1 {
			lo = "0"
		}
		if l == len(as) {
			lo = as
		}
		hi := strings.Repeat("9", l)
		if l == len(bs) {
			hi = bs
		}
		branches = append(branches, sameLenRange(lo, hi))
	}
	return alt(branches...)
}

// sameLenRange matches digit strings of len(lo) between lo and hi.
func sameLenRange(lo, hi string) *node {
	if lo > hi {
		return none()
	}
	if lo == "" {
		return empty()
	}
	n := len(lo)
	if strings.Trim(lo[1:], "0") == "" && strings.Trim(hi[1:], "9") == "" {
		return seq(byteClass(byteRange{lo[0], hi[0]}), repeat(digit, n-1, n-1))
	}
	if lo[0] == hi[0] {
		return seq(lit(lo[:1]), sameLenRange(lo[1:], hi[1:]))
	}
	branches := []*node{seq(lit(lo[:1]), sameLenRange(lo[1:], strings.Repeat("9", n-1)))}
	if lo[0]+1 <= hi[0]-1 {
		branches = append(branches, seq(byteClass(byteRange{lo[0] + 1, hi[0] - 1}), repeat(digit, n-1, n-1)))
	}
	branches = append(branches, seq(lit(hi[:1]), sameLenRange(strings.Repeat("0", n-1), hi[1:])))
	return alt(branches...)
}

// decimalRangeNode matches numbers x with lo <(=) x <(=) hi for integer
// bounds, written as an integer part and an optional fraction (no
// exponent: it would move the value across the bounds).
func decimalRangeNode(lo *int64, loExcl bool, hi *int64, hiExcl bool) *node {
	var branches []*node
	if hi == nil || *hi >= 0 || (*hi == 0 && !hiExcl) {
		// x >= 0 part.
		var l int64
		lEx := false
		if lo != nil && *lo >= 0 {
			l, lEx = *lo, loExcl
		}
		branches = append(branches, nonnegDecimal(l, lEx, hi, hiExcl, false))
	}
	if lo == nil || *lo < 0 {
		// x < 0: x = -y with y in (0 or -hi, -lo].
		var yl int64
		yEx := true // y > 0: -0.0 belongs to the x >= 0 part
		if hi != nil && *hi < 0 {
			yl, yEx = -*hi, hiExcl
		}
		var yh *int64
		yhEx := false
		if lo != nil {
			v := -*lo
			yh, yhEx = &v, loExcl
		}
		branches = append(branches, seq(lit("-"), nonnegDecimal(yl, yEx, yh, yhEx, true)))
	}
	return alt(branches...)
}

// nonnegDecimal matches y >= 0 with l <(=) y <(=) h. positive excludes
// texts equal to zero (for "-" in front).
func nonnegDecimal(l int64, lEx bool, h *int64, hEx bool, positive bool) *node {
	anyF := opt(fractionNode())
	zeroF := opt(seq(lit("."), plus(lit("0"))))
	nonzeroF := seq(lit("."), star(digit), byteClass(byteRange{'1', '9'}), star(digit))
	var branches []*node
	// Integer parts whose every fraction fits.
	a := l
	if lEx {
		a = l + 1
	}
	var b *int64
	if h != nil {
		v := *h - 1
		b = &v
	}
	if positive && a == 0 {
		// 0.x with x nonzero is positive; 0 itself is not.
		if b == nil || *b >= 0 {
			branches = append(branches, seq(lit("0"), nonzeroF))
		}
		a = 1
	}
	if b == nil || a <= *b {
		branches = append(branches, seq(uintRange(a, b), anyF))
	}
	// l itself with a nonzero fraction, when exclusive.
	if lEx && (h == nil || l < *h) && !(positive && l == 0) {
		branches = append(branches, seq(uintRange(l, &l), nonzeroF))
	}
	// h itself, fraction zero, when inclusive.
	if h != nil && !hEx && (*h > l || *h == l && !lEx) && !(positive && *h == 0) {
		branches = append(branches, seq(uintRange(*h, h), zeroF))
	}
	return alt(branches...)
}

// formatPatterns are the formats compiled (as anchored patterns); others
// are annotations. Dates leave out February 29 (leap years need more than
// a regular expression states cheaply).
var formatPatterns = map[string]string{
	"date":          `^[0-9]{4}-((0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])|(0[13-9]|1[0-2])-(29|30)|(0[13578]|1[02])-31)$`,
	"time":          `^([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$`,
	"date-time":     `^[0-9]{4}-((0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])|(0[13-9]|1[0-2])-(29|30)|(0[13578]|1[02])-31)T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$`,
	"uuid":          `^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`,
	"email":         `^[a-zA-Z0-9._%+-]+@[a-zA-Z0-9-]+(\.[a-zA-Z0-9-]+)*\.[a-zA-Z]{2,}$`,
	"ipv4":          `^((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])$`,
	"uri":           `^[a-zA-Z][a-zA-Z0-9+.-]*://([a-zA-Z0-9._~!$&'()*+,;=:@/?-]|%[0-9A-Fa-f]{2})*$`,
	"uri-reference": `^([a-zA-Z][a-zA-Z0-9+.-]*://([a-zA-Z0-9._~!$&'()*+,;=:@/?-]|%[0-9A-Fa-f]{2})*|/?[a-zA-Z0-9._~-]+(/[a-zA-Z0-9._~-]+)*/?)$`,
	"hostname":      `^[a-zA-Z0-9]([a-zA-Z0-9-]{0,20}[a-zA-Z0-9])?(\.[a-zA-Z0-9]([a-zA-Z0-9-]{0,20}[a-zA-Z0-9])?)*$`,
}
