package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/internal/shared"
)

// TestServeChatExample runs the README's and server/README's chat
// examples against the real server: with --chat-template, a chat request
// on stories260K (which has no template of its own) answers, whole and
// streamed; without one it is refused naming the flag.
func TestServeChatExample(t *testing.T) {
	stories := shared.Path(t, "models/stories260K/stories260K.gguf")
	url := startServe(t, "--model-path", stories, "--chat-template", "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}")
	post := func(url, body string) *http.Response {
		t.Helper()
		resp, err := http.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := post(url+"/v1/chat/completions", `{"messages": [{"role": "user", "content": "Once upon a time"}], "max_tokens": 32}`)
	var whole struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
	}
	err := json.NewDecoder(resp.Body).Decode(&whole)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || len(whole.Choices) != 1 || whole.Choices[0].Message.Content == "" {
		t.Errorf("README chat example: %d, %v, %+v", resp.StatusCode, err, whole)
	}
	resp = post(url+"/v1/chat/completions", `{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 32, "stream": true}`)
	defer resp.Body.Close()
	content, done := "", false
	for sc := bufio.NewScanner(resp.Body); sc.Scan(); {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			done = true
			break
		}
		var chunk struct {
			Choices []struct {
				Delta struct{ Content string } `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			t.Fatalf("stream chunk %q: %v", data, err)
		}
		for _, c := range chunk.Choices {
			content += c.Delta.Content
		}
	}
	if resp.StatusCode != 200 || !done || content == "" {
		t.Errorf("server/README streamed chat example: status %d, [DONE] %v, content %q", resp.StatusCode, done, content)
	}

	bare := startServe(t, "--model-path", stories)
	resp = post(bare+"/v1/chat/completions", `{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}`)
	var refused struct {
		Error struct{ Message string } `json:"error"`
	}
	json.NewDecoder(resp.Body).Decode(&refused)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(refused.Error.Message, "--chat-template") {
		t.Errorf("chat without a template: %d %q; want a 400 naming --chat-template", resp.StatusCode, refused.Error.Message)
	}
}
