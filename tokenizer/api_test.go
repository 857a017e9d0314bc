package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/internal/shared"
)

// TestTokenizerMetadata checks the ids and names other packages rely on.
func TestTokenizerMetadata(t *testing.T) {
	tests := []struct {
		name             string
		load             func(testing.TB) *Tokenizer
		bos, eos, vocab  int
		hasChatTemplate  bool
		special          map[string]string
		specialID        int // an id IsSpecial must report
		plainID          int // an id it must not
		tokenString      string
		tokenStringForID int
	}{
		{"llama3", func(tb testing.TB) *Tokenizer { return hfTokenizer(tb, "llama3") }, 128000, 128001, 128256, true,
			map[string]string{"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"}, 128009, 15, "Ġthe", 279},
		{"qwen3", func(tb testing.TB) *Tokenizer { return hfTokenizer(tb, "qwen3") }, -1, 151645, 151669, true,
			map[string]string{"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, 151644, 15, "Ġthe", 279},
		{"deepseek_v3", func(tb testing.TB) *Tokenizer { return hfTokenizer(tb, "deepseek_v3") }, 0, 1, 128815, true,
			map[string]string{"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>"}, 1, 18, "0", 18},
		{"mistral", func(tb testing.TB) *Tokenizer { return hfTokenizer(tb, "mistral") }, 1, 2, 32000, false,
			map[string]string{"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}, 0, 28734, "<0x0A>", 13},
		{"stories260K-hf", func(tb testing.TB) *Tokenizer { return hfTokenizer(tb, "stories260K") }, 1, 2, 512, false,
			map[string]string{"bos_token": "<s>", "eos_token": "</s>"}, 2, 300, "▁ha", 300},
		{"stories260K-llama2c", llama2cTokenizer, 1, 2, 512, false,
			map[string]string{"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}, 1, 300, " ha", 300},
		{"stories260K-gguf", ggufStoriesTokenizer, 1, 2, 512, false,
			map[string]string{"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}, 1, 300, "▁ha", 300},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tok := tc.load(t)
			if tok.BOS() != tc.bos || tok.EOS() != tc.eos {
				t.Errorf("BOS, EOS = %d, %d; want %d, %d", tok.BOS(), tok.EOS(), tc.bos, tc.eos)
			}
			if tok.VocabSize() != tc.vocab {
				t.Errorf("VocabSize = %d, want %d", tok.VocabSize(), tc.vocab)
			}
			if got := tok.ChatTemplateSource() != ""; got != tc.hasChatTemplate {
				t.Errorf("has chat template = %v, want %v", got, tc.hasChatTemplate)
			}
			got := tok.SpecialTokenStrings()
			for k, v := range tc.special {
				if got[k] != v {
					t.Errorf("SpecialTokenStrings()[%q] = %q, want %q (all: %v)", k, got[k], v, got)
				}
			}
			if !tok.IsSpecial(tc.specialID) || tok.IsSpecial(tc.plainID) || tok.IsSpecial(-1) || tok.IsSpecial(tok.VocabSize()) {
				t.Errorf("IsSpecial wrong for %d (special) / %d (plain) / out of range", tc.specialID, tc.plainID)
			}
			if s := tok.TokenString(tc.tokenStringForID); s != tc.tokenString {
				t.Errorf("TokenString(%d) = %q, want %q", tc.tokenStringForID, s, tc.tokenString)
			}
			if id, ok := tok.TokenID(tc.tokenString); !ok || id != tc.tokenStringForID {
				t.Errorf("TokenID(%q) = %d, %v; want %d", tc.tokenString, id, ok, tc.tokenStringForID)
			}
			if tok.TokenString(-1) != "" || tok.TokenString(tok.VocabSize()) != "" {
				t.Error("TokenString out of range should be empty")
			}
			if _, ok := tok.TokenID("no such token \x00"); ok {
				t.Error("TokenID found a token that does not exist")
			}
			if tc.bos >= 0 {
				if id, ok := tok.TokenID(got["bos_token"]); !ok || id != tc.bos {
					t.Errorf("TokenID(bos_token %q) = %d, %v; want %d", got["bos_token"], id, ok, tc.bos)
				}
			}
			if got := tok.Decode([]int{-5, tok.VocabSize() + 10}, false); got != "" {
				t.Errorf("Decode of out-of-range ids = %q, want empty", got)
			}
			if got := tok.Encode("", false); got == nil || len(got) != 0 {
				t.Errorf("Encode(\"\") = %#v, want an empty non-nil slice", got)
			}
		})
	}
}

// writeTemp writes files into a fresh directory and returns its path.
func writeTemp(t *testing.T, files map[string][]byte) string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// storiesJSON returns stories260K's tokenizer.json as a generic map to edit.
func storiesJSON(t *testing.T) map[string]any {
	t.Helper()
	data, err := os.ReadFile(shared.Path(t, "models/stories260K-hf/tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestConfigAddsBOSWithoutPostProcessor: a tokenizer.json without a
// post_processor takes add_bos_token/add_eos_token from the config (slow
// Llama tokenizers), and the config's chat_template list yields "default".
func TestConfigAddsBOSWithoutPostProcessor(t *testing.T) {
	tj := storiesJSON(t)
	tj["post_processor"] = nil
	cfg := map[string]any{
		"add_bos_token": true, "add_eos_token": true,
		"bos_token": map[string]any{"__type": "AddedToken", "content": "<s>"},
		"eos_token": "</s>",
		"chat_template": []map[string]string{
			{"name": "tool_use", "template": "TOOLS"},
			{"name": "default", "template": "DEFAULT"},
		},
	}
	dir := writeTemp(t, map[string][]byte{"tokenizer.json": mustJSON(t, tj), "tokenizer_config.json": mustJSON(t, cfg)})
	tok, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	plain := tok.Encode("Once upon a time", false)
	withSpecial := tok.Encode("Once upon a time", true)
	want := append(append([]int{1}, plain...), 2)
	if !equalIDs(withSpecial, want) {
		t.Errorf("Encode(true) = %v, want %v", withSpecial, want)
	}
	if got := tok.ChatTemplateSource(); got != "DEFAULT" {
		t.Errorf("ChatTemplateSource = %q, want the default entry", got)
	}
	if got := tok.SpecialTokenStrings()["bos_token"]; got != "<s>" {
		t.Errorf("bos_token = %q, want <s>", got)
	}

	// The same files loaded as a .json path pick up the sibling config.
	tok2, err := Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	if got := tok2.Encode("Once upon a time", true); !equalIDs(got, want) {
		t.Errorf("via tokenizer.json path: Encode(true) = %v, want %v", got, want)
	}
}

// TestGGUFMetadataLenientTypes: ids and flags may come as any integer width
// and arrays as typed slices or []any.
func TestGGUFMetadataLenientTypes(t *testing.T) {
	ref := ggufStoriesTokenizer(t)
	md, err := readGGUFMetadata(shared.Path(t, "models/stories260K/stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	md["tokenizer.ggml.bos_token_id"] = int64(1)
	md["tokenizer.ggml.eos_token_id"] = int(2)
	md["tokenizer.ggml.unknown_token_id"] = uint64(0)
	md["tokenizer.ggml.add_bos_token"] = false
	md["tokenizer.chat_template"] = "{{ messages }}"
	tokens, _ := mdStrings(md, "tokenizer.ggml.tokens")
	md["tokenizer.ggml.tokens"] = tokens // []string instead of []any
	tok, err := FromGGUFMetadata(md)
	if err != nil {
		t.Fatal(err)
	}
	text := "Lily liked the big red ball."
	if got, want := tok.Encode(text, true), ref.Encode(text, false); !equalIDs(got, want) {
		t.Errorf("with add_bos_token=false, Encode(true) = %v, want %v", got, want)
	}
	if tok.BOS() != 1 || tok.EOS() != 2 || tok.ChatTemplateSource() != "{{ messages }}" {
		t.Errorf("BOS/EOS/template = %d/%d/%q", tok.BOS(), tok.EOS(), tok.ChatTemplateSource())
	}
}

// TestAddedTokenMatching covers the matching rules on a real vocabulary:
// leftmost-longest among overlapping added tokens, and no match inside a
// longer look-alike.
func TestAddedTokenMatching(t *testing.T) {
	tok := hfTokenizer(t, "qwen3")
	imStart, _ := tok.TokenID("<|im_start|>")
	for _, tc := range []struct {
		text string
		want []int // the added-token ids that must appear, in order
	}{
		{"<|im_start|>user", []int{imStart}},
		{"<|im_start|<|im_start|>", []int{imStart}},
		{"<|im_start", nil},
	} {
		var got []int
		for _, id := range tok.Encode(tc.text, false) {
			if _, added := tok.addedByID[id]; added {
				got = append(got, id)
			}
		}
		if !equalIDs(got, tc.want) {
			t.Errorf("%q: added tokens %v, want %v", tc.text, got, tc.want)
		}
	}
	if got := tok.Decode(tok.Encode("<|im_start|>user\nhi<|im_end|>", false), true); strings.Contains(got, "<|") {
		t.Errorf("skipSpecialTokens left special text in %q", got)
	}
}

// TestConcurrentUse: a Tokenizer is shared by many requests at once (the
// word cache is the only mutable state).
func TestConcurrentUse(t *testing.T) {
	tok := hfTokenizer(t, "mistral")
	lines := readExpected(t, "mistral")
	errs := make(chan string, 4)
	for w := 0; w < 4; w++ {
		go func(w int) {
			for i := w; i < len(lines); i += 2 {
				l := lines[i]
				if got := tok.Encode(l.Text, true); !equalIDs(got, l.IDsWithSpecial) {
					errs <- l.Text
					return
				}
				if got := tok.Decode(l.IDs, false); got != l.Decoded {
					errs <- l.Text
					return
				}
			}
			errs <- ""
		}(w)
	}
	for w := 0; w < 4; w++ {
		if bad := <-errs; bad != "" {
			t.Errorf("concurrent encode/decode disagreed on %q", bad)
		}
	}
}
