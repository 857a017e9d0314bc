package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/device/cuda"
)

// TestBackendsNotOffered: where libcudnn.so.9 does not load, `gosling
// backends` still lists the cudnn backend with its capabilities, says why
// it is not offered here (text and JSON), a run that names it is refused
// with that reason, and the attention benchmark refuses it by name.
func TestBackendsNotOffered(t *testing.T) {
	_, missing := cuda.CudnnAvailable()
	if missing == nil {
		t.Skip("cuDNN loads on this machine: the cudnn backend is offered")
	}
	out, stderr, err := run(t, "", "backends")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	if !strings.Contains(out, "\ncudnn ") || !strings.Contains(out, "cudnn (cuda) is not offered here: "+missing.Error()) {
		t.Errorf("backends output does not list cudnn as not offered:\n%s", out)
	}
	out, stderr, err = run(t, "", "backends", "--json")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	var rows []struct {
		Name        string `json:"name"`
		Unavailable string `json:"unavailable"`
	}
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if (r.Name == "cudnn") != (r.Unavailable != "") {
			t.Errorf("%s: unavailable %q", r.Name, r.Unavailable)
		}
	}
	_, stderr, err = run(t, "", "bench", "attention", "--device", "cpu", "--backends", "cudnn", "--quick")
	if err == nil || !strings.Contains(stderr, `no cpu backend "cudnn"`) {
		t.Errorf("bench attention --device cpu --backends cudnn: %v\n%s", err, stderr)
	}
}
