package tokenizer

// The gonja environment that stands in for transformers' Jinja environment:
// its configuration, globals, filters, tests and methods. Only what differs
// from gonja's builtins is written here; each override names the Python
// behaviour it restores.

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nikolalohinski/gonja/v2/builtins"
	"github.com/nikolalohinski/gonja/v2/config"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/loaders"
	"github.com/nikolalohinski/gonja/v2/nodes"
	"github.com/nikolalohinski/gonja/v2/parser"
	"github.com/nikolalohinski/gonja/v2/tokens"
)

// compileTemplate parses source with transformers' settings, after the
// rewrites of chat_rewrite.go.
func compileTemplate(source string) (*exec.Template, error) {
	env := chatEnvironment()
	cfg := config.New()
	cfg.TrimBlocks = true
	cfg.LeftStripBlocks = true
	// Jinja drops the single trailing newline of a template unless told to keep it.
	cfg.KeepTrailingNewline = false

	var tmpl *exec.Template
	err := func() (err error) {
		// The parser is not hardened against every malformed input.
		defer func() {
			if recovered := recover(); recovered != nil {
				err = fmt.Errorf("template engine failed on this source: %v", recovered)
			}
		}()
		tmpl, err = exec.NewTemplate(chatTemplateName, cfg, singleTemplateLoader(rewriteTemplate(source)), env)
		return err
	}()
	if err != nil {
		// exec.NewTemplate quotes the whole source in its message; keep only the cause.
		if cause := errors.Unwrap(err); cause != nil {
			err = cause
		}
		return nil, fmt.Errorf("compile chat template: %w", err)
	}
	return tmpl, nil
}

// singleTemplateLoader serves the chat template and nothing else: a template
// from a model repository must not read files through include/import/extends
// (transformers compiles with from_string and no loader, so they fail there too).
type singleTemplateLoader string

func (l singleTemplateLoader) Read(path string) (io.Reader, error) {
	if path != chatTemplateName {
		return nil, fmt.Errorf("chat templates cannot load other templates (asked for %q)", path)
	}
	return strings.NewReader(string(l)), nil
}

func (l singleTemplateLoader) Resolve(path string) (string, error) { return path, nil }

func (l singleTemplateLoader) Inherit(string) (loaders.Loader, error) { return l, nil }

// chatEnvironment is built once; every part of it is read-only afterwards
// (per-render globals travel in the render's own context).
var chatEnvironment = sync.OnceValue(func() *exec.Environment {
	filters := exec.NewFilterSet(map[string]exec.FilterFunction{}).Update(builtins.Filters)
	// gonja's list-returning filters build []any, whose indexing rejects
	// x[-len(x)]; hand templates pyLists instead.
	for _, name := range []string{"list", "map", "select", "reject", "selectattr", "rejectattr", "sort", "reverse", "unique", "batch", "slice", "groupby"} {
		if original, ok := filters.Get(name); ok {
			mustConfigureChat(filters.Replace(name, listResultFilter(original)))
		}
	}
	mustConfigureChat(filters.Replace("tojson", jinjaFilterToJSON))
	mustConfigureChat(filters.Replace("trim", jinjaFilterTrim))
	mustConfigureChat(filters.Replace("items", jinjaFilterItems))
	mustConfigureChat(filters.Replace("dictsort", jinjaFilterDictSort))

	tests := exec.NewTestSet(map[string]exec.TestFunction{}).Update(builtins.Tests)
	mustConfigureChat(tests.Replace("true", jinjaTestTrue))
	mustConfigureChat(tests.Replace("false", jinjaTestFalse))
	mustConfigureChat(tests.Replace("sequence", jinjaTestSequence))

	controls := exec.NewControlStructureSet(map[string]parser.ControlStructureParser{}).Update(builtins.ControlStructures)
	mustConfigureChat(controls.Register("generation", generationParser))

	globals := exec.EmptyContext().Update(builtins.GlobalFunctions)
	globals.Set("range", rangeGlobal)
	globals.Set("dict", dictGlobal)

	return &exec.Environment{
		Context:           globals,
		Filters:           filters,
		Tests:             tests,
		ControlStructures: controls,
		Methods: exec.Methods{
			Bool:  builtins.Methods.Bool,
			Int:   builtins.Methods.Int,
			Float: builtins.Methods.Float,
			Str:   pyStrMethods(),
			Dict:  pyDictMethods(),
			List:  pyListMethods(),
		},
	}
})

// mustConfigureChat panics on an error that can only come from a mistake in this file
// (replacing a filter gonja does not have).
func mustConfigureChat(err error) {
	if err != nil {
		panic("tokenizer: chat template environment: " + err.Error())
	}
}

// chatRenderState holds what one Render shares with the template's globals.
type chatRenderState struct {
	now    func() time.Time
	raised *RaisedError
}

// raiseException is transformers' raise_exception(message): it aborts the
// render with the template's own message.
func (s *chatRenderState) raiseException(args *exec.VarArgs) (any, error) {
	message := "raise_exception called"
	if len(args.Args) > 0 {
		message = args.Args[0].String()
	}
	if s.raised == nil {
		s.raised = &RaisedError{Message: message}
	}
	return nil, s.raised
}

