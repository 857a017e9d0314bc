package cuda

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
	"sync"
	"time"
)

//go:embed kernels/*.cu kernels/*.cuh
var kernelFS embed.FS

// kernelPrelude is prepended to every kernel file.
const kernelPrelude = "kernels/common.cuh"

// nvrtcOptions are the compile flags besides the architecture. No fast-math:
// the kernels are checked against float32 CPU references.
var nvrtcOptions = []string{"--std=c++17", "-default-device", "--extra-device-vectorization"}

// KernelSource is one compilation unit: the prelude plus one .cu file.
type KernelSource struct {
	Name   string // file name, "norm.cu"
	Source []byte
}

// KernelSources lists the embedded kernel files, sorted, each with the
// prelude prepended.
func KernelSources() ([]KernelSource, error) {
	prelude, err := kernelFS.ReadFile(kernelPrelude)
	if err != nil {
		return nil, err
	}
	entries, err := fs.Glob(kernelFS, "kernels/*.cu")
	if err != nil {
		return nil, err
	}
	sort.Strings(entries)
	var out []KernelSource
	for _, e := range entries {
		body, err := kernelFS.ReadFile(e)
		if err != nil {
			return nil, err
		}
		name := path.Base(e)
		src := make([]byte, 0, len(prelude)+len(body)+64)
		src = append(src, prelude...)
		src = append(src, "\n#line 1 \""+name+"\"\n"...)
		src = append(src, body...)
		out = append(out, KernelSource{Name: name, Source: src})
	}
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
	images := make([][]byte, len(srcs))
	hit := make([]bool, len(srcs))
	errs := make([]error, len(srcs))
	var wg sync.WaitGroup
	for i, src := range srcs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := CacheKey(src.Source, target, nv.Version(), nvrtcOptions)
			if img, ok := cache.Get(key, target); ok {
				images[i], hit[i] = img, true
				return
			}
			img, _, err := nv.Compile(src.Name, src.Source, target, nvrtcOptions)
			if err != nil {
				errs[i] = err
				return
			}
			images[i] = img
			if err := cache.Put(key, target, img); err != nil {
				errs[i] = err
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
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

// dtypeSuffix names a dtype the way kernel names do.
func dtypeSuffix(dt DType) string {
	switch dt {
	case F32:
		return "f32"
	case BF16:
		return "bf16"
	case F16:
		return "f16"
	}
	return strings.ToLower(dt.String())
}
