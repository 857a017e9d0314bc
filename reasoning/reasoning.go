// Package reasoning splits a reasoning model's thinking (<think>…</think>)
// from its answer, whole or streamed, for the reasoning_content field of
// chat completions.
package reasoning

import (
	"fmt"
	"strings"
)

const (
	openTag  = "<think>"
	closeTag = "</think>"
)

// Parser is one model family's convention.
type Parser struct {
	Name string
	// startsInside: the prompt already opened the thinking block (DeepSeek
	// R1's template ends with "<think>\n"), so the output is reasoning
	// until </think>, all of it when the tag never comes.
	startsInside bool
}

// Lookup returns the parser for --reasoning-parser.
func Lookup(name string) (*Parser, error) {
	switch name {
	case "qwen3":
		return &Parser{Name: name}, nil
	case "deepseek-r1":
		return &Parser{Name: name, startsInside: true}, nil
	}
	return nil, fmt.Errorf("unknown reasoning parser %q; choose qwen3 or deepseek-r1", name)
}

// Split separates a finished output.
func (p *Parser) Split(text string) (reasoning, content string) {
	s := p.NewStreamer()
	r1, c1 := s.Push(text)
	r2, c2 := s.Finish()
	return r1 + r2, c1 + c2
}

type mode uint8

const (
	undecided mode = iota // before the first non-space text: is it <think>?
	thinking
	answering
)

// Streamer splits a streamed output; every Push returns only text that is
// final (a partial tag is held back).
type Streamer struct {
	p       *Parser
	mode    mode
	pending string // text not yet given out
	// fresh: nothing of the current block has been given out, so a
	// leading <think> (thinking) or newlines (answering) are dropped.
	fresh bool
}

// NewStreamer starts a stream.
func (p *Parser) NewStreamer() *Streamer {
	s := &Streamer{p: p, fresh: true}
	if p.startsInside {
		s.mode = thinking
	}
	return s
}

// Push adds a delta and returns the reasoning and content that became
// final.
func (s *Streamer) Push(delta string) (reasoning, content string) {
	s.pending += delta
	for {
		switch s.mode {
		case undecided:
			trimmed := strings.TrimLeft(s.pending, " \t\r\n")
			switch {
			case strings.HasPrefix(trimmed, openTag):
				s.pending = trimmed[len(openTag):]
				s.mode = thinking
				continue
			case strings.HasPrefix(openTag, trimmed):
				return reasoning, content // could still become <think>
			}
			s.mode = answering
			s.fresh = false // an answer without thinking keeps its text
			continue
		case thinking:
			if s.fresh {
				if strings.HasPrefix(openTag, s.pending) && s.pending != openTag {
					return reasoning, content // could still become <think>
				}
				s.pending = strings.TrimPrefix(s.pending, openTag)
				s.fresh = false
			}
			if i := strings.Index(s.pending, closeTag); i >= 0 {
				reasoning += s.pending[:i]
				s.pending = s.pending[i+len(closeTag):]
				s.mode = answering
				s.fresh = true
				continue
			}
			keep := partialSuffix(s.pending, closeTag)
			reasoning += s.pending[:len(s.pending)-keep]
			s.pending = s.pending[len(s.pending)-keep:]
			return reasoning, content
		default:
			if s.fresh {
				// The newlines between </think> and the answer.
				s.pending = strings.TrimLeft(s.pending, "\r\n")
				if s.pending == "" {
					return reasoning, content
				}
				s.fresh = false
			}
			content += s.pending
			s.pending = ""
			return reasoning, content
		}
	}
}

// Finish returns what was held back.
func (s *Streamer) Finish() (reasoning, content string) {
	rest := s.pending
	s.pending = ""
	if s.mode == thinking {
		return rest, ""
	}
	return "", rest
}

// partialSuffix is the length of the longest suffix of s that is a proper
// prefix of tag.
func partialSuffix(s, tag string) int {
	for k := min(len(tag)-1, len(s)); k > 0; k-- {
		if strings.HasSuffix(s, tag[:k]) {
			return k
		}
	}
	return 0
}
