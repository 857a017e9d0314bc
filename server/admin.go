package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"time"
	"unicode"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/sample"
)

// SGLang's native service routes besides /generate.

// GET /health: the process is up (SGLang's liveness check).
func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	w.WriteHeader(http.StatusOK)
}

// healthGenerateTimeout bounds /health_generate: a scheduler that cannot
// produce one token in this time is unhealthy.
const healthGenerateTimeout = 20 * time.Second

// GET /health_generate: the engine can generate one token.
func (s *Server) handleHealthGenerate(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), healthGenerateTimeout)
	defer cancel()
	first := 0
	if tok := s.eng.Tokenizer(); tok != nil && tok.BOS() >= 0 {
		first = tok.BOS()
	}
	p := sample.DefaultParams()
	p.Temperature = 0
	p.MaxNewTokens = 1
	res, err := s.eng.Generate(ctx, engine.Request{InputIDs: []int{first}, Sampling: p})
	if err != nil || len(res.OutputIDs) != 1 {
		msg := "the engine did not generate a token"
		if err != nil {
			msg += ": " + err.Error()
		}
		writeError(w, serverError(http.StatusServiceUnavailable, codeUnavailable, "%s", msg))
		return
	}
	w.WriteHeader(http.StatusOK)
}

// GET /get_model_info
func (s *Server) handleModelInfo(w http.ResponseWriter, r *http.Request) {
	set := s.eng.Settings()
	tokPath := set.TokenizerPath
	if tokPath == "" {
		tokPath = set.ModelPath // SGLang's default: the tokenizer comes with the model
	}
	mc := s.eng.ModelConfig()
	writeJSON(w, http.StatusOK, map[string]any{
		"model_path":        set.ModelPath,
		"tokenizer_path":    tokPath,
		"is_generation":     true,
		"served_model_name": s.opts.ServedModelName,
		"architecture":      mc.Architecture,
		"model_type":        mc.ModelType,
		"context_length":    set.ContextLength,
		"vocab_size":        mc.VocabSize,
		"format":            fmt.Sprint(s.eng.Checkpoint().Format),
		"has_tokenizer":     s.eng.Tokenizer() != nil,
	})
}

// GET /get_server_info: the engine's effective settings (after defaults and
// attention-backend resolution) in snake_case, plus the server's own.
func (s *Server) handleServerInfo(w http.ResponseWriter, r *http.Request) {
	info := settingsMap(s.eng.Settings())
	info["served_model_name"] = s.opts.ServedModelName
	info["chat_template_override"] = s.chat != nil
	info["api_key_required"] = s.opts.APIKey != ""
	info["max_request_bytes"] = s.opts.MaxRequestBytes
	info["max_request_sequences"] = s.opts.MaxRequestSequences
	info["max_request_tokens"] = s.opts.MaxRequestTokens
	st := s.eng.Stats()
	info["internal_states"] = []map[string]any{{
		"num_running_reqs": st.Running, "num_queue_reqs": st.Waiting,
		"kv_pages_free": st.KVPagesFree, "kv_pages_total": st.KVPagesTotal,
		"kv_pages_cached": st.KVPagesCached, "retractions": st.Retractions,
		"prompt_tokens": st.PromptTokens, "cached_tokens": st.CachedTokens, "generated_tokens": st.GeneratedTokens,
	}}
	// Steps by CUDA graph path (all zero where the engine runs none).
	graphs := map[string]engine.GraphCounts{}
	graphs["decode"], graphs["verify"], graphs["draft"] = st.GraphPaths()
	info["internal_states"].([]map[string]any)[0]["cuda_graph_steps"] = graphs
	if ss := s.eng.SpecStats(); ss.Algorithm != "" {
		// SGLang's name for the mean tokens emitted per verify step.
		state := info["internal_states"].([]map[string]any)[0]
		state["avg_spec_accept_length"] = ss.AcceptLength()
		state["spec_verify_steps"], state["spec_drafted_tokens"], state["spec_accepted_tokens"] = ss.VerifySteps, ss.DraftedTokens, ss.AcceptedTokens
		// Tree nodes decided from device results and from host logits.
		state["spec_device_verified_nodes"], state["spec_host_verified_nodes"] = ss.DeviceVerifiedNodes, ss.HostVerifiedNodes
	}
	writeJSON(w, http.StatusOK, info)
}

// settingsMap lists every exported setting of engine.Config by reflection,
// so a setting added to the engine shows up without touching the server.
func settingsMap(cfg engine.Config) map[string]any {
	out := map[string]any{}
	v := reflect.ValueOf(cfg)
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() || f.Type == reflect.TypeFor[*slog.Logger]() {
			continue
		}
		switch f.Type.Kind() {
		case reflect.Func, reflect.Chan, reflect.Interface, reflect.Pointer, reflect.UnsafePointer:
			continue
		}
		out[snakeCase(f.Name)] = v.Field(i).Interface()
	}
	return out
}

