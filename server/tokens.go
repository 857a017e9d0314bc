package server

import (
	"crypto/rand"
	"encoding/hex"
	"math"
	"strconv"
	"strings"

	"github.com/gosling-ai/gosling/sample"
	"github.com/gosling-ai/gosling/tokenizer"
)

// Token texts for logprobs. The chosen tokens of a generation are decoded as
// a stream, so their texts concatenate to the decoded output (a character
// split over several byte tokens lands on the token that completes it).
// Alternatives in top_logprobs are decoded one by one, as they would read in
// the middle of a text: after an anchor token, so that a SentencePiece
// decoder's "strip the first space" rule does not eat their leading space.

// tokenTexts decodes tokens for logprobs.
type tokenTexts struct {
	tok    *tokenizer.Tokenizer // nil: tokens are named by id
	anchor []int                // the ids of "a", decoded before alternatives
}

func newTokenTexts(tok *tokenizer.Tokenizer) *tokenTexts {
	t := &tokenTexts{tok: tok}
	if tok != nil {
		t.anchor = tok.Encode("a", false)
	}
	return t
}

// pieces returns the text each id adds when ids are decoded in order after
// context (nil for none), special tokens shown. Whatever the stream still
// holds at the end joins the last piece.
func (t *tokenTexts) pieces(ids, context []int) []string {
	st := t.stream(context)
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = st.push(id)
	}
	if len(ids) > 0 {
		out[len(ids)-1] += st.flush()
	}
	return out
}

// pieceStream is pieces for ids that arrive one by one.
type pieceStream struct {
	st *tokenizer.DecodeStream // nil without a tokenizer
}

// stream decodes ids that follow context, as the engine decodes output
// after the prompt, so that the pieces of an output concatenate to its text.
func (t *tokenTexts) stream(context []int) *pieceStream {
	if t.tok == nil {
		return &pieceStream{}
	}
	return &pieceStream{st: t.tok.NewDecodeStreamAfter(context, false)}
}

func (p *pieceStream) push(id int) string {
	if p.st == nil {
		return idToken(id)
	}
	return p.st.Push(id)
}

func (p *pieceStream) pushAll(ids []int) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = p.push(id)
	}
	return out
}

func (p *pieceStream) flush() string {
	if p.st == nil {
		return ""
	}
	return p.st.Flush()
}

// single is the text of id on its own, read mid-text.
func (t *tokenTexts) single(id int) string {
	if t.tok == nil {
		return idToken(id)
	}
	if len(t.anchor) == 1 {
		prefix := t.tok.Decode(t.anchor, false)
		if both := t.tok.Decode([]int{t.anchor[0], id}, false); prefix != "" && strings.HasPrefix(both, prefix) {
			return both[len(prefix):]
		}
	}
	return t.tok.Decode([]int{id}, false)
}

// idToken names a token without a tokenizer, as vLLM's return_tokens_as_token_ids does.
func idToken(id int) string { return "token_id:" + strconv.Itoa(id) }

// jsonLogprob makes a log-probability JSON-safe: -Inf (a token the model
// rules out) becomes -9999, OpenAI's floor.
func jsonLogprob(lp float32) float32 {
	if math.IsNaN(float64(lp)) || lp < -9999 {
		return -9999
	}
	return lp
}

func byteValues(s string) []int {
	out := make([]int, len(s))
	for i := range len(s) {
		out[i] = int(s[i])
	}
	return out
}

// chatTokenLogprob is one entry of OpenAI's chat logprobs.content.
type chatTokenLogprob struct {
	Token       string           `json:"token"`
	Logprob     float32          `json:"logprob"`
	Bytes       []int            `json:"bytes"`
	TopLogprobs []chatTopLogprob `json:"top_logprobs"`
}

type chatTopLogprob struct {
	Token   string  `json:"token"`
	Logprob float32 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

type chatLogprobs struct {
	Content []chatTokenLogprob `json:"content"`
}

// chatEntries builds logprobs.content for ids whose texts are pieces.
func (t *tokenTexts) chatEntries(ids []int, pieces []string, lps []float32, tops [][]sample.TokenLogprob) []chatTokenLogprob {
	out := make([]chatTokenLogprob, 0, len(ids))
	for i, id := range ids {
		e := chatTokenLogprob{Token: pieces[i], Bytes: byteValues(pieces[i]), TopLogprobs: []chatTopLogprob{}}
		if i < len(lps) {
			e.Logprob = jsonLogprob(lps[i])
		}
		if i < len(tops) {
			for _, alt := range tops[i] {
				text := pieces[i]
				if alt.ID != id {
					text = t.single(alt.ID)
				}
				e.TopLogprobs = append(e.TopLogprobs, chatTopLogprob{Token: text, Logprob: jsonLogprob(alt.Logprob), Bytes: byteValues(text)})
			}
		}
		out = append(out, e)
	}
	return out
}

// newID returns prefix followed by 32 random hex digits.
func newID(prefix string) string {
	var b [16]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}
