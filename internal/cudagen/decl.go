// Package cudagen keeps CUDA kernels and their Go launchers in step. A
// package's kernels are declared once, in a text file beside its .cu
// sources (kernels.decl); from it, `go generate` writes typed Go launch
// stubs and a C header with the request-field layout, and each package's
// test checks the declaration against what its preprocessed sources
// define, so that a renamed kernel, parameter or field fails `go test`
// instead of a run on the GPU.
//
// The declaration, line by line ('#' starts a comment):
//
//	package gpu                                 Go package of the stubs
//	import github.com/gosling-ai/gosling/device/cuda   (outside package cuda)
//	receiver rt *Runtime                        stubs are methods of it
//	stream s Stream                             an extra stream parameter (optional)
//	call rt.Launch(name, cfg, args)             how a stub launches
//	header attn_gen.cuh                         the C header written beside the declaration
//	params attn(q ptr, q_stride i64, ...)       a parameter list kernels share
//	params fa3(@attn, tm_k tmap, ...)           a list that extends another
//	kernel AttnFused attn_fused_{si}_{sk}(@attn)
//		si=f32|bf16 sk=f32|fp8                  instances: one cross product a line
//	struct req REQ_ 8                           a row of int32 fields, padded to 8
//		prefix
//		ext_len
//	const mmaRows MMA_BM = 64                   an integer constant: Go name, C macro, value
//	const GemvRound GemvStage GEMV_STAGE_ROUND = 0   the same, of a Go type of the package
//	const mlaRow MLA_ROW = MLA_DK * 2           a value may use the constants above it
//	const fa3Keys F3_BN(d) = 256:64 128         a function of one int: cases, then the default
//
// A constant becomes a Go constant (a function for the last form) in the
// stubs' file and a #define in the header, so that a tile shape the
// launcher sizes grids and shared memory from is written once. Constants
// on consecutive lines form a group; the comment block above a group is
// its documentation on both sides. The kernel sources must not #define a
// declared constant themselves (Check).
//
// A list that extends another generates an argument struct embedding the
// other's.
//
// Parameter kinds are ptr, i32, i64, u64, f32 and tmap (Kind). An axis whose
// values are all dtype names (f32, bf16, f16, fp8) takes a tensor.DType, one
// whose values are all integers an int, any other a string.
package cudagen

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Decl is one package's kernel declaration.
type Decl struct {
	Package, Import  string
	Receiver, Stream string
	Call             string
	Header           string
	Lists            map[string][]Param // named parameter lists
	Bases            map[string]string  // a list → the list it extends
	Families         []*Family
	Structs          []*Struct
	Consts           []*Const
}

// Const is an integer constant shared by Go and the kernels.
type Const struct {
	Go, GoType string      // Go name; its type, or "" for an untyped constant
	C          string      // the macro's name
	Arg        string      // a function's argument, or "" for a constant
	Expr       []string    // a constant's value: integers, operators, declared C names
	Cases      [][2]string // a function's argument value → result
	Default    string      // a function's result for any other argument
	Doc        []string    // the comment block above the constant's group
	Group      int         // constants of one group share a number
	Line       int
}

// Family is a kernel family: one Go stub, a name pattern and its instances.
type Family struct {
	Go      string // Go name, "AttnFused"
	Pattern string // "attn_fused_{si}_{sk}"
	List    string // the shared parameter list it uses, or ""
	Params  []Param
	Axes    []Axis
	Insts   []map[string]string // axis → value
	Line    int
}

// Axis is one instantiation parameter of a family.
type Axis struct {
	Name string
	Type AxisType
}

// AxisType is how a stub takes an axis.
type AxisType int

const (
	AxisString AxisType = iota
	AxisInt
	AxisDType
)

// Struct is a row of int32 fields shared by Go and the kernels.
type Struct struct {
	Name, Prefix string
	Fields       []string
	Stride       int
}

// dtypeNames are the kernel-name spellings of tensor dtypes.
var dtypeNames = map[string]string{"f32": "F32", "bf16": "BF16", "f16": "F16", "fp8": "FP8E4M3"}

// Names is every kernel name the family declares, in instance order.
func (f *Family) Names() []string {
	out := make([]string, len(f.Insts))
	for i, in := range f.Insts {
		out[i] = f.name(in)
	}
	return out
}

