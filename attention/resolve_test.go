package attention

import (
	"errors"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/tensor"
)

func fakeEntry(name string, pages PageSizes, window bool) Entry {
	return Entry{Name: name, Caps: Caps{Devices: []string{"cpu"}, PageSizes: pages, KVDTypes: []tensor.DType{tensor.F32}, SlidingWindow: window}}
}

func TestResolve(t *testing.T) {
	entries := []Entry{
		fakeEntry("any", PageSizes{Any: true}, true),
		fakeEntry("one", PageSizes{Only: []int{1}}, true),
		fakeEntry("big", PageSizes{Only: []int{16, 64}}, false),
		{Name: "any", Caps: Caps{Devices: []string{"cuda"}, PageSizes: PageSizes{Any: true}, KVDTypes: []tensor.DType{tensor.F32}}},
	}
	order := Order{Prefill: []string{"big", "any"}, Decode: []string{"one", "any"}}
	plain := Need{Device: "cpu"}
	windowed := Need{Device: "cpu", SlidingWindow: true}
	cases := []struct {
		name            string
		choice          Choice
		need            Need
		prefill, decode string
		page            int
		adjusted        bool
		err             string
	}{
		{"auto picks by phase order", Choice{PageSize: 16}, plain, "big", "any", 16, false, ""},
		{"auto skips a backend without the window", Choice{PageSize: 1}, windowed, "any", "one", 1, false, ""},
		{"one backend for both", Choice{Backend: "any", PageSize: 16, PageSizeSet: true}, plain, "any", "any", 16, false, ""},
		{"specific overrides general", Choice{Backend: "any", Decode: "one", PageSize: 1}, plain, "any", "one", 1, false, ""},
		{"unset page size defaults to 16 on the CPU", Choice{Backend: "big"}, plain, "big", "big", 16, false, ""},
		{"unset page size is adjusted, with a reason", Choice{Backend: "one"}, plain, "one", "one", 1, true, ""},
		{"explicit page size is never changed", Choice{Backend: "big", PageSize: 1, PageSizeSet: true}, plain, "", "", 0, false, "--page-size 1 is not supported"},
		{"incompatible pair", Choice{Prefill: "one", Decode: "big"}, plain, "", "", 0, false, "cannot share a KV cache"},
		{"unknown name lists the valid ones", Choice{Backend: "nope"}, plain, "", "", 0, false, "choose one of: any, one, big, auto"},
		{"missing capability", Choice{Backend: "big"}, windowed, "", "", 0, false, "does not support sliding-window"},
		{"wrong device", Choice{Backend: "one"}, Need{Device: "cuda"}, "", "", 0, false, "does not run on cuda"},
		{"the entry for the run's device", Choice{Backend: "any"}, Need{Device: "cuda"}, "any", "any", 1, false, ""},
		{"a vision model needs bidirectional spans", Choice{Backend: "any"}, Need{Device: "cuda", Multimodal: true}, "", "", 0, false, "bidirectional image spans"},
		{"kv dtype", Choice{Backend: "any", KVDType: "fp8_e4m3"}, plain, "", "", 0, false, "KV cache dtype"},
		{"bad kv dtype", Choice{KVDType: "int3"}, plain, "", "", 0, false, "--kv-cache-dtype"},
		{"bad speculative mode", Choice{SpeculativeMode: "both"}, plain, "", "", 0, false, "--speculative-attention-mode"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, err := Resolve(entries, order, c.choice, c.need)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want one containing %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Prefill.Name != c.prefill || res.Decode.Name != c.decode || res.PageSize != c.page {
				t.Fatalf("got %s,%s page %d; want %s,%s page %d", res.Prefill.Name, res.Decode.Name, res.PageSize, c.prefill, c.decode, c.page)
			}
			if (len(res.Adjustments) > 0) != c.adjusted {
				t.Fatalf("adjustments %v, want adjusted=%v", res.Adjustments, c.adjusted)
			}
		})
	}
}

func TestParseAttn(t *testing.T) {
	p, d, err := ParseAttn("flash,splitkv")
	if err != nil || p != "flash" || d != "splitkv" {
		t.Fatalf("got %q %q %v", p, d, err)
	}
	for _, bad := range []string{"flash", ",x", "a,b,c", ""} {
		if _, _, err := ParseAttn(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestResolveUnavailable: a backend whose library does not load is never
// picked by auto (the next one in the order is), and naming it fails with
// the reason; one that loads resolves as any other.
func TestResolveUnavailable(t *testing.T) {
	missing := fakeEntry("lib", PageSizes{Any: true}, true)
	missing.Available = func() error { return errors.New("liblib.so.1 not found") }
	loaded := fakeEntry("lib", PageSizes{Any: true}, true)
	loaded.Available = func() error { return nil }
	order := Order{Prefill: []string{"lib", "any"}, Decode: []string{"lib", "any"}}
	need := Need{Device: "cpu"}
	entries := []Entry{missing, fakeEntry("any", PageSizes{Any: true}, true)}

	res, err := Resolve(entries, order, Choice{}, need)
	if err != nil || res.Prefill.Name != "any" || res.Decode.Name != "any" {
		t.Fatalf("auto with the library missing: %+v, %v; want any for both phases", res, err)
	}
	_, err = Resolve(entries, order, Choice{Backend: "lib"}, need)
	if err == nil || !strings.Contains(err.Error(), `"lib" is not offered here: liblib.so.1 not found`) {
		t.Fatalf("naming the missing backend: %v", err)
	}
	// Capabilities are reported before availability: the user learns
	// what the backend could never do, wherever it runs.
	_, err = Resolve(entries, order, Choice{Backend: "lib"}, Need{Device: "cuda"})
	if err == nil || !strings.Contains(err.Error(), "does not run on cuda") {
		t.Fatalf("wrong device: %v", err)
	}
	_, err = Resolve([]Entry{missing}, order, Choice{}, need)
	if err == nil || !strings.Contains(err.Error(), "lib is not offered here (liblib.so.1 not found)") {
		t.Fatalf("auto with nothing else: %v", err)
	}
	res, err = Resolve([]Entry{loaded}, order, Choice{Backend: "lib"}, need)
	if err != nil || res.Prefill.Name != "lib" {
		t.Fatalf("loaded library: %+v, %v", res, err)
	}
}
