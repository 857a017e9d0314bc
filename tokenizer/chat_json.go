package tokenizer

// Python's json.dumps, as transformers' tojson filter calls it. Tool schemas
// reach the model through this, so its exact bytes matter: ", " and ": "
// separators, non-ASCII kept as is, dict order kept, floats written the way
// Python's repr writes them (1.0, 1e-05, 1e+16).

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/nikolalohinski/gonja/v2/exec"
)

type pyJSONOptions struct {
	ensureASCII bool
	sortKeys    bool
	pretty      bool   // indent was given: one item per line
	indent      string // one level of indentation
	itemSep     string
	keySep      string
}

// pyJSONDumps writes v (a template value) as json.dumps would.
func pyJSONDumps(v any, opts pyJSONOptions) (string, error) {
	var b strings.Builder
	if err := writePyJSON(&b, v, opts, 0); err != nil {
		return "", err
	}
	return b.String(), nil
}

func writePyJSON(b *strings.Builder, v any, opts pyJSONOptions, depth int) error {
	if depth > maxTemplateValueDepth {
		return fmt.Errorf("tojson: value nested more than %d levels deep", maxTemplateValueDepth)
	}
	if value, ok := v.(*exec.Value); ok {
		if value == nil || value.IsNil() {
			b.WriteString("null")
			return nil
		}
		v = value.Interface()
	}
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
		return nil
	case *exec.Dict:
		pairs := make([]pyJSONPair, len(x.Pairs))
		for i, pair := range x.Pairs {
			key, err := pyJSONKey(pair.Key)
			if err != nil {
				return err
			}
			pairs[i] = pyJSONPair{key, pair.Value}
		}
		return writePyJSONObject(b, pairs, opts, depth)
	case exec.Dict:
		return writePyJSON(b, &x, opts, depth)
	}

	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Bool:
		if rv.Bool() {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		b.WriteString(strconv.FormatInt(rv.Int(), 10))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		b.WriteString(strconv.FormatUint(rv.Uint(), 10))
	case reflect.Float32, reflect.Float64:
		b.WriteString(pyJSONFloat(rv.Float()))
	case reflect.String:
		writePyJSONString(b, rv.String(), opts.ensureASCII)
	case reflect.Slice, reflect.Array:
		return writePyJSONList(b, rv, opts, depth)
	case reflect.Map:
		// Maps here are Go maps (empty dicts, namespaces): no order to keep.
		pairs := make([]pyJSONPair, 0, rv.Len())
		for _, key := range rv.MapKeys() {
			name, err := pyJSONKey(exec.ToValue(key))
			if err != nil {
				return err
			}
			pairs = append(pairs, pyJSONPair{name, rv.MapIndex(key).Interface()})
		}
		slices.SortFunc(pairs, func(a, c pyJSONPair) int { return strings.Compare(a.key, c.key) })
		return writePyJSONObject(b, pairs, opts, depth)
	case reflect.Pointer, reflect.Interface:
		if rv.IsNil() {
			b.WriteString("null")
			return nil
		}
		return writePyJSON(b, rv.Elem().Interface(), opts, depth)
	default:
		return fmt.Errorf("tojson: object of type %T is not JSON serializable", v)
	}
	return nil
}

type pyJSONPair struct {
	key   string
	value any
}

// pyJSONKey converts a dict key as json.dumps does: strings as they are,
// numbers, booleans and None to their JSON spelling.
func pyJSONKey(key *exec.Value) (string, error) {
	switch {
	case key.IsString():
		return key.String(), nil
	case key.IsNil():
		return "null", nil
	case key.IsBool():
		return strconv.FormatBool(key.Bool()), nil
	case key.IsInteger():
		return strconv.Itoa(key.Integer()), nil
	case key.IsFloat():
		return pyJSONFloat(key.Float()), nil
	}
	return "", fmt.Errorf("tojson: keys must be str, int, float, bool or None, not %s", key.String())
}

