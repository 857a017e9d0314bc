package cudagen

import (
	"fmt"
	"strings"
)

// Kind is a kernel parameter's ABI class: how the launch packs it.
type Kind string

const (
	Ptr Kind = "ptr" // any T*
	I32 Kind = "i32" // int
	I64 Kind = "i64" // i64 (long long)
	U64 Kind = "u64" // unsigned long long
	F32 Kind = "f32" // float
	// TMap is a CUtensorMap passed by value (`const __grid_constant__
	// CUtensorMap`, the sources' own 128-byte, 64-byte aligned struct).
	TMap Kind = "tmap"
)

// Param is one kernel parameter.
type Param struct {
	Name string
	Kind Kind
}

// Kernel is an extern "C" __global__ function found in a source.
type Kernel struct {
	Name   string
	Params []Param
	File   string
}

// SourceKernels preprocesses each file (name → text) for defines and
// returns the extern "C" __global__ kernels it defines.
func SourceKernels(files map[string]string, defines map[string]string, headers map[string]string) ([]Kernel, error) {
	var out []Kernel
	for _, name := range sortedKeys(files) {
		ts, err := Preprocess(name, files[name], defines, headers)
		if err != nil {
			return nil, err
		}
		ks, err := scanKernels(ts)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		for i := range ks {
			ks[i].File = name
		}
		out = append(out, ks...)
	}
	return out, nil
}

// scanKernels finds extern "C" [qualifiers] __global__ [qualifiers] void
// [__launch_bounds__(...)] name(params) in a preprocessed token stream.
func scanKernels(ts []token) ([]Kernel, error) {
	var out []Kernel
	for i := 0; i+1 < len(ts); i++ {
		if ts[i].text != "extern" || ts[i+1].text != `"C"` {
			continue
		}
		j, global := i+2, false
		for ; j < len(ts) && ts[j].kind == tIdent; j++ {
			if ts[j].text == "__global__" {
				global = true
			}
			if ts[j].text == "__launch_bounds__" && j+1 < len(ts) && ts[j+1].text == "(" {
				end, err := closing(ts, j+1)
				if err != nil {
					return nil, err
				}
				j = end
			}
		}
		// ts[j] is "(": the last identifier before it is the name.
		if !global || j >= len(ts) || ts[j].text != "(" || ts[j-1].kind != tIdent {
			continue
		}
		end, err := closing(ts, j)
		if err != nil {
			return nil, err
		}
		k := Kernel{Name: ts[j-1].text}
		for _, p := range splitTop(ts[j+1 : end]) {
			prm, err := param(p)
			if err != nil {
				return nil, fmt.Errorf("kernel %s: %w", k.Name, err)
			}
			k.Params = append(k.Params, prm)
		}
		out = append(out, k)
		i = end
	}
	return out, nil
}

// closing is the index of the ")" that closes the "(" at ts[open].
func closing(ts []token, open int) (int, error) {
	depth := 0
	for i := open; i < len(ts); i++ {
		switch ts[i].text {
		case "(":
			depth++
		case ")":
			depth--
			if depth == 0 {
				return i, nil
			}
		}
	}
	return 0, fmt.Errorf("unbalanced parentheses after %q", ts[max(open-1, 0)].text)
}

func splitTop(ts []token) [][]token {
	var out [][]token
	var cur []token
	depth := 0
	for _, t := range ts {
		switch t.text {
		case "(", "<", "[":
			depth++
		case ")", ">", "]":
			depth--
		case ",":
			if depth == 0 {
				out = append(out, cur)
				cur = nil
				continue
			}
		}
		cur = append(cur, t)
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// param classifies one parameter declaration by its ABI.
func param(ts []token) (Param, error) {
	if len(ts) < 2 || ts[len(ts)-1].kind != tIdent {
		return Param{}, fmt.Errorf("cannot read parameter %q", joinTokens(ts))
	}
	p := Param{Name: ts[len(ts)-1].text}
	var typ []string
	for _, t := range ts[:len(ts)-1] {
		switch t.text {
		case "*":
			p.Kind = Ptr
		case "const", "volatile", "__restrict__", "__restrict", "__grid_constant__":
		default:
			typ = append(typ, t.text)
		}
	}
	if p.Kind == Ptr {
		return p, nil
	}
	switch strings.Join(typ, " ") {
	case "int", "signed", "signed int", "int32_t":
		p.Kind = I32
	case "i64", "long long", "long long int", "int64_t":
		p.Kind = I64
	case "unsigned long long", "unsigned long long int", "u64", "uint64_t":
		p.Kind = U64
	case "float":
		p.Kind = F32
	case "CUtensorMap":
		p.Kind = TMap
	default:
		return Param{}, fmt.Errorf("parameter %s: no launch packing for type %q", p.Name, strings.Join(typ, " "))
	}
	return p, nil
}

func joinTokens(ts []token) string {
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = t.text
	}
	return strings.Join(s, " ")
}
