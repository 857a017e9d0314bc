package deepseek

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gosling-ai/gosling/device/cpu"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/tensor"
)

// logit is the inverse sigmoid, so tests can state scores directly.
func logit(p float64) float32 { return float32(math.Log(p / (1 - p))) }

func TestRoute(t *testing.T) {
	// Eight experts in four groups of two. Expert 0 has the best score, but
	// its group's top-2 sum (0.9+0.1) loses to groups 3 (0.8+0.85 with the
	// bias on expert 6) and 1 (0.6+0.55), so experts 7 and 6 win. Weights
	// come from the unbiased scores 0.85 and 0.3.
	scores := []float64{0.9, 0.1, 0.6, 0.55, 0.7, 0.2, 0.3, 0.85}
	logits := tensor.New(1, len(scores))
	for i, s := range scores {
		logits.Data[i] = logit(s)
	}
	v3 := model.MoEConfig{
		NumRoutedExperts: 8, NumExpertsPerTok: 2, NumGroups: 4, TopKGroups: 2,
		NormTopKProb: true, RoutedScaling: 2.5, ScoringFunc: "sigmoid", TopKMethod: "noaux_tc",
	}
	bias := []float32{0, 0, 0, 0, 0, 0, 0.5, 0}

	cases := []struct {
		name        string
		cfg         model.MoEConfig
		bias        []float32
		wantExperts []int32
		wantWeights []float64
	}{
		{"noaux_tc grouped, biased", v3, bias, []int32{7, 6}, []float64{2.5 * 0.85 / 1.15, 2.5 * 0.3 / 1.15}},
		// Without the bias the group sums are 1.0, 1.15, 0.9, 1.15: groups 1
		// and 3 win, and their best experts are 7 (0.85) and 2 (0.6).
		{"noaux_tc grouped, unbiased", v3, nil, []int32{7, 2}, []float64{2.5 * 0.85 / 1.45, 2.5 * 0.6 / 1.45}},
		{"all groups", func() model.MoEConfig { c := v3; c.TopKGroups = 4; return c }(), bias, []int32{0, 7}, []float64{2.5 * 0.9 / 1.75, 2.5 * 0.85 / 1.75}},
		{"no normalisation", func() model.MoEConfig { c := v3; c.NormTopKProb = false; c.RoutedScaling = 1; return c }(), bias, []int32{7, 6}, []float64{0.85, 0.3}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := router{cfg: tc.cfg, bias: tc.bias}
			experts, weights := r.route(logits)
			if !slices.Equal(experts, tc.wantExperts) {
				t.Fatalf("experts %v, want %v", experts, tc.wantExperts)
			}
			for i, w := range weights {
				if math.Abs(float64(w)-tc.wantWeights[i]) > 1e-6 {
					t.Errorf("weights %v, want %v", weights, tc.wantWeights)
					break
				}
			}
		})
	}
}

func TestRouteV2(t *testing.T) {
	// Softmax scores. Plain greedy takes the two best experts anywhere (0
	// and 5); group_limited_greedy with two groups of four keeps only the
	// group holding the best single score and must stay inside it.
	logits := tensor.From([]float32{3, 0, 0, 0, 2.5, 2.9, 0, 0}, 1, 8)
	base := model.MoEConfig{NumRoutedExperts: 8, NumExpertsPerTok: 2, NumGroups: 2, TopKGroups: 1, RoutedScaling: 1, ScoringFunc: "softmax"}
	for _, tc := range []struct {
		method string
		want   []int32
	}{
		{"greedy", []int32{0, 5}},
		// Group 0 (experts 0-3) has the best single score (3.0), so only it
		// competes: 0, then one of the zeros (lowest index first).
		{"group_limited_greedy", []int32{0, 1}},
	} {
		cfg := base
		cfg.TopKMethod = tc.method
		r := router{cfg: cfg}
		experts, weights := r.route(logits)
		if !slices.Equal(experts, tc.want) {
			t.Errorf("%s: experts %v, want %v", tc.method, experts, tc.want)
		}
		var z float64
		for _, l := range logits.Data {
			z += math.Exp(float64(l))
		}
		if want := math.Exp(3) / z; math.Abs(float64(weights[0])-want) > 1e-6 {
			t.Errorf("%s: weight %v, want the softmax score %v", tc.method, weights[0], want)
		}
	}
}

func randLinear(rng *rand.Rand, out, in int) *cpu.Linear {
	w := make([]float32, out*in)
	for i := range w {
		w[i] = float32(rng.NormFloat64() * 0.3)
	}
	return cpu.NewLinear(tensor.FromFloat32("w", w, out, in), nil)
}

// TestMoEGroupedMatchesPerToken checks that running each expert once over
// its gathered tokens gives what a per-token loop over the chosen experts
// gives.
func TestMoEGroupedMatchesPerToken(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const hidden, inter, nExp, nTok = 16, 8, 8, 11
	cfg := model.MoEConfig{
		NumRoutedExperts: nExp, NumSharedExperts: 1, NumExpertsPerTok: 3, IntermediateSize: inter,
		NumGroups: 4, TopKGroups: 2, NormTopKProb: true, RoutedScaling: 1.5, ScoringFunc: "sigmoid", TopKMethod: "noaux_tc",
	}
	m := &moe{router: router{cfg: cfg, bias: make([]float32, nExp)}, gate: randLinear(rng, nExp, hidden)}
	for e := range nExp {
		m.router.bias[e] = float32(rng.NormFloat64() * 0.1)
		m.experts = append(m.experts, &mlp{randLinear(rng, inter, hidden), randLinear(rng, inter, hidden), randLinear(rng, hidden, inter)})
	}
	m.shared = &mlp{randLinear(rng, inter, hidden), randLinear(rng, inter, hidden), randLinear(rng, hidden, inter)}
	x := tensor.New(nTok, hidden)
	for i := range x.Data {
		x.Data[i] = float32(rng.NormFloat64())
	}
	w := cpu.NewWorkers(2)
	defer w.Close()

	got := m.forward(w, x)
	experts, weights := m.router.route(m.gate.Forward(w, x))
	used := map[int32]bool{}
	for tok := range nTok {
		one := tensor.From(slices.Clone(x.Row(tok)), 1, hidden)
		want := m.shared.forward(w, one)
		for j := range cfg.NumExpertsPerTok {
			e := experts[tok*cfg.NumExpertsPerTok+j]
			used[e] = true
			y := m.experts[e].forward(w, one)
			for d := range hidden {
				want.Data[d] += weights[tok*cfg.NumExpertsPerTok+j] * y.Data[d]
			}
		}
		for d := range hidden {
			if math.Abs(float64(got.Row(tok)[d]-want.Data[d])) > 1e-5 {
				t.Fatalf("token %d dim %d: grouped %v, per token %v", tok, d, got.Row(tok)[d], want.Data[d])
			}
		}
	}
	if len(used) < 2 {
		t.Fatalf("routing used only experts %v; the test needs several", used)
	}
}

func TestYarnInvFreq(t *testing.T) {
	const dim, base, factor, orig = 64, 10000.0, 40.0, 4096.0
	inv := yarnInvFreq(base, dim, factor, 32, 1, orig)
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
