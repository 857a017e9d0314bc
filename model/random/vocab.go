package random

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"strings"

	"github.com/gosling-ai/gosling/model/gguf"
)

// The vocabulary of a random model: what run.c and gosling's llama2.c and
// GGUF ("llama") tokenizers expect first (<unk>, <s>, </s>, the 256 byte
// tokens), then printable ASCII, then two- and three-letter pieces with and
// without a leading space until the vocabulary is full. It makes text
// prompts encodable; the weights make the output noise.
const (
	byteTokens = 3 // id of <0x00>
	minVocab   = byteTokens + 256
)

func vocabulary(n int) []string {
	v := []string{"<unk>", "<s>", "</s>"}
	for b := range 256 {
		v = append(v, fmt.Sprintf("<0x%02X>", b))
	}
	for c := byte(' '); c <= '~' && len(v) < n; c++ {
		v = append(v, string(c))
	}
	seen := map[string]bool{}
	for _, s := range v {
		seen[s] = true
	}
	add := func(s string) {
		if len(v) < n && !seen[s] {
			seen[s] = true
			v = append(v, s)
		}
	}
	for length := 2; len(v) < n; length++ {
		var gen func(prefix string)
		gen = func(prefix string) {
			if len(v) >= n {
				return
			}
			if len(prefix) == length {
				add(" " + prefix)
				add(prefix)
				return
			}
			for c := 'a'; c <= 'z'; c++ {
				gen(prefix + string(c))
			}
		}
		gen("")
	}
	return v
}

// score ranks merges: earlier (shorter) pieces first.
func score(id int) float32 {
	if id < minVocab {
		return 0
	}
	return -float32(id)
}

// writeLlama2CTokenizer writes run.c's tokenizer.bin: max_token_length,
// then per token its score, byte length and bytes.
func writeLlama2CTokenizer(path string, vocab int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	pieces := vocabulary(vocab)
	maxLen := 0
	for _, p := range pieces {
		maxLen = max(maxLen, len(p))
	}
	put := func(v uint32) { _ = binary.Write(w, binary.LittleEndian, v) }
	put(uint32(maxLen))
	for id, p := range pieces {
		put(math.Float32bits(score(id)))
		put(uint32(len(p)))
		w.WriteString(p)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// ggufTokenizer is the tokenizer.ggml.* metadata of the same vocabulary
// (SentencePiece spells the space ▁).
func ggufTokenizer(vocab int) []gguf.KV {
	pieces := vocabulary(vocab)
	tokens := make([]string, len(pieces))
	scores := make([]float32, len(pieces))
	types := make([]int32, len(pieces))
	for id, p := range pieces {
		tokens[id] = strings.ReplaceAll(p, " ", "▁")
		scores[id] = score(id)
		switch {
		case id == 0:
			types[id] = 2 // unknown
		case id < byteTokens:
			types[id] = 3 // control
		case id < minVocab:
			types[id] = 6 // byte
		default:
			types[id] = 1 // normal
		}
	}
	return []gguf.KV{
		{Key: "tokenizer.ggml.model", Value: "llama"},
		{Key: "tokenizer.ggml.tokens", Value: tokens},
		{Key: "tokenizer.ggml.scores", Value: scores},
		{Key: "tokenizer.ggml.token_type", Value: types},
		{Key: "tokenizer.ggml.unknown_token_id", Value: uint32(0)},
		{Key: "tokenizer.ggml.bos_token_id", Value: uint32(1)},
		{Key: "tokenizer.ggml.eos_token_id", Value: uint32(2)},
	}
}