// snakeCase turns Go names into SGLang's argument names:
// KVCacheTokens → kv_cache_tokens, KVCacheDType → kv_cache_dtype.
func snakeCase(name string) string {
	name = strings.ReplaceAll(name, "DType", "Dtype")
	runes := []rune(name)
	var b strings.Builder
	for i, r := range runes {
		if unicode.IsUpper(r) && i > 0 {
			prevLower := unicode.IsLower(runes[i-1]) || unicode.IsDigit(runes[i-1])
			nextLower := i+1 < len(runes) && unicode.IsLower(runes[i+1])
			if prevLower || unicode.IsUpper(runes[i-1]) && nextLower {
				b.WriteByte('_')
			}
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// POST /abort_request {"rid": "..."} or {"abort_all": true}. Aborting an
// unknown or finished request is not an error (as in SGLang): the request
// may have finished a moment ago.
func (s *Server) handleAbort(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Rid      json.RawMessage `json:"rid"`
		AbortAll bool            `json:"abort_all"`
	}
	if err := decodeBody(r, &req); err != nil {
		writeError(w, err)
		return
	}
	rids, err := parseStringOrList(req.Rid, "rid")
	if err != nil {
		writeError(w, err)
		return
	}
	if len(rids) == 0 && !req.AbortAll {
		writeError(w, badRequest("rid", codeMissing, "give the rid of the request to abort, or \"abort_all\": true"))
		return
	}
	n := s.requests.abort(rids, req.AbortAll)
	writeJSON(w, http.StatusOK, map[string]any{"aborted": n})
}

// POST /flush_cache drops the prefix cache. As in SGLang it fails (400)
// while running requests pin cached prefixes: retry when the server is idle.
func (s *Server) handleFlushCache(w http.ResponseWriter, r *http.Request) {
	if err := s.eng.FlushCache(); err != nil {
		if errors.Is(err, engine.ErrClosed) {
			writeError(w, serverError(http.StatusServiceUnavailable, codeUnavailable, "the server is shutting down"))
			return
		}
		writeError(w, badRequest("", codeInvalidValue, "cache not flushed: %v; retry when no request is running", err))
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	fmt.Fprintln(w, "Cache flushed.")
}

// POST /tokenize {"text" or "prompt": string or list, "add_special_tokens": true}
func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model            string          `json:"model"`
		Text             json.RawMessage `json:"text"`
		Prompt           json.RawMessage `json:"prompt"`
		AddSpecialTokens *bool           `json:"add_special_tokens"`
	}
	if err := decodeBody(r, &req); err != nil {
		writeError(w, err)
		return
	}
	if err := s.checkModel(req.Model); err != nil {
		writeError(w, err)
		return
	}
	tok := s.eng.Tokenizer()
	if tok == nil {
		writeError(w, badRequest("", codeInvalidValue, "this model has no tokenizer; start the server with --tokenizer PATH"))
		return
	}
	raw, param := req.Prompt, "prompt"
	if !isNull(req.Text) {
		raw, param = req.Text, "text"
	}
	if isNull(raw) {
		writeError(w, badRequest("prompt", codeMissing, "give the text to tokenize as \"prompt\" (or \"text\")"))
		return
	}
	addSpecial := req.AddSpecialTokens == nil || *req.AddSpecialTokens
	one, single := decodeAs[string](raw)
	texts := []string{one}
	if !single {
		var ok bool
		if texts, ok = decodeAs[[]string](raw); !ok {
			writeError(w, wrongType(param, "a string or a list of strings", rawKind(raw)))
			return
		}
	}
	// Texts longer than the context may be tokenized (to learn by how
	// much), within the request's token budget.
	budget, err := s.newBudget(len(texts), 1, param)
	if err != nil {
		writeError(w, err)
		return
	}
	tokens, counts := [][]int{}, []int{}
	for i, t := range texts {
		at := indexed(param, i, !single)
		ids, ok := tok.EncodeLimit(t, addSpecial, budget.left)
		if !ok {
			writeError(w, budget.exceeded(at))
			return
		}
		if err := budget.take(len(ids), at); err != nil {
			writeError(w, err)
			return
		}
		tokens, counts = append(tokens, ids), append(counts, len(ids))
	}
	ctxLen := s.eng.Settings().ContextLength
	if single {
		writeJSON(w, http.StatusOK, map[string]any{"tokens": tokens[0], "count": counts[0], "max_model_len": ctxLen})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"tokens": tokens, "count": counts, "max_model_len": ctxLen})
}

// POST /detokenize {"tokens": [ids], "skip_special_tokens": true}
func (s *Server) handleDetokenize(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model             string `json:"model"`
		Tokens            []int  `json:"tokens"`
		SkipSpecialTokens *bool  `json:"skip_special_tokens"`
	}
	if err := decodeBody(r, &req); err != nil {
		writeError(w, err)
		return
	}
	if err := s.checkModel(req.Model); err != nil {
		writeError(w, err)
		return
	}
	tok := s.eng.Tokenizer()
	if tok == nil {
		writeError(w, badRequest("", codeInvalidValue, "this model has no tokenizer; start the server with --tokenizer PATH"))
		return
	}
	if req.Tokens == nil {
		writeError(w, badRequest("tokens", codeMissing, "give the token ids to decode as \"tokens\""))
		return
	}
	for i, id := range req.Tokens {
		if id < 0 || id >= tok.VocabSize() {
			writeError(w, badRequest("tokens", codeInvalidValue, "tokens[%d] = %d is outside the vocabulary [0, %d)", i, id, tok.VocabSize()))
			return
		}
	}
	skip := req.SkipSpecialTokens == nil || *req.SkipSpecialTokens
	writeJSON(w, http.StatusOK, map[string]any{"text": tok.Decode(req.Tokens, skip)})
}
