//go:generate go run ../../internal/cudagen/gen kernels/kernels.decl

package cuda

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"time"
)

//go:embed kernels/*.cu kernels/*.cuh
var kernelFS embed.FS

// kernelPrelude is prepended to every kernel file, of every package.
const kernelPrelude = "kernels/common.cuh"

func init() { RegisterKernels("device/cuda", kernelFS, "kernels") }

// nvrtcOptions are the compile flags besides the architecture. No fast-math:
// the kernels are checked against float32 CPU references.
var nvrtcOptions = []string{"--std=c++17", "-default-device", "--extra-device-vectorization"}

// nvrtcDefines are the -D flags of GOSLING_NVRTC_DEFINES (space-separated;
// other words are ignored), so that a kernel's tuning constants (#ifndef'd
// in its source) can be swept on a GPU without a rebuild.
var nvrtcDefines = parseDefines(os.Getenv("GOSLING_NVRTC_DEFINES"))

func parseDefines(env string) []string {
	var ds []string
	for _, w := range strings.Fields(env) {
		if strings.HasPrefix(w, "-D") && len(w) > 2 {
			ds = append(ds, w)
		}
	}
	return ds
}

// compileOptions is nvrtcOptions and the defines that name a macro the
// source mentions (only those modules recompile; the options are part of
// the cache key).
func compileOptions(text []byte, defines []string) []string {
	opts := nvrtcOptions
	for _, d := range defines {
		name, _, _ := strings.Cut(d[2:], "=")
		if bytes.Contains(text, []byte(name)) {
			opts = append(slices.Clip(opts), d)
		}
	}
	return opts
}

// KernelSource is one compilation unit: the prelude plus one .cu file, and
// the headers it may #include (the .cuh files beside it, by base name).
type KernelSource struct {
	Owner   string // the package that registered it, "device/cuda"
	Name    string // file name, "norm.cu"
	Source  []byte
	Headers []Header
}

// Header is a file a kernel source may #include "Name".
type Header struct {
	Name   string
	Source []byte
}

// Options are the NVRTC options s compiles with in this process (the
// GOSLING_NVRTC_DEFINES that name one of its macros included).
func (s KernelSource) Options() []string { return compileOptions(s.cacheText(), nvrtcDefines) }

// cacheText is everything of s that changes its image: the source and
// each header, length-prefixed.
func (s KernelSource) cacheText() []byte {
	if len(s.Headers) == 0 {
		return s.Source
	}
	out := append([]byte(nil), s.Source...)
	for _, h := range s.Headers {
		out = fmt.Appendf(out, "\x00%d:%s%d:", len(h.Name), h.Name, len(h.Source))
		out = append(out, h.Source...)
	}
	return out
}

// kernelSet is one package's embedded kernel files: the .cu files of dir
// in fsys, with the .cuh files there as their headers.
type kernelSet struct {
	owner string
	fsys  fs.FS
	dir   string
}

var (
	kernelSetsMu sync.Mutex
	kernelSets   []kernelSet
)

// RegisterKernels adds a package's embedded kernels (the .cu files of dir
// in fsys, each compiled after device/cuda's prelude, with the .cuh files
// of dir available to #include) to what LoadKernels compiles. A package
// that launches kernels of its own calls it from an init function, so the
// kernels are loaded exactly when their launchers are linked.
func RegisterKernels(owner string, fsys fs.FS, dir string) {
	kernelSetsMu.Lock()
	defer kernelSetsMu.Unlock()
	kernelSets = append(kernelSets, kernelSet{owner, fsys, dir})
}

