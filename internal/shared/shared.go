// Package shared finds the folder of test data (reference models,
// tokenizers, configs) that lives beside the checkout as ../shared. Tests
// in every package find it through Path, whatever their depth in the tree.
package shared

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// Dir returns the shared folder: shared/ beside the module root (the
// nearest directory above the working directory holding go.mod), else
// shared/ inside it. The path is relative to the working directory (as
// "../../shared") where it can be, so messages and paths stay as short as
// the literals they replace.
func Dir() (string, error) { return dir() }

var dir = sync.OnceValues(func() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	root := wd
	for {
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err == nil {
			break
		}
		up := filepath.Dir(root)
		if up == root {
			return "", errors.New("no go.mod above " + wd)
		}
		root = up
	}
	for _, d := range []string{filepath.Join(root, "..", "shared"), filepath.Join(root, "shared")} {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			if rel, err := filepath.Rel(wd, d); err == nil {
				return rel, nil
			}
			return d, nil
		}
	}
	return "", errors.New("no shared/ beside or inside " + root)
})

// Path returns rel (slash-separated, "" for the folder itself) inside the
// shared folder, skipping the test with one line when the folder or the
// file is absent (CI always has ../shared beside the checkout).
func Path(tb testing.TB, rel string) string {
	tb.Helper()
	d, err := Dir()
	if err != nil {
		tb.Skipf("shared test data absent (%v); CI has ../shared beside the checkout", err)
	}
	p := filepath.Join(d, filepath.FromSlash(rel))
	if _, err := os.Stat(p); err != nil {
		tb.Skipf("shared test data %s absent (%v); CI has ../shared beside the checkout", rel, err)
	}
	return p
}

// StoriesGolden is karpathy's run.c greedy continuation of stories260K
// from BOS (models/stories260K/golden_greedy.json, its output_ids: 256
// tokens, BOS excluded).
func StoriesGolden(tb testing.TB) []int {
	tb.Helper()
	var golden struct {
		OutputIDs []int `json:"output_ids"`
	}
	data, err := os.ReadFile(Path(tb, "models/stories260K/golden_greedy.json"))
	if err != nil {
		tb.Fatal(err)
	}
	if err := json.Unmarshal(data, &golden); err != nil {
		tb.Fatal(err)
	}
	return golden.OutputIDs
}

// CopyDir copies the files of directory src (a checkpoint, say one under
// the shared folder, whose files are read-only) into dst, created if need
// be, as writable files a test may then edit.
func CopyDir(tb testing.TB, src, dst string) {
	tb.Helper()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		tb.Fatal(err)
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		tb.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), data, 0o644); err != nil {
			tb.Fatal(err)
		}
	}
}
