package server

import (
	"encoding/json"
	"strings"

	"github.com/gosling-ai/gosling/sample"
)

// samplingFields are the sampling parameters OpenAI's routes and SGLang's
// sampling_params share. Pointers are nil when the client left the field
// out, so that the model's generation_config.json supplies the default.
type samplingFields struct {
	Temperature       *float64        `json:"temperature"`
	TopP              *float64        `json:"top_p"`
	TopK              *int            `json:"top_k"`              // SGLang/vLLM extension
	MinP              *float64        `json:"min_p"`              // SGLang/vLLM extension
	RepetitionPenalty *float64        `json:"repetition_penalty"` // SGLang/vLLM extension
	FrequencyPenalty  *float64        `json:"frequency_penalty"`
	PresencePenalty   *float64        `json:"presence_penalty"`
	Stop              json.RawMessage `json:"stop"` // a string or a list of strings
	StopTokenIDs      []int           `json:"stop_token_ids"`
	IgnoreEOS         bool            `json:"ignore_eos"`
	SkipSpecialTokens *bool           `json:"skip_special_tokens"`
}

// baseParams are OpenAI's defaults overridden by the model's
// generation_config.json, as SGLang does for fields a request leaves out.
func (s *Server) baseParams() sample.Params {
	p := sample.DefaultParams()
	gen := s.eng.Checkpoint().Generation
	for _, f := range []struct {
		def *float64
		dst *float64
	}{{gen.Temperature, &p.Temperature}, {gen.TopP, &p.TopP}, {gen.MinP, &p.MinP}, {gen.RepetitionPenalty, &p.RepetitionPenalty}} {
		if f.def != nil {
			*f.dst = *f.def
		}
	}
	if gen.TopK != nil {
		p.TopK = *gen.TopK
	}
	return p
}

// params applies the fields over base. prefix is prepended to parameter
// names in errors ("sampling_params." for /generate). MaxNewTokens and Seed
// are the caller's: their names and defaults differ between the APIs.
func (f *samplingFields) params(base sample.Params, prefix string) (sample.Params, *apiError) {
	p := base
	setF := func(src *float64, dst *float64) {
		if src != nil {
			*dst = *src
		}
	}
	setF(f.Temperature, &p.Temperature)
	setF(f.TopP, &p.TopP)
	setF(f.MinP, &p.MinP)
	setF(f.RepetitionPenalty, &p.RepetitionPenalty)
	setF(f.FrequencyPenalty, &p.FrequencyPenalty)
	setF(f.PresencePenalty, &p.PresencePenalty)
	if f.TopK != nil {
		p.TopK = *f.TopK
	}
	stop, err := parseStringOrList(f.Stop, prefix+"stop")
	if err != nil {
		return p, err
	}
	p.Stop = stop
	p.StopTokenIDs = f.StopTokenIDs
	p.IgnoreEOS = f.IgnoreEOS
	if f.SkipSpecialTokens != nil {
		p.SkipSpecialTokens = *f.SkipSpecialTokens
	}
	return p, nil
}

// validateParams runs sample.Params.Validate and answers its message as a
// 400, naming the parameter when there is a single problem.
func validateParams(p sample.Params, prefix string) *apiError {
	err := p.Validate()
	if err == nil {
		return nil
	}
	msg := err.Error()
	// Validate joins its problems with "; ", each starting with the
	// parameter's name (a problem's own text may hold "; " too).
	param := ""
	for _, part := range strings.Split(strings.TrimPrefix(msg, "invalid sampling parameters: "), "; ") {
		name, _, _ := strings.Cut(part, " ")
		name, _, _ = strings.Cut(name, "[")
		if !samplingNames[name] {
			continue
		}
		if param != "" && param != prefix+name {
			param = "" // several parameters: name none
			break
		}
		param = prefix + name
	}
	return badRequest(param, codeInvalidValue, "%s", msg)
}

var samplingNames = map[string]bool{
	"temperature": true, "top_p": true, "top_k": true, "min_p": true, "repetition_penalty": true,
	"frequency_penalty": true, "presence_penalty": true, "max_new_tokens": true, "stop_token_ids": true, "stop": true,
}

// parseStringOrList reads a field that is null, a string, or a list of strings.
func parseStringOrList(raw json.RawMessage, param string) ([]string, *apiError) {
	if isNull(raw) {
		return nil, nil
	}
	if one, ok := decodeAs[string](raw); ok {
		return []string{one}, nil
	}
	if list, ok := decodeAs[[]string](raw); ok {
		return list, nil
	}
	return nil, wrongType(param, "a string or a list of strings", rawKind(raw))
}

// seedAt is the seed of the i-th of n generations: seed+i, so that n
// choices differ yet each is reproducible.
func seedAt(seed *int64, i int) *uint64 {
	if seed == nil {
		return nil
	}
	v := uint64(*seed) + uint64(i)
	return &v
}

// maxNewTokens resolves the completion budget of a prompt of promptLen
// tokens. requested is the client's value (nil: absent) and def the API's
// default (-1: the rest of the context). An explicit budget that overflows
// the context is an error, as in OpenAI, vLLM and SGLang; a default one is
// clipped.
func (s *Server) maxNewTokens(requested *int, def, promptLen int, param string) (int, *apiError) {
	ctxLen := s.eng.Settings().ContextLength
	if requested != nil && *requested < 0 {
		return 0, badRequest(param, codeInvalidValue, "%s must be >= 0, got %d", param, *requested)
	}
	if promptLen > ctxLen || promptLen == ctxLen && (requested == nil || *requested > 0) {
		return 0, badRequest("", codeContextExceeded,
			"the prompt has %d tokens, but this model's context length is %d tokens; shorten the prompt", promptLen, ctxLen)
	}
	room := ctxLen - promptLen
	if requested == nil {
		if def < 0 || def > room {
			return room, nil
		}
		return def, nil
	}
	if *requested > room {
		return 0, badRequest(param, codeContextExceeded,
			"this model's context length is %d tokens, but %d were requested (%d in the prompt, %d for the completion); shorten the prompt or lower %s",
			ctxLen, promptLen+*requested, promptLen, *requested, param)
	}
	return *requested, nil
}

// checkIDs validates a token-id prompt against the model's vocabulary.
func (s *Server) checkIDs(ids []int, param string) *apiError {
	if len(ids) == 0 {
		return badRequest(param, codeInvalidValue, "%s is empty; give at least one token id", param)
	}
	vocab := s.eng.ModelConfig().VocabSize
	for i, id := range ids {
		if id < 0 || id >= vocab {
			return badRequest(param, codeInvalidValue, "%s[%d] = %d is outside the vocabulary [0, %d)", param, i, id, vocab)
		}
	}
	return nil
}
