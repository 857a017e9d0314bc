package tokenizer

import (
	"fmt"
	"sort"
	"strings"
	"testing"
)

// TestEncodeExpected checks every line of the reference encodings: ids
// without and with special tokens, and the reference decode of the ids
// (Decode(ids, skipSpecialTokens=false); for Llama 3 that includes
// transformers' clean_up_tokenization_spaces, which its config enables).
func TestEncodeExpected(t *testing.T) {
	for _, name := range []string{"llama3", "qwen3", "deepseek_v3", "mistral", "stories260K"} {
		t.Run(name, func(t *testing.T) {
			tok := hfTokenizer(t, name)
			lines := readExpected(t, name)
			checkExpected(t, tok, lines, true)
			t.Logf("%s: %d lines checked (encode, encode+special, decode)", name, len(lines))
		})
	}
}

// checkExpected compares encodings (and decodes, when checkDecode) with the
// reference, reporting the first few mismatches.
func checkExpected(t *testing.T, tok *Tokenizer, lines []expectedLine, checkDecode bool) {
	t.Helper()
	failures := 0
	fail := func(format string, args ...any) {
		failures++
		if failures <= 5 {
			t.Errorf(format, args...)
		}
	}
	for i, l := range lines {
		if got := tok.Encode(l.Text, false); !equalIDs(got, l.IDs) {
			fail("line %d %q: Encode(false)\n got %v\nwant %v", i+1, l.Text, got, l.IDs)
		}
		if got := tok.Encode(l.Text, true); !equalIDs(got, l.IDsWithSpecial) {
			fail("line %d %q: Encode(true)\n got %v\nwant %v", i+1, l.Text, got, l.IDsWithSpecial)
		}
		if checkDecode {
			if got := tok.Decode(l.IDs, false); got != l.Decoded {
				fail("line %d: Decode(ids, false) = %q, want %q", i+1, got, l.Decoded)
			}
		}
	}
	if failures > 5 {
		t.Errorf("... %d mismatches in all", failures)
	}
}

// TestStories260KThreeWays: the Hugging Face files, the llama2.c
// tokenizer.bin and the vocabulary embedded in the GGUF must all produce the
// reference ids for every line.
func TestStories260KThreeWays(t *testing.T) {
	lines := readExpected(t, "stories260K")
	for _, tc := range []struct {
		name string
		load func(testing.TB) *Tokenizer
	}{
		{"hf", func(tb testing.TB) *Tokenizer { return hfTokenizer(tb, "stories260K") }},
		{"llama2c", llama2cTokenizer},
		{"gguf", ggufStoriesTokenizer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok := tc.load(t)
			checkExpected(t, tok, lines, false)
			// Text without special tokens decodes like the reference too.
			decoded := 0
			for i, l := range lines {
				if containsAny(l.Text, "<s>", "</s>", "<unk>") {
					continue
				}
				if got := tok.Decode(l.IDsWithSpecial, true); got != l.Decoded {
					t.Errorf("line %d: Decode(ids_with_special, true) = %q, want %q", i+1, got, l.Decoded)
				}
				decoded++
			}
			t.Logf("stories260K via %s: %d lines encoded, %d decoded", tc.name, len(lines), decoded)
		})
	}
}

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// TestGGUFFromHFVocab converts the byte-level Hugging Face vocabularies into
// the GGUF metadata a converter writes (tokens by id, token types, merges as
// "a b") and checks that the "gpt2" GGUF path reproduces every reference line.
func TestGGUFFromHFVocab(t *testing.T) {
	for _, tc := range []struct{ name, pre string }{
		{"llama3", "llama-bpe"},
		{"qwen3", "qwen2"},
		{"deepseek_v3", "deepseek-v3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hf := hfTokenizer(t, tc.name)
			md := ggufMetadataFromHF(t, hf, tc.pre)
			tok := cachedLoad(t, "gguf-from-hf:"+tc.name, func() (*Tokenizer, error) { return FromGGUFMetadata(md) })
			lines := readExpected(t, tc.name)
			for i := range lines {
				// A converted GGUF adds BOS only when told to; compare bare ids.
				lines[i].IDsWithSpecial = lines[i].IDs
			}
			checkExpected(t, tok, lines, tc.name != "llama3") // no clean-up of spaces in GGUF
			t.Logf("%s as GGUF (pre %q): %d lines checked", tc.name, tc.pre, len(lines))
		})
	}
}

// ggufMetadataFromHF writes a loaded byte-level tokenizer back out as the
// tokenizer.ggml.* metadata llama.cpp's converter would produce.
func ggufMetadataFromHF(t *testing.T, hf *Tokenizer, pre string) map[string]any {
	t.Helper()
	bpe, ok := hf.model.(*bpeModel)
	if !ok {
		t.Fatalf("model is %T, want *bpeModel", hf.model)
	}
	tokens := make([]any, len(hf.pieces))
	types := make([]any, len(hf.pieces))
	for id, s := range hf.pieces {
		tokens[id] = s
		types[id] = int32(ggufTokenNormal)
		if s == "" {
			tokens[id] = fmt.Sprintf("[PAD%d]", id)
			types[id] = int32(ggufTokenUnused)
		}
		if a, ok := hf.addedByID[id]; ok {
			types[id] = int32(ggufTokenUserDefined)
			if a.special {
				types[id] = int32(ggufTokenControl)
			}
		}
	}
	type rankedMerge struct {
		rank int32
		line string
	}
	var ranked []rankedMerge
	for key, target := range bpe.merges {
		a, b := int(key>>32), int(uint32(key))
		ranked = append(ranked, rankedMerge{target.rank, hf.pieces[a] + " " + hf.pieces[b]})
	}
	sort.Slice(ranked, func(i, j int) bool { return ranked[i].rank < ranked[j].rank })
	merges := make([]any, len(ranked))
	for i, r := range ranked {
		merges[i] = r.line
	}
	return map[string]any{
		"tokenizer.ggml.model":         "gpt2",
		"tokenizer.ggml.pre":           pre,
		"tokenizer.ggml.tokens":        tokens,
		"tokenizer.ggml.token_type":    types,
		"tokenizer.ggml.merges":        merges,
		"tokenizer.ggml.bos_token_id":  uint32(max(hf.BOS(), 0)),
		"tokenizer.ggml.eos_token_id":  uint32(max(hf.EOS(), 0)),
		"tokenizer.ggml.add_bos_token": false,
	}
}
