package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/tokenizer"
)

// POST /v1/chat/completions

type chatRequest struct {
	openaiCommon
	Messages            []map[string]json.RawMessage `json:"messages"`
	MaxTokens           *int                         `json:"max_tokens"`
	MaxCompletionTokens *int                         `json:"max_completion_tokens"`
	Logprobs            bool                         `json:"logprobs"`
	TopLogprobs         *int                         `json:"top_logprobs"`
	Tools               json.RawMessage              `json:"tools"`
	ToolChoice          json.RawMessage              `json:"tool_choice"`
	ParallelToolCalls   *bool                        `json:"parallel_tool_calls"`
	ChatTemplateKwargs  map[string]json.RawMessage   `json:"chat_template_kwargs"`
	SeparateReasoning   *bool                        `json:"separate_reasoning"`  // SGLang: split <think> (default true)
	MMProcessorKwargs   json.RawMessage              `json:"mm_processor_kwargs"` // vLLM: image processor settings
}

type chatCompletion struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   *usage       `json:"usage"`
}

type chatChoice struct {
	Index        int           `json:"index"`
	Message      chatMessage   `json:"message"`
	Logprobs     *chatLogprobs `json:"logprobs"`
	FinishReason string        `json:"finish_reason"`
	MatchedStop  any           `json:"matched_stop,omitempty"` // SGLang extension: the stop token id or string
}

type chatMessage struct {
	Role             string     `json:"role"`
	Content          *string    `json:"content"` // null when the reply is only tool calls
	ReasoningContent *string    `json:"reasoning_content,omitempty"`
	ToolCalls        []toolCall `json:"tool_calls,omitempty"`
}

type chatChunk struct {
	ID      string            `json:"id"`
	Object  string            `json:"object"`
	Created int64             `json:"created"`
	Model   string            `json:"model"`
	Choices []chatChunkChoice `json:"choices"`
	Usage   *usage            `json:"usage,omitempty"`
}

type chatChunkChoice struct {
	Index        int           `json:"index"`
	Delta        chatDelta     `json:"delta"`
	Logprobs     *chatLogprobs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
	MatchedStop  any           `json:"matched_stop,omitempty"`
}

type chatDelta struct {
	Role             string          `json:"role,omitempty"`
	Content          *string         `json:"content,omitempty"`
	ReasoningContent *string         `json:"reasoning_content,omitempty"`
	ToolCalls        []toolCallDelta `json:"tool_calls,omitempty"`
}

