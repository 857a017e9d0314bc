package deepseek

import (
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/model/blocks"
)

// moeNames are DeepSeek's tensor names under a layer's "mlp.".
var moeNames = blocks.MoENames{Router: "gate", Experts: "experts", Proj: blocks.ProjNames, Shared: "shared_experts"}

// loadMoE is a DeepSeek mixture of experts: V3's router carries a
// selection bias, e_score_correction_bias.
func loadMoE(ld *blocks.Loader, cfg *model.Config, prefix string) *blocks.MoE {
	m := ld.MoE(cfg.MoE, cfg.HiddenSize, prefix, moeNames)
	if biasName := prefix + "gate.e_score_correction_bias"; ld.WS.Has(biasName) {
		m.Router.Bias = ld.Vec(biasName, cfg.MoE.NumRoutedExperts)
		if err := m.Router.Check(cfg.MoE.NumRoutedExperts); err != nil {
			ld.Fail(err)
		}
	}
	return m
}
