// Package registry lists the attention backends, resolves the user's
// choice against them, and renders the support matrix for `gosling
// backends` and the docs. The host backends are listed here; the CUDA
// ones are added by device/cudadev, which a program imports to link CUDA
// at all (it registers the device the same way), so a host-only program
// links no CUDA code.
package registry

import (
	"slices"
	"sync"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/attention/flash"
	"github.com/gosling-ai/gosling/attention/native"
	"github.com/gosling-ai/gosling/attention/splitkv"
)

var (
	mu         sync.Mutex
	registered []attention.Entry
)

// Register adds the backends of a device linked into the program, after
// the host ones (device/cudadev calls it from init).
func Register(entries ...attention.Entry) {
	mu.Lock()
	defer mu.Unlock()
	registered = append(registered, entries...)
}

// Entries is every backend on every device linked in: a backend has one
// entry per device it runs on, each with its own capabilities.
func Entries() []attention.Entry {
	mu.Lock()
	defer mu.Unlock()
	return append([]attention.Entry{native.Entry, flash.Entry, splitkv.Entry}, registered...)
}

// ForDevice lists the entries that run on device ("cpu", "cuda").
func ForDevice(device string) []attention.Entry {
	var out []attention.Entry
	for _, e := range Entries() {
		if slices.Contains(e.Caps.Devices, device) {
			out = append(out, e)
		}
	}
	return out
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

// Names lists the registered backend names (each once).
func Names() []string {
	var names []string
	for _, e := range Entries() {
		if !slices.Contains(names, e.Name) {
			names = append(names, e.Name)
		}
	}
	return names
}