const maxTopLogprobs = 20 // OpenAI's limit

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	if err := decodeBody(r, &req); err != nil {
		writeError(w, err)
		return
	}
	n, err := req.check(s)
	if err != nil {
		writeError(w, err)
		return
	}
	constraint, err := req.grammar(s)
	if err != nil {
		writeError(w, err)
		return
	}
	plan, err := s.planTools(req.Tools, req.ToolChoice, req.ParallelToolCalls)
	if err != nil {
		writeError(w, err)
		return
	}
	if plan.grammar != nil {
		if constraint != nil {
			writeError(w, badRequest("tool_choice", codeInvalidValue, "tool_choice %s forces tool calls; it cannot be combined with response_format or another constraint", req.ToolChoice))
			return
		}
		constraint = plan.grammar
	}
	separate := req.SeparateReasoning == nil || *req.SeparateReasoning
	imgs := imageParts{placeholder: s.eng.ImagePlaceholderText(), video: s.eng.VideoPlaceholderText(), model: s.eng.ModelConfig().Architecture}
	msgs, err := parseMessages(req.Messages, &imgs)
	if err != nil {
		writeError(w, err)
		return
	}
	imageOpts, err := s.imageOptions(req.MMProcessorKwargs)
	if err != nil {
		writeError(w, err)
		return
	}
	images, err := s.chatImages(&imgs)
	if err != nil {
		writeError(w, err)
		return
	}
	if images, err = s.prepareImages(images, imageOpts, "messages"); err != nil {
		writeError(w, err)
		return
	}
	extra := map[string]any{}
	for k, v := range req.ChatTemplateKwargs {
		if k == "messages" || k == "add_generation_prompt" {
			writeError(w, badRequest("chat_template_kwargs."+k, codeInvalidValue, "chat_template_kwargs may not set %q", k))
			return
		}
		extra[k] = v
	}
	if plan.render != nil {
		extra["tools"] = plan.render
	}
	ids, err := s.chatPromptIDs(msgs, extra, n, images)
	if err != nil {
		writeError(w, err)
		return
	}
	budget, budgetParam := req.MaxTokens, "max_tokens"
	if req.MaxCompletionTokens != nil {
		budget, budgetParam = req.MaxCompletionTokens, "max_completion_tokens"
	}
	maxNew, err := s.maxNewTokens(budget, -1, len(ids), budgetParam)
	if err != nil {
		writeError(w, err)
		return
	}
	params, err := req.params(s.baseParams(), "")
	if err != nil {
		writeError(w, err)
		return
	}
	params.MaxNewTokens = maxNew
	if err := validateParams(params, ""); err != nil {
		writeError(w, err)
		return
	}
	topN := 0
	if req.TopLogprobs != nil {
		topN = *req.TopLogprobs
		if topN < 0 || topN > maxTopLogprobs {
			writeError(w, badRequest("top_logprobs", codeInvalidValue, "top_logprobs must be between 0 and %d, got %d", maxTopLogprobs, topN))
			return
		}
		if topN > 0 && !req.Logprobs {
			writeError(w, badRequest("top_logprobs", codeInvalidValue, "top_logprobs needs \"logprobs\": true"))
			return
		}
	}

	parsed(r)
	id := newID("chatcmpl-")
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	ctx, untrack, err := s.track(ctx, id, "")
	if err != nil {
		writeError(w, err)
		return
	}
	defer untrack()
	reqs := make([]engine.Request, n)
	for i := range reqs {
		p := params
		p.Seed = seedAt(req.Seed, i)
		p.KeepSpecial = plan.keep
		reqs[i] = engine.Request{InputIDs: ids, Sampling: p, Logprobs: req.Logprobs, TopLogprobs: topN, Images: images, Grammar: constraint}
	}
	head := chatChunk{ID: id, Object: "chat.completion.chunk", Created: time.Now().Unix(), Model: s.opts.ServedModelName}
	if req.Stream {
		shapers := make([]*replyShaper, n)
		for i := range shapers {
			shapers[i] = s.newReplyShaper(plan, separate)
		}
		s.streamChat(ctx, newSSEWriter(w, cancel), head, reqs, shapers, req.Logprobs, req.includeUsage())
		return
	}
	results, genErr := s.runAll(ctx, reqs, nil)
	if genErr != nil {
		writeError(w, genErr)
		return
	}
	resp := chatCompletion{ID: id, Object: "chat.completion", Created: head.Created, Model: head.Model}
	completion, cached := 0, 0
	for i, res := range results {
		c := chatChoice{Index: i, Message: s.newReplyShaper(plan, separate).message(res.Text),
			FinishReason: res.FinishReason, MatchedStop: res.MatchedStop}
		if len(c.Message.ToolCalls) > 0 && res.FinishReason == engine.FinishStop {
			c.FinishReason = "tool_calls"
		}
		if req.Logprobs {
			c.Logprobs = &chatLogprobs{Content: s.texts.chatEntries(res.OutputIDs, s.texts.pieces(res.OutputIDs, res.PromptIDs), res.OutputLogprobs, res.TopLogprobs)}
		}
		resp.Choices = append(resp.Choices, c)
		completion += len(res.OutputIDs)
		cached = max(cached, res.CachedTokens)
	}
	resp.Usage = newUsage(len(ids), completion, cached)
	writeJSON(w, http.StatusOK, resp)
}

