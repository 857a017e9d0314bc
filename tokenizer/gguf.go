package tokenizer

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"golang.org/x/text/unicode/norm"
)

// GGUF token types (tokenizer.ggml.token_type).
const (
	ggufTokenNormal      = 1
	ggufTokenUnknown     = 2
	ggufTokenControl     = 3
	ggufTokenUserDefined = 4
	ggufTokenUnused      = 5
	ggufTokenByte        = 6
)

// ggufPreTokenizers maps tokenizer.ggml.pre to the split regexes the model's
// tokenizer.json uses (applied in order, each with Isolated behaviour), and
// whether the model's BPE takes whole pieces found in the vocabulary before
// merging (ignore_merges).
var ggufPreTokenizers = map[string]struct {
	regexes      []string
	ignoreMerges bool
	nfc          bool
}{
	"default":     {regexes: []string{gpt2Pattern}},
	"gpt2":        {regexes: []string{gpt2Pattern}},
	"llama-bpe":   {regexes: []string{llama3Pattern}, ignoreMerges: true},
	"llama3":      {regexes: []string{llama3Pattern}, ignoreMerges: true},
	"dbrx":        {regexes: []string{llama3Pattern}},
	"smaug-bpe":   {regexes: []string{llama3Pattern}},
	"qwen2":       {regexes: []string{qwen2Pattern}, nfc: true},
	"deepseek-v3": {regexes: deepseekV3Patterns},
}

