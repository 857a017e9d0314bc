package cpu

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/tensor"
)

func TestConcatHeads(t *testing.T) {
	o := NewOps(nil)
	// Two tokens, two heads: a has heads of 2 values, b of 1.
	a := tensor.From([]float32{1, 2, 3, 4, 5, 6, 7, 8}, 2, 4)
	b := tensor.From([]float32{-1, -2, -3, -4}, 2, 2)
	got := o.ConcatHeads(a, b, 2)
	want := []float32{1, 2, -1, 3, 4, -2, 5, 6, -3, 7, 8, -4}
	if !slices.Equal(got.Shape, []int{2, 6}) || !slices.Equal(got.HostData(), want) {
		t.Errorf("ConcatHeads = %v %v, want [2 6] %v", got.Shape, got.HostData(), want)
	}
	if got := o.ConcatHeads(a, b, 1); !slices.Equal(got.HostData(), []float32{1, 2, 3, 4, -1, -2, 5, 6, 7, 8, -3, -4}) {
		t.Errorf("one head: %v", got.HostData())
	}
	if got := o.ConcatHeads(tensor.New(0, 4), tensor.New(0, 2), 2); !slices.Equal(got.Shape, []int{0, 6}) {
		t.Errorf("no rows: shape %v", got.Shape)
	}
	defer func() {
		if p := recover(); p == nil || !strings.Contains(p.(string), "3 heads") {
			t.Errorf("heads that do not divide the rows: panic %v", p)
		}
	}()
	o.ConcatHeads(a, b, 3)
}

// TestLinearPerHead checks every head against a float64 product with its
// own slice of the stacked weight, for F32 (read in place) and BF16
// (decoded) weights.
func TestLinearPerHead(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	w := NewWorkers(2)
	defer w.Close()
	o := NewOps(w)
	const heads, outH, in, rows = 3, 5, 19, 4
	vals := randVec(rng, heads*outH*in, 1)
	x := tensor.From(randVec(rng, rows*heads*in, 1), rows, heads*in)
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16} {
		stored, err := tensor.Convert(tensor.FromFloat32("w", vals, heads*outH, in), dt)
		if err != nil {
			t.Fatal(err)
		}
		m, err := o.Matrix(stored, nil)
		if err != nil {
			t.Fatal(err)
		}
		wv := stored.Float32()
		got := o.LinearPerHead(x, m, heads)
		if !slices.Equal(got.Shape, []int{rows, heads * outH}) {
			t.Fatalf("%v: shape %v", dt, got.Shape)
		}
		for r := range rows {
			for h := range heads {
				for d := range outH {
					var want float64
					for i := range in {
						want += float64(wv[(h*outH+d)*in+i]) * float64(x.Row(r)[h*in+i])
					}
					if g := float64(got.Row(r)[h*outH+d]); math.Abs(g-want) > 1e-5*(1+math.Abs(want)) {
						t.Fatalf("%v: row %d head %d out %d: %v, want %v", dt, r, h, d, g, want)
					}
				}
			}
		}
	}
}

func TestScatterAddRows(t *testing.T) {
	o := NewOps(nil)
	dst := tensor.From([]float32{1, 1, 2, 2, 3, 3}, 3, 2)
	src := tensor.From([]float32{10, 20, 30, 40}, 2, 2)
	o.ScatterAddRows(dst, src, []int32{2, 0}, []float32{0.5, -1})
	if want := []float32{-29, -39, 2, 2, 8, 13}; !slices.Equal(dst.HostData(), want) {
		t.Errorf("ScatterAddRows = %v, want %v", dst.HostData(), want)
	}
	o.ScatterAddRows(dst, tensor.New(0, 2), nil, nil) // nothing routed: no change
	if dst.HostData()[0] != -29 {
		t.Errorf("an empty scatter changed dst: %v", dst.HostData())
	}
}

// logit is the inverse sigmoid, so tests can state scores directly.
func logit(p float64) float32 { return float32(math.Log(p / (1 - p))) }

