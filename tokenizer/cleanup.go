package tokenizer

import "strings"

// transformers' clean_up_tokenization: English-centric tidying of spaces
// before punctuation and contractions, applied in this order, each a
// left-to-right replace over the whole text. Llama 3's config turns it on,
// so its reference decodes ("it 's" -> "it's") depend on it.
var cleanUpReplacer = []struct{ from, to string }{
	{" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"},
	{" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"},
}

func cleanUpTokenization(s string) string {
	if !strings.Contains(s, " ") {
		return s
	}
	for _, r := range cleanUpReplacer {
		s = strings.ReplaceAll(s, r.from, r.to)
	}
	return s
}

// cleanUpSafeCut returns a byte offset p such that clean-up of s[:p]
// followed by clean-up of s[p:]+later equals clean-up of the whole, whatever
// comes later. Every pattern starts with a space and is at most 4 bytes, so an
// occurrence that could run past the end starts at a space among the last 3
// bytes; cutting before the earliest such space splits nothing, except the
// trailing space of a " ' " occurrence, which moves the cut to its start.
// Passes only delete spaces, so spaces further back never come closer than
// the bytes that follow the deleted one.
func cleanUpSafeCut(s string) int {
	p := len(s)
	for i := max(0, len(s)-3); i < len(s); i++ {
		if s[i] == ' ' {
			p = i
			break
		}
	}
	for p >= 2 && s[p-2:p] == " '" && p < len(s) && s[p] == ' ' {
		p -= 2
	}
	return p
}