const (
	llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	qwen2Pattern  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

var deepseekV3Patterns = []string{
	`\p{N}{1,3}`,
	`[一-龥぀-ゟ゠-ヿ]+`,
	"[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
}

func supportedGGUFPre() string {
	names := make([]string, 0, len(ggufPreTokenizers))
	for n := range ggufPreTokenizers {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// FromGGUFMetadata builds the tokenizer described by a GGUF file's
// tokenizer.ggml.* metadata. Model "llama" is SentencePiece-style score BPE
// over "▁"-spaced tokens with <0xNN> byte tokens; "gpt2" is byte-level BPE
// with merges and a pre-tokenizer chosen by tokenizer.ggml.pre.
func FromGGUFMetadata(md map[string]any) (*Tokenizer, error) {
	t, err := fromGGUFMetadata(md)
	if err != nil {
		return nil, fmt.Errorf("gguf tokenizer: %w", err)
	}
	return t, nil
}

func fromGGUFMetadata(md map[string]any) (*Tokenizer, error) {
	modelName, err := mdString(md, "tokenizer.ggml.model", true)
	if err != nil {
		return nil, err
	}
	tokens, err := mdStrings(md, "tokenizer.ggml.tokens")
	if err != nil {
		return nil, err
	}
	if len(tokens) == 0 {
		return nil, fmt.Errorf("tokenizer.ggml.tokens is missing or empty")
	}
	types, err := mdInts(md, "tokenizer.ggml.token_type", len(tokens))
	if err != nil {
		return nil, err
	}

	t := newTokenizer()
	t.pieces = append([]string(nil), tokens...) // the caller's slice stays theirs
	// Later duplicates win, as in llama.cpp's token-to-id map.
	t.vocab = make(map[string]int, len(tokens))
	for id, s := range tokens {
		t.vocab[s] = id
	}
	t.bos = mdID(md, "tokenizer.ggml.bos_token_id", len(tokens))
	t.eos = mdID(md, "tokenizer.ggml.eos_token_id", len(tokens))
	unk := mdID(md, "tokenizer.ggml.unknown_token_id", len(tokens))
	pad := mdID(md, "tokenizer.ggml.padding_token_id", len(tokens))
	if t.chatTemplate, err = mdString(md, "tokenizer.chat_template", false); err != nil {
		return nil, err
	}

	var addBOS, addEOS bool
	switch modelName {
	case "llama":
		addBOS = mdBool(md, "tokenizer.ggml.add_bos_token", true)
		addEOS = mdBool(md, "tokenizer.ggml.add_eos_token", false)
		if err := t.setupGGUFLlama(md, unk); err != nil {
			return nil, err
		}
	case "gpt2":
		addBOS = mdBool(md, "tokenizer.ggml.add_bos_token", false)
		addEOS = mdBool(md, "tokenizer.ggml.add_eos_token", false)
		if err := t.setupGGUFGPT2(md); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("unsupported tokenizer.ggml.model %q (supported: llama, gpt2)", modelName)
	}

	// Control, user-defined and unknown tokens are matched whole in the text;
	// control and unknown ones are special (skipped when decoding).
	for id, typ := range types {
		switch typ {
		case ggufTokenControl, ggufTokenUnknown, ggufTokenUserDefined:
			t.addAddedToken(&addedToken{id: id, content: t.pieces[id], special: typ != ggufTokenUserDefined})
		}
	}
	t.finishAdded()

	if addBOS || addEOS {
		p := bosEosPost{bos: -1, eos: -1}
		if addBOS && t.bos >= 0 {
			p.bos = t.bos
		}
		if addEOS && t.eos >= 0 {
			p.eos = t.eos
		}
		t.post = p
	}
	for name, id := range map[string]int{"bos_token": t.bos, "eos_token": t.eos, "unk_token": unk, "pad_token": pad} {
		if id >= 0 {
			t.specialStrings[name] = t.pieces[id]
		}
	}
	return t, nil
}

func (t *Tokenizer) setupGGUFLlama(md map[string]any, unk int) error {
	scores, err := mdFloats(md, "tokenizer.ggml.scores", len(t.pieces))
	if err != nil {
		return err
	}
	if scores == nil {
		return fmt.Errorf("tokenizer.ggml.scores is required for model llama")
	}
	m := &scoreModel{
		vocab: t.vocab, pieces: t.pieces, scores: scores,
		minScore: float32(math.Inf(-1)), unkID: unk,
	}
	for b := range m.byteIDs {
		m.byteIDs[b] = -1
		if id, ok := t.vocab[fmt.Sprintf("<0x%02X>", b)]; ok {
			m.byteIDs[b] = id
		}
	}
	t.model = m
	// SentencePiece semantics, spelled as the Hugging Face Llama tokenizer
	// does: a dummy "▁" prefix per text segment, spaces as "▁".
	var seq normalizerSeq
	addSpacePrefix := mdBool(md, "tokenizer.ggml.add_space_prefix", true)
	if addSpacePrefix {
		seq = append(seq, prependNormalizer{prefix: "▁"})
	}
	seq = append(seq, replaceNormalizer{pattern: literalPattern(" "), content: "▁"})
	t.normalizer = seq
	steps := []decodeStep{replaceStep{pattern: literalPattern("▁"), content: " "}, byteFallbackStep{}, fuseStep{}}
	if addSpacePrefix {
		steps = append(steps, stripStep{content: ' ', start: 1})
	}
	t.decoder = newDecoderChain(steps...)
	return nil
}

func (t *Tokenizer) setupGGUFGPT2(md map[string]any) error {
	pre, err := mdString(md, "tokenizer.ggml.pre", false)
	if err != nil {
		return err
	}
	if pre == "" {
		pre = "default"
	}
	cfg, ok := ggufPreTokenizers[pre]
	if !ok {
		return fmt.Errorf("unsupported tokenizer.ggml.pre %q (supported: %s)", pre, supportedGGUFPre())
	}
	mergeLines, err := mdStrings(md, "tokenizer.ggml.merges")
	if err != nil {
		return err
	}
	if mergeLines == nil {
		return fmt.Errorf("tokenizer.ggml.merges is required for model gpt2")
	}
	merges := make([]bpeMerge, len(mergeLines))
	for i, l := range mergeLines {
		left, right, ok := strings.Cut(l, " ")
		if !ok {
			return fmt.Errorf("tokenizer.ggml.merges[%d] %q: want two tokens separated by a space", i, l)
		}
		merges[i] = bpeMerge{left, right}
	}
	bpe, err := newBPEModel(t.vocab, merges, "")
	if err != nil {
		return fmt.Errorf("tokenizer.ggml.merges: %w", err)
	}
	bpe.ignoreMerges = cfg.ignoreMerges
	t.model = bpe

	var seq preTokenizerSeq
	for _, src := range cfg.regexes {
		re, err := compileRegex(src)
		if err != nil {
			return err
		}
		seq = append(seq, splitPre{pattern: re, behavior: splitIsolated})
	}
	seq = append(seq, byteLevelPre{})
	t.preTok = seq
	if cfg.nfc {
		t.normalizer = unicodeForm{norm.NFC}
	}
	t.decoder = newDecoderChain(byteLevelStep{})
	return nil
}

// Metadata accessors. The GGUF reader hands over Go values of the file's
// own types, so integers may arrive as any width or signedness.

func mdString(md map[string]any, key string, required bool) (string, error) {
	v, ok := md[key]
	if !ok {
		if required {
			return "", fmt.Errorf("%s is missing", key)
		}
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%s: want a string, got %T", key, v)
	}
	return s, nil
}

func mdStrings(md map[string]any, key string) ([]string, error) {
	v, ok := md[key]
	if !ok {
		return nil, nil
	}
	switch arr := v.(type) {
	case []string:
		return arr, nil
	case []any:
		out := make([]string, len(arr))
		for i, e := range arr {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("%s[%d]: want a string, got %T", key, i, e)
			}
			out[i] = s
		}
		return out, nil
	}
	return nil, fmt.Errorf("%s: want an array of strings, got %T", key, v)
}

// mdFloats returns nil when the key is absent.
func mdFloats(md map[string]any, key string, n int) ([]float32, error) {
	v, ok := md[key]
	if !ok {
		return nil, nil
	}
	var out []float32
	switch arr := v.(type) {
	case []float32:
		out = arr
	case []any:
		out = make([]float32, len(arr))
		for i, e := range arr {
			f, ok := asFloat(e)
			if !ok {
				return nil, fmt.Errorf("%s[%d]: want a number, got %T", key, i, e)
			}
			out[i] = float32(f)
		}
	default:
		return nil, fmt.Errorf("%s: want an array of numbers, got %T", key, v)
	}
	if len(out) != n {
		return nil, fmt.Errorf("%s has %d entries for %d tokens", key, len(out), n)
	}
	return out, nil
}

// mdInts returns nil when the key is absent.
func mdInts(md map[string]any, key string, n int) ([]int, error) {
	v, ok := md[key]
	if !ok {
		return nil, nil
	}
	var elems []any
	switch arr := v.(type) {
	case []any:
		elems = arr
	case []int32:
		for _, x := range arr {
			elems = append(elems, x)
		}
	default:
		return nil, fmt.Errorf("%s: want an array of integers, got %T", key, v)
	}
	out := make([]int, len(elems))
	for i, e := range elems {
		x, ok := asInt(e)
		if !ok {
			return nil, fmt.Errorf("%s[%d]: want an integer, got %T", key, i, e)
		}
		out[i] = int(x)
	}
	if len(out) != n {
		return nil, fmt.Errorf("%s has %d entries for %d tokens", key, len(out), n)
	}
	return out, nil
}

// mdID returns a token id, or -1 when absent or out of range.
func mdID(md map[string]any, key string, n int) int {
	x, ok := asInt(md[key])
	if !ok || x < 0 || x >= int64(n) {
		return -1
	}
	return int(x)
}

func mdBool(md map[string]any, key string, def bool) bool {
	if b, ok := md[key].(bool); ok {
		return b
	}
	return def
}

func asInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int:
		return int64(x), true
	case int8:
		return int64(x), true
	case int16:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	case uint:
		return int64(x), true
	case uint8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case uint64:
		if x > math.MaxInt64 {
			return 0, false
		}
		return int64(x), true
	}
	return 0, false
}

func asFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case float32:
		return float64(x), true
	case float64:
		return x, true
	}
	i, ok := asInt(v)
	return float64(i), ok
}
