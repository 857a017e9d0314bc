package mmap

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestOpen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := os.WriteFile(path, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Data) != "hello" || m.Path != path {
		t.Errorf("Data %q Path %q", m.Data, m.Path)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil || m.Data != nil {
		t.Errorf("second Close: %v, Data %v", err, m.Data)
	}

	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if m, err := Open(empty); err != nil || len(m.Data) != 0 {
		t.Errorf("empty file: %v, %d bytes", err, len(m.Data))
	}

	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("directory: %v", err)
	}
	if _, err := Open(filepath.Join(dir, "absent")); err == nil {
		t.Error("absent file opened")
	}
}
