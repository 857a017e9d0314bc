package bench

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/tokenizer"
)

// Datasets with a tokenizer: prompts are text, and their lengths are what
// the tokenizer (the served model's) makes of them, special tokens (BOS)
// included, so that they count what the server will prefill.

// LoadTokenizer opens the tokenizer at path: a tokenizer file or
// directory (tokenizer.Load), or failing that a model checkpoint's own.
func LoadTokenizer(path string) (*tokenizer.Tokenizer, error) {
	tok, err := tokenizer.Load(path)
	if err == nil {
		return tok, nil
	}
	ck, cerr := model.Open(path)
	if cerr != nil {
		return nil, fmt.Errorf("%s is neither a tokenizer (%v) nor a model (%v)", path, err, cerr)
	}
	// The checkpoint stays open: a tokenizer read from GGUF metadata may
	// refer to its mapped memory.
	tok, err = engine.LoadTokenizer(ck, "")
	if err == nil && tok == nil {
		err = fmt.Errorf("the model at %s carries no tokenizer; pass --tokenizer", path)
	}
	return tok, err
}

// textOf makes text of about n tokens (specials included) from body
// token ids: the ids are decoded, and the text re-encoded and cut until
// its own encoding has n tokens. It returns the text and its true length.
func textOf(tok *tokenizer.Tokenizer, body []int, n int, more func() int) (string, int) {
	special := len(tok.Encode("", true))
	want := max(n-special, 1)
	text := ""
	got := 0
	for range 8 {
		// Decoding then encoding canonicalises the ids (merges, byte
		// fallbacks); a cut of canonical ids decodes to text that encodes
		// back to them, up to merges across the cut.
		canon := tok.Encode(tok.Decode(body, true), false)
		for len(canon) < want {
			body = append(body, more())
			canon = tok.Encode(tok.Decode(body, true), false)
		}
		text = tok.Decode(canon[:want], true)
		got = len(tok.Encode(text, true))
		if got == n {
			break
		}
		body = canon[:want]
		want += n - got
		if want < 1 {
			break
		}
	}
	return text, got
}

// textTokens are the ids that are text by themselves: not special, and
// whole printable UTF-8 (no byte-fallback piece of a character, whose
// text would re-encode to other tokens). Random text is drawn from them.
func textTokens(tok *tokenizer.Tokenizer) []int {
	var ids []int
	for id := range tok.VocabSize() {
		b, ok := tok.TokenBytes(id)
		if ok && utf8.Valid(b) && !strings.ContainsFunc(string(b), func(r rune) bool { return !unicode.IsPrint(r) && r != ' ' }) {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		ids = []int{firstRandomID}
	}
	return ids
}

// randomTextPrompts is SGLang's random dataset as text: random token ids
// of the drawn length made into text by tok, after a shared prefix of
// SharedPrefixLen such tokens.
func randomTextPrompts(o ServingOptions, tok *tokenizer.Tokenizer) []servingPrompt {
	rng := rand.New(rand.NewPCG(o.Seed, 1))
	ids := textTokens(tok)
	token := func() int { return ids[rng.IntN(len(ids))] }
	draw := func(n int) []int {
		ids := make([]int, n)
		for i := range ids {
			ids[i] = token()
		}
		return ids
	}
	var prefix []int
	if o.SharedPrefixLen > 0 {
		text, _ := textOf(tok, draw(o.SharedPrefixLen), o.SharedPrefixLen, token)
		prefix = tok.Encode(text, false)
	}
	prompts := make([]servingPrompt, o.NumPrompts)
	for i := range prompts {
		n := max(lengthIn(rng, o.InputLen, o.RangeRatio), o.SharedPrefixLen+1)
		out := lengthIn(rng, o.OutputLen, o.RangeRatio)
		body := append(append([]int(nil), prefix...), draw(n-len(prefix))...)
		text, got := textOf(tok, body, n, token)
		prompts[i] = servingPrompt{text: text, promptLen: got, outputLen: out}
	}
	return prompts
}

// shareGPTEntry is one conversation of a ShareGPT-style file; the first
// turn is the prompt and the second the reply whose length the request
// asks for.
type shareGPTEntry struct {
	Conversations []shareGPTTurn `json:"conversations"`
	Conversation  []shareGPTTurn `json:"conversation"`
}

type shareGPTTurn struct {
	From  string `json:"from"`
	Value string `json:"value"`
}

// shareGPTPrompts draws NumPrompts conversations of the file at
// DatasetPath in a seeded order, as SGLang's sharegpt dataset does: the
// output length is the reply's token count (or ShareGPTOutputLen), and
// conversations with a prompt or reply under 2 tokens, or longer together
// than the context, are passed over.
func shareGPTPrompts(o ServingOptions, tok *tokenizer.Tokenizer, contextLen int) ([]servingPrompt, error) {
	data, err := os.ReadFile(o.DatasetPath)
	if err != nil {
		return nil, fmt.Errorf("--dataset-path: %w", err)
	}
	var entries []shareGPTEntry
	if err := json.Unmarshal(data, &entries); err != nil {
		return nil, fmt.Errorf("--dataset-path %s: not a ShareGPT JSON list of {\"conversations\": [{\"from\", \"value\"}, ...]}: %w", o.DatasetPath, err)
	}
	rng := rand.New(rand.NewPCG(o.Seed, 3))
	order := rng.Perm(len(entries))
	var prompts []servingPrompt
	for _, i := range order {
		conv := entries[i].Conversations
		if conv == nil {
			conv = entries[i].Conversation
		}
		if len(conv) < 2 {
			continue
		}
		promptLen := len(tok.Encode(conv[0].Value, true))
		outputLen := o.ShareGPTOutputLen
		if outputLen <= 0 {
			outputLen = len(tok.Encode(conv[1].Value, false))
		}
		if promptLen < 2 || outputLen < 2 || contextLen > 0 && promptLen+outputLen > contextLen {
			continue
		}
		prompts = append(prompts, servingPrompt{text: conv[0].Value, promptLen: promptLen, outputLen: outputLen})
		if len(prompts) == o.NumPrompts {
			return prompts, nil
		}
	}
	return nil, fmt.Errorf("--dataset-path %s has %d usable conversations (of %d), fewer than --num-prompts %d",
		o.DatasetPath, len(prompts), len(entries), o.NumPrompts)
}
