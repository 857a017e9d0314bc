// Package registry lists every attention backend explicitly (no hidden
// registration by blank import), resolves the user's choice against them,
// and renders the support matrix for `gosling backends` and the docs.
package registry

import (
	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/attention/flash"
	"github.com/gosling-ai/gosling/attention/native"
	"github.com/gosling-ai/gosling/attention/splitkv"
)

// Entries is every backend.
func Entries() []attention.Entry {
	return []attention.Entry{native.Entry, flash.Entry, splitkv.Entry}
}

// AutoOrder is the order `auto` tries backends in, per phase. Prefill
// favours tiled kernels (K/V tiles reused by many queries); decode favours
// split-KV (parallel over the context when the batch is small).
var AutoOrder = attention.Order{
	Prefill: []string{"flash", "splitkv", "native"},
	Decode:  []string{"splitkv", "flash", "native"},
}

// Resolve resolves the user's choice against the registered backends.
func Resolve(c attention.Choice, need attention.Need) (*attention.Resolution, error) {
	return attention.Resolve(Entries(), AutoOrder, c, need)
}

// Names lists the registered backends.
func Names() []string {
	var names []string
	for _, e := range Entries() {
		names = append(names, e.Name)
	}
	return names
}
