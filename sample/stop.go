package sample

import "strings"

// StopChecker finds stop strings in streamed text and holds back text that
// might be the start of one.
//
// Invariant: everything already emitted lies before any place a stop string
// could still start, so a match found later never needs to take text back.
// The held text is the shortest suffix of the text so far that begins at a
// place where some stop string could still match.
//
// The result does not depend on how the text is split into pushes: the stop
// is the match that ends first in the text (on a tie, the one that starts
// first), exactly what pushing one byte at a time would find.
type StopChecker struct {
	stops   []string
	held    string
	stopped bool
	matched string
}

// Matched is the stop string that ended the text ("" while none has).
func (c *StopChecker) Matched() string { return c.matched }

// NewStopChecker watches for stops; empty strings are ignored (Params.Validate
// rejects them).
func NewStopChecker(stops []string) *StopChecker {
	c := &StopChecker{}
	for _, s := range stops {
		if s != "" {
			c.stops = append(c.stops, s)
		}
	}
	return c
}

// Push appends newly decoded text; returns text that is safe to emit now, and
// whether a stop string matched (then emit is the text before the stop
// string, and nothing more must be emitted). After a stop, Push returns "",
// true.
func (c *StopChecker) Push(text string) (emit string, stopped bool) {
	if c.stopped {
		return "", true
	}
	buf := c.held + text
	if start, ok := c.firstMatch(buf); ok {
		c.stopped = true
		for _, s := range c.stops {
			if strings.HasPrefix(buf[start:], s) && (c.matched == "" || len(s) < len(c.matched)) {
				c.matched = s
			}
		}
		c.held = ""
		return buf[:start], true
	}
	hold := c.holdFrom(buf)
	c.held = buf[hold:]
	return buf[:hold], false
}

// Flush returns held-back text at the end of generation: a partial stop
// string that never completed is ordinary text. It returns "" after a stop.
func (c *StopChecker) Flush() string {
	held := c.held
	c.held = ""
	if c.stopped {
		return ""
	}
	return held
}

// firstMatch returns where the match that ends first in buf starts. Any
// match lies in held text plus new text, since emitted text holds no start.
func (c *StopChecker) firstMatch(buf string) (start int, ok bool) {
	bestEnd := -1
	for _, s := range c.stops {
		i := strings.Index(buf, s)
		if i < 0 {
			continue
		}
		end := i + len(s)
		if bestEnd < 0 || end < bestEnd || (end == bestEnd && i < start) {
			start, bestEnd = i, end
		}
	}
	return start, bestEnd >= 0
}

// holdFrom returns the start of the longest suffix of buf that is a proper
// prefix of some stop string, or len(buf) if there is none.
func (c *StopChecker) holdFrom(buf string) int {
	hold := len(buf)
	for _, s := range c.stops {
		for n := min(len(s)-1, len(buf)); n > 0 && len(buf)-n < hold; n-- {
			if strings.HasSuffix(buf, s[:n]) {
				hold = len(buf) - n
				break
			}
		}
	}
	return hold
}
