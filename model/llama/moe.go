package llama

import (
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/model/blocks"
)

// The mixtures of experts served with the Llama layer: softmax routing
// over every expert to the top num_experts_per_tok, the chosen weights
// renormalised when norm_topk_prob says so (Mixtral always), experts that
// are SwiGLU MLPs.
//
//	Qwen3-MoE  Qwen3 attention (q/k norms); MoE on the layers
//	           decoder_sparse_step and mlp_only_layers pick
//	Qwen2-MoE  Qwen2 attention (q/k/v biases); plus a shared expert
//	           whose output each token weighs by sigmoid(shared_expert_gate·x)
//	Mixtral    Mistral attention; every layer MoE, experts w1 (gate),
//	           w3 (up), w2 (down)

// moeNames says where an architecture keeps a MoE layer's tensors: the
// prefix under the layer and the names below it.
func moeNames(cfg *model.Config) (prefix string, names blocks.MoENames) {
	if cfg.Architecture == "MixtralForCausalLM" {
		return "block_sparse_moe.", blocks.MoENames{Router: "gate", Experts: "experts", Proj: [3]string{"w1", "w3", "w2"}}
	}
	return "mlp.", blocks.MoENames{Router: "gate", Experts: "experts", Proj: blocks.ProjNames,
		Shared: "shared_expert", SharedGate: "shared_expert_gate"}
}
