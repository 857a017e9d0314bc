package tokenizer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
)

// llama2.c's tokenizer.bin: int32 max_token_length, then per token float32
// score, int32 byte length, bytes; the vocabulary size is not stored, so
// tokens run to the end of the file. Spaces are plain ' ' (the exporter
// replaced SentencePiece's "▁"), ids 0/1/2 are <unk>, BOS ("\n<s>\n") and
// EOS ("\n</s>\n"), and ids 3..258 are the bytes <0x00>..<0xFF>.
const (
	llama2cBOS        = 1
	llama2cEOS        = 2
	llama2cByteOffset = 3
	// llama2cMaxToken bounds one token's length, to reject garbage files
	// instead of allocating whatever they claim.
	llama2cMaxToken = 1 << 16
)

// FromLlama2C loads a llama2.c tokenizer.bin. Encoding follows run.c's
// encode: a " " dummy prefix for non-empty text, per-codepoint lookup with
// byte fallback (id = byte+3), then repeated merging of the adjacent pair
// whose concatenation scores highest. Two additions make it agree with the
// SentencePiece model it was exported from: "<unk>", "<s>" and "</s>" in the
// text encode as ids 0, 1 and 2, and "▁" in the text is a space.
func FromLlama2C(path string) (*Tokenizer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load llama2.c tokenizer %s: %w", path, err)
	}
	t, err := fromLlama2C(data)
	if err != nil {
		return nil, fmt.Errorf("load llama2.c tokenizer %s: %w", path, err)
	}
	return t, nil
}

func fromLlama2C(data []byte) (*Tokenizer, error) {
	if len(data) < 4 {
		return nil, errors.New("file is truncated: no max_token_length header")
	}
	maxLen := int32(binary.LittleEndian.Uint32(data))
	if maxLen <= 0 || maxLen > llama2cMaxToken {
		return nil, fmt.Errorf("max_token_length %d is implausible; not a llama2.c tokenizer?", maxLen)
	}
	var pieces []string
	var scores []float32
	for off := 4; off < len(data); {
		if len(data)-off < 8 {
			return nil, fmt.Errorf("file is truncated in the header of token %d", len(pieces))
		}
		score := math.Float32frombits(binary.LittleEndian.Uint32(data[off:]))
		n := int32(binary.LittleEndian.Uint32(data[off+4:]))
		off += 8
		if n < 0 || n > llama2cMaxToken {
			return nil, fmt.Errorf("token %d has implausible length %d; not a llama2.c tokenizer?", len(pieces), n)
		}
		if len(data)-off < int(n) {
			return nil, fmt.Errorf("file is truncated in token %d (%d bytes declared, %d left)", len(pieces), n, len(data)-off)
		}
		pieces = append(pieces, string(data[off:off+int(n)]))
		scores = append(scores, score)
		off += int(n)
	}
	if len(pieces) < llama2cByteOffset+256 {
		return nil, fmt.Errorf("only %d tokens; a llama2.c vocabulary has <unk>, <s>, </s> and 256 byte tokens first", len(pieces))
	}

	t := newTokenizer()
	fileStrings := append([]string(nil), pieces[:3]...)
	t.pieces = pieces
	t.vocab = make(map[string]int, len(pieces))
	for id, s := range pieces {
		if _, dup := t.vocab[s]; !dup {
			t.vocab[s] = id
		}
	}
	m := &scoreModel{
		vocab: t.vocab, pieces: pieces, scores: scores,
		bytesFirst: true, minScore: -1e10, unkID: -1,
	}
	for b := range m.byteIDs {
		m.byteIDs[b] = b + llama2cByteOffset
	}
	t.model = m
	t.normalizer = normalizerSeq{
		replaceNormalizer{pattern: literalPattern("▁"), content: " "},
		prependNormalizer{prefix: " "},
	}
	for id, name := range []string{"<unk>", "<s>", "</s>"} {
		t.addAddedToken(&addedToken{id: id, content: name, special: true})
	}
	t.finishAdded()
	// TokenString keeps the file's strings; decoding shows the names.
	copy(t.pieces, fileStrings)
	for id, name := range []string{"<unk>", "<s>", "</s>"} {
		t.decodeAs[id] = name
	}
	t.decoder = newDecoderChain(llama2cStep{bos: "<s>"}, byteFallbackStep{}, fuseStep{})
	t.bos, t.eos = llama2cBOS, llama2cEOS
	t.post = bosEosPost{bos: llama2cBOS, eos: -1}
	t.specialStrings = map[string]string{"unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>"}
	return t, nil
}
