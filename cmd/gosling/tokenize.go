package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/tokenizer"
)

type tokenizeCmd struct {
	Tokenizer         string `help:"Tokenizer: tokenizer.json, its directory, a .gguf, or a llama2.c tokenizer .bin." type:"path" xor:"source" required:""`
	ModelPath         string `help:"Use the tokenizer of this model instead." type:"path" xor:"source" required:""`
	AddSpecialTokens  bool   `help:"Add BOS/EOS as the tokenizer's post-processor says."`
	Decode            bool   `help:"Read {\"ids\": [...]} lines and write {\"text\": ...}."`
	SkipSpecialTokens bool   `help:"With --decode, drop special tokens from the text."`
}

func (c *tokenizeCmd) Run() error {
	tok, err := c.load()
	if err != nil {
		return err
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 64<<20), 64<<20)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	for line := 1; in.Scan(); line++ {
		if len(in.Bytes()) == 0 {
			continue
		}
		var rec struct {
			Text *string `json:"text"`
			IDs  []int   `json:"ids"`
		}
		if err := json.Unmarshal(in.Bytes(), &rec); err != nil {
			return fmt.Errorf("stdin line %d: %w", line, err)
		}
		if c.Decode {
			if rec.IDs == nil {
				return fmt.Errorf("stdin line %d: --decode needs {\"ids\": [...]}", line)
			}
			for _, id := range rec.IDs {
				if id < 0 || id >= tok.VocabSize() {
					return fmt.Errorf("stdin line %d: token id %d outside the vocabulary [0, %d)", line, id, tok.VocabSize())
				}
			}
			err = enc.Encode(map[string]string{"text": tok.Decode(rec.IDs, c.SkipSpecialTokens)})
		} else {
			if rec.Text == nil {
				return fmt.Errorf("stdin line %d: expected {\"text\": ...}", line)
			}
			ids := tok.Encode(*rec.Text, c.AddSpecialTokens)
			if ids == nil {
				ids = []int{}
			}
			err = enc.Encode(map[string][]int{"ids": ids})
		}
		if err != nil {
			return err
		}
	}
	return in.Err()
}

func (c *tokenizeCmd) load() (*tokenizer.Tokenizer, error) {
	if c.Tokenizer != "" {
		return tokenizer.Load(c.Tokenizer)
	}
	ck, err := model.Open(c.ModelPath)
	if err != nil {
		return nil, err
	}
	defer ck.Close()
	tok, err := engine.LoadTokenizer(ck, "")
	if err == nil && tok == nil {
		err = fmt.Errorf("%s carries no tokenizer; use --tokenizer", c.ModelPath)
	}
	return tok, err
}