func (f *Family) name(in map[string]string) string {
	s := f.Pattern
	for _, a := range f.Axes {
		s = strings.ReplaceAll(s, "{"+a.Name+"}", in[a.Name])
	}
	return s
}

// Names is every kernel name d declares.
func (d *Decl) Names() []string {
	var out []string
	for _, f := range d.Families {
		out = append(out, f.Names()...)
	}
	return out
}

// Parse reads a declaration.
func Parse(text string) (*Decl, error) {
	d := &Decl{Lists: map[string][]Param{}, Bases: map[string]string{}}
	lines := strings.Split(text, "\n")
	var fam *Family
	var st *Struct
	var doc []string // the comment block just read
	group, lastConst := 0, -2
	for n := 0; n < len(lines); n++ {
		line := lines[n]
		if t := strings.TrimSpace(line); strings.HasPrefix(t, "#") {
			doc = append(doc, strings.TrimSpace(t[1:]))
			continue
		} else if t == "" {
			doc = nil
			continue
		}
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		if strings.TrimSpace(line) == "" {
			continue
		}
		fail := func(format string, args ...any) error {
			return fmt.Errorf("line %d: %s", n+1, fmt.Sprintf(format, args...))
		}
		indented := line[0] == ' ' || line[0] == '\t'
		line = strings.TrimSpace(line)
		if indented {
			switch {
			case fam != nil:
				in, err := instances(line)
				if err != nil {
					return nil, fail("%v", err)
				}
				fam.Insts = append(fam.Insts, in...)
			case st != nil:
				if !isName(line) {
					return nil, fail("field %q is not a name", line)
				}
				st.Fields = append(st.Fields, line)
			default:
				return nil, fail("an indented line belongs under a kernel or struct")
			}
			continue
		}
		fam, st = nil, nil
		lineDoc := doc
		doc = nil
		// A parameter list may run over several lines.
		for strings.Count(line, "(") > strings.Count(line, ")") && n+1 < len(lines) {
			n++
			line += " " + strings.TrimSpace(lines[n])
		}
		word, rest, _ := strings.Cut(line, " ")
		rest = strings.TrimSpace(rest)
		switch word {
		case "package":
			d.Package = rest
		case "import":
			d.Import = rest
		case "receiver":
			d.Receiver = rest
		case "stream":
			d.Stream = rest
		case "call":
			d.Call = rest
		case "header":
			d.Header = rest
		case "params":
			name, ps, err := signature(rest)
			if err != nil {
				return nil, fail("%v", err)
			}
			if len(ps) > 0 && strings.HasPrefix(ps[0].Name, "@") {
				base := ps[0].Name[1:]
				if d.Lists[base] == nil {
					return nil, fail("no parameter list %q", base)
				}
				d.Bases[name] = base
				ps = append(slices.Clone(d.Lists[base]), ps[1:]...)
			}
			d.Lists[name] = ps
		case "kernel":
			goName, sig, ok := strings.Cut(rest, " ")
			if !ok || !isName(goName) {
				return nil, fail("want: kernel GoName pattern(params)")
			}
			pattern, ps, err := signature(strings.TrimSpace(sig))
			if err != nil {
				return nil, fail("%v", err)
			}
			fam = &Family{Go: goName, Pattern: pattern, Params: ps, Line: n + 1}
			if len(ps) > 1 && strings.HasPrefix(ps[0].Name, "@") {
				return nil, fail("a kernel takes a list alone: declare params that extend it")
			}
			if len(ps) == 1 && strings.HasPrefix(ps[0].Name, "@") {
				fam.List = ps[0].Name[1:]
				if fam.Params = d.Lists[fam.List]; fam.Params == nil {
					return nil, fail("no parameter list %q", fam.List)
				}
			}
			d.Families = append(d.Families, fam)
		case "struct":
			f := strings.Fields(rest)
			if len(f) != 3 {
				return nil, fail("want: struct name PREFIX_ stride")
			}
			stride, err := strconv.Atoi(f[2])
			if err != nil {
				return nil, fail("stride: %v", err)
			}
			st = &Struct{Name: f[0], Prefix: f[1], Stride: stride}
			d.Structs = append(d.Structs, st)
		case "const":
			c, err := d.parseConst(rest)
			if err != nil {
				return nil, fail("%v", err)
			}
			if lastConst != n-1 || lineDoc != nil {
				group++
			}
			c.Group, c.Doc, c.Line = group, lineDoc, n+1
			lastConst = n
			d.Consts = append(d.Consts, c)
		default:
			return nil, fail("unknown word %q", word)
		}
	}
	return d, d.validate()
}

