package engine

import (
	"fmt"
	"sync"

	"github.com/gosling-ai/gosling/tokenizer"
)

type chatTemplateOnce struct {
	once sync.Once
	tmpl *tokenizer.ChatTemplate
	err  error
}

// ChatPromptIDs renders messages with the model's chat template (with the
// generation prompt appended) and tokenizes the result. The template writes
// the special tokens itself, so none are added by the tokenizer.
func (e *Engine) ChatPromptIDs(messages []tokenizer.ChatMessage, extra map[string]any) ([]int, string, error) {
	tmpl, err := e.ChatTemplate()
	if err != nil {
		return nil, "", err
	}
	text, err := tmpl.Render(messages, true, extra)
	if err != nil {
		return nil, "", fmt.Errorf("chat template: %w", err)
	}
	return e.tok.Encode(e.ExpandImageText(text), false), text, nil
}

// ChatTemplate is the tokenizer's chat template, parsed once.
func (e *Engine) ChatTemplate() (*tokenizer.ChatTemplate, error) {
	if e.tok == nil {
		return nil, fmt.Errorf("this model has no tokenizer, so chat is unavailable; load one with --tokenizer PATH")
	}
	e.chat.once.Do(func() {
		src := e.tok.ChatTemplateSource()
		if src == "" {
			e.chat.err = fmt.Errorf("the tokenizer has no chat template; send a plain prompt instead, or give one with --chat-template")
			return
		}
		e.chat.tmpl, e.chat.err = tokenizer.NewChatTemplate(src, e.tok.SpecialTokenStrings())
	})
	return e.chat.tmpl, e.chat.err
}
