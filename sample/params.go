package sample

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// Params are one request's sampling parameters (OpenAI/SGLang semantics).
//
// The zero value is not valid (TopP and RepetitionPenalty must be set); start
// from DefaultParams. NewSampler does not validate: call Validate at the API
// boundary so the user gets the error.
type Params struct {
	Temperature       float64 // 0 => greedy (argmax; ties → lowest id)
	TopK              int     // <=0 => disabled
	TopP              float64 // 1 => disabled; (0,1]
	MinP              float64 // 0 => disabled; keep tokens with p >= MinP * p_max
	RepetitionPenalty float64 // 1 => disabled; HF/vLLM semantics over prompt+output tokens: logit>0 ? logit/pen : logit*pen
	FrequencyPenalty  float64 // OpenAI: logit -= freq * count(token in output)
	PresencePenalty   float64 // OpenAI: logit -= pres * (count>0)
	Seed              *uint64 // nil => random seed; same seed => same output
	MaxNewTokens      int
	StopTokenIDs      []int    // besides the model's EOS
	Stop              []string // stop strings
	IgnoreEOS         bool
	SkipSpecialTokens bool
	// KeepSpecial are special token ids the output text keeps even when
	// SkipSpecialTokens: a tool-call marker the server parses (Mistral's
	// [TOOL_CALLS] is a control token).
	KeepSpecial []int
}

// DefaultParams are the OpenAI API's defaults: temperature 1 with every
// filter and penalty disabled, and special tokens skipped in the output text
// as vLLM and SGLang do. MaxNewTokens is left 0 for the engine to choose.
func DefaultParams() Params {
	return Params{Temperature: 1, TopP: 1, RepetitionPenalty: 1, SkipSpecialTokens: true}
}

// Validate reports every out-of-range parameter in one error, each phrased
// with the accepted range so an API user can fix the request.
func (p Params) Validate() error {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	if math.IsNaN(p.Temperature) || math.IsInf(p.Temperature, 0) || p.Temperature < 0 {
		bad("temperature must be a finite number >= 0 (0 means greedy), got %v", p.Temperature)
	}
	if math.IsNaN(p.TopP) || p.TopP <= 0 || p.TopP > 1 {
		bad("top_p must be in (0, 1] (1 disables it), got %v", p.TopP)
	}
	if math.IsNaN(p.MinP) || p.MinP < 0 || p.MinP > 1 {
		bad("min_p must be in [0, 1] (0 disables it), got %v", p.MinP)
	}
	if math.IsNaN(p.RepetitionPenalty) || math.IsInf(p.RepetitionPenalty, 0) || p.RepetitionPenalty <= 0 {
		bad("repetition_penalty must be a finite number > 0 (1 disables it), got %v", p.RepetitionPenalty)
	}
	if math.IsNaN(p.FrequencyPenalty) || p.FrequencyPenalty < -2 || p.FrequencyPenalty > 2 {
		bad("frequency_penalty must be in [-2, 2], got %v", p.FrequencyPenalty)
	}
	if math.IsNaN(p.PresencePenalty) || p.PresencePenalty < -2 || p.PresencePenalty > 2 {
		bad("presence_penalty must be in [-2, 2], got %v", p.PresencePenalty)
	}
	if p.MaxNewTokens < 0 {
		bad("max_new_tokens must be >= 0, got %d", p.MaxNewTokens)
	}
	for _, id := range p.StopTokenIDs {
		if id < 0 {
			bad("stop_token_ids must be >= 0, got %d", id)
		}
	}
	for i, s := range p.Stop {
		if s == "" {
			bad("stop[%d] is empty; an empty stop string would end generation at once, remove it", i)
		}
	}
	if len(problems) == 0 {
		return nil
	}
	// One line, so it reads well inside a JSON error body.
	return errors.New("invalid sampling parameters: " + strings.Join(problems, "; "))
}

// IsStopToken reports whether generating id ends the request: one of the
// model's EOS ids (unless IgnoreEOS) or one of StopTokenIDs. As in vLLM and
// SGLang, IgnoreEOS does not silence StopTokenIDs the user asked for.
func (p Params) IsStopToken(id int, eosIDs []int) bool {
	if !p.IgnoreEOS {
		for _, eos := range eosIDs {
			if id == eos {
				return true
			}
		}
	}
	for _, stop := range p.StopTokenIDs {
		if id == stop {
			return true
		}
	}
	return false
}
