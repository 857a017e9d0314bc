package tokenizer

import (
	"math/rand"
	"strings"
	"testing"
	"unicode/utf8"
)

// streamAll pushes ids one by one and checks every piece is valid UTF-8.
func streamAll(t *testing.T, tok *Tokenizer, ids []int, skip bool) string {
	t.Helper()
	s := tok.NewDecodeStream(skip)
	var sb strings.Builder
	for i, id := range ids {
		out := s.Push(id)
		if !utf8.ValidString(out) {
			t.Fatalf("Push #%d (id %d) returned invalid UTF-8 %q", i, id, out)
		}
		sb.WriteString(out)
	}
	sb.WriteString(s.Flush())
	return sb.String()
}

type streamCase struct {
	name string
	data string // encode_expected corpus
	load func(testing.TB) *Tokenizer
}

var streamCases = []streamCase{
	{"llama3", "llama3", func(tb testing.TB) *Tokenizer { return hfTokenizer(tb, "llama3") }},
	{"qwen3", "qwen3", func(tb testing.TB) *Tokenizer { return hfTokenizer(tb, "qwen3") }},
	{"deepseek_v3", "deepseek_v3", func(tb testing.TB) *Tokenizer { return hfTokenizer(tb, "deepseek_v3") }},
	{"mistral", "mistral", func(tb testing.TB) *Tokenizer { return hfTokenizer(tb, "mistral") }},
	{"stories260K-hf", "stories260K", func(tb testing.TB) *Tokenizer { return hfTokenizer(tb, "stories260K") }},
	{"stories260K-llama2c", "stories260K", llama2cTokenizer},
	{"stories260K-gguf", "stories260K", ggufStoriesTokenizer},
}

// TestDecodeStreamMatchesDecode: for every reference line, streaming the ids
// (with and without special tokens, skipping them or not) gives exactly
// Decode's text, and no piece splits a UTF-8 character.
func TestDecodeStreamMatchesDecode(t *testing.T) {
	for _, tc := range streamCases {
		t.Run(tc.name, func(t *testing.T) {
			tok := tc.load(t)
			lines := readExpected(t, tc.data)
			for i, l := range lines {
				for _, ids := range [][]int{l.IDs, l.IDsWithSpecial} {
					for _, skip := range []bool{false, true} {
						want := tok.Decode(ids, skip)
						if got := streamAll(t, tok, ids, skip); got != want {
							t.Fatalf("line %d %q skip=%v: stream %q, Decode %q", i+1, l.Text, skip, got, want)
						}
					}
				}
			}
			t.Logf("%s: %d lines streamed", tc.name, len(lines))
		})
	}
}

// TestDecodeStreamRandomIDs streams arbitrary id sequences, biased towards
// byte tokens and spaces so that partial characters, invalid byte runs and
// first-token strips all occur, and compares with Decode.
func TestDecodeStreamRandomIDs(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for _, tc := range streamCases {
		t.Run(tc.name, func(t *testing.T) {
			tok := tc.load(t)
			// Interesting ids: the tokens of a multilingual sample, byte
			// tokens, specials and random ones.
			var pool []int
			for _, l := range readExpected(t, tc.data)[:80] {
				pool = append(pool, l.IDsWithSpecial...)
			}
			for b := 0; b < 256; b++ {
				if id, ok := tok.TokenID(byteTokenName(b)); ok {
					pool = append(pool, id)
				}
			}
			for i := 0; i < 200; i++ {
				pool = append(pool, rng.Intn(tok.VocabSize()))
			}
			for trial := 0; trial < 300; trial++ {
				ids := make([]int, 1+rng.Intn(12))
				for i := range ids {
					ids[i] = pool[rng.Intn(len(pool))]
				}
				skip := trial%2 == 0
				if got, want := streamAll(t, tok, ids, skip), tok.Decode(ids, skip); got != want {
					t.Fatalf("ids %v skip=%v: stream %q, Decode %q", ids, skip, got, want)
				}
			}
		})
	}
}

func byteTokenName(b int) string {
	const hex = "0123456789ABCDEF"
	return "<0x" + string(hex[b>>4]) + string(hex[b&15]) + ">"
}

// TestDecodeStreamHoldsPartialCharacters: a character spread over byte
// tokens appears only once complete, and the first token's strip waits.
func TestDecodeStreamHoldsPartialCharacters(t *testing.T) {
	tok := hfTokenizer(t, "mistral")
	ids := tok.Encode("😀 ok", false) // ▁ then four <0xNN> byte tokens, then ▁ok
	s := tok.NewDecodeStream(false)
	var outs []string
	for _, id := range ids {
		outs = append(outs, s.Push(id))
	}
	outs = append(outs, s.Flush())
	joined := strings.Join(outs, "|")
	if strings.Join(outs, "") != "😀 ok" {
		t.Fatalf("stream pieces %q do not join to %q", joined, "😀 ok")
	}
	for _, o := range outs {
		if o != "" && o != "😀" && !strings.HasSuffix(o, "ok") {
			t.Errorf("unexpected piece %q in %q", o, joined)
		}
	}
}

// TestCleanUpSafeCut: clean-up applied to two parts cut at the safe point
// equals clean-up of the whole, for every split of texts full of patterns.
func TestCleanUpSafeCut(t *testing.T) {
	texts := []string{
		"it 's a ' quote ' ' here , and n't . ? ! 're 've 'm",
		" ' ' ' ' x",
		"a  ,b  .c ' 's ' 're",
		"don 't , won 't ' n't ' ' s",
	}
	for _, text := range texts {
		want := cleanUpTokenization(text)
		for i := 0; i <= len(text); i++ {
			head := text[:i]
			cut := cleanUpSafeCut(head)
			got := cleanUpTokenization(head[:cut]) + cleanUpTokenization(head[cut:]+text[i:])
			if got != want {
				t.Errorf("%q split at %d (cut %d): %q, want %q", text, i, cut, got, want)
			}
		}
	}
}

// TestDecodeStreamAfterContext: ids decoded after a context read as the
// rest of the whole text: Decode(context) + stream == Decode(context + ids)
// wherever the context's own text is a prefix of the whole (it is not when
// the cut splits a character, or a clean-up pattern spans it).
func TestDecodeStreamAfterContext(t *testing.T) {
	for _, tc := range streamCases {
		t.Run(tc.name, func(t *testing.T) {
			tok := tc.load(t)
			checked := 0
			for i, l := range readExpected(t, tc.data) {
				ids := l.IDsWithSpecial
				for cut := 1; cut < len(ids); cut++ {
					for _, skip := range []bool{false, true} {
						whole, head := tok.Decode(ids, skip), tok.Decode(ids[:cut], skip)
						if !strings.HasPrefix(whole, head) || strings.ContainsRune(whole, utf8.RuneError) {
							continue
						}
						s := tok.NewDecodeStreamAfter(ids[:cut], skip)
						var sb strings.Builder
						for _, id := range ids[cut:] {
							sb.WriteString(s.Push(id))
						}
						sb.WriteString(s.Flush())
						if got := sb.String(); head+got != whole {
							t.Fatalf("line %d %q cut %d skip=%v: %q after %q, want %q", i+1, l.Text, cut, skip, got, head, whole[len(head):])
						}
						checked++
					}
				}
			}
			if checked == 0 {
				t.Fatal("no cut checked")
			}
		})
	}
}
