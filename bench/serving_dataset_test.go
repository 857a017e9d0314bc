package bench

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gosling-ai/gosling/internal/shared"
)

// TestRandomTextPrompts: with a real tokenizer, each prompt's text
// encodes (BOS included) to the length recorded for it, which is the
// length drawn, and the shared prefix starts every prompt.
func TestRandomTextPrompts(t *testing.T) {
	for _, path := range []string{"models/stories260K/stories260K.gguf", "models/stories260K-hf"} {
		tok, err := LoadTokenizer(shared.Path(t, path))
		if err != nil {
			t.Fatal(err)
		}
		o := ServingOptions{NumPrompts: 40, InputLen: 60, OutputLen: 9, RangeRatio: 0.3, SharedPrefixLen: 12, Seed: 4}
		ps := randomTextPrompts(o, tok)
		exact := 0
		for i, p := range ps {
			ids := tok.Encode(p.text, true)
			if len(ids) != p.promptLen || p.ids != nil {
				t.Fatalf("%s: prompt %d encodes to %d tokens, recorded %d", path, i, len(ids), p.promptLen)
			}
			if p.promptLen < 13 || p.promptLen > 61 || p.outputLen < 2 || p.outputLen > 9 {
				t.Errorf("%s: prompt %d: %d tokens, output %d", path, i, p.promptLen, p.outputLen)
			}
			if !slices.Equal(ids[:8], tok.Encode(ps[0].text, true)[:8]) {
				t.Errorf("%s: prompt %d does not start with the shared prefix", path, i)
			}
			if i > 0 && p.text == ps[0].text {
				t.Errorf("%s: prompt %d repeats prompt 0", path, i)
			}
		}
		// The drawn lengths are hit; a merge across the cut may miss one.
		for i, p := range randomTextPrompts(ServingOptions{NumPrompts: 40, InputLen: 50, OutputLen: 5, RangeRatio: 1, Seed: 4}, tok) {
			if p.promptLen == 50 {
				exact++
			} else if p.promptLen < 48 || p.promptLen > 52 {
				t.Errorf("%s: prompt %d has %d tokens, want 50", path, i, p.promptLen)
			}
		}
		if exact < 36 {
			t.Errorf("%s: %d of 40 prompts have the drawn length", path, exact)
		}
	}
}

func TestShareGPTPrompts(t *testing.T) {
	tok, err := LoadTokenizer(shared.Path(t, "models/stories260K-hf"))
	if err != nil {
		t.Fatal(err)
	}
	turn := func(from, v string) shareGPTTurn { return shareGPTTurn{From: from, Value: v} }
	entries := []shareGPTEntry{
		{Conversations: []shareGPTTurn{turn("human", "Once upon a time there was a dog."), turn("gpt", "The dog was happy.")}},
		{Conversation: []shareGPTTurn{turn("user", "Lily saw a big tree."), turn("assistant", "She climbed it and saw the sea.")}},
		{Conversations: []shareGPTTurn{turn("human", "no reply")}},
		{Conversations: []shareGPTTurn{turn("human", ""), turn("gpt", "nothing was asked")}},
		{Conversations: []shareGPTTurn{turn("human", "Tom ran."), turn("gpt", "")}},
	}
	raw, _ := json.Marshal(entries)
	path := filepath.Join(t.TempDir(), "sharegpt.json")
	os.WriteFile(path, raw, 0o644)
	o := ServingOptions{NumPrompts: 2, DatasetPath: path, Seed: 1}
	ps, err := shareGPTPrompts(o, tok, 0)
	if err != nil {
		t.Fatal(err)
	}
	texts := []string{ps[0].text, ps[1].text}
	slices.Sort(texts)
	if !slices.Equal(texts, []string{"Lily saw a big tree.", "Once upon a time there was a dog."}) {
		t.Errorf("prompts %q: want the two complete conversations", texts)
	}
	for _, p := range ps {
		if p.promptLen != len(tok.Encode(p.text, true)) {
			t.Errorf("%q: %d tokens recorded", p.text, p.promptLen)
		}
	}
	if _, err := shareGPTPrompts(ServingOptions{NumPrompts: 3, DatasetPath: path}, tok, 0); err == nil {
		t.Errorf("3 prompts from 2 usable conversations: no error")
	}
	o.ShareGPTOutputLen = 7
	if ps, _ = shareGPTPrompts(o, tok, 0); ps[0].outputLen != 7 || ps[1].outputLen != 7 {
		t.Errorf("--sharegpt-output-len 7: output lengths %d, %d", ps[0].outputLen, ps[1].outputLen)
	}
	// A context of 12 tokens leaves out what does not fit.
	if _, err := shareGPTPrompts(ServingOptions{NumPrompts: 2, DatasetPath: path}, tok, 12); err == nil {
		t.Errorf("context 12: both conversations kept")
	}
}
