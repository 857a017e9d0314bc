package tokenizer

// Python's str methods as templates call them (message.content.split('</think>')[-1].lstrip('\n')).
// gonja has most of them, but several differ from Python where chat templates
// notice: lstrip()/rstrip()/split() without arguments act on ' ' only instead of
// all whitespace, count() ignores its argument, split() returns a list with
// Go indexing. The ones here follow CPython; indices count code points.

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"

	"github.com/nikolalohinski/gonja/v2/builtins"
	"github.com/nikolalohinski/gonja/v2/exec"
)

// pyStrMethods is gonja's string method set with the Python-faithful
// replacements below.
func pyStrMethods() *exec.MethodSet[string] {
	methods := map[string]exec.Method[string]{}
	// gonja's versions are kept for these: they agree with Python on what
	// templates use, or are rare enough not to matter.
	for _, name := range []string{"casefold", "center", "encode", "expandtabs", "format", "format_map",
		"isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "islower", "isnumeric", "isprintable",
		"istitle", "isupper", "ljust", "rjust", "swapcase", "zfill"} {
		if method, ok := builtins.Methods.Str.Get(name); ok {
			methods[name] = method
		}
	}
	for name, method := range map[string]exec.Method[string]{
		"strip":        stripMethod(true, true),
		"lstrip":       stripMethod(true, false),
		"rstrip":       stripMethod(false, true),
		"split":        splitMethod(false),
		"rsplit":       splitMethod(true),
		"splitlines":   splitlinesMethod,
		"replace":      replaceMethod,
		"startswith":   affixMethod(strings.HasPrefix),
		"endswith":     affixMethod(strings.HasSuffix),
		"upper":        pyNoArgStr("upper", strings.ToUpper),
		"lower":        pyNoArgStr("lower", strings.ToLower),
		"title":        pyNoArgStr("title", pyTitle),
		"capitalize":   pyNoArgStr("capitalize", pyCapitalize),
		"isspace":      isspaceMethod,
		"count":        findMethod("count"),
		"find":         findMethod("find"),
		"rfind":        findMethod("rfind"),
		"index":        findMethod("index"),
		"rindex":       findMethod("rindex"),
		"join":         joinMethod,
		"removeprefix": removeAffixMethod(strings.TrimPrefix),
		"removesuffix": removeAffixMethod(strings.TrimSuffix),
		"partition":    partitionMethod(false),
		"rpartition":   partitionMethod(true),
	} {
		methods[name] = method
	}
	return exec.NewMethodSet(methods)
}

// pyStrArgs reads up to len(names) positional arguments; a missing or None
// argument is nil. Keyword arguments are not accepted (CPython's str methods
// take none, apart from split's).
func pyStrArgs(method string, args *exec.VarArgs, names ...string) ([]*exec.Value, error) {
	if len(args.Args) > len(names) {
		return nil, exec.ErrInvalidCall(fmt.Errorf("%s() takes at most %d arguments (%d given)", method, len(names), len(args.Args)))
	}
	values := make([]*exec.Value, len(names))
	for i, arg := range args.Args {
		if !arg.IsNil() {
			values[i] = arg
		}
	}
	for name, arg := range args.KwArgs {
		i := slices.Index(names, name)
		if i < 0 || (method != "split" && method != "rsplit") {
			return nil, exec.ErrInvalidCall(fmt.Errorf("%s() got an unexpected keyword argument %q", method, name))
		}
		if !arg.IsNil() {
			values[i] = arg
		}
	}
	return values, nil
}

func pyStrArg(method string, arg *exec.Value) (string, error) {
	if !arg.IsString() {
		return "", exec.ErrInvalidCall(fmt.Errorf("%s(): argument must be str, not %s", method, arg.String()))
	}
	return arg.String(), nil
}

// pyIsSpace is str.isspace for one code point: Go's unicode.IsSpace plus the
// information separators U+001C..U+001F, which Python also counts.
func pyIsSpace(r rune) bool {
	return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f)
}

