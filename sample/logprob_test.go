package sample

import (
	"math"
	"slices"
	"testing"
)

func TestLogSoftmax(t *testing.T) {
	inf := float32(math.Inf(1))
	nan := float32(math.NaN())
	tests := []struct {
		name   string
		logits []float32
		want   []float64 // probabilities
	}{
		{"uniform", []float32{0, 0, 0, 0}, []float64{0.25, 0.25, 0.25, 0.25}},
		{"shift invariant", []float32{100, 100 + float32(math.Log(3))}, []float64{0.25, 0.75}},
		{"large values do not overflow", []float32{3e38, 3e38, -3e38}, []float64{0.5, 0.5, 0}},
		{"very negative values", []float32{-1e30, -1e30 + 1e24}, []float64{0, 1}},
		{"-Inf has probability 0", []float32{negInf, 0, negInf, 0}, []float64{0, 0.5, 0, 0.5}},
		{"NaN has probability 0", []float32{nan, 0}, []float64{0, 1}},
		{"+Inf takes all the mass", []float32{inf, 5, inf}, []float64{0.5, 0, 0.5}},
		{"all -Inf", []float32{negInf, negInf}, []float64{0, 0}},
		{"hand computed", []float32{1, 2, 3}, []float64{0.09003057, 0.24472847, 0.66524096}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := make([]float32, len(tt.logits))
			LogSoftmax(tt.logits, out)
			for i, want := range tt.want {
				if got := math.Exp(float64(out[i])); math.Abs(got-want) > 1e-6 {
					t.Fatalf("exp(out) = %v, want %v (out %v)", expAll(out), tt.want, out)
				}
				if in := tt.logits[i]; (in != in || in == negInf) && out[i] != negInf {
					t.Fatalf("logit %v gave log-probability %v, want -Inf", in, out[i])
				}
			}
		})
	}
}

func expAll(logprobs []float32) []float64 {
	probs := make([]float64, len(logprobs))
	for i, lp := range logprobs {
		probs[i] = math.Exp(float64(lp))
	}
	return probs
}

func TestLogSoftmaxSumsToOne(t *testing.T) {
	logits := benchLogits()
	out := make([]float32, len(logits))
	LogSoftmax(logits, out)
	sum := 0.0
	for _, lp := range out {
		if lp > 0 {
			t.Fatalf("log-probability %v > 0", lp)
		}
		sum += math.Exp(float64(lp))
	}
	// float32 rounding of each of 131072 log-probs bounds the error.
	if math.Abs(sum-1) > 1e-4 {
		t.Fatalf("probabilities sum to %v, want 1", sum)
	}
}

func TestLogSoftmaxInPlace(t *testing.T) {
	logits := []float32{1, 2, 3}
	want := make([]float32, 3)
	LogSoftmax(logits, want)
	LogSoftmax(logits, logits)
	if !slices.Equal(logits, want) {
		t.Fatalf("in place = %v, want %v", logits, want)
	}
}

func TestTopN(t *testing.T) {
	nan := float32(math.NaN())
	logprobs := []float32{-2, -0.5, -3, -0.5, negInf, -1, nan}
	tests := []struct {
		n    int
		want []TokenLogprob
	}{
		{0, nil},
		{-1, nil},
		{1, []TokenLogprob{{1, -0.5}}},
		{3, []TokenLogprob{{1, -0.5}, {3, -0.5}, {5, -1}}},
		{6, []TokenLogprob{{1, -0.5}, {3, -0.5}, {5, -1}, {0, -2}, {2, -3}, {4, negInf}}},
	}
	for _, tt := range tests {
		if got := TopN(logprobs, tt.n); !slices.Equal(got, tt.want) {
			t.Errorf("TopN(%d) = %v, want %v", tt.n, got, tt.want)
		}
	}
	all := TopN(logprobs, 100)
	if len(all) != len(logprobs) || !math.IsNaN(float64(all[len(all)-1].Logprob)) {
		t.Errorf("TopN(100) = %v, want all 7 tokens with NaN last", all)
	}
	if got := TopN(nil, 5); got != nil {
		t.Errorf("TopN(nil, 5) = %v, want nil", got)
	}
}
