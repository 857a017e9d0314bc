// Package registry lists every attention backend explicitly (no hidden
// registration by blank import) and resolves the user's choice into the
// backends that will serve prefill and decode.
package registry

import (
	"fmt"
	"strings"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/attention/native"
)

// Entries is every backend, in the order `auto` prefers them.
func Entries() []attention.Entry {
	return []attention.Entry{native.Entry}
}

// Lookup finds a backend by name.
func Lookup(name string) (attention.Entry, bool) {
	for _, e := range Entries() {
		if e.Name == name {
			return e, true
		}
	}
	return attention.Entry{}, false
}

// Names lists the registered backends.
func Names() []string {
	var names []string
	for _, e := range Entries() {
		names = append(names, e.Name)
	}
	return names
}

// Choose picks the backend for name ("" or "auto" = first that serves
// need), or explains why none can.
func Choose(name string, need attention.Need) (attention.Entry, error) {
	if name == "" || name == "auto" {
		var reasons []string
		for _, e := range Entries() {
			unmet := e.Caps.Unmet(need)
			if len(unmet) == 0 {
				return e, nil
			}
			reasons = append(reasons, e.Name+": "+strings.Join(unmet, "; "))
		}
		return attention.Entry{}, fmt.Errorf("no attention backend can serve this model: %s", strings.Join(reasons, " | "))
	}
	e, ok := Lookup(name)
	if !ok {
		return attention.Entry{}, fmt.Errorf("unknown attention backend %q; available: %s, auto", name, strings.Join(Names(), ", "))
	}
	if unmet := e.Caps.Unmet(need); len(unmet) > 0 {
		return attention.Entry{}, fmt.Errorf("attention backend %q %s", name, strings.Join(unmet, "; "))
	}
	return e, nil
}