// strftimeNow is transformers' strftime_now(format): datetime.now().strftime(format).
func (s *chatRenderState) strftimeNow(args *exec.VarArgs) (any, error) {
	if len(args.Args) != 1 || !args.Args[0].IsString() {
		return nil, errors.New("strftime_now takes one string argument, the format")
	}
	return strftime(s.now(), args.Args[0].String()), nil
}

// maxRangeLen bounds range(): Python's is lazy, this one builds a list.
const maxRangeLen = 1 << 20

// rangeGlobal is Python's range returned as a list. gonja's range feeds a
// channel from a goroutine that leaks when the range is never fully read.
func rangeGlobal(args *exec.VarArgs) (any, error) {
	bounds := make([]int, len(args.Args))
	for i, arg := range args.Args {
		if !arg.IsInteger() {
			return nil, fmt.Errorf("range: argument %d is not an integer", i+1)
		}
		bounds[i] = arg.Integer()
	}
	start, stop, step := 0, 0, 1
	switch len(bounds) {
	case 1:
		stop = bounds[0]
	case 2:
		start, stop = bounds[0], bounds[1]
	case 3:
		start, stop, step = bounds[0], bounds[1], bounds[2]
	default:
		return nil, errors.New("range expects 1 to 3 integer arguments")
	}
	if step == 0 {
		return nil, errors.New("range() arg 3 must not be zero")
	}
	var list pyList
	for i := start; (step > 0 && i < stop) || (step < 0 && i > stop); i += step {
		if len(list) == maxRangeLen {
			return nil, fmt.Errorf("range: more than %d items", maxRangeLen)
		}
		list = append(list, i)
	}
	return list, nil
}

// dictGlobal is dict(**kwargs). Python keeps the keyword order; gonja hands
// keywords over in a Go map, so sorted order is the deterministic stand-in.
func dictGlobal(args *exec.VarArgs) (any, error) {
	if len(args.Args) > 0 {
		return nil, errors.New("dict() takes keyword arguments only")
	}
	names := make([]string, 0, len(args.KwArgs))
	for name := range args.KwArgs {
		names = append(names, name)
	}
	slices.Sort(names)
	dict := exec.NewDict()
	for _, name := range names {
		dict.Pairs = append(dict.Pairs, &exec.Pair{Key: exec.AsValue(name), Value: args.KwArgs[name]})
	}
	return templateDict(dict), nil
}

// listResultFilter wraps a gonja filter so that a list it returns indexes
// like a Python list.
func listResultFilter(filter exec.FilterFunction) exec.FilterFunction {
	return func(e *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
		out := filter(e, in, params)
		if out == nil || out.IsError() || !out.IsList() {
			return out
		}
		if _, ok := out.Interface().(pyList); ok {
			return out
		}
		list := pyList{}
		out.Iterate(func(_, _ int, item, _ *exec.Value) bool {
			list = append(list, item)
			return true
		}, func() {})
		return exec.AsValue(list)
	}
}

// bindArgs binds a filter's positional and keyword arguments to its Python
// parameter names, as a Python call would, rejecting unknown and repeated ones.
func bindArgs(filter string, params *exec.VarArgs, names ...string) (map[string]*exec.Value, error) {
	if len(params.Args) > len(names) {
		return nil, fmt.Errorf("%s takes at most %d arguments (%d given)", filter, len(names), len(params.Args))
	}
	given := make(map[string]*exec.Value, len(names))
	for i, arg := range params.Args {
		given[names[i]] = arg
	}
	for name, arg := range params.KwArgs {
		if !slices.Contains(names, name) {
			return nil, fmt.Errorf("%s got an unexpected keyword argument %q", filter, name)
		}
		if _, dup := given[name]; dup {
			return nil, fmt.Errorf("%s got multiple values for argument %q", filter, name)
		}
		given[name] = arg
	}
	return given, nil
}

// jinjaFilterToJSON is transformers' tojson:
// json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
func jinjaFilterToJSON(_ *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	given, err := bindArgs("tojson", params, "ensure_ascii", "indent", "separators", "sort_keys")
	if err != nil {
		return exec.AsValue(err)
	}
	opts := pyJSONOptions{}
	if v, ok := given["ensure_ascii"]; ok {
		opts.ensureASCII = v.IsTrue()
	}
	if v, ok := given["sort_keys"]; ok {
		opts.sortKeys = v.IsTrue()
	}
	if v, ok := given["indent"]; ok && !v.IsNil() {
		switch {
		case v.IsInteger():
			opts.indent = strings.Repeat(" ", max(v.Integer(), 0))
		case v.IsString():
			opts.indent = v.String()
		default:
			return exec.AsValue(fmt.Errorf("tojson: indent must be an integer or a string, not %s", v.String()))
		}
		opts.pretty = true
	}
	opts.itemSep, opts.keySep = ", ", ": "
	if opts.pretty {
		opts.itemSep = ","
	}
	if v, ok := given["separators"]; ok && !v.IsNil() {
		if !v.IsList() || v.Len() != 2 {
			return exec.AsValue(errors.New("tojson: separators must be an (item_separator, key_separator) pair"))
		}
		opts.itemSep, opts.keySep = v.Index(0).String(), v.Index(1).String()
	}
	out, err := pyJSONDumps(in, opts)
	if err != nil {
		return exec.AsValue(err)
	}
	return exec.AsSafeValue(out)
}

