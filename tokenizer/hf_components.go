package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// This file turns the JSON of tokenizer.json's normalizer, pre_tokenizer,
// decoder and post_processor sections into pipeline parts. Each section is an
// object with a "type" and that type's fields; null means "none".

type typed struct {
	Type string `json:"type"`
}

func isNull(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s == "" || s == "null"
}

// hfPattern is {"String": "..."} or {"Regex": "..."}.
type hfPattern struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

func (p hfPattern) compile() (pattern, error) {
	switch {
	case p.String != nil:
		return literalPattern(*p.String), nil
	case p.Regex != nil:
		return compileRegex(*p.Regex)
	}
	return nil, fmt.Errorf("pattern needs a \"String\" or \"Regex\" field")
}

const supportedNormalizers = "Sequence, NFC, NFD, NFKC, NFKD, Lowercase, Strip, StripAccents, Prepend, Replace, Nmt"

func parseNormalizer(raw json.RawMessage) (normalizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	var t typed
	if err := json.Unmarshal(raw, &t); err != nil {
		return nil, fmt.Errorf("normalizer: %w", err)
	}
	switch t.Type {
	case "Sequence":
		var v struct {
			Normalizers []json.RawMessage `json:"normalizers"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, fmt.Errorf("normalizer Sequence: %w", err)
		}
		var seq normalizerSeq
		for _, r := range v.Normalizers {
			n, err := parseNormalizer(r)
			if err != nil {
				return nil, err
			}
			if n != nil {
				seq = append(seq, n)
			}
		}
		if len(seq) == 0 {
			return nil, nil
		}
		return seq, nil
	case "NFC":
		return unicodeForm{norm.NFC}, nil
	case "NFD":
		return unicodeForm{norm.NFD}, nil
	case "NFKC":
		return unicodeForm{norm.NFKC}, nil
	case "NFKD":
		return unicodeForm{norm.NFKD}, nil
	case "Lowercase":
		return lowercaseNormalizer{}, nil
	case "StripAccents":
		return stripAccentsNormalizer{}, nil
	case "Nmt":
		return nmtNormalizer{}, nil
	case "Strip":
		var v struct {
			Left  bool `json:"strip_left"`
			Right bool `json:"strip_right"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, fmt.Errorf("normalizer Strip: %w", err)
		}
		return stripNormalizer{left: v.Left, right: v.Right}, nil
	case "Prepend":
		var v struct {
			Prepend string `json:"prepend"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, fmt.Errorf("normalizer Prepend: %w", err)
		}
		return prependNormalizer{prefix: v.Prepend}, nil
	case "Replace":
		var v struct {
			Pattern hfPattern `json:"pattern"`
			Content string    `json:"content"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, fmt.Errorf("normalizer Replace: %w", err)
		}
		p, err := v.Pattern.compile()
		if err != nil {
			return nil, fmt.Errorf("normalizer Replace: %w", err)
		}
		return replaceNormalizer{pattern: p, content: v.Content}, nil
	}
	return nil, fmt.Errorf("unsupported normalizer type %q (supported: %s)", t.Type, supportedNormalizers)
}

const supportedPreTokenizers = "Sequence, ByteLevel, Split, Metaspace, Digits, Punctuation, Whitespace, WhitespaceSplit, BertPreTokenizer"

