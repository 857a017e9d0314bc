package engine

import (
	"fmt"
	"os"
	"strings"
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
// the special tokens itself, so none are added by the tokenizer. imgs are
// the conversation's prepared images (PrepareImages), whose pan-and-scan
// crops change the text.
func (e *Engine) ChatPromptIDs(messages []tokenizer.ChatMessage, extra map[string]any, imgs []Image) ([]int, string, error) {
	tmpl, err := e.ChatTemplate()
	if err != nil {
		return nil, "", err
	}
	text, err := tmpl.Render(messages, true, extra)
	if err != nil {
		return nil, "", fmt.Errorf("chat template: %w", err)
	}
	return e.tok.Encode(e.ExpandImageText(text, imgs), false), text, nil
}

// ChatTemplate is the tokenizer's chat template, parsed once.
func (e *Engine) ChatTemplate() (*tokenizer.ChatTemplate, error) {
	if e.tok == nil {
		return nil, fmt.Errorf("this model has no tokenizer, so chat is unavailable; load one with --tokenizer PATH")
	}
	e.chat.once.Do(func() {
		if e.cfg.ChatTemplate != "" {
			e.chat.tmpl, e.chat.err = LoadChatTemplate(e.cfg.ChatTemplate, e.tok)
			return
		}
		src := e.tok.ChatTemplateSource()
		if src == "" {
			e.chat.err = fmt.Errorf("the tokenizer has no chat template; send a plain prompt instead, or give one with --chat-template")
			return
		}
		e.chat.tmpl, e.chat.err = tokenizer.NewChatTemplate(src, e.tok.SpecialTokenStrings())
	})
	return e.chat.tmpl, e.chat.err
}

// LoadChatTemplate reads a --chat-template: the path of a file holding a
// Jinja template, or the template itself.
func LoadChatTemplate(spec string, tok *tokenizer.Tokenizer) (*tokenizer.ChatTemplate, error) {
	source := spec
	if data, err := os.ReadFile(spec); err == nil {
		source = string(data)
	} else if !strings.Contains(spec, "{{") && !strings.Contains(spec, "{%") {
		return nil, fmt.Errorf("--chat-template %q is neither a readable file nor a Jinja template: %w", spec, err)
	}
	if tok == nil {
		return nil, fmt.Errorf("--chat-template needs a tokenizer, and this model has none; add --tokenizer PATH")
	}
	tmpl, err := tokenizer.NewChatTemplate(source, tok.SpecialTokenStrings())
	if err != nil {
		return nil, fmt.Errorf("--chat-template: %w", err)
	}
	return tmpl, nil
}
