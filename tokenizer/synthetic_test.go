package tokenizer

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSyntheticTokenizers runs the small tokenizer.json files in
// testdata/synthetic, which exercise features the shared real tokenizers do
// not use (Metaspace, Split behaviours, Digits, Punctuation, Whitespace,
// Lowercase/NFD/StripAccents/Strip/Replace/Prepend normalizers, added-token
// lstrip/rstrip/single_word/normalized, unk and fuse_unk, partial byte
// fallback, continuing_subword_prefix/end_of_word_suffix, pair-form merges,
// Template/Bert/Sequence post-processors, Replace/Strip/Fuse decoders), and
// compares with what Hugging Face's Rust tokenizers produced for them
// (testdata/gen_synthetic.js).
func TestSyntheticTokenizers(t *testing.T) {
	files, err := filepath.Glob("testdata/synthetic/*.expected.jsonl")
	if err != nil || len(files) == 0 {
		t.Fatalf("no synthetic test data: %v", err)
	}
	for _, expected := range files {
		name := strings.TrimSuffix(filepath.Base(expected), ".expected.jsonl")
		t.Run(name, func(t *testing.T) {
			tok, err := FromHFFiles(filepath.Join("testdata/synthetic", name+".json"), "")
			if err != nil {
				t.Fatal(err)
			}
			lines := readSyntheticExpected(t, expected)
			checkSyntheticLines(t, tok, lines)
			t.Logf("%s: %d lines checked", name, len(lines))
		})
	}
}

type syntheticLine struct {
	expectedLine
	DecodedSkipSpecial string `json:"decoded_skip_special"`
}

func readSyntheticExpected(t *testing.T, path string) []syntheticLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []syntheticLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l syntheticLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		lines = append(lines, l)
	}
	return lines
}