// KernelSources lists the registered kernel files, sorted by name, each
// with the prelude prepended.
func KernelSources() ([]KernelSource, error) {
	prelude, err := kernelFS.ReadFile(kernelPrelude)
	if err != nil {
		return nil, err
	}
	kernelSetsMu.Lock()
	sets := slices.Clone(kernelSets)
	kernelSetsMu.Unlock()
	var out []KernelSource
	owners := map[string]string{}
	for _, set := range sets {
		files, err := fs.Glob(set.fsys, path.Join(set.dir, "*.cu"))
		if err != nil {
			return nil, err
		}
		heads, err := fs.Glob(set.fsys, path.Join(set.dir, "*.cuh"))
		if err != nil {
			return nil, err
		}
		var headers []Header
		for _, h := range heads {
			if set.fsys == fs.FS(kernelFS) && h == kernelPrelude { // prepended, not included
				continue
			}
			text, err := fs.ReadFile(set.fsys, h)
			if err != nil {
				return nil, err
			}
			headers = append(headers, Header{Name: path.Base(h), Source: text})
		}
		for _, e := range files {
			body, err := fs.ReadFile(set.fsys, e)
			if err != nil {
				return nil, err
			}
			name := path.Base(e)
			if prev, dup := owners[name]; dup {
				return nil, fmt.Errorf("cuda: kernel file %s registered by %s and %s", name, prev, set.owner)
			}
			owners[name] = set.owner
			src := make([]byte, 0, len(prelude)+len(body)+64)
			src = append(src, prelude...)
			src = append(src, "\n#line 1 \""+name+"\"\n"...)
			src = append(src, body...)
			out = append(out, KernelSource{Owner: set.owner, Name: name, Source: src, Headers: headers})
		}
	}
	slices.SortFunc(out, func(a, b KernelSource) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Kernels is the compiled kernel set loaded on one device.
type Kernels struct {
	dev     *Device
	modules []*Module
	mu      sync.Mutex
	fns     map[string]Function
	// Stats of the last load, for the start-up log.
	Compiled, CacheHits int
	LoadTime            time.Duration

	gemvBlocksPerSM int // 0: gemvBlocksPerSM (tests and benchmarks tune it)
	qintBlocksPerSM int // 0: qgemvIntBlocksPerSM (benchmarks tune it)
}

// LoadKernels compiles (or takes from cache) every embedded kernel file for
// dev's architecture and loads them. Files compile in parallel: NVRTC needs
// no context, and a cold start compiles them all.
func LoadKernels(dev *Device, nv *NVRTC, cache *KernelCache) (*Kernels, error) {
	start := time.Now()
	target, err := nv.TargetFor(dev.Info.Arch())
	if err != nil {
		return nil, err
	}
	srcs, err := KernelSources()
	if err != nil {
		return nil, err
	}
	images, hit, err := compileAll(nv, cache, target, srcs)
	if err != nil {
		return nil, err
	}
	k := &Kernels{dev: dev, fns: map[string]Function{}}
	for i, img := range images {
		m, err := dev.LoadModule(img)
		if err != nil {
			k.Unload()
			return nil, fmt.Errorf("load %s: %w", srcs[i].Name, err)
		}
		k.modules = append(k.modules, m)
		if hit[i] {
			k.CacheHits++
		} else {
			k.Compiled++
		}
	}
	k.LoadTime = time.Since(start)
	return k, nil
}

// compileAll returns every source's image for target, from cache where it
// holds one (hit), else compiled now and stored there; the sources compile
// in parallel.
func compileAll(nv *NVRTC, cache *KernelCache, target Target, srcs []KernelSource) (images [][]byte, hit []bool, err error) {
	images = make([][]byte, len(srcs))
	hit = make([]bool, len(srcs))
	errs := make([]error, len(srcs))
	var wg sync.WaitGroup
	for i, src := range srcs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			text := src.cacheText()
			opts := compileOptions(text, nvrtcDefines)
			key := CacheKey(text, target, nv.Version(), opts)
			if img, ok := cache.Get(key, target); ok {
				images[i], hit[i] = img, true
				return
			}
			img, _, err := nv.Compile(src.Name, src.Source, src.Headers, target, opts)
			if err != nil {
				errs[i] = err
				return
			}
			images[i] = img
			errs[i] = cache.Put(key, target, img)
		}()
	}
	wg.Wait()
	return images, hit, errors.Join(errs...)
}

// Precompile fills cache with every registered kernel source compiled for
// target (GOSLING_NVRTC_DEFINES applied), so that a GPU machine whose
// NVRTC has the same version loads them without compiling. It returns how
// many sources it compiled (the others were cached already).
func Precompile(nv *NVRTC, cache *KernelCache, target Target) (int, error) {
	srcs, err := KernelSources()
	if err != nil {
		return 0, err
	}
	_, hit, err := compileAll(nv, cache, target, srcs)
	n := 0
	for _, h := range hit {
		if !h {
			n++
		}
	}
	return n, err
}

// Unload releases the modules.
func (k *Kernels) Unload() error {
	var errs []error
	for _, m := range k.modules {
		errs = append(errs, m.Unload())
	}
	k.modules = nil
	return errors.Join(errs...)
}

// Function finds a kernel by name in whichever module holds it. The lock
// is not held across the driver lookups, which run on the device thread.
func (k *Kernels) Function(name string) (Function, error) {
	k.mu.Lock()
	f, ok := k.fns[name]
	k.mu.Unlock()
	if ok {
		return f, nil
	}
	for _, m := range k.modules {
		if f, err := m.Function(name); err == nil {
			k.mu.Lock()
			k.fns[name] = f
			k.mu.Unlock()
			return f, nil
		}
	}
	return Function{}, fmt.Errorf("cuda: no kernel %q (unsupported dtype combination?)", name)
}
