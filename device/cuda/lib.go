package cuda

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// The shared libraries this package opens. The CUDA 13 sonames are asked for
// exactly: a binary built against one major version's ABI (enum values,
// struct sizes) must not silently pick up another.
const (
	LibCUDA     = "libcuda.so.1"
	LibNVRTC    = "libnvrtc.so.13"
	LibCUBLASLt = "libcublasLt.so.13"
	LibCUBLAS   = "libcublas.so.13"
	// LibNCCL is NCCL's soname, stable across its 2.x releases.
	LibNCCL = "libnccl.so.2"
)

// searchEnv is what library search reads from the process, injectable so the
// search order is testable on machines without CUDA.
type searchEnv struct {
	Getenv func(string) string
	Glob   func(pattern string) ([]string, error)
	Home   string
	GOARCH string
}

func processSearchEnv() searchEnv {
	home, _ := os.UserHomeDir()
	return searchEnv{Getenv: os.Getenv, Glob: filepath.Glob, Home: home, GOARCH: runtime.GOARCH}
}

// multiarchDir is Debian's per-architecture library folder.
func multiarchDir(goarch string) string {
	switch goarch {
	case "arm64":
		return "/usr/lib/aarch64-linux-gnu"
	default:
		return "/usr/lib/x86_64-linux-gnu"
	}
}

// libraryDirs lists the folders searched after the dynamic loader's own path,
// in order: the toolkit named by the environment, the default toolkit, the
// system and container-driver folders, then the lib folders of NVIDIA's Python
// wheels (site-packages/nvidia/*/lib), which is where pip-installed PyTorch
// keeps cuBLAS and NVRTC on machines with no toolkit.
func libraryDirs(env searchEnv) []string {
	var dirs []string
	seen := map[string]bool{}
	add := func(d string) {
		d = filepath.Clean(d)
		if d == "." || seen[d] {
			return
		}
		seen[d] = true
		dirs = append(dirs, d)
	}
	for _, v := range []string{"CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"} {
		if root := env.Getenv(v); root != "" {
			add(filepath.Join(root, "lib64"))
			add(filepath.Join(root, "lib"))
		}
	}
	add("/usr/local/cuda/lib64")
	add("/usr/local/nvidia/lib64") // where container runtimes mount the driver
	add(multiarchDir(env.GOARCH))
	add("/usr/lib64")
	add("/usr/lib/wsl/lib") // the driver under WSL2
	for _, sp := range sitePackages(env) {
		matches, _ := env.Glob(filepath.Join(sp, "nvidia", "*", "lib"))
		for _, m := range matches {
			add(m)
		}
	}
	return dirs
}

