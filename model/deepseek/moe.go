package deepseek

import (
	"strconv"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/tensor"
)

// moe is a DeepSeek mixture-of-experts block: the routed experts chosen per
// token, weighted by the router, plus shared experts every token goes
// through.
type moe struct {
	router  device.Router
	gate    device.Matrix // router logits: [n_routed_experts, hidden]
	experts []*mlp
	shared  *mlp // nil without shared experts
}

// routerOf is the config's routing rule (device.Router states it):
// V3's noaux_tc ranks groups by their two best biased choices,
// group_limited_greedy (V2) by their best score, and greedy does not
// group.
func routerOf(e model.MoEConfig) device.Router {
	r := device.Router{
		TopK:     e.NumExpertsPerTok,
		Softmax:  e.ScoringFunc == "softmax",
		NormTopK: e.NormTopKProb,
		Scale:    float32(e.RoutedScaling),
	}
	if e.TopKMethod != "greedy" {
		r.Groups, r.TopKGroups = e.NumGroups, e.TopKGroups
		r.GroupByMaxScore = e.TopKMethod == "group_limited_greedy"
	}
	return r
}

func loadMoE(ld *loader, cfg *model.Config, prefix string) *moe {
	e := cfg.MoE
	h := cfg.HiddenSize
	m := &moe{router: routerOf(e), gate: ld.linear(prefix+"gate.weight", e.NumRoutedExperts, h)}
	if biasName := prefix + "gate.e_score_correction_bias"; ld.ws.Has(biasName) {
		m.router.Bias = ld.vec(biasName, e.NumRoutedExperts)
	}
	if err := m.router.Check(e.NumRoutedExperts); err != nil && ld.err == nil {
		ld.err = err
	}
	for i := range e.NumRoutedExperts {
		m.experts = append(m.experts, ld.mlp(prefix+"experts."+strconv.Itoa(i)+".", h, e.IntermediateSize))
	}
	if e.NumSharedExperts > 0 {
		m.shared = ld.mlp(prefix+"shared_experts.", h, e.IntermediateSize*e.NumSharedExperts)
	}
	return m
}

// releaser is a device that can take a forward's tensors back early
// (cuda.ModelOps): the routed experts' activations are dead once added to
// the residual, and a long prefill would otherwise hold every expert's.
type releaser interface{ Release(ts ...tensor.T) }

// addTo adds the block's output for x [T, hidden] (the normalised
// residual) to residual [T, hidden]. Each routed expert runs once over
// all the tokens routed to it, gathered into one matrix, so its weights
// are read once per forward, not once per token; its outputs are added
// back to their tokens' rows, weighted by the router.
func (m *moe) addTo(ops device.Ops, residual, x tensor.T) {
	rel, _ := ops.(releaser)
	k := m.router.TopK
	logits := ops.Linear(x, m.gate)                  // [T, n_routed_experts]
	experts, weights := ops.Route(logits, &m.router) // [T*k] each, on the host

	// Bucket the (token, weight) pairs by expert; a token's k experts are
	// distinct, so each bucket's rows are too.
	tokens := make([][]int32, len(m.experts))
	tokWeights := make([][]float32, len(m.experts))
	for i, e := range experts {
		tokens[e] = append(tokens[e], int32(i/k))
		tokWeights[e] = append(tokWeights[e], weights[i])
	}
	for e, rows := range tokens {
		if len(rows) == 0 {
			continue
		}
		ex := m.experts[e]
		in := ops.GatherRows(x, rows)                 // [tokens of e, hidden]
		gateUp := ops.LinearGroup(in, ex.gate, ex.up) // [tokens of e, intermediate] each
		ops.SiLUMul(gateUp[0], gateUp[1])
		y := ops.Linear(gateUp[0], ex.down) // [tokens of e, hidden]
		ops.ScatterAddRows(residual, y, rows, tokWeights[e])
		if rel != nil {
			rel.Release(in, gateUp[0], gateUp[1], y)
		}
	}
	if rel != nil {
		rel.Release(logits)
	}
	if m.shared != nil {
		ops.Add(residual, m.shared.forward(ops, x))
	}
}
