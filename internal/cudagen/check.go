package cudagen

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Arch is what Check preprocesses the sources for: the newest architecture
// gosling builds, so that every kernel an architecture may define is seen.
var Arch = map[string]string{"__CUDA_ARCH__": "900", "__CUDA_ARCH_FEAT_SM90_ALL": "1", "__CUDACC__": "1", "__CUDACC_RTC__": "1"}

// Check compares d with the kernels the sources define (files: name →
// text, each compiled after prelude; headers: what they may #include):
// every declared kernel must be defined with the declared parameters, in
// order, by name and kind, every defined kernel must be declared, and
// every use of a struct's field prefix must name a declared field.
func (d *Decl) Check(prelude string, files, headers map[string]string) error {
	full := map[string]string{}
	for n, src := range files {
		full[n] = prelude + "\n" + src
	}
	// Each file expanded once, for all the checks below.
	expanded := map[string][]token{}
	var found []Kernel
	for _, name := range sortedKeys(full) {
		ts, err := Preprocess(name, full[name], Arch, headers)
		if err != nil {
			return err
		}
		expanded[name] = ts
		ks, err := scanKernels(ts)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		for i := range ks {
			ks[i].File = name
		}
		found = append(found, ks...)
	}
	defined := map[string]Kernel{}
	var errs []error
	for _, k := range found {
		if prev, dup := defined[k.Name]; dup {
			errs = append(errs, fmt.Errorf("kernel %s is defined in %s and %s", k.Name, prev.File, k.File))
		}
		defined[k.Name] = k
	}
	declared := map[string]bool{}
	for _, f := range d.Families {
		for _, name := range f.Names() {
			declared[name] = true
			k, ok := defined[name]
			if !ok {
				errs = append(errs, fmt.Errorf("kernel %s (%s, declared line %d) is defined by no source", name, f.Go, f.Line))
				continue
			}
			if err := sameParams(f.Params, k.Params); err != nil {
				errs = append(errs, fmt.Errorf("kernel %s (%s): %w", name, k.File, err))
			}
		}
	}
	for _, k := range found {
		if !declared[k.Name] {
			errs = append(errs, fmt.Errorf("kernel %s (%s) is not declared", k.Name, k.File))
		}
	}
	errs = append(errs, d.checkFields(expanded), d.checkConsts(full, headers, expanded))
	return errors.Join(errs...)
}

// handDefine matches a #define's name.
var handDefine = regexp.MustCompile(`(?m)^[ \t]*#[ \t]*define[ \t]+([A-Za-z_][A-Za-z0-9_]*)`)

// checkConsts fails on a source or header (other than the generated one)
// that #defines a declared constant itself, and on a name left after
// expansion that carries a declared constant's prefix (MMA_ of MMA_BM):
// a constant renamed in the declaration but not in the sources.
func (d *Decl) checkConsts(files, headers map[string]string, expanded map[string][]token) error {
	if len(d.Consts) == 0 {
		return nil
	}
	declared := map[string]bool{}
	prefixes := map[string]bool{}
	for _, c := range d.Consts {
		declared[c.C] = true
		if i := strings.IndexByte(c.C, '_'); i > 0 {
			prefixes[c.C[:i+1]] = true
		}
	}
	var errs []error
	texts := map[string]string{}
	for n, t := range files {
		texts[n] = t
	}
	for n, t := range headers {
		if n != d.Header {
			texts[n] = t
		}
	}
	for _, name := range sortedKeys(texts) {
		for _, m := range handDefine.FindAllStringSubmatch(texts[name], -1) {
			if declared[m[1]] {
				errs = append(errs, fmt.Errorf("%s defines %s, a constant declared for %s: drop the #define", name, m[1], d.Header))
			}
		}
	}
	for _, name := range sortedKeys(expanded) {
		seen := map[string]bool{}
		for _, t := range expanded[name] {
			if t.kind != tIdent || seen[t.text] {
				continue
			}
			if i := strings.IndexByte(t.text, '_'); i > 0 && prefixes[t.text[:i+1]] {
				seen[t.text] = true
				errs = append(errs, fmt.Errorf("%s: %s is not defined, and its prefix is that of constants declared for %s", name, t.text, d.Header))
			}
		}
	}
	return errors.Join(errs...)
}

func sameParams(decl, src []Param) error {
	for i := range max(len(decl), len(src)) {
		switch {
		case i >= len(decl):
			return fmt.Errorf("parameter %d (%s %s) is not declared", i, src[i].Name, src[i].Kind)
		case i >= len(src):
			return fmt.Errorf("declared parameter %d (%s %s) is not in the source", i, decl[i].Name, decl[i].Kind)
		case decl[i] != src[i]:
			return fmt.Errorf("parameter %d is %s %s in the source, %s %s in the declaration", i, src[i].Name, src[i].Kind, decl[i].Name, decl[i].Kind)
		}
	}
	return nil
}

// checkFields finds, in the expanded sources, names that carry a struct's
// prefix but are no macro it defines (a field renamed on one side only).
func (d *Decl) checkFields(expanded map[string][]token) error {
	if len(d.Structs) == 0 {
		return nil
	}
	var errs []error
	for _, name := range sortedKeys(expanded) {
		seen := map[string]bool{}
		for _, t := range expanded[name] {
			for _, s := range d.Structs {
				if t.kind == tIdent && strings.HasPrefix(t.text, s.Prefix) && !seen[t.text] {
					seen[t.text] = true
					errs = append(errs, fmt.Errorf("%s: %s is no field of %s (%s)", name, t.text, s.Name, d.Header))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// CheckPackage is the test every package with declared kernels runs, in
// its directory: the generated files are what the declaration at declPath
// renders, and the declaration matches sources (name → the text NVRTC
// compiles) with headers (name → text, what they may #include).
func CheckPackage(declPath string, sources, headers map[string]string) error {
	text, err := os.ReadFile(declPath)
	if err != nil {
		return err
	}
	g, err := Generate(declPath, string(text))
	if err != nil {
		return err
	}
	var errs []error
	stale := func(file string, want []byte) {
		got, err := os.ReadFile(file)
		if err != nil || !bytes.Equal(got, want) {
			errs = append(errs, fmt.Errorf("%s is not what %s generates: run go generate", file, declPath))
		}
	}
	stale(GoFile, g.Go)
	if g.Header != nil {
		stale(filepath.Join(filepath.Dir(declPath), g.Decl.Header), g.Header)
	}
	if len(sources) == 0 {
		errs = append(errs, fmt.Errorf("no kernel sources to check %s against", declPath))
	}
	errs = append(errs, g.Decl.Check("", sources, headers))
	return errors.Join(errs...)
}