// pyStrip is str.strip/lstrip/rstrip: chars nil means whitespace.
func pyStrip(s string, chars []rune, left, right bool) string {
	cut := pyIsSpace
	if chars != nil {
		cut = func(r rune) bool { return slices.Contains(chars, r) }
	}
	if left {
		s = strings.TrimLeftFunc(s, cut)
	}
	if right {
		s = strings.TrimRightFunc(s, cut)
	}
	return s
}

func stripMethod(left, right bool) exec.Method[string] {
	name := map[[2]bool]string{{true, true}: "strip", {true, false}: "lstrip", {false, true}: "rstrip"}[[2]bool{left, right}]
	return func(self string, _ *exec.Value, args *exec.VarArgs) (any, error) {
		values, err := pyStrArgs(name, args, "chars")
		if err != nil {
			return nil, err
		}
		if values[0] == nil {
			return pyStrip(self, nil, left, right), nil
		}
		chars, err := pyStrArg(name, values[0])
		if err != nil {
			return nil, err
		}
		return pyStrip(self, []rune(chars), left, right), nil
	}
}

// splitMethod is str.split / str.rsplit(sep=None, maxsplit=-1).
func splitMethod(fromRight bool) exec.Method[string] {
	name := "split"
	if fromRight {
		name = "rsplit"
	}
	return func(self string, _ *exec.Value, args *exec.VarArgs) (any, error) {
		values, err := pyStrArgs(name, args, "sep", "maxsplit")
		if err != nil {
			return nil, err
		}
		maxSplit := -1
		if values[1] != nil {
			if !values[1].IsInteger() {
				return nil, exec.ErrInvalidCall(fmt.Errorf("%s(): maxsplit must be an integer", name))
			}
			maxSplit = values[1].Integer()
		}
		var parts []string
		if values[0] == nil {
			parts = splitWhitespace(self, maxSplit, fromRight)
		} else {
			sep, err := pyStrArg(name, values[0])
			if err != nil {
				return nil, err
			}
			if sep == "" {
				return nil, errors.New("empty separator")
			}
			parts = splitSeparator(self, sep, maxSplit, fromRight)
		}
		list := make(pyList, len(parts))
		for i, part := range parts {
			list[i] = part
		}
		return list, nil
	}
}

func splitSeparator(s, sep string, maxSplit int, fromRight bool) []string {
	if maxSplit < 0 {
		return strings.Split(s, sep)
	}
	if !fromRight {
		return strings.SplitN(s, sep, maxSplit+1)
	}
	var tail []string
	for len(tail) < maxSplit {
		i := strings.LastIndex(s, sep)
		if i < 0 {
			break
		}
		tail = append(tail, s[i+len(sep):])
		s = s[:i]
	}
	parts := []string{s}
	for i := len(tail) - 1; i >= 0; i-- {
		parts = append(parts, tail[i])
	}
	return parts
}

// splitWhitespace is split() without a separator: runs of whitespace
// separate, and no empty strings come out; once maxSplit parts are cut, the
// rest is kept whole, whitespace at its far end included.
func splitWhitespace(s string, maxSplit int, fromRight bool) []string {
	runes := []rune(s)
	var parts []string
	if !fromRight {
		i := 0
		for {
			for i < len(runes) && pyIsSpace(runes[i]) {
				i++
			}
			if i == len(runes) {
				return parts
			}
			if maxSplit >= 0 && len(parts) == maxSplit {
				return append(parts, string(runes[i:]))
			}
			start := i
			for i < len(runes) && !pyIsSpace(runes[i]) {
				i++
			}
			parts = append(parts, string(runes[start:i]))
		}
	}
	i := len(runes)
	for {
		for i > 0 && pyIsSpace(runes[i-1]) {
			i--
		}
		if i == 0 {
			break
		}
		if maxSplit >= 0 && len(parts) == maxSplit {
			parts = append(parts, string(runes[:i]))
			break
		}
		end := i
		for i > 0 && !pyIsSpace(runes[i-1]) {
			i--
		}
		parts = append(parts, string(runes[i:end]))
	}
	slices.Reverse(parts)
	return parts
}

