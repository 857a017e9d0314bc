package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
)

// hfFile is the top level of tokenizer.json.
type hfFile struct {
	AddedTokens   []hfAddedToken  `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	Model         json.RawMessage `json:"model"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
}

type hfAddedToken struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	Lstrip     bool   `json:"lstrip"`
	Rstrip     bool   `json:"rstrip"`
	Normalized *bool  `json:"normalized"`
	Special    bool   `json:"special"`
}

type hfModel struct {
	Type                    string          `json:"type"`
	Vocab                   json.RawMessage `json:"vocab"`
	Merges                  json.RawMessage `json:"merges"`
	UnkToken                *string         `json:"unk_token"`
	ContinuingSubwordPrefix *string         `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string         `json:"end_of_word_suffix"`
	FuseUnk                 bool            `json:"fuse_unk"`
	ByteFallback            bool            `json:"byte_fallback"`
	IgnoreMerges            bool            `json:"ignore_merges"`
	// dropout is ignored: it is a training-time regularizer, and serving
	// wants the deterministic encoding.
}

// hfConfig holds the parts of tokenizer_config.json the tokenizer uses.
type hfConfig struct {
	ChatTemplate json.RawMessage `json:"chat_template"`
	AddBOSToken  *bool           `json:"add_bos_token"`
	AddEOSToken  *bool           `json:"add_eos_token"`
	// Named special tokens: a string, {"content": ...}, or null.
	BOSToken  json.RawMessage `json:"bos_token"`
	EOSToken  json.RawMessage `json:"eos_token"`
	UnkToken  json.RawMessage `json:"unk_token"`
	PadToken  json.RawMessage `json:"pad_token"`
	SepToken  json.RawMessage `json:"sep_token"`
	ClsToken  json.RawMessage `json:"cls_token"`
	MaskToken json.RawMessage `json:"mask_token"`
	// transformers tidies decoded text (" ." -> ".", " 's" -> "'s") when set.
	CleanUpTokenizationSpaces *bool `json:"clean_up_tokenization_spaces"`
}

// FromHFFiles loads a Hugging Face tokenizer.json and, when configPath is not
// "", its tokenizer_config.json (chat template, BOS/EOS names, and
// add_bos_token/add_eos_token for files without a post_processor).
func FromHFFiles(tokenizerJSONPath, tokenizerConfigPath string) (*Tokenizer, error) {
	data, err := os.ReadFile(tokenizerJSONPath)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer %s: %w", tokenizerJSONPath, err)
	}
	var cfg *hfConfig
	if tokenizerConfigPath != "" {
		cfgData, err := os.ReadFile(tokenizerConfigPath)
		if err != nil {
			return nil, fmt.Errorf("load tokenizer config %s: %w", tokenizerConfigPath, err)
		}
		cfg = new(hfConfig)
		if err := json.Unmarshal(cfgData, cfg); err != nil {
			return nil, fmt.Errorf("load tokenizer config %s: invalid JSON: %w", tokenizerConfigPath, err)
		}
	}
	t, err := fromHFJSON(data, cfg)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer %s: %w", tokenizerJSONPath, err)
	}
	return t, nil
}

func fromHFJSON(data []byte, cfg *hfConfig) (*Tokenizer, error) {
	var f hfFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("invalid JSON (truncated or not a tokenizer.json?): %w", err)
	}
	if isNull(f.Model) {
		return nil, errors.New(`no "model" section`)
	}
	t := newTokenizer()
	var err error
	if t.normalizer, err = parseNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	if t.preTok, err = parsePreTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	if err := t.loadHFModel(f.Model); err != nil {
		return nil, err
	}
	if t.post, err = parsePostProcessor(f.PostProcessor); err != nil {
		return nil, err
	}
	steps, err := parseDecoder(f.Decoder)
	if err != nil {
		return nil, err
	}
	t.decoder = newDecoderChain(steps...)

	for _, a := range f.AddedTokens {
		normalized := !a.Special
		if a.Normalized != nil {
			normalized = *a.Normalized
		}
		if a.ID < 0 || a.ID >= len(t.pieces)+maxIDGap {
			return nil, fmt.Errorf("added token %q has implausible id %d (vocabulary size %d)", a.Content, a.ID, len(t.pieces))
		}
		t.addAddedToken(&addedToken{
			id: a.ID, content: a.Content, special: a.Special,
			lstrip: a.Lstrip, rstrip: a.Rstrip, singleWord: a.SingleWord, normalized: normalized,
		})
	}
	t.finishAdded()

	if cfg != nil {
		if err := t.applyHFConfig(cfg, !isNull(f.PostProcessor)); err != nil {
			return nil, err
		}
	}
	if t.bos < 0 {
		// Without a config, the template's leading special token is the BOS.
		if tp, ok := t.post.(templatePost); ok && len(tp.items) > 0 && !tp.items[0].sequence && len(tp.items[0].ids) == 1 {
			t.bos = tp.items[0].ids[0]
		}
	}
	for name, id := range map[string]int{"bos_token": t.bos, "eos_token": t.eos} {
		if _, ok := t.specialStrings[name]; !ok && id >= 0 {
			t.specialStrings[name] = t.TokenString(id)
		}
	}
	return t, nil
}

const supportedModels = "BPE"

func (t *Tokenizer) loadHFModel(raw json.RawMessage) error {
	var m hfModel
	if err := json.Unmarshal(raw, &m); err != nil {
		return fmt.Errorf("model: %w", err)
	}
	if m.Type == "" && !isNull(m.Merges) {
		m.Type = "BPE" // old files omit the type
	}
	if m.Type != "BPE" {
		return fmt.Errorf("unsupported model type %q (supported: %s)", m.Type, supportedModels)
	}
	vocab := map[string]int{}
	if err := json.Unmarshal(m.Vocab, &vocab); err != nil {
		return fmt.Errorf("model vocab: %w", err)
	}
	merges, err := parseHFMerges(m.Merges)
	if err != nil {
		return err
	}
	prefix := ""
	if m.ContinuingSubwordPrefix != nil {
		prefix = *m.ContinuingSubwordPrefix
	}
	bpe, err := newBPEModel(vocab, merges, prefix)
	if err != nil {
		return fmt.Errorf("model: %w", err)
	}
	if m.EndOfWordSuffix != nil {
		bpe.endOfWordSuffix = *m.EndOfWordSuffix
	}
	bpe.fuseUnk, bpe.byteFallback, bpe.ignoreMerges = m.FuseUnk, m.ByteFallback, m.IgnoreMerges
	if m.UnkToken != nil {
		id, ok := vocab[*m.UnkToken]
		if !ok {
			return fmt.Errorf("model unk_token %q is not in the vocabulary", *m.UnkToken)
		}
		bpe.unkID = id
	}
	t.vocab = vocab
	t.model = bpe
	if t.pieces, err = piecesFromVocab(vocab); err != nil {
		return fmt.Errorf("model vocab: %w", err)
	}
	return nil
}

// maxIDGap bounds how far ids may run past the number of tokens, so that a
// corrupt file cannot make the id table absurdly large.
const maxIDGap = 1 << 20

func piecesFromVocab(vocab map[string]int) ([]string, error) {
	n := 0
	for s, id := range vocab {
		if id < 0 || id >= len(vocab)+maxIDGap {
			return nil, fmt.Errorf("token %q has implausible id %d for %d tokens", s, id, len(vocab))
		}
		n = max(n, id+1)
	}
	pieces := make([]string, n)
	for s, id := range vocab {
		pieces[id] = s
	}
	return pieces, nil
}

// parseHFMerges accepts both spellings: ["a b", ...] and [["a", "b"], ...].
func parseHFMerges(raw json.RawMessage) ([]bpeMerge, error) {
	if isNull(raw) {
		return nil, nil
	}
	var pairs [][]string
	if err := json.Unmarshal(raw, &pairs); err == nil {
		merges := make([]bpeMerge, len(pairs))
		for i, p := range pairs {
			if len(p) != 2 {
				return nil, fmt.Errorf("model merges[%d]: want 2 strings, got %d", i, len(p))
			}
			merges[i] = bpeMerge{p[0], p[1]}
		}
		return merges, nil
	}
	var lines []string
	if err := json.Unmarshal(raw, &lines); err != nil {
		return nil, fmt.Errorf("model merges: want a list of \"a b\" strings or of [a, b] pairs: %w", err)
	}
	merges := make([]bpeMerge, 0, len(lines))
	for i, l := range lines {
		if strings.HasPrefix(l, "#version") {
			continue
		}
		parts := strings.Split(l, " ")
		if len(parts) != 2 {
			return nil, fmt.Errorf("model merges[%d] %q: want two tokens separated by one space", i, l)
		}
		merges = append(merges, bpeMerge{parts[0], parts[1]})
	}
	return merges, nil
}

// applyHFConfig reads tokenizer_config.json. hasPost: tokenizer.json has a
// post_processor, which then alone decides what Encode adds (DeepSeek V3's
// config says add_bos_token, but its ByteLevel post_processor adds nothing,
// and the reference follows tokenizer.json).
func (t *Tokenizer) applyHFConfig(cfg *hfConfig, hasPost bool) error {
	tmpl, err := chatTemplateSource(cfg.ChatTemplate)
	if err != nil {
		return err
	}
	t.chatTemplate = tmpl
	t.cleanUpSpaces = cfg.CleanUpTokenizationSpaces != nil && *cfg.CleanUpTokenizationSpaces
	named := []struct {
		key string
		raw json.RawMessage
	}{
		{"bos_token", cfg.BOSToken}, {"eos_token", cfg.EOSToken}, {"unk_token", cfg.UnkToken},
		{"pad_token", cfg.PadToken}, {"sep_token", cfg.SepToken}, {"cls_token", cfg.ClsToken},
		{"mask_token", cfg.MaskToken},
	}
	for _, n := range named {
		s, ok, err := specialTokenString(n.raw)
		if err != nil {
			return fmt.Errorf("%s: %w", n.key, err)
		}
		if ok {
			t.specialStrings[n.key] = s
		}
	}
	if s, ok := t.specialStrings["bos_token"]; ok {
		if id, ok := t.TokenID(s); ok {
			t.bos = id
		}
	}
	if s, ok := t.specialStrings["eos_token"]; ok {
		if id, ok := t.TokenID(s); ok {
			t.eos = id
		}
	}
	// Slow (SentencePiece) Llama tokenizers add BOS/EOS in Python; a
	// tokenizer.json without a post_processor leaves that to the config.
	if !hasPost {
		addBOS := cfg.AddBOSToken != nil && *cfg.AddBOSToken && t.bos >= 0
		addEOS := cfg.AddEOSToken != nil && *cfg.AddEOSToken && t.eos >= 0
		if addBOS || addEOS {
			p := bosEosPost{bos: -1, eos: -1}
			if addBOS {
				p.bos = t.bos
			}
			if addEOS {
				p.eos = t.eos
			}
			t.post = p
		}
	}
	return nil
}

// looksLikeJSON reports whether data starts with '{' after whitespace.
func looksLikeJSON(data []byte) bool {
	data = bytes.TrimLeft(data, " \t\r\n\ufeff")
	return len(data) > 0 && data[0] == '{'
}
