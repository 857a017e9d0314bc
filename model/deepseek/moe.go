package deepseek

import (
	"math"
	"slices"
	"strconv"

	"github.com/gosling-ai/gosling/device/cpu"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/tensor"
)

// moe is a DeepSeek mixture-of-experts block: the routed experts chosen per
// token, weighted by the router, plus shared experts every token goes
// through.
type moe struct {
	router  router
	gate    *cpu.Linear // router logits: [n_routed_experts, hidden]
	experts []*mlp
	shared  *mlp // nil without shared experts
}

func loadMoE(ld *loader, cfg *model.Config, prefix string) *moe {
	e := cfg.MoE
	h := cfg.HiddenSize
	m := &moe{router: router{cfg: e}, gate: ld.linear(prefix+"gate.weight", e.NumRoutedExperts, h)}
	if biasName := prefix + "gate.e_score_correction_bias"; ld.ws.Has(biasName) {
		m.router.bias = ld.vec(biasName, e.NumRoutedExperts)
	}
	for i := range e.NumRoutedExperts {
		m.experts = append(m.experts, ld.mlp(prefix+"experts."+strconv.Itoa(i)+".", h, e.IntermediateSize))
	}
	if e.NumSharedExperts > 0 {
		m.shared = ld.mlp(prefix+"shared_experts.", h, e.IntermediateSize*e.NumSharedExperts)
	}
	return m
}

// forward maps x [T, hidden] to [T, hidden]. Each routed expert runs once
// over all the tokens routed to it (gathered into one matrix), so its
// weights are read once per forward, not once per token.
func (m *moe) forward(w *cpu.Workers, x tensor.T) tensor.T {
	nTok, h := x.Rows(), x.Cols()
	k := m.router.cfg.NumExpertsPerTok
	experts, weights := m.router.route(m.gate.Forward(w, x)) // [T*k] each

	// Bucket the (token, weight) pairs by expert.
	tokens := make([][]int32, len(m.experts))
	tokWeights := make([][]float32, len(m.experts))
	for i, e := range experts {
		tokens[e] = append(tokens[e], int32(i/k))
		tokWeights[e] = append(tokWeights[e], weights[i])
	}
	out := tensor.New(nTok, h)
	for e, rows := range tokens {
		if len(rows) == 0 {
			continue
		}
		in := tensor.New(len(rows), h) // [tokens of e, hidden]
		for i, t := range rows {
			copy(in.Row(i), x.Row(int(t)))
		}
		y := m.experts[e].forward(w, in)
		for i, t := range rows {
			dst, src, wt := out.Row(int(t)), y.Row(i), tokWeights[e][i]
			for d, v := range src {
				dst[d] += wt * v
			}
		}
	}
	if m.shared != nil {
		cpu.Add(out, m.shared.forward(w, x))
	}
	return out
}

// router chooses each token's experts from the gate's logits.
type router struct {
	cfg  model.MoEConfig
	bias []float32 // e_score_correction_bias (V3); nil when absent
}

// route returns, for logits [T, n_routed_experts], the chosen experts and
// their weights, k = num_experts_per_tok per token: [T*k] each, token-major.
//
//   - scores: sigmoid (V3) or softmax (V2) of the logits;
//   - choice = scores + e_score_correction_bias (the bias steers selection
//     only; weights come from the unbiased scores);
//   - grouped top-k: experts form n_group groups; a group scores the sum of
//     its top-2 choice values (noaux_tc) or its best score
//     (group_limited_greedy); only the topk_group best groups compete;
//   - the top-k choice values among those experts win; their weights are
//     normalised to sum 1 when norm_topk_prob, then multiplied by
//     routed_scaling_factor.
//
// Experts outside the chosen groups can never win. (transformers instead
// zeroes their choice values, which differs only when a chosen group's
// biased value is negative; DeepSeek's and SGLang's kernels exclude them.)
func (r *router) route(logits tensor.T) (experts []int32, weights []float32) {
	nExp := r.cfg.NumRoutedExperts
	k := r.cfg.NumExpertsPerTok
	nTok := logits.Rows()
	experts = make([]int32, 0, nTok*k)
	weights = make([]float32, 0, nTok*k)
	scores := make([]float32, nExp)
	choice := make([]float32, nExp)
	eligible := make([]bool, nExp)
	order := make([]int, nExp)
	groups := max(r.cfg.NumGroups, 1)
	perGroup := nExp / groups
	groupScore := make([]float32, groups)
	groupOrder := make([]int, groups)
	limitGroups := r.cfg.TopKMethod != "greedy" && groups > 1 && r.cfg.TopKGroups < groups

	for t := range nTok {
		row := logits.Row(t)
		if r.cfg.ScoringFunc == "softmax" {
			softmax(scores, row)
		} else {
			for e, l := range row {
				scores[e] = cpu.Sigmoid(l)
			}
		}
		copy(choice, scores)
		for e, b := range r.bias {
			choice[e] += b
		}

		for e := range eligible {
			eligible[e] = true
		}
		if limitGroups {
			for g := range groups {
				members := choice[g*perGroup : (g+1)*perGroup]
				if r.cfg.TopKMethod == "group_limited_greedy" {
					members = scores[g*perGroup : (g+1)*perGroup]
					groupScore[g] = slices.Max(members)
				} else {
					groupScore[g] = sumTop2(members)
				}
			}
			topIndices(groupOrder, groupScore)
			for e := range eligible {
				eligible[e] = false
			}
			for _, g := range groupOrder[:r.cfg.TopKGroups] {
				for e := g * perGroup; e < (g+1)*perGroup; e++ {
					eligible[e] = true
				}
			}
		}

		n := 0
		for e := range nExp {
			if eligible[e] {
				order[n] = e
				n++
			}
		}
		chosen := order[:n]
		slices.SortStableFunc(chosen, func(a, b int) int { return cmpDesc(choice[a], choice[b]) })
		chosen = chosen[:k]

		first := len(weights)
		var sum float32
		for _, e := range chosen {
			experts = append(experts, int32(e))
			weights = append(weights, scores[e])
			sum += scores[e]
		}
		for i := first; i < len(weights); i++ {
			if r.cfg.NormTopKProb {
				weights[i] /= sum + 1e-20
			}
			weights[i] *= float32(r.cfg.RoutedScaling)
		}
	}
	return experts, weights
}

// sumTop2 is the sum of the two largest values (the one value of a
// single-expert group).
func sumTop2(x []float32) float32 {
	best, second := float32(math.Inf(-1)), float32(math.Inf(-1))
	for _, v := range x {
		switch {
		case v > best:
			best, second = v, best
		case v > second:
			second = v
		}
	}
	if len(x) < 2 {
		return best
	}
	return best + second
}

// topIndices writes into order the indices of x sorted by descending value
// (ties: lower index first).
func topIndices(order []int, x []float32) {
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmpDesc(x[a], x[b]) })
}

func cmpDesc(a, b float32) int {
	switch {
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}

// softmax writes the softmax of x into dst, with float64 accumulation.
func softmax(dst, x []float32) {
	m := slices.Max(x)
	var sum float64
	for i, v := range x {
		e := math.Exp(float64(v - m))
		dst[i] = float32(e)
		sum += e
	}
	for i := range dst {
		dst[i] = float32(float64(dst[i]) / sum)
	}
}
