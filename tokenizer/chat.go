package tokenizer

// Chat templates: the Jinja "chat_template" of tokenizer_config.json, rendered
// the way Hugging Face transformers renders it in apply_chat_template, so that a
// conversation becomes, byte for byte, the prompt the model was trained on.
//
// transformers compiles a template in an ImmutableSandboxedEnvironment with
// trim_blocks and lstrip_blocks, the loopcontrols extension, the
// {% generation %} tag, its own tojson filter and the globals raise_exception
// and strftime_now. chat_env.go rebuilds that environment on gonja (a Go
// Jinja engine); chat_values.go turns Go data into the Python-like values
// templates expect; chat_pystr.go and chat_json.go hold the Python semantics
// (str methods, json.dumps) that templates lean on.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nikolalohinski/gonja/v2/exec"
)

// ChatMessage is one OpenAI-style message. Content is a string, or a list of
// parts ([]any of map[string]any like {"type":"text","text":...}) — passed to
// the template as-is.
type ChatMessage map[string]any

// ChatTemplate is a compiled chat template. It is safe for concurrent use.
type ChatTemplate struct {
	template      *exec.Template
	specialTokens map[string]string
	// now is strftime_now's clock (time.Now); tests pin it.
	now func() time.Time
}

// RaisedError is returned by Render when the template itself rejects the
// conversation through raise_exception (for example "Conversation roles must
// alternate user/assistant/user/assistant/..."). Its message is written for the
// end user, so servers should answer it as a bad request.
type RaisedError struct {
	Message string
}

func (e *RaisedError) Error() string { return "chat template: " + e.Message }

// chatTemplateName is how gonja names the one template of a ChatTemplate in its
// messages; it is also the only name the loader serves.
const chatTemplateName = "chat_template"

// NewChatTemplate compiles a Jinja chat template (the "chat_template" of
// tokenizer_config.json). specialTokens holds the bos_token, eos_token,
// unk_token, pad_token … strings made available to the template.
func NewChatTemplate(source string, specialTokens map[string]string) (*ChatTemplate, error) {
	tmpl, err := compileTemplate(source)
	if err != nil {
		return nil, err
	}
	tokens := make(map[string]string, len(specialTokens))
	for name, value := range specialTokens {
		tokens[name] = value
	}
	return &ChatTemplate{template: tmpl, specialTokens: tokens, now: time.Now}, nil
}

// Render renders messages. extra holds further template variables (tools,
// documents, enable_thinking, any chat_template_kwargs); they override the
// defaults (tools and documents are none, the special tokens), but not
// messages or add_generation_prompt, which are Render's own arguments. When
// the template rejects the conversation with raise_exception, the error is a
// *RaisedError.
//
// Values are shown to the template as Python would see them after json.loads
// of an OpenAI request: maps become dicts, slices become lists. Go maps have no
// key order, so their keys are presented sorted (with "role" and "content"
// first); to keep a caller's key order — it shows in tojson output — pass the
// value as json.RawMessage, or as a struct, whose field order is kept.
func (c *ChatTemplate) Render(messages []ChatMessage, addGenerationPrompt bool, extra map[string]any) (rendered string, err error) {
	for _, reserved := range []string{"messages", "add_generation_prompt"} {
		if _, ok := extra[reserved]; ok {
			return "", fmt.Errorf("render chat template: %q is an argument of Render, not an extra variable", reserved)
		}
	}
	state := &chatRenderState{now: c.now}
	data, err := c.variables(messages, addGenerationPrompt, extra, state)
	if err != nil {
		return "", fmt.Errorf("render chat template: %w", err)
	}

	// gonja can panic on inputs it did not foresee; a bad template or message
	// must cost one request, never the server.
	defer func() {
		if recovered := recover(); recovered != nil {
			rendered, err = "", fmt.Errorf("render chat template: internal error in the template engine: %v", recovered)
		}
	}()
	var out bytes.Buffer
	execErr := c.template.Execute(&out, exec.NewContext(data))
	if state.raised != nil {
		// raise_exception aborts the render in Python even where gonja would
		// have swallowed the error (e.g. inside an "is defined" test).
		return "", state.raised
	}
	if execErr != nil {
		// gonja prefixes every message with this; the rest names the problem.
		return "", fmt.Errorf("render chat template: %s", strings.TrimPrefix(execErr.Error(), "unable to execute template: "))
	}
	return out.String(), nil
}