// parseConst reads "GoName [GoType] C_NAME = value" or
// "GoName C_NAME(arg) = v:r ... default".
func (d *Decl) parseConst(s string) (*Const, error) {
	lhs, rhs, ok := strings.Cut(s, "=")
	f := strings.Fields(lhs)
	if !ok || len(f) < 2 || len(f) > 3 {
		return nil, fmt.Errorf("want: const GoName [GoType] C_NAME = value")
	}
	c := &Const{Go: f[0], C: f[len(f)-1]}
	if len(f) == 3 {
		c.GoType = f[1]
	}
	if open := strings.IndexByte(c.C, '('); open >= 0 {
		if !strings.HasSuffix(c.C, ")") || c.GoType != "" {
			return nil, fmt.Errorf("want: const goName C_NAME(arg) = v:r ... default")
		}
		c.C, c.Arg = c.C[:open], c.C[open+1:len(c.C)-1]
		if !isName(c.Arg) {
			return nil, fmt.Errorf("argument %q is not a name", c.Arg)
		}
	}
	if !isName(c.Go) || !isName(c.C) || c.GoType != "" && !isName(c.GoType) {
		return nil, fmt.Errorf("want: const GoName [GoType] C_NAME = value")
	}
	for _, o := range d.Consts {
		if o.Go == c.Go || o.C == c.C {
			return nil, fmt.Errorf("constant %s (%s) declared twice", c.Go, c.C)
		}
	}
	vals := strings.Fields(rhs)
	if len(vals) == 0 {
		return nil, fmt.Errorf("constant %s has no value", c.Go)
	}
	if c.Arg != "" {
		for _, v := range vals[:len(vals)-1] {
			a, r, ok := strings.Cut(v, ":")
			if !ok || !isInt(a) || !isInt(r) {
				return nil, fmt.Errorf("case %q of %s: want value:result, both integers", v, c.C)
			}
			c.Cases = append(c.Cases, [2]string{a, r})
		}
		if c.Default = vals[len(vals)-1]; !isInt(c.Default) {
			return nil, fmt.Errorf("the default of %s, %q, is not an integer", c.C, c.Default)
		}
		return c, nil
	}
	toks, err := constTokens(rhs)
	if err != nil {
		return nil, fmt.Errorf("constant %s: %v", c.C, err)
	}
	for _, t := range toks {
		if isIdentStart(t[0]) && d.constNamed(t) == nil {
			return nil, fmt.Errorf("constant %s: %s is no constant declared above it", c.C, t)
		}
	}
	c.Expr = toks
	return c, nil
}

// constNamed is the object-like constant whose C name is name, or nil.
func (d *Decl) constNamed(name string) *Const {
	for _, c := range d.Consts {
		if c.C == name && c.Arg == "" {
			return c
		}
	}
	return nil
}

// constTokens splits a constant's value into integers, names and the
// operators that C and Go spell alike.
func constTokens(s string) ([]string, error) {
	var out []string
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			i++
		case isIdentChar(c):
			j := i
			for j < len(s) && isIdentChar(s[j]) {
				j++
			}
			if t := s[i:j]; !isIdentStart(t[0]) && !isInt(t) {
				return nil, fmt.Errorf("%q is neither an integer nor a name", t)
			}
			out = append(out, s[i:j])
			i = j
		case strings.HasPrefix(s[i:], "<<") || strings.HasPrefix(s[i:], ">>"):
			out = append(out, s[i:i+2])
			i += 2
		case strings.IndexByte("+-*/%()", c) >= 0:
			out = append(out, s[i:i+1])
			i++
		default:
			return nil, fmt.Errorf("unexpected %q", c)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no value")
	}
	return out, nil
}

func isInt(s string) bool {
	_, err := strconv.Atoi(s)
	return err == nil
}

// ParseFile reads the declaration at path.
func ParseFile(path string) (*Decl, error) {
	text, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	d, err := Parse(string(text))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return d, nil
}

