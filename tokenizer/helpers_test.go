package tokenizer

import (
	"bufio"
	"encoding/json"
	"os"
	"sync"
	"testing"

	"github.com/gosling-ai/gosling/internal/shared"
)

// expectedLine is one line of shared/tokenizers/*/encode_expected.jsonl,
// produced by the reference JavaScript tokenizer and cross-checked with
// Hugging Face's Rust tokenizers.
type expectedLine struct {
	Text           string `json:"text"`
	IDs            []int  `json:"ids"`
	IDsWithSpecial []int  `json:"ids_with_special"`
	Decoded        string `json:"decoded"`
}

func readExpected(t testing.TB, name string) []expectedLine {
	t.Helper()
	f, err := os.Open(shared.Path(t, "tokenizers/"+name+"/encode_expected.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []expectedLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var l expectedLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("%s line %d: %v", name, len(lines)+1, err)
		}
		lines = append(lines, l)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(lines) == 0 {
		t.Fatalf("%s: no expected lines", name)
	}
	return lines
}

// Loading the big vocabularies takes a moment; tests share one copy.
var tokenizerCache sync.Map // key -> *cachedTokenizer

type cachedTokenizer struct {
	once sync.Once
	tok  *Tokenizer
	err  error
}

func cachedLoad(t testing.TB, key string, load func() (*Tokenizer, error)) *Tokenizer {
	t.Helper()
	v, _ := tokenizerCache.LoadOrStore(key, &cachedTokenizer{})
	c := v.(*cachedTokenizer)
	c.once.Do(func() { c.tok, c.err = load() })
	if c.err != nil {
		t.Fatalf("load %s: %v", key, c.err)
	}
	return c.tok
}

// hfTokenizer loads shared/tokenizers/<name> (or the stories260K-hf model dir).
func hfTokenizer(t testing.TB, name string) *Tokenizer {
	t.Helper()
	dir := shared.Path(t, "tokenizers/"+name)
	if name == "stories260K" {
		dir = shared.Path(t, "models/stories260K-hf")
	}
	return cachedLoad(t, "hf:"+name, func() (*Tokenizer, error) { return Load(dir) })
}

func equalIDs(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func llama2cTokenizer(t testing.TB) *Tokenizer {
	t.Helper()
	p := shared.Path(t, "models/stories260K/tok512.bin")
	return cachedLoad(t, "llama2c:stories260K", func() (*Tokenizer, error) { return Load(p) })
}

func ggufStoriesTokenizer(t testing.TB) *Tokenizer {
	t.Helper()
	p := shared.Path(t, "models/stories260K/stories260K.gguf")
	return cachedLoad(t, "gguf:stories260K", func() (*Tokenizer, error) { return Load(p) })
}

// resetCaches empties the per-word caches (benchmarks measure cold encoding).
func (t *Tokenizer) resetCaches() {
	switch m := t.model.(type) {
	case *bpeModel:
		m.cache = wordCache{}
	case *scoreModel:
		m.cache = wordCache{}
	}
}
