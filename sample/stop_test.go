package sample

import (
	"strings"
	"testing"
)

func TestStopChecker(t *testing.T) {
	tests := []struct {
		name        string
		stops       []string
		pushes      []string
		wantEmits   []string // one per push
		wantStopped int      // index of the push that stops; -1 for none
		wantFlush   string
	}{
		{
			name:        "no stops passes text through",
			stops:       nil,
			pushes:      []string{"Hello", ", world"},
			wantEmits:   []string{"Hello", ", world"},
			wantStopped: -1,
		},
		{
			name:        "stop inside one push",
			stops:       []string{"END"},
			pushes:      []string{"abcENDxyz", "more"},
			wantEmits:   []string{"abc", ""},
			wantStopped: 0,
		},
		{
			name:        "stop split across pushes",
			stops:       []string{"</s>"},
			pushes:      []string{"Hi</", "s", ">tail"},
			wantEmits:   []string{"Hi", "", ""},
			wantStopped: 2,
		},
		{
			name:        "held prefix released when it stops matching",
			stops:       []string{"</s>"},
			pushes:      []string{"a<", "/", "x", "b"},
			wantEmits:   []string{"a", "", "</x", "b"},
			wantStopped: -1,
		},
		{
			name:        "partial prefix at the end is flushed",
			stops:       []string{"###"},
			pushes:      []string{"answer #", "#"},
			wantEmits:   []string{"answer ", ""},
			wantStopped: -1,
			wantFlush:   "##",
		},
		{
			name:        "no false hold: only real prefixes are held",
			stops:       []string{"STOP"},
			pushes:      []string{"TOPS", "OP"},
			wantEmits:   []string{"TOP", "SOP"},
			wantStopped: -1,
			wantFlush:   "",
		},
		{
			name:        "stop at the very start",
			stops:       []string{"\n\n"},
			pushes:      []string{"\n\nrest"},
			wantEmits:   []string{""},
			wantStopped: 0,
		},
		{
			name:        "stop is the whole first push",
			stops:       []string{"x"},
			pushes:      []string{"x"},
			wantEmits:   []string{""},
			wantStopped: 0,
		},
		{
			name:        "multiple stops: the first to appear wins",
			stops:       []string{"World", "lo"},
			pushes:      []string{"Hel", "lo World"},
			wantEmits:   []string{"He", "l"},
			wantStopped: 1,
		},
		{
			name:        "multiple stops: the one that ends first wins",
			stops:       []string{"abcde", "c"},
			pushes:      []string{"xxabcde"},
			wantEmits:   []string{"xxab"},
			wantStopped: 0,
		},
		{
			name:        "multiple stops: same end, longer match wins",
			stops:       []string{"bc", "abc"},
			pushes:      []string{"xab", "c"},
			wantEmits:   []string{"x", ""},
			wantStopped: 1,
		},
		{
			name:        "hold the longest possible prefix",
			stops:       []string{"aab"},
			pushes:      []string{"xaa", "a", "b"},
			wantEmits:   []string{"x", "a", ""},
			wantStopped: 2,
		},
		{
			name:        "multibyte stop split inside a rune",
			stops:       []string{"。"},
			pushes:      []string{"好\xe3\x80", "\x82后"},
			wantEmits:   []string{"好", ""},
			wantStopped: 1,
		},
		{
			name:        "empty stop strings are ignored",
			stops:       []string{""},
			pushes:      []string{"abc"},
			wantEmits:   []string{"abc"},
			wantStopped: -1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewStopChecker(tt.stops)
			for i, text := range tt.pushes {
				emit, stopped := c.Push(text)
				if emit != tt.wantEmits[i] {
					t.Fatalf("push %d (%q): emit %q, want %q", i, text, emit, tt.wantEmits[i])
				}
				wantStopped := tt.wantStopped >= 0 && i >= tt.wantStopped
				if stopped != wantStopped {
					t.Fatalf("push %d (%q): stopped %v, want %v", i, text, stopped, wantStopped)
				}
			}
			if got := c.Flush(); got != tt.wantFlush {
				t.Fatalf("Flush() = %q, want %q", got, tt.wantFlush)
			}
		})
	}
}

// Emitted text must not depend on how the stream is cut into pushes.
func TestStopCheckerIndependentOfChunking(t *testing.T) {
	tests := []struct {
		text  string
		stops []string
	}{
		{"The answer is 42.\nUser: hi", []string{"\nUser:", "\n\n"}},
		{"aaaaab", []string{"aab", "ab"}},
		{"abcabd", []string{"abd", "cab"}},
		{"no stop here <|im", []string{"<|im_end|>"}},
		{"xxabcde", []string{"abcde", "c"}},
	}
	for _, tt := range tests {
		want := streamAll(tt.stops, []string{tt.text})
		for size := 1; size <= len(tt.text); size++ {
			var chunks []string
			for i := 0; i < len(tt.text); i += size {
				chunks = append(chunks, tt.text[i:min(i+size, len(tt.text))])
			}
			if got := streamAll(tt.stops, chunks); got != want {
				t.Errorf("%q stops %q in chunks of %d: %q, in one push: %q", tt.text, tt.stops, size, got, want)
			}
		}
	}
}

func streamAll(stops, chunks []string) string {
	c := NewStopChecker(stops)
	var out strings.Builder
	for _, chunk := range chunks {
		emit, stopped := c.Push(chunk)
		out.WriteString(emit)
		if stopped {
			return out.String() + "|STOP"
		}
	}
	return out.String() + c.Flush()
}