func parsePreTokenizer(raw json.RawMessage) (preTokenizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	var t typed
	if err := json.Unmarshal(raw, &t); err != nil {
		return nil, fmt.Errorf("pre_tokenizer: %w", err)
	}
	switch t.Type {
	case "Sequence":
		var v struct {
			PreTokenizers []json.RawMessage `json:"pretokenizers"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, fmt.Errorf("pre_tokenizer Sequence: %w", err)
		}
		var seq preTokenizerSeq
		for _, r := range v.PreTokenizers {
			p, err := parsePreTokenizer(r)
			if err != nil {
				return nil, err
			}
			if p != nil {
				seq = append(seq, p)
			}
		}
		return seq, nil
	case "ByteLevel":
		v := struct {
			AddPrefixSpace bool `json:"add_prefix_space"`
			UseRegex       bool `json:"use_regex"`
		}{UseRegex: true}
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, fmt.Errorf("pre_tokenizer ByteLevel: %w", err)
		}
		return byteLevelPre{addPrefixSpace: v.AddPrefixSpace, useRegex: v.UseRegex}, nil
	case "Split":
		var v struct {
			Pattern  hfPattern `json:"pattern"`
			Behavior string    `json:"behavior"`
			Invert   bool      `json:"invert"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, fmt.Errorf("pre_tokenizer Split: %w", err)
		}
		p, err := v.Pattern.compile()
		if err != nil {
			return nil, fmt.Errorf("pre_tokenizer Split: %w", err)
		}
		b, err := parseSplitBehavior(v.Behavior)
		if err != nil {
			return nil, fmt.Errorf("pre_tokenizer Split: %w", err)
		}
		return splitPre{pattern: p, behavior: b, invert: v.Invert}, nil
	case "Metaspace":
		repl, scheme, split, err := parseMetaspace(raw)
		if err != nil {
			return nil, fmt.Errorf("pre_tokenizer Metaspace: %w", err)
		}
		return metaspacePre{replacement: string(repl), scheme: scheme, split: split}, nil
	case "Digits":
		var v struct {
			Individual bool `json:"individual_digits"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, fmt.Errorf("pre_tokenizer Digits: %w", err)
		}
		behavior := splitContiguous
		if v.Individual {
			behavior = splitIsolated
		}
		return runeSplitPre{pred: unicode.IsNumber, behavior: behavior}, nil
	case "Punctuation":
		v := struct {
			Behavior string `json:"behavior"`
		}{Behavior: "Isolated"}
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, fmt.Errorf("pre_tokenizer Punctuation: %w", err)
		}
		b, err := parseSplitBehavior(v.Behavior)
		if err != nil {
			return nil, fmt.Errorf("pre_tokenizer Punctuation: %w", err)
		}
		return runeSplitPre{pred: isPunctuationRune, behavior: b}, nil
	case "Whitespace":
		return whitespacePre{}, nil
	case "WhitespaceSplit":
		return runeSplitPre{pred: unicode.IsSpace, behavior: splitRemoved}, nil
	case "BertPreTokenizer":
		return preTokenizerSeq{
			runeSplitPre{pred: unicode.IsSpace, behavior: splitRemoved},
			runeSplitPre{pred: isPunctuationRune, behavior: splitIsolated},
		}, nil
	}
	return nil, fmt.Errorf("unsupported pre_tokenizer type %q (supported: %s)", t.Type, supportedPreTokenizers)
}

// parseMetaspace reads the fields shared by the Metaspace pre-tokenizer and
// decoder, including the legacy add_prefix_space flag.
func parseMetaspace(raw json.RawMessage) (rune, prependScheme, bool, error) {
	var v struct {
		Replacement    string `json:"replacement"`
		PrependScheme  string `json:"prepend_scheme"`
		AddPrefixSpace *bool  `json:"add_prefix_space"`
		Split          *bool  `json:"split"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return 0, 0, false, err
	}
	repl, size := utf8.DecodeRuneInString(v.Replacement)
	if size == 0 || size != len(v.Replacement) {
		return 0, 0, false, fmt.Errorf("replacement %q must be one character", v.Replacement)
	}
	scheme := prependAlways
	switch v.PrependScheme {
	case "", "always":
	case "first":
		scheme = prependFirst
	case "never":
		scheme = prependNever
	default:
		return 0, 0, false, fmt.Errorf("unsupported prepend_scheme %q (supported: always, first, never)", v.PrependScheme)
	}
	if v.AddPrefixSpace != nil && !*v.AddPrefixSpace {
		scheme = prependNever
	}
	return repl, scheme, v.Split == nil || *v.Split, nil
}

const supportedDecoders = "Sequence, ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace"

func parseDecoder(raw json.RawMessage) ([]decodeStep, error) {
	if isNull(raw) {
		return nil, nil
	}
	var t typed
	if err := json.Unmarshal(raw, &t); err != nil {
		return nil, fmt.Errorf("decoder: %w", err)
	}
	switch t.Type {
	case "Sequence":
		var v struct {
			Decoders []json.RawMessage `json:"decoders"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, fmt.Errorf("decoder Sequence: %w", err)
		}
		var steps []decodeStep
		for _, r := range v.Decoders {
			s, err := parseDecoder(r)
			if err != nil {
				return nil, err
			}
			steps = append(steps, s...)
		}
		return steps, nil
	case "ByteLevel":
		return []decodeStep{byteLevelStep{}}, nil
	case "ByteFallback":
		return []decodeStep{byteFallbackStep{}}, nil
	case "Fuse":
		return []decodeStep{fuseStep{}}, nil
	case "Replace":
		var v struct {
			Pattern hfPattern `json:"pattern"`
			Content string    `json:"content"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, fmt.Errorf("decoder Replace: %w", err)
		}
		p, err := v.Pattern.compile()
		if err != nil {
			return nil, fmt.Errorf("decoder Replace: %w", err)
		}
		return []decodeStep{replaceStep{pattern: p, content: v.Content}}, nil
	case "Strip":
		var v struct {
			Content string `json:"content"`
			Start   int    `json:"start"`
			Stop    int    `json:"stop"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, fmt.Errorf("decoder Strip: %w", err)
		}
		r, size := utf8.DecodeRuneInString(v.Content)
		if size == 0 || size != len(v.Content) {
			return nil, fmt.Errorf("decoder Strip: content %q must be one character", v.Content)
		}
		return []decodeStep{stripStep{content: r, start: v.Start, stop: v.Stop}}, nil
	case "Metaspace":
		repl, scheme, _, err := parseMetaspace(raw)
		if err != nil {
			return nil, fmt.Errorf("decoder Metaspace: %w", err)
		}
		return []decodeStep{metaspaceStep{replacement: repl, scheme: scheme}}, nil
	}
	return nil, fmt.Errorf("unsupported decoder type %q (supported: %s)", t.Type, supportedDecoders)
}

const supportedPostProcessors = "TemplateProcessing, ByteLevel, Sequence, BertProcessing, RobertaProcessing"

// parsePostProcessor returns nil for processors that add no ids (ByteLevel
// only adjusts offsets).
func parsePostProcessor(raw json.RawMessage) (postProcessor, error) {
	if isNull(raw) {
		return nil, nil
	}
	var t typed
	if err := json.Unmarshal(raw, &t); err != nil {
		return nil, fmt.Errorf("post_processor: %w", err)
	}
	switch t.Type {
	case "ByteLevel":
		return nil, nil
	case "Sequence":
		var v struct {
			Processors []json.RawMessage `json:"processors"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, fmt.Errorf("post_processor Sequence: %w", err)
		}
		var seq postSeq
		for _, r := range v.Processors {
			p, err := parsePostProcessor(r)
			if err != nil {
				return nil, err
			}
			if p != nil {
				seq = append(seq, p)
			}
		}
		if len(seq) == 0 {
			return nil, nil
		}
		return seq, nil
	case "TemplateProcessing":
		return parseTemplate(raw)
	case "BertProcessing", "RobertaProcessing":
		// Both put cls before and sep after a single sequence.
		var v struct {
			Sep [2]json.RawMessage `json:"sep"`
			Cls [2]json.RawMessage `json:"cls"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, fmt.Errorf("post_processor %s: %w", t.Type, err)
		}
		var sep, cls int
		if err := json.Unmarshal(v.Sep[1], &sep); err != nil {
			return nil, fmt.Errorf("post_processor %s sep: %w", t.Type, err)
		}
		if err := json.Unmarshal(v.Cls[1], &cls); err != nil {
			return nil, fmt.Errorf("post_processor %s cls: %w", t.Type, err)
		}
		return templatePost{items: []templateItem{{ids: []int{cls}}, {sequence: true}, {ids: []int{sep}}}}, nil
	}
	return nil, fmt.Errorf("unsupported post_processor type %q (supported: %s)", t.Type, supportedPostProcessors)
}

func parseTemplate(raw json.RawMessage) (postProcessor, error) {
	var v struct {
		Single []struct {
			SpecialToken *struct {
				ID string `json:"id"`
			} `json:"SpecialToken"`
			Sequence *struct {
				ID string `json:"id"`
			} `json:"Sequence"`
		} `json:"single"`
		SpecialTokens map[string]struct {
			IDs []int `json:"ids"`
		} `json:"special_tokens"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("post_processor TemplateProcessing: %w", err)
	}
	var tp templatePost
	for _, it := range v.Single {
		switch {
		case it.Sequence != nil:
			tp.items = append(tp.items, templateItem{sequence: true})
		case it.SpecialToken != nil:
			st, ok := v.SpecialTokens[it.SpecialToken.ID]
			if !ok {
				return nil, fmt.Errorf("post_processor TemplateProcessing: special token %q is not in special_tokens", it.SpecialToken.ID)
			}
			tp.items = append(tp.items, templateItem{ids: st.IDs})
		default:
			return nil, fmt.Errorf("post_processor TemplateProcessing: template item needs SpecialToken or Sequence")
		}
	}
	return tp, nil
}