// jinjaFilterTrim is Jinja's trim(value, chars=None): str(value).strip(chars),
// with Python's idea of whitespace.
func jinjaFilterTrim(_ *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	given, err := bindArgs("trim", params, "chars")
	if err != nil {
		return exec.AsValue(err)
	}
	chars := given["chars"]
	if chars == nil || chars.IsNil() {
		return exec.AsValue(pyStrip(in.String(), nil, true, true))
	}
	cut := []rune(chars.String())
	return exec.AsValue(pyStrip(in.String(), cut, true, true))
}

// jinjaFilterItems is Jinja's items(value): a dict's (key, value) pairs in order.
// gonja's sees only Go maps, not the ordered dicts templates are given.
func jinjaFilterItems(_ *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	if len(params.Args)+len(params.KwArgs) > 0 {
		return exec.AsValue(errors.New("items takes no arguments"))
	}
	if in.IsNil() {
		return exec.AsValue(pyList{})
	}
	if !in.IsDict() {
		return exec.AsValue(fmt.Errorf("items: %s is not a mapping", in.String()))
	}
	return exec.AsValue(pyDictItems(in))
}

// jinjaFilterDictSort is Jinja's dictsort(value, case_sensitive=False, by='key',
// reverse=False): the (key, value) pairs, stably sorted. gonja's sees only Go
// maps.
func jinjaFilterDictSort(_ *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	given, err := bindArgs("dictsort", params, "case_sensitive", "by", "reverse")
	if err != nil {
		return exec.AsValue(err)
	}
	if !in.IsDict() {
		return exec.AsValue(fmt.Errorf("dictsort: %s is not a mapping", in.String()))
	}
	caseSensitive := given["case_sensitive"] != nil && given["case_sensitive"].IsTrue()
	reverse := given["reverse"] != nil && given["reverse"].IsTrue()
	position := 0
	if by := given["by"]; by != nil {
		switch by.String() {
		case "key":
		case "value":
			position = 1
		default:
			return exec.AsValue(errors.New("dictsort: you can only sort by either 'key' or 'value'"))
		}
	}
	items := pyDictItems(in)
	sortKey := func(item any) *exec.Value {
		v := exec.ToValue(item.(pyList)[position])
		if v.IsString() && !caseSensitive {
			return exec.AsValue(strings.ToLower(v.String()))
		}
		return v
	}
	slices.SortStableFunc(items, func(a, b any) int {
		order := comparePy(sortKey(a), sortKey(b))
		if reverse {
			return -order
		}
		return order
	})
	return exec.AsValue(items)
}

// comparePy orders two values as Python's < would for the types templates
// sort: numbers by value, strings by code point, anything else by its text.
func comparePy(a, b *exec.Value) int {
	if a.IsNumber() && b.IsNumber() {
		switch fa, fb := a.Float(), b.Float(); {
		case fa < fb:
			return -1
		case fa > fb:
			return 1
		}
		return 0
	}
	return strings.Compare(a.String(), b.String())
}

// Python's `x is true` / `x is false` are identity tests against the bool
// singletons; gonja's `is false` holds for anything that is not true,
// undefined included.
func jinjaTestTrue(_ *exec.Context, in *exec.Value, _ *exec.VarArgs) (bool, error) {
	return in.IsBool() && in.Bool(), nil
}

func jinjaTestFalse(_ *exec.Context, in *exec.Value, _ *exec.VarArgs) (bool, error) {
	return in.IsBool() && !in.Bool(), nil
}

// jinjaTestSequence is Jinja's `is sequence`: anything with len() and [] — strings
// and dicts too, not only lists.
func jinjaTestSequence(_ *exec.Context, in *exec.Value, _ *exec.VarArgs) (bool, error) {
	return in.IsList() || in.IsString() || in.IsDict(), nil
}

// generationControl is transformers' {% generation %}…{% endgeneration %}:
// it marks assistant text for return_assistant_tokens_mask and renders its
// body unchanged.
type generationControl struct {
	body *nodes.Wrapper
}

func (g *generationControl) Position() *tokens.Token { return g.body.Position() }
func (g *generationControl) String() string          { return "generation" }

// Execute renders the body in its own scope, as Jinja's call block does.
func (g *generationControl) Execute(r *exec.Renderer, _ *nodes.ControlStructureBlock) error {
	return r.ExecuteWrapper(g.body)
}

func generationParser(p *parser.Parser, args *parser.Parser) (nodes.ControlStructure, error) {
	if !args.End() {
		return nil, args.Error("generation takes no arguments", args.Current())
	}
	body, endArgs, err := p.WrapUntil("endgeneration")
	if err != nil {
		return nil, err
	}
	if !endArgs.End() {
		return nil, endArgs.Error("endgeneration takes no arguments", endArgs.Current())
	}
	return &generationControl{body: body}, nil
}