// streamChat streams the n choices as chat.completion.chunk events: per
// choice a first chunk with the role, content chunks, a last chunk with the
// finish reason; then the usage chunk if asked for, and [DONE].
func (s *Server) streamChat(ctx context.Context, sse *sseWriter, head chatChunk, reqs []engine.Request, shapers []*replyShaper, logprobs, includeUsage bool) {
	chunk := func(c chatChunkChoice) chatChunk {
		out := head
		out.Choices = []chatChunkChoice{c}
		return out
	}
	roles := make([]func(), len(reqs)) // each choice's first chunk, sent once
	for i := range reqs {
		pieces := s.texts.stream(reqs[i].InputIDs)
		roleSent := false
		sendRole := func() {
			if !roleSent {
				roleSent = true
				empty := ""
				sse.send(chunk(chatChunkChoice{Index: i, Delta: chatDelta{Role: "assistant", Content: &empty}}))
			}
		}
		reqs[i].OnDelta = func(d engine.Delta) {
			c := chatChunkChoice{Index: i}
			if logprobs && len(d.IDs) > 0 {
				c.Logprobs = &chatLogprobs{Content: s.texts.chatEntries(d.IDs, pieces.pushAll(d.IDs), d.Logprobs, d.TopLogprobs)}
			}
			reasoningText, text, calls := shapers[i].push(d.Text, false)
			if text == "" && reasoningText == "" && len(calls) == 0 && c.Logprobs == nil {
				return
			}
			sendRole()
			c.Delta = deltaOf(reasoningText, text, calls)
			sse.send(chunk(c))
		}
		roles[i] = sendRole
	}
	completion, cached := 0, 0
	if _, err := s.runAll(ctx, reqs, func(i int, res *engine.Result) {
		roles[i]()
		reason := res.FinishReason
		// What the shaper held back (a partial tag, calls parsed at the end).
		reasoningText, text, calls := shapers[i].push("", true)
		if text != "" || reasoningText != "" || len(calls) > 0 {
			sse.send(chunk(chatChunkChoice{Index: i, Delta: deltaOf(reasoningText, text, calls)}))
		}
		if shapers[i].calls() > 0 && reason == engine.FinishStop {
			reason = "tool_calls"
		}
		sse.send(chunk(chatChunkChoice{Index: i, FinishReason: &reason, MatchedStop: res.MatchedStop}))
		completion += len(res.OutputIDs)
		cached = max(cached, res.CachedTokens)
	}); err != nil {
		sse.fail(err)
		return
	}
	if includeUsage {
		out := head
		out.Choices = []chatChunkChoice{}
		out.Usage = newUsage(len(reqs[0].InputIDs), completion, cached)
		sse.send(out)
	}
	sse.done()
}

// deltaOf is a stream delta with the non-empty parts.
func deltaOf(reasoningText, text string, calls []toolCallDelta) chatDelta {
	var d chatDelta
	if reasoningText != "" {
		d.ReasoningContent = &reasoningText
	}
	if text != "" || (reasoningText == "" && len(calls) == 0) {
		d.Content = &text
	}
	d.ToolCalls = calls
	return d
}

// chatPromptIDs renders the conversation (with the generation prompt) with
// the server's --chat-template when given, else the tokenizer's, and
// tokenizes it within the request's budget for n choices, with the
// prepared images' placeholders expanded.
func (s *Server) chatPromptIDs(msgs []tokenizer.ChatMessage, extra map[string]any, n int, images []engine.Image) ([]int, *apiError) {
	budget, apiErr := s.newBudget(1, n, "messages")
	if apiErr != nil {
		return nil, apiErr
	}
	tmpl := s.chat
	var err error
	if tmpl == nil {
		tmpl, err = s.eng.ChatTemplate()
	}
	var text string
	if err == nil {
		text, err = tmpl.Render(msgs, true, extra)
	}
	if err != nil {
		// A template error is caused by the conversation (or by a model
		// without a template): either way the client must change the request.
		return nil, badRequest("messages", codeInvalidValue, "%v", err)
	}
	if text == "" {
		return nil, badRequest("messages", codeInvalidValue, "the chat template rendered an empty prompt")
	}
	// The template writes the special tokens itself.
	ids, apiErr := budget.encode(s.eng.ExpandImageText(text, images), "messages", false)
	if apiErr != nil {
		return nil, apiErr
	}
	return budget.expandImages(ids, images, "messages")
}