// signature reads name(p kind, ...) or name(@list).
func signature(s string) (string, []Param, error) {
	open := strings.IndexByte(s, '(')
	if open < 0 || !strings.HasSuffix(s, ")") {
		return "", nil, fmt.Errorf("want name(params) in %q", s)
	}
	name, body := s[:open], strings.TrimSpace(s[open+1:len(s)-1])
	var ps []Param
	for i, p := range strings.Split(body, ",") {
		if t := strings.TrimSpace(p); i == 0 && strings.HasPrefix(t, "@") {
			ps = append(ps, Param{Name: t}) // a list, expanded by the caller
			continue
		}
		f := strings.Fields(p)
		if len(f) != 2 || !isName(f[0]) {
			return "", nil, fmt.Errorf("parameter %q: want name kind", strings.TrimSpace(p))
		}
		k := Kind(f[1])
		if !slices.Contains([]Kind{Ptr, I32, I64, U64, F32, TMap}, k) {
			return "", nil, fmt.Errorf("parameter %s: unknown kind %q", f[0], f[1])
		}
		ps = append(ps, Param{Name: f[0], Kind: k})
	}
	return name, ps, nil
}

// instances expands "a=x|y b=z" into its cross product.
func instances(line string) ([]map[string]string, error) {
	out := []map[string]string{{}}
	for _, f := range strings.Fields(line) {
		axis, vals, ok := strings.Cut(f, "=")
		if !ok || !isName(axis) {
			return nil, fmt.Errorf("want axis=value|value, got %q", f)
		}
		var next []map[string]string
		for _, in := range out {
			for _, v := range strings.Split(vals, "|") {
				m := map[string]string{axis: v}
				for k, x := range in {
					m[k] = x
				}
				next = append(next, m)
			}
		}
		out = next
	}
	return out, nil
}

func (d *Decl) validate() error {
	if d.Package == "" || d.Receiver == "" || d.Call == "" {
		return fmt.Errorf("a declaration needs package, receiver and call")
	}
	seen := map[string]string{}
	goNames := map[string]bool{}
	for _, f := range d.Families {
		if goNames[f.Go] {
			return fmt.Errorf("line %d: two families named %s", f.Line, f.Go)
		}
		goNames[f.Go] = true
		// Axes in the order the pattern names them.
		rest := f.Pattern
		for {
			i := strings.IndexByte(rest, '{')
			if i < 0 {
				break
			}
			j := strings.IndexByte(rest[i:], '}')
			if j < 0 {
				return fmt.Errorf("line %d: unclosed { in %s", f.Line, f.Pattern)
			}
			f.Axes = append(f.Axes, Axis{Name: rest[i+1 : i+j]})
			rest = rest[i+j+1:]
		}
		if len(f.Insts) == 0 {
			if len(f.Axes) > 0 {
				return fmt.Errorf("line %d: %s has axes but no instances", f.Line, f.Pattern)
			}
			f.Insts = []map[string]string{{}}
		}
		for i := range f.Axes {
			a := &f.Axes[i]
			ints, dts := true, true
			for _, in := range f.Insts {
				v, ok := in[a.Name]
				if !ok {
					return fmt.Errorf("line %d: an instance of %s has no %s", f.Line, f.Pattern, a.Name)
				}
				if _, err := strconv.Atoi(v); err != nil {
					ints = false
				}
				if _, ok := dtypeNames[v]; !ok {
					dts = false
				}
			}
			switch {
			case ints:
				a.Type = AxisInt
			case dts:
				a.Type = AxisDType
			}
		}
		for _, in := range f.Insts {
			if len(in) != len(f.Axes) {
				return fmt.Errorf("line %d: instance %v does not match the axes of %s", f.Line, in, f.Pattern)
			}
			name := f.name(in)
			if prev, dup := seen[name]; dup {
				return fmt.Errorf("line %d: kernel %s declared twice (%s and %s)", f.Line, name, prev, f.Go)
			}
			seen[name] = f.Go
		}
	}
	for _, s := range d.Structs {
		if len(s.Fields) == 0 || len(s.Fields) > s.Stride {
			return fmt.Errorf("struct %s: %d fields in a row of %d", s.Name, len(s.Fields), s.Stride)
		}
	}
	if (len(d.Structs) > 0 || len(d.Consts) > 0) && d.Header == "" {
		return fmt.Errorf("structs and constants need a header to be written to")
	}
	return nil
}

func isName(s string) bool {
	if s == "" || !isIdentStart(s[0]) {
		return false
	}
	for i := range len(s) {
		if !isIdentChar(s[i]) {
			return false
		}
	}
	return true
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
