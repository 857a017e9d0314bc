// Command gen writes device/cpu's generated kernels into the current
// directory (go generate runs it there).
package main

import (
	"log"
	"os"

	"github.com/gosling-ai/gosling/device/cpu/internal/asmgen"
)

func main() {
	for name, text := range map[string]string{
		"kernels_amd64.s":      asmgen.Assembly(),
		"kernels_amd64_gen.go": asmgen.Declarations(),
	} {
		if err := os.WriteFile(name, []byte(text), 0o644); err != nil {
			log.Fatal(err)
		}
	}
}