var chatRoles = map[string]bool{"system": true, "developer": true, "user": true, "assistant": true, "tool": true, "function": true}

// parseMessages checks OpenAI messages and turns them into template input:
// text-part lists become one string (parts joined by "\n", as vLLM and SGLang
// do for templates that expect strings), "developer" becomes "system", and
// other keys (name, tool_calls, tool_call_id, reasoning_content) pass through
// with their JSON key order.
func parseMessages(raw []map[string]json.RawMessage, imgs *imageParts) ([]tokenizer.ChatMessage, *apiError) {
	if len(raw) == 0 {
		return nil, badRequest("messages", codeInvalidValue, "messages must be a non-empty array")
	}
	out := make([]tokenizer.ChatMessage, 0, len(raw))
	for i, m := range raw {
		at := fmt.Sprintf("messages[%d]", i)
		if m == nil {
			return nil, wrongType(at, "an object", "null")
		}
		var role string
		if err := json.Unmarshal(m["role"], &role); err != nil || role == "" {
			if isNull(m["role"]) {
				return nil, badRequest(at+".role", codeMissing, "%s.role is required", at)
			}
			return nil, wrongType(at+".role", "a string", rawKind(m["role"]))
		}
		if !chatRoles[role] {
			return nil, badRequest(at+".role", codeInvalidValue, "%s.role %q is not one of system, developer, user, assistant, tool", at, role)
		}
		if role == "developer" {
			role = "system"
		}
		msg := tokenizer.ChatMessage{"role": role}
		content, err := parseContent(m["content"], at+".content", imgs)
		if err != nil {
			return nil, err
		}
		if content == nil && role != "assistant" {
			return nil, badRequest(at+".content", codeMissing, "%s.content is required for role %q", at, role)
		}
		if content != nil {
			msg["content"] = *content
		} else {
			msg["content"] = nil
		}
		for k, v := range m {
			if k != "role" && k != "content" {
				msg[k] = v
			}
		}
		out = append(out, msg)
	}
	return out, nil
}

// parseContent reads a message's content: null, a string, or a list of
// {"type": "text", "text": ...} and {"type": "image_url", ...} parts. An
// image part becomes imageMarker in the text (chatImages puts the model's
// placeholder there) and its URL joins imgs. Other part types (audio,
// files) are refused.
func parseContent(raw json.RawMessage, param string, imgs *imageParts) (*string, *apiError) {
	if isNull(raw) {
		return nil, nil
	}
	if text, ok := decodeAs[string](raw); ok {
		return &text, nil
	}
	parts, ok := decodeAs[[]map[string]json.RawMessage](raw)
	if !ok {
		return nil, wrongType(param, "a string or an array of content parts", rawKind(raw))
	}
	texts := make([]string, 0, len(parts))
	for j, part := range parts {
		at := fmt.Sprintf("%s[%d]", param, j)
		var typ string
		if json.Unmarshal(part["type"], &typ) != nil {
			return nil, badRequest(at+".type", codeMissing, "%s.type must be a string such as \"text\"", at)
		}
		if typ == "image_url" || typ == "video" {
			add := imgs.add
			if typ == "video" {
				add = imgs.addVideo
			}
			placeholder, err := add(part, at)
			if err != nil {
				return nil, err
			}
			texts = append(texts, placeholder)
			continue
		}
		if typ == "video_url" {
			return nil, badRequest(at+".type", codeUnsupported, "content part type \"video_url\" is not supported: video files are not decoded; send a video as its frames, {\"type\": \"video\", \"video\": [image, ...]}, to a model that reads video")
		}
		if typ != "text" {
			return nil, badRequest(at+".type", codeUnsupported, "content part type %q is not supported: this server accepts \"text\", \"image_url\" and \"video\" (frames) parts", typ)
		}
		var t string
		if err := json.Unmarshal(part["text"], &t); err != nil {
			return nil, wrongType(at+".text", "a string", rawKind(part["text"]))
		}
		texts = append(texts, t)
	}
	joined := strings.Join(texts, "\n")
	return &joined, nil
}
