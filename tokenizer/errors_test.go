package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/internal/shared"
)

// TestLoadErrors: broken inputs fail with an error that names the file and
// says what is wrong (and, for unsupported parts, what is supported).
func TestLoadErrors(t *testing.T) {
	storiesTJ, err := os.ReadFile(shared.Path(t, "models/stories260K-hf/tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	tok512, err := os.ReadFile(shared.Path(t, "models/stories260K/tok512.bin"))
	if err != nil {
		t.Fatal(err)
	}
	gguf, err := os.ReadFile(shared.Path(t, "models/stories260K/stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	withModel := func(model string) []byte {
		return []byte(`{"version":"1.0","added_tokens":[],"normalizer":null,"pre_tokenizer":null,"post_processor":null,"decoder":null,"model":` + model + `}`)
	}
	tests := []struct {
		name string
		file string // name inside the temp dir
		data []byte
		want []string // substrings of the error
	}{
		{"truncated tokenizer.json", "tokenizer.json", storiesTJ[:len(storiesTJ)/2], []string{"tokenizer.json", "invalid JSON"}},
		{"not JSON", "broken.json", []byte("{this is not json"), []string{"broken.json", "invalid JSON"}},
		{"no model", "tokenizer.json", []byte(`{"version":"1.0"}`), []string{"tokenizer.json", `no "model"`}},
		{"unknown model type", "tokenizer.json", withModel(`{"type":"Unigram","vocab":[["a",0.0]]}`),
			[]string{"tokenizer.json", `unsupported model type "Unigram"`, "supported: BPE"}},
		{"merge outside vocabulary", "tokenizer.json", withModel(`{"type":"BPE","vocab":{"a":0,"b":1},"merges":["a b"]}`),
			[]string{"tokenizer.json", `"ab"`, "missing from the vocabulary"}},
		{"bad merge line", "tokenizer.json", withModel(`{"type":"BPE","vocab":{"a":0},"merges":["a"]}`),
			[]string{"tokenizer.json", "merges[0]"}},
		{"unknown pre-tokenizer", "tokenizer.json", []byte(`{"pre_tokenizer":{"type":"CharDelimiterSplit","delimiter":"x"},"model":{"type":"BPE","vocab":{},"merges":[]}}`),
			[]string{"tokenizer.json", `unsupported pre_tokenizer type "CharDelimiterSplit"`, "Metaspace"}},
		{"unknown normalizer", "tokenizer.json", []byte(`{"normalizer":{"type":"Precompiled","precompiled_charsmap":""},"model":{"type":"BPE","vocab":{},"merges":[]}}`),
			[]string{"tokenizer.json", `unsupported normalizer type "Precompiled"`, "NFC"}},
		{"unknown decoder", "tokenizer.json", []byte(`{"decoder":{"type":"WordPiece"},"model":{"type":"BPE","vocab":{},"merges":[]}}`),
			[]string{"tokenizer.json", `unsupported decoder type "WordPiece"`, "ByteFallback"}},
		{"bad split regex", "tokenizer.json", []byte(`{"pre_tokenizer":{"type":"Split","pattern":{"Regex":"(unclosed"},"behavior":"Isolated","invert":false},"model":{"type":"BPE","vocab":{},"merges":[]}}`),
			[]string{"tokenizer.json", "compile regex"}},
		{"truncated llama2.c", "tok512.bin", tok512[:len(tok512)-3], []string{"tok512.bin", "truncated"}},
		{"llama2.c header only", "tok512.bin", tok512[:2], []string{"tok512.bin", "truncated"}},
		{"llama2.c garbage", "tokenizer.bin", []byte("\xff\xff\xff\xff garbage garbage"), []string{"tokenizer.bin", "max_token_length"}},
		{"truncated GGUF", "model.gguf", gguf[:5000], []string{"model.gguf", "truncated"}},
		{"GGUF bad version", "model.gguf", append([]byte("GGUF\x09\x00\x00\x00"), make([]byte, 16)...), []string{"model.gguf", "unsupported GGUF version 9"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeTemp(t, map[string][]byte{tc.file: tc.data})
			_, err := Load(filepath.Join(dir, tc.file))
			if err == nil {
				t.Fatal("Load succeeded, want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}

	t.Run("directory without tokenizer.json", func(t *testing.T) {
		dir := t.TempDir()
		if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "no tokenizer.json") {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("missing file", func(t *testing.T) {
		if _, err := Load(filepath.Join(t.TempDir(), "nope.json")); err == nil {
			t.Error("Load of a missing file succeeded")
		}
	})
}

// TestGGUFMetadataErrors: unsupported models and pre-tokenizers are named,
// with the supported ones listed.
func TestGGUFMetadataErrors(t *testing.T) {
	base := func() map[string]any {
		return map[string]any{
			"tokenizer.ggml.model":  "gpt2",
			"tokenizer.ggml.tokens": []any{"a", "b", "ab"},
			"tokenizer.ggml.merges": []any{"a b"},
		}
	}
	tests := []struct {
		name   string
		mutate func(map[string]any)
		want   []string
	}{
		{"unknown model", func(md map[string]any) { md["tokenizer.ggml.model"] = "bert" },
			[]string{`unsupported tokenizer.ggml.model "bert"`, "llama, gpt2"}},
		{"unknown pre", func(md map[string]any) { md["tokenizer.ggml.pre"] = "chatglm-bpe" },
			[]string{`unsupported tokenizer.ggml.pre "chatglm-bpe"`, "llama-bpe", "qwen2", "deepseek-v3"}},
		{"no tokens", func(md map[string]any) { delete(md, "tokenizer.ggml.tokens") }, []string{"tokenizer.ggml.tokens"}},
		{"no model", func(md map[string]any) { delete(md, "tokenizer.ggml.model") }, []string{"tokenizer.ggml.model is missing"}},
		{"no merges", func(md map[string]any) { delete(md, "tokenizer.ggml.merges") }, []string{"tokenizer.ggml.merges is required"}},
		{"llama without scores", func(md map[string]any) { md["tokenizer.ggml.model"] = "llama" }, []string{"tokenizer.ggml.scores is required"}},
		{"wrong type", func(md map[string]any) { md["tokenizer.ggml.tokens"] = []any{"a", 3} }, []string{"tokenizer.ggml.tokens[1]"}},
		{"short token_type", func(md map[string]any) { md["tokenizer.ggml.token_type"] = []any{int32(1)} }, []string{"token_type has 1 entries for 3 tokens"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			md := base()
			tc.mutate(md)
			_, err := FromGGUFMetadata(md)
			if err == nil {
				t.Fatal("FromGGUFMetadata succeeded, want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
	// The minimal metadata itself is valid.
	tok, err := FromGGUFMetadata(base())
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.Encode("ab", false); !equalIDs(got, []int{2}) {
		t.Errorf("Encode(ab) = %v, want [2]", got)
	}
}
