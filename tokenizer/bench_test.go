package tokenizer

import (
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/internal/shared"
)

// benchText is about 100 KB of mixed prose, code and other scripts built from
// the expected-encoding corpus.
func benchText(b *testing.B) string {
	var sb strings.Builder
	lines := readExpected(b, "llama3")
	for sb.Len() < 100_000 {
		for _, l := range lines {
			sb.WriteString(l.Text)
			sb.WriteByte('\n')
		}
	}
	return sb.String()
}

func benchmarkEncode(b *testing.B, load func(testing.TB) *Tokenizer) {
	tok := load(b)
	text := benchText(b)
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// A fresh word cache each round measures the cold path too.
		tok.resetCaches()
		tok.Encode(text, true)
	}
}

func BenchmarkEncodeLlama3(b *testing.B) {
	benchmarkEncode(b, func(tb testing.TB) *Tokenizer { return hfTokenizer(tb, "llama3") })
}

func BenchmarkEncodeQwen3(b *testing.B) {
	benchmarkEncode(b, func(tb testing.TB) *Tokenizer { return hfTokenizer(tb, "qwen3") })
}

func BenchmarkEncodeDeepSeekV3(b *testing.B) {
	benchmarkEncode(b, func(tb testing.TB) *Tokenizer { return hfTokenizer(tb, "deepseek_v3") })
}

func BenchmarkEncodeMistral(b *testing.B) {
	benchmarkEncode(b, func(tb testing.TB) *Tokenizer { return hfTokenizer(tb, "mistral") })
}

func BenchmarkEncodeLlama2C(b *testing.B) {
	benchmarkEncode(b, func(tb testing.TB) *Tokenizer { return llama2cTokenizer(tb) })
}

func BenchmarkDecodeStreamLlama3(b *testing.B) {
	tok := hfTokenizer(b, "llama3")
	ids := tok.Encode(benchText(b), false)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s := tok.NewDecodeStream(false)
		for _, id := range ids {
			s.Push(id)
		}
		s.Flush()
	}
}

func BenchmarkLoadLlama3(b *testing.B) {
	dir := shared.Path(b, "tokenizers/llama3")
	for i := 0; i < b.N; i++ {
		if _, err := Load(dir); err != nil {
			b.Fatal(err)
		}
	}
}
