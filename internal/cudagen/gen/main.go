// Command gen writes a package's kernel launch stubs (kernels_gen.go) and
// the C header its declaration names, from the declaration given as the
// argument; go generate runs it in the package directory.
package main

import (
	"log"
	"os"
	"path/filepath"

	"github.com/gosling-ai/gosling/internal/cudagen"
)

func main() {
	if len(os.Args) != 2 {
		log.Fatal("usage: gen kernels/kernels.decl")
	}
	decl := os.Args[1]
	text, err := os.ReadFile(decl)
	if err != nil {
		log.Fatal(err)
	}
	g, err := cudagen.Generate(filepath.ToSlash(decl), string(text))
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(cudagen.GoFile, g.Go, 0o644); err != nil {
		log.Fatal(err)
	}
	if g.Header != nil {
		if err := os.WriteFile(filepath.Join(filepath.Dir(decl), g.Decl.Header), g.Header, 0o644); err != nil {
			log.Fatal(err)
		}
	}
}