// variables builds the template's variables the way transformers does:
// special tokens, then tools/documents (none unless given), then the caller's
// extras, then messages and add_generation_prompt.
func (c *ChatTemplate) variables(messages []ChatMessage, addGenerationPrompt bool, extra map[string]any, state *chatRenderState) (map[string]any, error) {
	data := map[string]any{
		"tools":     nil,
		"documents": nil,
	}
	for name, value := range c.specialTokens {
		data[name] = value
	}
	for name, value := range extra {
		converted, err := toTemplateValue(value)
		if err != nil {
			return nil, fmt.Errorf("variable %q: %w", name, err)
		}
		data[name] = converted
	}
	list := make(pyList, len(messages))
	for i, message := range messages {
		converted, err := toTemplateValue(map[string]any(message))
		if err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
		list[i] = converted
	}
	data["messages"] = list
	data["add_generation_prompt"] = addGenerationPrompt
	// Per render, so that a raise can be told apart from other errors.
	data["raise_exception"] = state.raiseException
	data["strftime_now"] = state.strftimeNow
	return data, nil
}

// LoadChatTemplateConfig reads tokenizer_config.json. It returns the template
// source — when chat_template is a list of {"name", "template"} it picks the
// one named "default"; when the file has no chat template (Mistral v0.1, base
// models) source is "" — and the special-token strings (bos_token, eos_token,
// unk_token, pad_token, sep_token, cls_token, mask_token), each given either as
// a string or as {"content": ...}. Tokens that are null are left out, as
// transformers leaves them undefined in the template.
func LoadChatTemplateConfig(tokenizerConfigPath string) (source string, specialTokens map[string]string, err error) {
	raw, err := os.ReadFile(tokenizerConfigPath)
	if err != nil {
		return "", nil, fmt.Errorf("load chat template: %w", err)
	}
	var config map[string]json.RawMessage
	if err := json.Unmarshal(raw, &config); err != nil {
		return "", nil, fmt.Errorf("load chat template: parse %s: %w", tokenizerConfigPath, err)
	}

	specialTokens = map[string]string{}
	for _, name := range []string{"bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token"} {
		token, ok, err := specialTokenString(config[name])
		if err != nil {
			return "", nil, fmt.Errorf("load chat template: %s: %s: %w", tokenizerConfigPath, name, err)
		}
		if ok {
			specialTokens[name] = token
		}
	}

	source, err = chatTemplateSource(config["chat_template"])
	if err != nil {
		return "", nil, fmt.Errorf("load chat template: %s: %w", tokenizerConfigPath, err)
	}
	return source, specialTokens, nil
}

// specialTokenString reads a special token given as "text", as an AddedToken
// object {"content": "text", ...}, or as null (ok is false).
func specialTokenString(raw json.RawMessage) (token string, ok bool, err error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", false, nil
	}
	if err := json.Unmarshal(raw, &token); err == nil {
		return token, true, nil
	}
	var added struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(raw, &added); err != nil || added.Content == nil {
		return "", false, errors.New(`want a string or an object with "content"`)
	}
	return *added.Content, true, nil
}

// chatTemplateSource reads chat_template: a string, a list of named templates
// (the "default" one is the chat template; the others, such as "tool_use" or
// "rag", are chosen by callers that know about them), or absent/null.
func chatTemplateSource(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var source string
	if err := json.Unmarshal(raw, &source); err == nil {
		return source, nil
	}
	var named []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &named); err != nil {
		return "", errors.New(`chat_template: want a string or a list of {"name", "template"}`)
	}
	names := make([]string, 0, len(named))
	for _, entry := range named {
		if entry.Name == "default" {
			return entry.Template, nil
		}
		names = append(names, entry.Name)
	}
	return "", fmt.Errorf("chat_template: no template named \"default\" among %q", names)
}
