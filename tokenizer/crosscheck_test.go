package tokenizer

import (
	"path/filepath"
	"testing"
)

// TestCrossCheckAwkwardText compares with Hugging Face's Rust tokenizers on
// random texts built from awkward pieces (testdata/gen_crosscheck.js): odd-case
// contractions, "ſ", exotic spaces, joiners, combining marks, other scripts'
// digits, emoji, special-token look-alikes. Decodes here are the raw decoder
// output, so clean_up_tokenization_spaces is switched off for the check.
func TestCrossCheckAwkwardText(t *testing.T) {
	for _, name := range []string{"llama3", "qwen3", "deepseek_v3", "mistral", "stories260K"} {
		t.Run(name, func(t *testing.T) {
			tok := *hfTokenizer(t, name) // a copy, to turn clean-up off
			tok.cleanUpSpaces = false
			lines := readSyntheticExpected(t, filepath.Join("testdata", "crosscheck", name+".jsonl"))
			checkSyntheticLines(t, &tok, lines)
			t.Logf("%s: %d lines checked", name, len(lines))
		})
	}
	// The stories260K vocabulary must agree in its llama2.c and GGUF forms too.
	lines := readSyntheticExpected(t, filepath.Join("testdata", "crosscheck", "stories260K.jsonl"))
	for name, load := range map[string]func(testing.TB) *Tokenizer{"llama2c": llama2cTokenizer, "gguf": ggufStoriesTokenizer} {
		t.Run("stories260K-"+name, func(t *testing.T) {
			tok := load(t)
			for _, l := range lines {
				if got := tok.Encode(l.Text, false); !equalIDs(got, l.IDs) {
					t.Errorf("%q: Encode(false) = %v, want %v", l.Text, got, l.IDs)
				}
				if got := tok.Encode(l.Text, true); !equalIDs(got, l.IDsWithSpecial) {
					t.Errorf("%q: Encode(true) = %v, want %v", l.Text, got, l.IDsWithSpecial)
				}
			}
		})
	}
}

func checkSyntheticLines(t *testing.T, tok *Tokenizer, lines []syntheticLine) {
	t.Helper()
	for _, l := range lines {
		if got := tok.Encode(l.Text, false); !equalIDs(got, l.IDs) {
			t.Errorf("%q: Encode(false) = %v, want %v", l.Text, got, l.IDs)
		}
		if got := tok.Encode(l.Text, true); !equalIDs(got, l.IDsWithSpecial) {
			t.Errorf("%q: Encode(true) = %v, want %v", l.Text, got, l.IDsWithSpecial)
		}
		if got := tok.Decode(l.IDs, false); got != l.Decoded {
			t.Errorf("%q: Decode(ids, false) = %q, want %q", l.Text, got, l.Decoded)
		}
		if got := tok.Decode(l.IDsWithSpecial, true); got != l.DecodedSkipSpecial {
			t.Errorf("%q: Decode(ids_with_special, true) = %q, want %q", l.Text, got, l.DecodedSkipSpecial)
		}
		for _, skip := range []bool{false, true} {
			if got, want := streamAll(t, tok, l.IDsWithSpecial, skip), tok.Decode(l.IDsWithSpecial, skip); got != want {
				t.Errorf("%q skip=%v: stream %q, Decode %q", l.Text, skip, got, want)
			}
		}
	}
}