func writePyJSONObject(b *strings.Builder, pairs []pyJSONPair, opts pyJSONOptions, depth int) error {
	if len(pairs) == 0 {
		b.WriteString("{}")
		return nil
	}
	if opts.sortKeys {
		slices.SortStableFunc(pairs, func(a, c pyJSONPair) int { return strings.Compare(a.key, c.key) })
	}
	b.WriteByte('{')
	for i, pair := range pairs {
		if i > 0 {
			b.WriteString(opts.itemSep)
		}
		writePyJSONNewline(b, opts, depth+1)
		writePyJSONString(b, pair.key, opts.ensureASCII)
		b.WriteString(opts.keySep)
		if err := writePyJSON(b, pair.value, opts, depth+1); err != nil {
			return err
		}
	}
	writePyJSONNewline(b, opts, depth)
	b.WriteByte('}')
	return nil
}

func writePyJSONList(b *strings.Builder, list reflect.Value, opts pyJSONOptions, depth int) error {
	if list.Len() == 0 {
		b.WriteString("[]")
		return nil
	}
	b.WriteByte('[')
	for i := range list.Len() {
		if i > 0 {
			b.WriteString(opts.itemSep)
		}
		writePyJSONNewline(b, opts, depth+1)
		if err := writePyJSON(b, list.Index(i).Interface(), opts, depth+1); err != nil {
			return err
		}
	}
	writePyJSONNewline(b, opts, depth)
	b.WriteByte(']')
	return nil
}

func writePyJSONNewline(b *strings.Builder, opts pyJSONOptions, depth int) {
	if !opts.pretty {
		return
	}
	b.WriteByte('\n')
	for range depth {
		b.WriteString(opts.indent)
	}
}

// writePyJSONString quotes s like json.dumps: the two-character escapes for
// \" \\ \n \r \t \b \f, \u00XX for the other control characters, and with
// ensureASCII every code point past '~' as \uXXXX (surrogate pairs above
// U+FFFF). Bytes that are not UTF-8 (a Python str cannot hold them) become
// U+FFFD.
func writePyJSONString(b *strings.Builder, s string, ensureASCII bool) {
	const hex = "0123456789abcdef"
	writeU := func(r rune) {
		b.WriteString(`\u`)
		for shift := 12; shift >= 0; shift -= 4 {
			b.WriteByte(hex[(r>>shift)&0xf])
		}
	}
	b.WriteByte('"')
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			switch {
			case r < 0x20:
				writeU(r)
			case !ensureASCII || r < 0x7f:
				b.WriteRune(r)
			case r > 0xffff:
				r -= 0x10000
				writeU(0xd800 + (r >> 10))
				writeU(0xdc00 + (r & 0x3ff))
			default:
				writeU(r)
			}
		}
	}
	b.WriteByte('"')
}

// pyJSONFloat is float.__repr__ as json.dumps uses it: the shortest digits
// that round-trip, positional notation for exponents -4..15, scientific
// otherwise ("1e-05", "1.5e+16"), and always a ".0" on whole numbers.
func pyJSONFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	sci := strconv.FormatFloat(f, 'e', -1, 64) // "-1.2345e+06"
	mantissa, expText, _ := strings.Cut(sci, "e")
	exp, _ := strconv.Atoi(expText)
	if exp < -4 || exp >= 16 {
		return sci
	}
	sign := ""
	if strings.HasPrefix(mantissa, "-") {
		sign, mantissa = "-", mantissa[1:]
	}
	digits := strings.Replace(mantissa, ".", "", 1)
	var intPart, fracPart string
	if exp >= 0 {
		if len(digits) <= exp+1 {
			intPart = digits + strings.Repeat("0", exp+1-len(digits))
		} else {
			intPart, fracPart = digits[:exp+1], digits[exp+1:]
		}
	} else {
		intPart, fracPart = "0", strings.Repeat("0", -exp-1)+digits
	}
	if fracPart == "" {
		fracPart = "0"
	}
	return sign + intPart + "." + fracPart
}