func TestRoute(t *testing.T) {
	o := NewOps(nil)
	// Eight experts in four groups of two. Expert 0 has the best score, but
	// its group's top-2 sum (0.9+0.1) loses to groups 3 (0.8+0.85 with the
	// bias on expert 6) and 1 (0.6+0.55), so experts 7 and 6 win. Weights
	// come from the unbiased scores 0.85 and 0.3.
	scores := []float64{0.9, 0.1, 0.6, 0.55, 0.7, 0.2, 0.3, 0.85}
	logits := tensor.New(1, len(scores))
	for i, s := range scores {
		logits.HostData()[i] = logit(s)
	}
	bias, err := o.Vector([]float32{0, 0, 0, 0, 0, 0, 0.5, 0})
	if err != nil {
		t.Fatal(err)
	}
	v3 := device.Router{TopK: 2, Groups: 4, TopKGroups: 2, NormTopK: true, Scale: 2.5, Bias: bias}
	with := func(change func(r *device.Router)) device.Router {
		r := v3
		change(&r)
		return r
	}
	cases := []struct {
		name        string
		r           device.Router
		wantExperts []int32
		wantWeights []float64
	}{
		{"noaux_tc grouped, biased", v3, []int32{7, 6}, []float64{2.5 * 0.85 / 1.15, 2.5 * 0.3 / 1.15}},
		// Without the bias the group sums are 1.0, 1.15, 0.9, 1.15: groups 1
		// and 3 win, and their best experts are 7 (0.85) and 2 (0.6).
		{"noaux_tc grouped, unbiased", with(func(r *device.Router) { r.Bias = nil }), []int32{7, 2}, []float64{2.5 * 0.85 / 1.45, 2.5 * 0.6 / 1.45}},
		{"all groups", with(func(r *device.Router) { r.TopKGroups = 4 }), []int32{0, 7}, []float64{2.5 * 0.9 / 1.75, 2.5 * 0.85 / 1.75}},
		{"no groups", with(func(r *device.Router) { r.Groups = 0 }), []int32{0, 7}, []float64{2.5 * 0.9 / 1.75, 2.5 * 0.85 / 1.75}},
		{"no normalisation", with(func(r *device.Router) { r.NormTopK = false; r.Scale = 1 }), []int32{7, 6}, []float64{0.85, 0.3}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			experts, weights := o.Route(logits, &tc.r)
			if !slices.Equal(experts, tc.wantExperts) {
				t.Fatalf("experts %v, want %v", experts, tc.wantExperts)
			}
			for i, w := range weights {
				if math.Abs(float64(w)-tc.wantWeights[i]) > 1e-6 {
					t.Fatalf("weights %v, want %v", weights, tc.wantWeights)
				}
			}
		})
	}
}

func TestRouteV2(t *testing.T) {
	o := NewOps(nil)
	// Softmax scores. Without groups the two best experts anywhere win (0
	// and 5); ranking two groups of four by their best score keeps only the
	// group holding the best single score.
	logits := tensor.From([]float32{3, 0, 0, 0, 2.5, 2.9, 0, 0}, 1, 8)
	for _, tc := range []struct {
		name string
		r    device.Router
		want []int32
	}{
		{"greedy", device.Router{TopK: 2, Softmax: true, Scale: 1}, []int32{0, 5}},
		// Group 0 (experts 0-3) has the best single score (3.0), so only it
		// competes: 0, then one of the zeros (lowest index first).
		{"group_limited_greedy", device.Router{TopK: 2, Softmax: true, Groups: 2, TopKGroups: 1, GroupByMaxScore: true, Scale: 1}, []int32{0, 1}},
	} {
		experts, weights := o.Route(logits, &tc.r)
		if !slices.Equal(experts, tc.want) {
			t.Errorf("%s: experts %v, want %v", tc.name, experts, tc.want)
		}
		var z float64
		for _, l := range logits.HostData() {
			z += math.Exp(float64(l))
		}
		if want := math.Exp(3) / z; math.Abs(float64(weights[0])-want) > 1e-6 {
			t.Errorf("%s: weight %v, want the softmax score %v", tc.name, weights[0], want)
		}
	}
}

// TestRouteTokens: several tokens come back token-major, each routed on
// its own row.
func TestRouteTokens(t *testing.T) {
	o := NewOps(nil)
	logits := tensor.From([]float32{
		0, 1, 2, 3,
		3, 2, 1, 0,
		0, 5, 0, 4,
	}, 3, 4)
	experts, weights := o.Route(logits, &device.Router{TopK: 2, Scale: 1})
	if want := []int32{3, 2, 0, 1, 1, 3}; !slices.Equal(experts, want) {
		t.Errorf("experts %v, want %v", experts, want)
	}
	if len(weights) != 6 || math.Abs(float64(weights[0])-1/(1+math.Exp(-3))) > 1e-7 {
		t.Errorf("weights %v", weights)
	}
}

func TestRouterCheck(t *testing.T) {
	bias := vector(make([]float32, 8))
	for _, tc := range []struct {
		r       device.Router
		experts int
		err     string
	}{
		{device.Router{TopK: 2}, 8, ""},
		{device.Router{TopK: 2, Groups: 4, TopKGroups: 2, Bias: bias}, 8, ""},
		{device.Router{TopK: 2, Groups: 4, TopKGroups: 4}, 6, ""}, // every group: not grouped
		{device.Router{TopK: 0}, 8, "top-k 0"},
		{device.Router{TopK: 9}, 8, "top-k 9"},
		{device.Router{TopK: 1}, 0, "0 experts"},
		{device.Router{TopK: 2, Bias: bias}, 6, "bias of 8 values"},
		{device.Router{TopK: 2, Groups: 3, TopKGroups: 1}, 8, "3 groups do not divide"},
		{device.Router{TopK: 2, Groups: 4, TopKGroups: 0}, 8, "top-k groups 0"},
		{device.Router{TopK: 3, Groups: 4, TopKGroups: 1}, 8, "fewer than top-k 3"},
	} {
		err := tc.r.Check(tc.experts)
		if (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%+v over %d experts: %v, want %q", tc.r, tc.experts, err, tc.err)
		}
	}
}
