package reasoning

import "testing"

func TestSplit(t *testing.T) {
	q, _ := Lookup("qwen3")
	r1, _ := Lookup("deepseek-r1")
	for _, tc := range []struct {
		p                  *Parser
		text, reason, want string
	}{
		{q, "<think>\nplan it\n</think>\n\nThe answer.", "\nplan it\n", "The answer."},
		{q, "Just an answer.", "", "Just an answer."},
		{q, "<think>never closed", "never closed", ""},
		{r1, "thinking...</think>\n\n42", "thinking...", "42"},
		{r1, "<think>thinking</think>42", "thinking", "42"},
		{r1, "all reasoning", "all reasoning", ""},
	} {
		gotR, gotC := tc.p.Split(tc.text)
		if gotR != tc.reason || gotC != tc.want {
			t.Errorf("%s %q: reasoning %q content %q, want %q %q", tc.p.Name, tc.text, gotR, gotC, tc.reason, tc.want)
		}
		// Byte-by-byte streaming gives the same split.
		s := tc.p.NewStreamer()
		var sr, sc string
		for i := range len(tc.text) {
			r, c := s.Push(tc.text[i : i+1])
			sr += r
			sc += c
		}
		r, c := s.Finish()
		if sr+r != tc.reason || sc+c != tc.want {
			t.Errorf("%s %q streamed: %q %q", tc.p.Name, tc.text, sr+r, sc+c)
		}
	}
	if _, err := Lookup("nope"); err == nil {
		t.Error("unknown parser accepted")
	}
}