// sitePackages guesses the Python package folders worth looking in: the
// active virtualenv or conda prefix, the prefix of every python on PATH (a
// venv's bin/ sits beside its lib/), the user's and the system's.
func sitePackages(env searchEnv) []string {
	var prefixes []string
	for _, v := range []string{"VIRTUAL_ENV", "CONDA_PREFIX"} {
		if p := env.Getenv(v); p != "" {
			prefixes = append(prefixes, p)
		}
	}
	for _, d := range filepath.SplitList(env.Getenv("PATH")) {
		if filepath.Base(d) == "bin" {
			prefixes = append(prefixes, filepath.Dir(d))
		}
	}
	if env.Home != "" {
		prefixes = append(prefixes, filepath.Join(env.Home, ".local"))
	}
	prefixes = append(prefixes, "/usr/local", "/usr")

	var out []string
	seen := map[string]bool{}
	addSP := func(d string) {
		d = filepath.Clean(d)
		if !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	for _, p := range filepath.SplitList(env.Getenv("PYTHONPATH")) {
		if p != "" {
			addSP(p)
		}
	}
	for _, p := range prefixes {
		for _, kind := range []string{"site-packages", "dist-packages"} {
			matches, _ := env.Glob(filepath.Join(p, "lib", "python3*", kind))
			for _, m := range matches {
				addSP(m)
			}
		}
	}
	return out
}

// searchPaths is the ordered list of dlopen arguments tried for a library:
// the bare soname first, so LD_LIBRARY_PATH, the ld.so cache and RUNPATH win
// (for libcuda.so.1 that is what keeps the driver and its kernel module in
// step), then the soname in each of libraryDirs.
func searchPaths(soname string, env searchEnv) []string {
	paths := []string{soname}
	for _, d := range libraryDirs(env) {
		paths = append(paths, filepath.Join(d, soname))
	}
	return paths
}

// LibraryNotFoundError says that a library could not be opened from any of
// the places searched.
type LibraryNotFoundError struct {
	Soname   string
	Searched []string // folders, after "the loader path"
	Errs     []string // dlopen errors other than "no such file"
}

func (e *LibraryNotFoundError) Error() string {
	where := "the loader path, " + strings.Join(e.Searched, ", ")
	var b strings.Builder
	if e.Soname == LibCUDA {
		fmt.Fprintf(&b, "no NVIDIA driver: %s not found (searched %s)", e.Soname, where)
	} else {
		fmt.Fprintf(&b, "%s not found (searched %s)", e.Soname, where)
	}
	if len(e.Errs) > 0 {
		fmt.Fprintf(&b, " [%s]", strings.Join(e.Errs, "; "))
	}
	switch e.Soname {
	case LibCUDA:
		b.WriteString("; use --device cpu")
	case LibNCCL:
		b.WriteString("; install NCCL (the nvidia-nccl-cu13 Python wheel or the libnccl2 package), or add its folder to LD_LIBRARY_PATH")
	case LibCUDNN:
		b.WriteString("; install cuDNN 9 (the nvidia-cudnn-cu13 Python wheel or the libcudnn9-cuda-13 package), or add its folder to LD_LIBRARY_PATH")
	default:
		b.WriteString("; install the CUDA 13 toolkit or the nvidia-* Python wheels, or set CUDA_HOME, or use --device cpu")
	}
	return b.String()
}

// ErrNoLibrary matches every LibraryNotFoundError under errors.Is.
var ErrNoLibrary = errors.New("CUDA library not found")

func (e *LibraryNotFoundError) Is(target error) bool { return target == ErrNoLibrary }

// isNotFound reports whether a dlopen error only says that the file tried is
// absent. A missing dependency of a file that exists names the dependency
// instead, and is worth showing.
func isNotFound(path, msg string) bool {
	return strings.HasPrefix(msg, path+":") && strings.Contains(msg, "No such file")
}

// openLibrary tries the search paths in order with open (dlopen) and returns
// the first handle, or a LibraryNotFoundError naming what was searched.
func openLibrary(soname string, env searchEnv, open func(path string) (uintptr, error)) (handle uintptr, path string, err error) {
	paths := searchPaths(soname, env)
	nf := &LibraryNotFoundError{Soname: soname, Searched: libraryDirs(env)}
	for _, p := range paths {
		h, err := open(p)
		if err == nil {
			return h, p, nil
		}
		if msg := err.Error(); !isNotFound(p, msg) {
			nf.Errs = append(nf.Errs, msg)
		}
	}
	return 0, "", nf
}

// OpenLibrary opens soname (dlopen, global symbols) from the loader path
// and the places CUDA's own libraries are searched: what device/nccl opens
// NCCL with. The error is a *LibraryNotFoundError naming what was searched.
func OpenLibrary(soname string) (handle uintptr, path string, err error) {
	return openLibrary(soname, processSearchEnv(), dlopen)
}

// openBound opens soname as OpenLibrary does and binds every symbol; an
// error names the library, where it was found and the missing symbol.
func openBound(soname string, syms []symbol) (handle uintptr, path string, err error) {
	h, path, err := openLibrary(soname, processSearchEnv(), dlopen)
	if err != nil {
		return 0, "", err
	}
	for _, s := range syms {
		if err := bindFirst(h, s.field, s.names); err != nil {
			return 0, "", fmt.Errorf("%s at %s: %w", soname, path, err)
		}
	}
	return h, path, nil
}

// Bind points the func at fptr to the first of names that library h
// exports.
func Bind(h uintptr, fptr any, names ...string) error { return bindFirst(h, fptr, names) }
