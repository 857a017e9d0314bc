package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// servingClient speaks to one server with one backend's protocol.
type servingClient struct {
	base    string
	http    *http.Client
	backend string // "gosling", "openai" or "openai-chat"
	model   string
}

// send runs one streaming request and times it: TTFT to the first token,
// ITL between later ones, E2E to the end of the stream.
func (c *servingClient) send(ctx context.Context, p servingPrompt) requestResult {
	if c.backend == "openai" || c.backend == "openai-chat" {
		return c.sendOpenAI(ctx, p)
	}
	return c.sendNative(ctx, p)
}

// tokenClock turns the arrival of tokens into TTFT and ITLs. The first
// chunk gives the TTFT; a later chunk that brings several tokens (the
// server batched them) spreads its gap evenly over them, as SGLang's
// bench_serving does.
type tokenClock struct {
	start, last time.Time
	seen        bool
	r           *requestResult
}

func (k *tokenClock) arrived(now time.Time, tokens int) {
	if tokens <= 0 {
		return
	}
	if !k.seen {
		k.seen = true
		k.r.ttft = now.Sub(k.start)
	} else {
		gap := now.Sub(k.last) / time.Duration(tokens)
		for range tokens {
			k.r.itls = append(k.r.itls, gap)
		}
	}
	k.last = now
}

// sendNative streams POST /generate. Every event carries the output so
// far (SGLang's cumulative stream), so the token count is exact.
func (c *servingClient) sendNative(ctx context.Context, p servingPrompt) requestResult {
	body := map[string]any{
		"sampling_params": map[string]any{
			"max_new_tokens": p.outputLen, "temperature": 0, "ignore_eos": true,
		},
		"stream": true,
	}
	if p.ids != nil {
		body["input_ids"] = p.ids
	} else {
		body["text"] = p.text
	}
	r := requestResult{promptLen: p.length()}
	var finish json.RawMessage
	clock := tokenClock{r: &r}
	err := c.stream(ctx, "/generate", body, &clock, func(now time.Time, data []byte) error {
		var ev struct {
			OutputIDs []int `json:"output_ids"`
			MetaInfo  struct {
				PromptTokens     int             `json:"prompt_tokens"`
				CompletionTokens int             `json:"completion_tokens"`
				CachedTokens     int             `json:"cached_tokens"`
				FinishReason     json.RawMessage `json:"finish_reason"`
			} `json:"meta_info"`
		}
		if err := json.Unmarshal(data, &ev); err != nil {
			return fmt.Errorf("bad event %.200s: %w", data, err)
		}
		m := ev.MetaInfo
		total := m.CompletionTokens
		if total == 0 {
			total = len(ev.OutputIDs)
		}
		clock.arrived(now, total-r.outputLen)
		r.outputLen = max(r.outputLen, total)
		r.serverPrompt, r.cached = m.PromptTokens, m.CachedTokens
		if len(m.FinishReason) > 0 && string(m.FinishReason) != "null" {
			finish = m.FinishReason
		}
		return nil
	})
	r.e2e = time.Since(clock.start)
	if err == nil {
		var fr struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		}
		if finish != nil && json.Unmarshal(finish, &fr) == nil && fr.Type == "abort" {
			err = fmt.Errorf("the server aborted the request: %s", fr.Message)
		}
	}
	r.err = err
	return r
}

