package tokenizer

import (
	"testing"
)

func TestAppendLossyUTF8(t *testing.T) {
	// Expected values follow Rust's String::from_utf8_lossy: one U+FFFD per
	// maximal invalid subpart.
	tests := []struct {
		in   string
		want string
	}{
		{"plain", "plain"},
		{"\xe4\xbd\xa0", "你"},
		{"\xe4\xbd", "\uFFFD"},
		{"\xe4\xbda", "\uFFFDa"},
		{"\x80\x80", "\uFFFD\uFFFD"},
		{"\xf0\x9f\x98", "\uFFFD"},
		{"\xf0\x9f\x98\x80", "😀"},
		{"\xe0\x80\x80", "\uFFFD\uFFFD\uFFFD"}, // overlong: E0 needs A0..BF next
		{"\xed\xa0\x80", "\uFFFD\uFFFD\uFFFD"}, // surrogate
		{"\xc0\xaf", "\uFFFD\uFFFD"},
		{"\xf4\x90\x80\x80", "\uFFFD\uFFFD\uFFFD\uFFFD"}, // above U+10FFFF
		{"a\xffb", "a\uFFFDb"},
	}
	for _, tc := range tests {
		if got := string(appendLossyUTF8(nil, []byte(tc.in))); got != tc.want {
			t.Errorf("lossy(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestEndsInPartialUTF8(t *testing.T) {
	tests := []struct {
		in   string
		want bool
	}{
		{"", false},
		{"abc", false},
		{"\xe4", true},
		{"\xe4\xbd", true},
		{"\xe4\xbd\xa0", false},
		{"x\xf0\x9f\x98", true},
		{"\xe0\x80", false}, // can never complete
		{"\x80", false},
		{"\xf0\x9f\x98\x80", false},
	}
	for _, tc := range tests {
		if got := endsInPartialUTF8([]byte(tc.in)); got != tc.want {
			t.Errorf("endsInPartialUTF8(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestByteLevelRoundTrip(t *testing.T) {
	var all []byte
	for b := 0; b < 256; b++ {
		all = append(all, byte(b))
	}
	enc := byteLevelEncode(string(all))
	if got := appendByteLevelDecoded(nil, enc); string(got) != string(all) {
		t.Fatalf("byte-level round trip lost bytes")
	}
	if byteLevelEncode(" \n") != "ĠĊ" {
		t.Errorf("space/newline map to %q, want ĠĊ", byteLevelEncode(" \n"))
	}
}

func TestOnigToRegexp2(t *testing.T) {
	tests := []struct{ in, want string }{
		{`(?i:'s|'t)|\p{L}+`, "(?:'[sS\u017F]|'[tT])|\\p{L}+"},
		{`(?i:'k)`, "(?:'[kK\u212A])"},
		{`(?i:[a-z]+)x`, `(?i:[a-z]+)x`}, // not a plain alternation: left alone
		{`abc`, `abc`},
	}
	for _, tc := range tests {
		if got := onigToRegexp2(tc.in); got != tc.want {
			t.Errorf("onigToRegexp2(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
