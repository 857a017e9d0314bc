package random

import (
	"strings"

	"github.com/gosling-ai/gosling/model/gguf"
)

// ggufNames maps Hugging Face names to llama.cpp's.
var ggufNames = strings.NewReplacer(
	"model.embed_tokens.", "token_embd.",
	"model.norm.", "output_norm.",
	"lm_head.", "output.",
	"model.layers.", "blk.",
	".input_layernorm.", ".attn_norm.",
	".self_attn.q_proj.", ".attn_q.",
	".self_attn.k_proj.", ".attn_k.",
	".self_attn.v_proj.", ".attn_v.",
	".self_attn.o_proj.", ".attn_output.",
	".post_attention_layernorm.", ".ffn_norm.",
	".mlp.gate_proj.", ".ffn_gate.",
	".mlp.up_proj.", ".ffn_up.",
	".mlp.down_proj.", ".ffn_down.",
)

// writeGGUF writes a GGUF v3 file of architecture "llama" with the
// tokenizer embedded. Its q and k rows are in llama.cpp's interleaved RoPE
// layout by construction (they are random).
func writeGGUF(path string, o Options) error {
	s := o.Shape
	md := []gguf.KV{
		{Key: "general.architecture", Value: "llama"},
		{Key: "general.name", Value: "gosling random"},
		{Key: "general.alignment", Value: uint32(gguf.DefaultAlignment)},
		{Key: "llama.context_length", Value: uint32(s.SeqLen)},
		{Key: "llama.embedding_length", Value: uint32(s.Dim)},
		{Key: "llama.block_count", Value: uint32(s.Layers)},
		{Key: "llama.feed_forward_length", Value: uint32(s.Hidden)},
		{Key: "llama.attention.head_count", Value: uint32(s.Heads)},
		{Key: "llama.attention.head_count_kv", Value: uint32(s.KVHeads)},
		{Key: "llama.attention.layer_norm_rms_epsilon", Value: float32(s.NormEps)},
		{Key: "llama.rope.freq_base", Value: float32(s.RopeTheta)},
	}
	md = append(md, ggufTokenizer(s.Vocab)...)
	var tensors []gguf.WriteTensor
	for _, t := range s.tensors() {
		tensors = append(tensors, gguf.WriteTensor{
			Name: ggufNames.Replace(t.name), DType: o.dtypeOf(t), Shape: t.shape,
			Load: func() []byte { data, _ := o.encoded(t); return data },
		})
	}
	return gguf.Write(path, md, tensors)
}
