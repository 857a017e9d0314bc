package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/gosling-ai/gosling/attention/gpu"
	"github.com/gosling-ai/gosling/attention/registry"
	"github.com/gosling-ai/gosling/device/cuda"
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
			// Unavailable is why a library backend is not offered here.
			Unavailable string `json:"unavailable,omitempty"`
		}
		var rows []row
		for _, e := range entries {
			r := row{Name: e.Name, Description: e.Description, Caps: e.Caps}
			if err := e.Unavailable(); err != nil {
				r.Unavailable = err.Error()
			}
			rows = append(rows, r)
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
	if err := w.Flush(); err != nil {
		return err
	}
	for _, e := range entries {
		switch err := e.Unavailable(); {
		case err != nil:
			fmt.Printf("\n%s (%s) is not offered here: %v\n", e.Name, strings.Join(e.Caps.Devices, ","), err)
		case e.Name == gpu.CudnnEntry.Name:
			fmt.Printf("\n%s (%s) runs on %s\n", e.Name, strings.Join(e.Caps.Devices, ","), cuda.CudnnLoaded())
		}
	}
	return nil
}
