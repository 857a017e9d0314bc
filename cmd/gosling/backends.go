package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/gosling-ai/gosling/attention/registry"
)

type backendsCmd struct {
	JSON     bool `help:"Print the registry as JSON." name:"json" xor:"format"`
	Markdown bool `help:"Print the support matrix as Markdown (docs/attention-backends.md)." xor:"format"`
}

func (b *backendsCmd) Run() error {
	entries := registry.Entries()
	if b.Markdown {
		fmt.Print(registry.Markdown())
		return nil
	}
	if b.JSON {
		type row struct {
			Name        string `json:"name"`
			Description string `json:"description"`
			Caps        any    `json:"caps"`
		}
		var rows []row
		for _, e := range entries {
			rows = append(rows, row{e.Name, e.Description, e.Caps})
		}
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 2, 2, ' ', 0)
	fmt.Fprint(w, "backend\tdevices\tpage sizes")
	for _, c := range registry.Columns {
		fmt.Fprint(w, "\t"+c.Title)
	}
	fmt.Fprintln(w, "\tdescription")
	for _, e := range entries {
		fmt.Fprintf(w, "%s\t%s\t%v", e.Name, strings.Join(e.Caps.Devices, ","), e.Caps.PageSizes)
		for _, c := range registry.Columns {
			fmt.Fprint(w, "\t"+c.Cell(e.Caps))
		}
		fmt.Fprintln(w, "\t"+e.Description)
	}
	return w.Flush()
}
