package main

import (
	"encoding/json"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/gosling-ai/gosling/attention/registry"
)

type backendsCmd struct {
	JSON bool `help:"Print the registry as JSON." name:"json"`
}

func (b *backendsCmd) Run() error {
	entries := registry.Entries()
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
	fmt.Fprintln(w, "backend\tdevices\tpage sizes\tsliding window\tsoftcap\tspec decoding\tMLA\tmultimodal\tdescription")
	mark := func(ok bool) string {
		if ok {
			return "yes"
		}
		return "no"
	}
	for _, e := range entries {
		c := e.Caps
		fmt.Fprintf(w, "%s\t%v\t%v\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Name, c.Devices, c.PageSizes, mark(c.SlidingWindow),
			mark(c.LogitSoftcap), mark(c.SpecDecoding), mark(c.MLA), mark(c.Multimodal), e.Description)
	}
	return w.Flush()
}
