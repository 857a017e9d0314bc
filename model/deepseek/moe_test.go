package deepseek

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/device/cpu"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/model/blocks"
	"github.com/gosling-ai/gosling/tensor"
)

// logit is the inverse sigmoid, so tests can state scores directly.
func logit(p float64) float32 { return float32(math.Log(p / (1 - p))) }

func TestRouterOf(t *testing.T) {
	v3 := model.MoEConfig{
		NumRoutedExperts: 8, NumExpertsPerTok: 2, NumGroups: 4, TopKGroups: 2,
		NormTopKProb: true, RoutedScaling: 2.5, ScoringFunc: "sigmoid", TopKMethod: "noaux_tc",
	}
	v2 := model.MoEConfig{NumRoutedExperts: 8, NumExpertsPerTok: 2, NumGroups: 2, TopKGroups: 1, RoutedScaling: 16, ScoringFunc: "softmax", TopKMethod: "greedy"}
	limited := v2
	limited.TopKMethod = "group_limited_greedy"
	for _, tc := range []struct {
		name string
		cfg  model.MoEConfig
		want device.Router
	}{
		{"noaux_tc", v3, device.Router{TopK: 2, Groups: 4, TopKGroups: 2, NormTopK: true, Scale: 2.5}},
		{"greedy ignores groups", v2, device.Router{TopK: 2, Softmax: true, Scale: 16}},
		{"group_limited_greedy", limited, device.Router{TopK: 2, Softmax: true, Groups: 2, TopKGroups: 1, GroupByMaxScore: true, Scale: 16}},
	} {
		if got := blocks.RouterOf(tc.cfg); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}

	// The V3 rule end to end on the CPU: expert 0 has the best score, but
	// its group's top-2 sum (0.9+0.1) loses to groups 3 (0.8+0.85 with the
	// bias on expert 6) and 1 (0.6+0.55), so experts 7 and 6 win, weighted
	// by their unbiased scores.
	ops := cpu.NewOps(nil)
	scores := []float64{0.9, 0.1, 0.6, 0.55, 0.7, 0.2, 0.3, 0.85}
	logits := tensor.New(1, len(scores))
	for i, s := range scores {
		logits.HostData()[i] = logit(s)
	}
	r := blocks.RouterOf(v3)
	var err error
	if r.Bias, err = ops.Vector([]float32{0, 0, 0, 0, 0, 0, 0.5, 0}); err != nil {
		t.Fatal(err)
	}
	experts, weights := ops.Route(logits, &r)
	if !slices.Equal(experts, []int32{7, 6}) || math.Abs(float64(weights[0])-2.5*0.85/1.15) > 1e-6 || math.Abs(float64(weights[1])-2.5*0.3/1.15) > 1e-6 {
		t.Errorf("experts %v weights %v, want [7 6] [%v %v]", experts, weights, 2.5*0.85/1.15, 2.5*0.3/1.15)
	}
}

