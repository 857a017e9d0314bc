package shared

import (
	"os"
	"path/filepath"
	"testing"
)

func TestPathFindsSharedBesideCheckout(t *testing.T) {
	d, err := Dir()
	if err != nil {
		t.Skipf("no shared folder here: %v", err)
	}
	if filepath.Base(d) != "shared" {
		t.Fatalf("Dir() = %q", d)
	}
	p := Path(t, "")
	if p != d {
		t.Fatalf("Path(t, \"\") = %q, want %q", p, d)
	}
	if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
		t.Fatalf("%s: %v", p, err)
	}
}

func TestPathSkipsWhenAbsent(t *testing.T) {
	if _, err := Dir(); err != nil {
		t.Skipf("no shared folder here: %v", err)
	}
	var skipped bool
	t.Run("absent", func(t *testing.T) {
		defer func() { skipped = t.Skipped() }()
		Path(t, "no/such/file")
		t.Error("Path returned for an absent file")
	})
	if !skipped {
		t.Fatal("Path did not skip for an absent file")
	}
}
