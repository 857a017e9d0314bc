package tokenizer

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Load opens a tokenizer by looking at what path is:
//   - a directory: its tokenizer.json (and tokenizer_config.json if present);
//   - a .json file: that tokenizer.json (and a sibling tokenizer_config.json);
//   - a file starting with "GGUF": the vocabulary in its metadata;
//   - anything else: a llama2.c tokenizer.bin.
func Load(path string) (*Tokenizer, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer: %w", err)
	}
	if st.IsDir() {
		tj := filepath.Join(path, "tokenizer.json")
		if _, err := os.Stat(tj); err != nil {
			return nil, fmt.Errorf("load tokenizer %s: no tokenizer.json in this directory (pass a tokenizer.json, a .gguf or a llama2.c tokenizer.bin instead)", path)
		}
		return FromHFFiles(tj, siblingConfig(tj))
	}
	head, err := readHead(path, 64)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer %s: %w", path, err)
	}
	switch {
	case strings.HasPrefix(string(head), ggufMagic):
		md, err := readGGUFMetadata(path)
		if err != nil {
			return nil, fmt.Errorf("load tokenizer %s: GGUF metadata: %w", path, err)
		}
		t, err := fromGGUFMetadata(md)
		if err != nil {
			return nil, fmt.Errorf("load tokenizer %s: %w", path, err)
		}
		return t, nil
	case strings.EqualFold(filepath.Ext(path), ".json") || looksLikeJSON(head):
		return FromHFFiles(path, siblingConfig(path))
	}
	return FromLlama2C(path)
}

// siblingConfig returns the tokenizer_config.json next to a tokenizer.json,
// or "" when there is none.
func siblingConfig(tokenizerJSON string) string {
	p := filepath.Join(filepath.Dir(tokenizerJSON), "tokenizer_config.json")
	if p == tokenizerJSON {
		return ""
	}
	if st, err := os.Stat(p); err == nil && !st.IsDir() {
		return p
	}
	return ""
}

func readHead(path string, n int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, n)
	k, err := io.ReadFull(f, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return buf[:k], nil
}