func randMatrix(t *testing.T, ops device.Ops, rng *rand.Rand, out, in int) device.Matrix {
	t.Helper()
	w := make([]float32, out*in)
	for i := range w {
		w[i] = float32(rng.NormFloat64() * 0.3)
	}
	m, err := ops.Matrix(tensor.FromFloat32("w", w, out, in), nil)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestMoEGroupedMatchesPerToken checks that running each expert once over
// its gathered tokens and scattering the results back gives what a
// per-token loop over the chosen experts gives.
func TestMoEGroupedMatchesPerToken(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const hidden, inter, nExp, nTok = 16, 8, 8, 11
	cfg := model.MoEConfig{
		NumRoutedExperts: nExp, NumSharedExperts: 1, NumExpertsPerTok: 3, IntermediateSize: inter,
		NumGroups: 4, TopKGroups: 2, NormTopKProb: true, RoutedScaling: 1.5, ScoringFunc: "sigmoid", TopKMethod: "noaux_tc",
	}
	w := cpu.NewWorkers(2)
	defer w.Close()
	ops := cpu.NewOps(w)
	randMLP := func() *blocks.MLP {
		return &blocks.MLP{Gate: randMatrix(t, ops, rng, inter, hidden), Up: randMatrix(t, ops, rng, inter, hidden), Down: randMatrix(t, ops, rng, hidden, inter)}
	}
	m := &blocks.MoE{Router: blocks.RouterOf(cfg), Gate: randMatrix(t, ops, rng, nExp, hidden)}
	bias := make([]float32, nExp)
	for e := range bias {
		bias[e] = float32(rng.NormFloat64() * 0.1)
	}
	m.Router.Bias, _ = ops.Vector(bias)
	for range nExp {
		m.Experts = append(m.Experts, randMLP())
	}
	m.Shared = randMLP()
	x := tensor.New(nTok, hidden)
	for i := range x.HostData() {
		x.HostData()[i] = float32(rng.NormFloat64())
	}
	residual := tensor.New(nTok, hidden)
	for i := range residual.HostData() {
		residual.HostData()[i] = float32(i % 7)
	}
	got := tensor.From(slices.Clone(residual.HostData()), residual.Shape...)
	m.AddTo(ops, got, x)

	experts, weights := ops.Route(ops.Linear(x, m.Gate), &m.Router)
	used := map[int32]bool{}
	for tok := range nTok {
		one := tensor.From(slices.Clone(x.Row(tok)), 1, hidden)
		want := m.Shared.Forward(ops, one)
		for j := range cfg.NumExpertsPerTok {
			e := experts[tok*cfg.NumExpertsPerTok+j]
			used[e] = true
			y := m.Experts[e].Forward(ops, one)
			for d := range hidden {
				want.HostData()[d] += weights[tok*cfg.NumExpertsPerTok+j] * y.HostData()[d]
			}
		}
		for d := range hidden {
			if g, w := got.Row(tok)[d], residual.Row(tok)[d]+want.HostData()[d]; math.Abs(float64(g-w)) > 1e-5 {
				t.Fatalf("token %d dim %d: grouped %v, per token %v", tok, d, g, w)
			}
		}
	}
	if len(used) < 2 {
		t.Fatalf("routing used only experts %v; the test needs several", used)
	}
}

func TestYarnInvFreq(t *testing.T) {
	const dim, base, factor, orig = 64, 10000.0, 40.0, 4096.0
	inv := model.YarnInvFreq(base, dim, factor, 32, 1, orig, true)
	plain := func(i int) float64 { return 1 / math.Pow(base, float64(2*i)/dim) }
	// Fast dimensions keep their frequency, slow ones are divided by factor.
	if got := float64(inv[0]); math.Abs(got-plain(0)) > 1e-7 {
		t.Errorf("dim 0: %v, want %v", got, plain(0))
	}
	if got, want := float64(inv[dim/2-1]), plain(dim/2-1)/factor; math.Abs(got-want)/want > 1e-5 {
		t.Errorf("last dim: %v, want %v", got, want)
	}
	for i := 1; i < dim/2; i++ {
		if inv[i] > inv[i-1] {
			t.Fatalf("frequencies must decrease: %v", inv)
		}
	}
	// DeepSeek-V3: mscale = mscale_all_dim = 1 leaves cos/sin unscaled and
	// multiplies the softmax scale by (0.1 ln 40 + 1)².
	cfg := &model.Config{RopeTheta: base, MaxPositions: 163840, RopeScaling: &model.RopeScaling{
		Type: "yarn", Factor: factor, OriginalMaxPositionEmbeddings: orig, BetaFast: 32, BetaSlow: 1, MScale: 1, MScaleAllDim: 1}}
	_, ropeFactor, mscale := ropeParams(cfg, dim)
	if ropeFactor != 1 || math.Abs(mscale-(0.1*math.Log(factor)+1)) > 1e-12 {
		t.Errorf("rope factor %v, mscale %v", ropeFactor, mscale)
	}
}
