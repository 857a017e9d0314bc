package engine_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoDeviceImports: the engine and its scheduler reach a GPU only
// through device.Runtime, so neither links device/cuda or attention/gpu,
// directly or through another package (CUDA comes in with a blank import
// of device/cudadev in the program's main package).
func TestNoDeviceImports(t *testing.T) {
	forbidden := []string{"github.com/gosling-ai/gosling/device/cuda", "github.com/gosling-ai/gosling/attention/gpu",
		"github.com/gosling-ai/gosling/device/cudadev"}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go list needs the go tool:", err)
	}
	for _, pkg := range []string{"github.com/gosling-ai/gosling/engine", "github.com/gosling-ai/gosling/engine/sched"} {
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
				if d == f || strings.HasPrefix(d, f+"/") {
					t.Errorf("%s imports %s", pkg, d)
				}
			}
		}
	}
}