// sendOpenAI streams POST /v1/completions with a token-id or text prompt,
// or /v1/chat/completions with the text as the user's message. A chunk
// counts as tokens arriving when it brings text; the output's length is
// the usage the server sends at the end (include_usage), else the count of
// such chunks.
func (c *servingClient) sendOpenAI(ctx context.Context, p servingPrompt) requestResult {
	body := map[string]any{
		"max_tokens": p.outputLen, "temperature": 0, "ignore_eos": true,
		"stream": true, "stream_options": map[string]any{"include_usage": true},
	}
	path := "/v1/completions"
	switch {
	case c.backend == "openai-chat":
		// The prompt is the user's message; the chat template adds its
		// own tokens, which the server's usage counts.
		path = "/v1/chat/completions"
		body["messages"] = []map[string]string{{"role": "user", "content": p.text}}
	case p.ids != nil:
		body["prompt"] = p.ids
	default:
		body["prompt"] = p.text
	}
	if c.model != "" {
		body["model"] = c.model
	}
	r := requestResult{promptLen: p.length()}
	clock := tokenClock{r: &r}
	chunks, usage := 0, false
	err := c.stream(ctx, path, body, &clock, func(now time.Time, data []byte) error {
		var ev struct {
			Choices []struct {
				Text  string `json:"text"`
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage *struct {
				PromptTokens        int `json:"prompt_tokens"`
				CompletionTokens    int `json:"completion_tokens"`
				PromptTokensDetails *struct {
					CachedTokens int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(data, &ev); err != nil {
			return fmt.Errorf("bad event %.200s: %w", data, err)
		}
		for _, ch := range ev.Choices {
			if ch.Text != "" || ch.Delta.Content != "" {
				clock.arrived(now, 1)
				chunks++
			}
			if ch.FinishReason != nil && *ch.FinishReason == "abort" {
				return fmt.Errorf("the server aborted the request")
			}
		}
		if u := ev.Usage; u != nil {
			usage = true
			r.serverPrompt, r.outputLen = u.PromptTokens, u.CompletionTokens
			if u.PromptTokensDetails != nil {
				r.cached = u.PromptTokensDetails.CachedTokens
			}
		}
		return nil
	})
	r.e2e = time.Since(clock.start)
	if !usage {
		r.outputLen = chunks
	}
	r.err = err
	return r
}

// stream POSTs body to path and hands each SSE data payload to onEvent
// until "data: [DONE]". clock.start is set when the request goes out.
func (c *servingClient) stream(ctx context.Context, path string, body any, clock *tokenClock,
	onEvent func(now time.Time, data []byte) error) error {
	data, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(data))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	clock.start = time.Now()
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return httpError(resp)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 64<<20) // cumulative events grow with the output
	for sc.Scan() {
		payload, ok := bytes.CutPrefix(sc.Bytes(), []byte("data:"))
		if !ok {
			continue // blank separators, comments, other fields
		}
		payload = bytes.TrimSpace(payload)
		if string(payload) == "[DONE]" {
			return nil
		}
		now := time.Now()
		if msg := errorMessage(payload); msg != "" {
			return fmt.Errorf("error event: %s", msg)
		}
		if err := onEvent(now, payload); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return errNoDone
}

// errorMessage is the message of an OpenAI-style {"error": {...}} payload,
// or "" for any other.
func errorMessage(payload []byte) string {
	if !bytes.Contains(payload, []byte(`"error"`)) {
		return ""
	}
	var e struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(payload, &e) != nil || len(e.Error) == 0 || string(e.Error) == "null" {
		return ""
	}
	var obj struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(e.Error, &obj) == nil && obj.Message != "" {
		return obj.Message
	}
	return string(e.Error)
}

// statusError is an answer other than 200 OK.
type statusError struct {
	status  int
	message string
}

func (e *statusError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.status, e.message) }

func httpError(resp *http.Response) error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	msg := errorMessage(raw)
	if msg == "" {
		msg = strings.TrimSpace(string(raw))
	}
	return &statusError{status: resp.StatusCode, message: msg}
}

// getJSON GETs path and decodes the JSON answer into v.
func (c *servingClient) getJSON(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return httpError(resp)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

type serverModelInfo struct {
	VocabSize     int `json:"vocab_size"`
	ContextLength int `json:"context_length"`
}

// modelInfo reads /get_model_info. A server without the route (404) is
// not an error: the caller may know the vocabulary size itself.
func (c *servingClient) modelInfo(ctx context.Context) (serverModelInfo, error) {
	var info serverModelInfo
	err := c.getJSON(ctx, "/get_model_info", &info)
	if se, ok := err.(*statusError); ok && se.status == http.StatusNotFound {
		err = nil
	}
	return info, err
}

// firstModel is the id of the first model of /v1/models, or "".
func (c *servingClient) firstModel(ctx context.Context) string {
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if c.getJSON(ctx, "/v1/models", &list) != nil || len(list.Data) == 0 {
		return ""
	}
	return list.Data[0].ID
}

// radixCache is "on" or "off" from /get_server_info's
// disable_radix_cache, or "" when the server does not say.
func (c *servingClient) radixCache(ctx context.Context) string {
	var info struct {
		DisableRadixCache *bool `json:"disable_radix_cache"`
	}
	if c.getJSON(ctx, "/get_server_info", &info) != nil || info.DisableRadixCache == nil {
		return ""
	}
	if *info.DisableRadixCache {
		return "off"
	}
	return "on"
}

func (c *servingClient) flushCache(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/flush_cache", nil)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("flush cache: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("flush cache: %w", httpError(resp))
	}
	return nil
}

// cacheHitRate reads the cache_hit_rate gauge of /metrics (gosling's, or
// SGLang's under "sglang:"); nil when the server has none.
func (c *servingClient) cacheHitRate(ctx context.Context) *float64 {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/metrics", nil)
	if err != nil {
		return nil
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil
	}
	return parseCacheHitRate(resp.Body)
}

// parseCacheHitRate finds "<prefix>:cache_hit_rate{labels} value" in a
// Prometheus text exposition.
func parseCacheHitRate(r io.Reader) *float64 {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		_, rest, ok := strings.Cut(line, ":cache_hit_rate")
		if !ok || (rest != "" && rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		fields := strings.Fields(line)
		if v, err := strconv.ParseFloat(fields[len(fields)-1], 64); err == nil {
			return &v
		}
	}
	return nil
}
