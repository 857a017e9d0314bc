package tokenizer

import (
	"encoding/json"
	"os"
	"testing"
	"time"
)

func TestChatCrossCheckTmp(t *testing.T) {
	in := os.Getenv("CHATX_IN")
	if in == "" {
		t.Skip()
	}
	raw, _ := os.ReadFile(in)
	var cases []struct {
		Name     string                       `json:"name"`
		Template string                       `json:"template"`
		Messages []map[string]json.RawMessage `json:"messages"`
		Gen      bool                         `json:"gen"`
		Extra    map[string]json.RawMessage   `json:"extra"`
		Special  map[string]string            `json:"special"`
	}
	if err := json.Unmarshal(raw, &cases); err != nil {
		t.Fatal(err)
	}
	var out []map[string]string
	for _, c := range cases {
		res := map[string]string{"name": c.Name}
		tmpl, err := NewChatTemplate(c.Template, c.Special)
		if err != nil {
			res["error"] = err.Error()
			out = append(out, res)
			continue
		}
		tmpl.now = func() time.Time { return time.Date(2024, 7, 26, 9, 5, 3, 123456000, time.Local) }
		var msgs []ChatMessage
		for _, m := range c.Messages {
			cm := ChatMessage{}
			for k, v := range m {
				cm[k] = v
			}
			msgs = append(msgs, cm)
		}
		extra := map[string]any{}
		for k, v := range c.Extra {
			extra[k] = v
		}
		r, err := tmpl.Render(msgs, c.Gen, extra)
		if err != nil {
			res["error"] = err.Error()
		} else {
			res["rendered"] = r
		}
		out = append(out, res)
	}
	b, _ := json.MarshalIndent(out, "", " ")
	os.WriteFile(os.Getenv("CHATX_OUT"), b, 0o644)
}
