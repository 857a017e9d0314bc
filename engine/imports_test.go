package engine_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoDeviceImports: the engine, its scheduler and its runner reach a
// GPU only through device.Runtime, so none links device/cuda or
// attention/gpu, directly or through another package (CUDA comes in with
// a blank import of device/cudadev in the program's main package); the
// scheduler and the runner know the engine only through their interfaces,
// so neither links engine or server.
func TestNoDeviceImports(t *testing.T) {
	const mod = "github.com/gosling-ai/gosling/"
	device := []string{mod + "device/cuda", mod + "attention/gpu", mod + "device/cudadev"}
	upward := append([]string{mod + "engine", mod + "server"}, device...)
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go list needs the go tool:", err)
	}
	for pkg, forbidden := range map[string][]string{mod + "engine": device, mod + "engine/sched": upward, mod + "engine/runner": upward} {
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		deps := strings.Fields(string(out))
		if len(deps) < 2 {
			t.Fatalf("go list -deps %s listed %v", pkg, deps)
		}
		for _, d := range deps {
			for _, f := range forbidden {
				// engine's own subpackages are engine/...; only engine
				// itself is above them.
				sub := f != mod+"engine" && strings.HasPrefix(d, f+"/")
				if d != pkg && (d == f || sub) {
					t.Errorf("%s imports %s", pkg, d)
				}
			}
		}
	}
}

// TestNoStorageBranches fails when engine or engine/runner asks a tensor
// or a KV pool where its storage lives (OnDevice) or reads a tensor's
// storage directly (DevPtr, HostData): they read values through
// tensor.Host, which checks, and free pools with Pool.Free, which knows.
func TestNoStorageBranches(t *testing.T) {
	for _, dir := range []string{".", "runner"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			ast.Inspect(parseFile(t, f), func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok && (sel.Sel.Name == "OnDevice" || sel.Sel.Name == "DevPtr" || sel.Sel.Name == "HostData") {
					t.Errorf("%s: .%s: read values through tensor.Host (or Device) instead", f, sel.Sel.Name)
				}
				return true
			})
		}
	}
}

func parseFile(t *testing.T, path string) *ast.File {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	return f
}
