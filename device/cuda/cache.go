package cuda

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// KernelCache keeps compiled kernel images on disk so NVRTC runs once per
// source, architecture and compiler version, not at every start.
type KernelCache struct {
	Dir string // "" disables the cache
}

// DefaultCacheDir is $GOSLING_CUDA_CACHE, else $XDG_CACHE_HOME/gosling/cuda,
// else ~/.cache/gosling/cuda.
func DefaultCacheDir(getenv func(string) string, home string) string {
	if d := getenv("GOSLING_CUDA_CACHE"); d != "" {
		return d
	}
	if x := getenv("XDG_CACHE_HOME"); x != "" {
		return filepath.Join(x, "gosling", "cuda")
	}
	if home == "" {
		return ""
	}
	return filepath.Join(home, ".cache", "gosling", "cuda")
}

// NewDefaultKernelCache is the cache at DefaultCacheDir for this process.
func NewDefaultKernelCache() *KernelCache {
	home, _ := os.UserHomeDir()
	return &KernelCache{Dir: DefaultCacheDir(os.Getenv, home)}
}

// CacheKey names a compiled image: the SHA-256 of everything that changes
// the output, each field length-prefixed so no two inputs collide by
// concatenation.
func CacheKey(source []byte, t Target, nvrtcVersion string, options []string) string {
	h := sha256.New()
	field := func(b []byte) {
		fmt.Fprintf(h, "%d:", len(b))
		h.Write(b)
	}
	field([]byte("gosling-cuda-kernel-v1"))
	field(source)
	field([]byte(t.Option()))
	field([]byte(nvrtcVersion))
	for _, o := range options {
		field([]byte(o))
	}
	return hex.EncodeToString(h.Sum(nil))
}

func (c *KernelCache) path(key string, t Target) string {
	ext := ".ptx"
	if t.CUBIN {
		ext = ".cubin"
	}
	return filepath.Join(c.Dir, key+ext)
}

// Get returns the cached image for key, or false.
func (c *KernelCache) Get(key string, t Target) ([]byte, bool) {
	if c == nil || c.Dir == "" {
		return nil, false
	}
	b, err := os.ReadFile(c.path(key, t))
	if err != nil || len(b) == 0 {
		return nil, false
	}
	return b, true
}

// Put stores an image. It writes a temporary file and renames it, so a
// concurrent reader (another gosling starting) sees the old state or the
// whole new file, never a torn one.
func (c *KernelCache) Put(key string, t Target, image []byte) error {
	if c == nil || c.Dir == "" {
		return nil
	}
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return fmt.Errorf("kernel cache: %w", err)
	}
	tmp, err := os.CreateTemp(c.Dir, ".tmp-*")
	if err != nil {
		return fmt.Errorf("kernel cache: %w", err)
	}
	_, werr := tmp.Write(image)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("kernel cache: %w", err)
	}
	if err := os.Rename(tmp.Name(), c.path(key, t)); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("kernel cache: %w", err)
	}
	return nil
}

// Clear removes every cached image.
func (c *KernelCache) Clear() error {
	if c == nil || c.Dir == "" {
		return nil
	}
	err := os.RemoveAll(c.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}