// splitlinesMethod is str.splitlines(keepends=False), with Python's set of
// line boundaries.
func splitlinesMethod(self string, _ *exec.Value, args *exec.VarArgs) (any, error) {
	if len(args.Args) > 1 {
		return nil, exec.ErrInvalidCall(errors.New("splitlines() takes at most 1 argument"))
	}
	keepEnds := false
	if len(args.Args) == 1 {
		keepEnds = args.Args[0].IsTrue()
	}
	if v, ok := args.KwArgs["keepends"]; ok {
		keepEnds = v.IsTrue()
	}
	lines := pyList{}
	runes := []rune(self)
	start := 0
	for i := 0; i < len(runes); i++ {
		switch runes[i] {
		case '\n', '\r', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029:
		default:
			continue
		}
		end := i + 1
		if runes[i] == '\r' && i+1 < len(runes) && runes[i+1] == '\n' {
			end++
		}
		if keepEnds {
			lines = append(lines, string(runes[start:end]))
		} else {
			lines = append(lines, string(runes[start:i]))
		}
		start = end
		i = end - 1
	}
	if start < len(runes) {
		lines = append(lines, string(runes[start:]))
	}
	return lines, nil
}

// replaceMethod is str.replace(old, new, count=-1).
func replaceMethod(self string, _ *exec.Value, args *exec.VarArgs) (any, error) {
	values, err := pyStrArgs("replace", args, "old", "new", "count")
	if err != nil {
		return nil, err
	}
	if values[0] == nil || values[1] == nil {
		return nil, exec.ErrInvalidCall(errors.New("replace() takes at least 2 arguments"))
	}
	old, err := pyStrArg("replace", values[0])
	if err != nil {
		return nil, err
	}
	replacement, err := pyStrArg("replace", values[1])
	if err != nil {
		return nil, err
	}
	count := -1
	if values[2] != nil {
		count = values[2].Integer()
	}
	return strings.Replace(self, old, replacement, count), nil
}

// affixMethod is str.startswith / str.endswith(affix, start=None, end=None),
// where affix may be a tuple (a list here) of strings.
func affixMethod(match func(s, affix string) bool) exec.Method[string] {
	return func(self string, _ *exec.Value, args *exec.VarArgs) (any, error) {
		values, err := pyStrArgs("startswith/endswith", args, "affix", "start", "end")
		if err != nil {
			return nil, err
		}
		if values[0] == nil {
			return nil, exec.ErrInvalidCall(errors.New("startswith/endswith take at least 1 argument"))
		}
		s := pySlice(self, values[1], values[2])
		if values[0].IsList() {
			for i := 0; i < values[0].Len(); i++ {
				if match(s, values[0].Index(i).String()) {
					return true, nil
				}
			}
			return false, nil
		}
		affix, err := pyStrArg("startswith/endswith", values[0])
		if err != nil {
			return nil, err
		}
		return match(s, affix), nil
	}
}

// pySlice is s[start:end] in code points, with Python's clamping.
func pySlice(s string, start, end *exec.Value) string {
	if start == nil && end == nil {
		return s
	}
	runes := []rune(s)
	bound := func(v *exec.Value, fallback int) int {
		if v == nil {
			return fallback
		}
		i := v.Integer()
		if i < 0 {
			i += len(runes)
		}
		return min(max(i, 0), len(runes))
	}
	from, to := bound(start, 0), bound(end, len(runes))
	if from > to {
		return ""
	}
	return string(runes[from:to])
}

func pyNoArgStr(name string, fn func(string) string) exec.Method[string] {
	return func(self string, _ *exec.Value, args *exec.VarArgs) (any, error) {
		if len(args.Args)+len(args.KwArgs) > 0 {
			return nil, exec.ErrInvalidCall(fmt.Errorf("%s() takes no arguments", name))
		}
		return fn(self), nil
	}
}

func pyIsCased(r rune) bool { return unicode.IsUpper(r) || unicode.IsLower(r) || unicode.IsTitle(r) }

// pyTitle is str.title: a letter after a cased letter is lowered, any other
// letter is title-cased ("they're" becomes "They'Re", as in Python).
func pyTitle(s string) string {
	var b strings.Builder
	previousCased := false
	for _, r := range s {
		if previousCased {
			b.WriteRune(unicode.ToLower(r))
		} else {
			b.WriteRune(unicode.ToTitle(r))
		}
		previousCased = pyIsCased(r)
	}
	return b.String()
}

