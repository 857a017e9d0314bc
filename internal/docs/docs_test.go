package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const root = "../.."

// packages lists every directory under root that holds a non-test Go
// file, as a slash path relative to root; testdata and hidden directories
// are skipped, as the go tool skips them.
func packages(t *testing.T) []string {
	t.Helper()
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			rel, err := filepath.Rel(root, filepath.Dir(path))
			if err != nil {
				return err
			}
			seen[filepath.ToSlash(rel)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var pkgs []string
	for p := range seen {
		pkgs = append(pkgs, p)
	}
	slices.Sort(pkgs)
	return pkgs
}

// tableRow is a markdown table row whose first cell is a backquoted path.
var tableRow = regexp.MustCompile("(?m)^\\| `([^`]+)` \\|")

func read(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// section is the text of doc between the lines starting with begin and end.
func section(t *testing.T, doc, begin, end string) string {
	t.Helper()
	_, after, ok := strings.Cut(doc, begin)
	if !ok {
		t.Fatalf("no %q", begin)
	}
	body, _, ok := strings.Cut(after, end)
	if !ok {
		t.Fatalf("no %q after %q", end, begin)
	}
	return body
}

// TestArchitecturePackages fails when the package table of
// docs/architecture.md does not list exactly the packages of the tree,
// once each and in order.
func TestArchitecturePackages(t *testing.T) {
	table := section(t, read(t, "docs/architecture.md"), "<!-- packages", "<!-- /packages -->")
	var listed []string
	for _, m := range tableRow.FindAllStringSubmatch(table, -1) {
		listed = append(listed, m[1])
	}
	actual := packages(t)
	for _, p := range actual {
		if !slices.Contains(listed, p) {
			t.Errorf("docs/architecture.md: package %s is missing from the table", p)
		}
	}
	for _, p := range listed {
		if !slices.Contains(actual, p) {
			t.Errorf("docs/architecture.md: %s is in the table but is not a package", p)
		}
	}
	if !slices.IsSorted(listed) || len(slices.Compact(slices.Clone(listed))) != len(listed) {
		t.Errorf("docs/architecture.md: the package table is not sorted, or lists a package twice")
	}
}

// TestFlowFilesExist fails when the request flow of docs/architecture.md
// or of the README's layout names a file that is not there.
func TestFlowFilesExist(t *testing.T) {
	for _, f := range []struct{ doc, from, to string }{
		{"docs/architecture.md", "## 1.", "## 2."},
		{"README.md", "## Layout", "| package | owns |"},
	} {
		flow := section(t, read(t, f.doc), f.from, f.to)
		files := regexp.MustCompile("`([a-z0-9_/]+\\.go)`").FindAllStringSubmatch(flow, -1)
		if len(files) < 8 {
			t.Fatalf("%s: the flow names %d files; it should follow a request through every layer", f.doc, len(files))
		}
		for _, m := range files {
			if _, err := os.Stat(filepath.Join(root, m[1])); err != nil {
				t.Errorf("%s flow: %v", f.doc, err)
			}
		}
	}
}

// TestReadmeLayout fails when the README's layout table names a package
// that does not exist.
func TestReadmeLayout(t *testing.T) {
	_, table, ok := strings.Cut(read(t, "README.md"), "## Layout")
	if !ok {
		t.Fatal("README.md: no ## Layout")
	}
	table, _, _ = strings.Cut(table, "\n## ")
	rows := tableRow.FindAllStringSubmatch(table, -1)
	if len(rows) == 0 {
		t.Fatal("README.md: no layout table")
	}
	actual := packages(t)
	for _, m := range rows {
		if !slices.Contains(actual, m[1]) {
			t.Errorf("README.md layout: %s is not a package", m[1])
		}
	}
}
