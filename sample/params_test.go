package sample

import (
	"math"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*Params)
		want   string // substring of the error; "" means valid
	}{
		{"defaults", func(p *Params) {}, ""},
		{"greedy", func(p *Params) { p.Temperature = 0 }, ""},
		{"all filters", func(p *Params) { p.TopK, p.TopP, p.MinP = 40, 0.9, 0.05 }, ""},
		{"top_k negative disables", func(p *Params) { p.TopK = -1 }, ""},
		{"penalty bounds inclusive", func(p *Params) { p.FrequencyPenalty, p.PresencePenalty = -2, 2 }, ""},
		{"negative temperature", func(p *Params) { p.Temperature = -0.5 }, "temperature must be a finite number >= 0"},
		{"NaN temperature", func(p *Params) { p.Temperature = math.NaN() }, "temperature"},
		{"infinite temperature", func(p *Params) { p.Temperature = math.Inf(1) }, "temperature"},
		{"top_p zero", func(p *Params) { p.TopP = 0 }, "top_p must be in (0, 1]"},
		{"top_p above one", func(p *Params) { p.TopP = 1.01 }, "top_p must be in (0, 1]"},
		{"min_p negative", func(p *Params) { p.MinP = -0.1 }, "min_p must be in [0, 1]"},
		{"min_p above one", func(p *Params) { p.MinP = 1.5 }, "min_p must be in [0, 1]"},
		{"repetition_penalty zero", func(p *Params) { p.RepetitionPenalty = 0 }, "repetition_penalty must be a finite number > 0"},
		{"repetition_penalty negative", func(p *Params) { p.RepetitionPenalty = -1 }, "repetition_penalty"},
		{"frequency_penalty high", func(p *Params) { p.FrequencyPenalty = 2.5 }, "frequency_penalty must be in [-2, 2]"},
		{"presence_penalty low", func(p *Params) { p.PresencePenalty = -3 }, "presence_penalty must be in [-2, 2]"},
		{"max_new_tokens negative", func(p *Params) { p.MaxNewTokens = -1 }, "max_new_tokens must be >= 0"},
		{"negative stop token", func(p *Params) { p.StopTokenIDs = []int{2, -5} }, "stop_token_ids must be >= 0, got -5"},
		{"empty stop string", func(p *Params) { p.Stop = []string{"\n", ""} }, "stop[1] is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := DefaultParams()
			tt.modify(&p)
			err := p.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.want != "" && err == nil:
				t.Fatalf("Validate() = nil, want error containing %q", tt.want)
			case tt.want != "" && !strings.Contains(err.Error(), tt.want):
				t.Fatalf("Validate() = %q, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	p := DefaultParams()
	p.Temperature, p.TopP, p.MaxNewTokens = -1, 2, -3
	err := p.Validate()
	if err == nil {
		t.Fatal("Validate() = nil, want an error")
	}
	for _, want := range []string{"temperature", "top_p", "max_new_tokens"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %q, want it to mention %s", err, want)
		}
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("Validate() = %q, want one line", err)
	}
}

func TestZeroParamsInvalid(t *testing.T) {
	if err := (Params{}).Validate(); err == nil {
		t.Fatal("zero Params validated; top_p and repetition_penalty must be required")
	}
}

func TestIsStopToken(t *testing.T) {
	eos := []int{2, 32000}
	tests := []struct {
		name      string
		ignoreEOS bool
		stopIDs   []int
		id        int
		want      bool
	}{
		{"eos", false, nil, 2, true},
		{"second eos", false, nil, 32000, true},
		{"ordinary token", false, []int{7}, 5, false},
		{"user stop id", false, []int{7}, 7, true},
		{"eos ignored", true, nil, 2, false},
		{"user stop id still stops with ignore_eos", true, []int{7}, 7, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := DefaultParams()
			p.IgnoreEOS, p.StopTokenIDs = tt.ignoreEOS, tt.stopIDs
			if got := p.IsStopToken(tt.id, eos); got != tt.want {
				t.Errorf("IsStopToken(%d) = %v, want %v", tt.id, got, tt.want)
			}
		})
	}
}