// pyCapitalize is str.capitalize: first character title-cased, the rest lowered.
func pyCapitalize(s string) string {
	for i, r := range s {
		return string(unicode.ToTitle(r)) + strings.ToLower(s[i+len(string(r)):])
	}
	return s
}

func isspaceMethod(self string, _ *exec.Value, args *exec.VarArgs) (any, error) {
	if len(args.Args)+len(args.KwArgs) > 0 {
		return nil, exec.ErrInvalidCall(errors.New("isspace() takes no arguments"))
	}
	if self == "" {
		return false, nil
	}
	for _, r := range self {
		if !pyIsSpace(r) {
			return false, nil
		}
	}
	return true, nil
}

// findMethod is str.count / find / rfind / index / rindex(sub, start, end);
// positions are code-point indices into the whole string.
func findMethod(name string) exec.Method[string] {
	return func(self string, _ *exec.Value, args *exec.VarArgs) (any, error) {
		values, err := pyStrArgs(name, args, "sub", "start", "end")
		if err != nil {
			return nil, err
		}
		if values[0] == nil {
			return nil, exec.ErrInvalidCall(fmt.Errorf("%s() takes at least 1 argument", name))
		}
		sub, err := pyStrArg(name, values[0])
		if err != nil {
			return nil, err
		}
		runes := []rune(self)
		offset := 0
		if values[1] != nil {
			offset = values[1].Integer()
			if offset < 0 {
				offset += len(runes)
			}
			offset = min(max(offset, 0), len(runes))
		}
		window := pySlice(self, values[1], values[2])
		if name == "count" {
			if sub == "" {
				return len([]rune(window)) + 1, nil
			}
			return strings.Count(window, sub), nil
		}
		var at int
		if name == "find" || name == "index" {
			at = strings.Index(window, sub)
		} else {
			at = strings.LastIndex(window, sub)
		}
		if at < 0 {
			if name == "index" || name == "rindex" {
				return nil, errors.New("substring not found")
			}
			return -1, nil
		}
		return offset + len([]rune(window[:at])), nil
	}
}

// joinMethod is str.join(iterable): every item must be a string.
func joinMethod(self string, _ *exec.Value, args *exec.VarArgs) (any, error) {
	if len(args.Args) != 1 || len(args.KwArgs) > 0 {
		return nil, exec.ErrInvalidCall(errors.New("join() takes exactly one argument"))
	}
	var parts []string
	var bad *exec.Value
	args.Args[0].Iterate(func(_, _ int, item, _ *exec.Value) bool {
		if !item.IsString() {
			bad = item
			return false
		}
		parts = append(parts, item.String())
		return true
	}, func() {})
	if bad != nil {
		return nil, fmt.Errorf("sequence item: expected str instance, got %s", bad.String())
	}
	return strings.Join(parts, self), nil
}

func removeAffixMethod(trim func(s, affix string) string) exec.Method[string] {
	return func(self string, _ *exec.Value, args *exec.VarArgs) (any, error) {
		if len(args.Args) != 1 || len(args.KwArgs) > 0 || !args.Args[0].IsString() {
			return nil, exec.ErrInvalidCall(errors.New("removeprefix/removesuffix take one str argument"))
		}
		return trim(self, args.Args[0].String()), nil
	}
}

// partitionMethod is str.partition / str.rpartition(sep).
func partitionMethod(fromRight bool) exec.Method[string] {
	return func(self string, _ *exec.Value, args *exec.VarArgs) (any, error) {
		if len(args.Args) != 1 || len(args.KwArgs) > 0 || !args.Args[0].IsString() {
			return nil, exec.ErrInvalidCall(errors.New("partition/rpartition take one str argument"))
		}
		sep := args.Args[0].String()
		if sep == "" {
			return nil, errors.New("empty separator")
		}
		at := strings.Index(self, sep)
		if fromRight {
			at = strings.LastIndex(self, sep)
		}
		if at < 0 {
			if fromRight {
				return pyList{"", "", self}, nil
			}
			return pyList{self, "", ""}, nil
		}
		return pyList{self[:at], sep, self[at+len(sep):]}, nil
	}
}
