package main

import (
	"fmt"
	"strings"

	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/model/eagle"
	"github.com/gosling-ai/gosling/model/random"
	"github.com/gosling-ai/gosling/tensor"
)

type modelCmd struct {
	Random modelRandomCmd `cmd:"" help:"Write a Llama checkpoint with random weights (for benchmarks at real shapes without downloads)."`
	KV     modelKVCmd     `cmd:"" name:"kv" help:"KV cache bytes per token of models, from their config.json alone."`
	Eagle  modelEagleCmd  `cmd:"" help:"Write an EAGLE or EAGLE-3 head with random weights for a target model (its drafts are near-random: for tests and timing, not speed-ups)."`
}

type modelEagleCmd struct {
	Target      string `help:"The target model the head drafts for (its shapes and vocabulary)." required:"" type:"path"`
	Eagle3      bool   `help:"An EAGLE-3 head (LlamaForCausalLMEagle3) instead of EAGLE (LlamaForCausalLMEagle)." name:"eagle3"`
	DraftVocab  int    `help:"EAGLE-3: draft vocabulary size, mapped to the target's by d2t (0: the target's)."`
	AuxLayerIDs []int  `help:"EAGLE-3: the target layers whose outputs the head reads, written as eagle_config.eagle_aux_hidden_state_layer_ids (default: SGLang's choice at load)." name:"aux-layer-ids"`
	Seed        uint64 `help:"Random seed." default:"0"`
	Out         string `help:"The head's directory (config.json, model.safetensors)." required:"" type:"path"`
}

func (c *modelEagleCmd) Run() error {
	ck, err := model.Open(c.Target)
	if err != nil {
		return err
	}
	defer ck.Close()
	if c.DraftVocab != 0 && !c.Eagle3 {
		return fmt.Errorf("--draft-vocab is an EAGLE-3 setting; add --eagle3")
	}
	if c.AuxLayerIDs != nil && !c.Eagle3 {
		return fmt.Errorf("--aux-layer-ids is an EAGLE-3 setting; add --eagle3")
	}
	o := random.EagleOptions{Eagle3: c.Eagle3, DraftVocab: c.DraftVocab, AuxLayerIDs: c.AuxLayerIDs, Seed: c.Seed}
	if err := eagle.WriteRandom(c.Out, &ck.Config, o); err != nil {
		return err
	}
	kind := "EAGLE"
	if c.Eagle3 {
		kind = "EAGLE-3"
	}
	fmt.Printf("wrote %s: a random %s head for %s (hidden %d, vocab %d)\n", c.Out, kind, c.Target, ck.Config.HiddenSize, ck.Config.VocabSize)
	return nil
}

type modelRandomCmd struct {
	Shape   string `help:"Preset shape (stories260K, stories15M, stories42M, stories110M, llama-3.2-1b, llama-3.2-3b, llama-3.1-8b); the size flags below override it." default:"stories110M"`
	Dim     int    `help:"Hidden size (0: the preset's)."`
	Hidden  int    `help:"MLP intermediate size (0: the preset's)."`
	Layers  int    `help:"Layers (0: the preset's)."`
	Heads   int    `help:"Attention heads (0: the preset's)."`
	KVHeads int    `help:"Key/value heads (0: the preset's)." name:"kv-heads"`
	Vocab   int    `help:"Vocabulary size, at least 259 (0: the preset's)."`
	SeqLen  int    `help:"Context length (0: the preset's)." name:"seq-len"`
	Untied  bool   `help:"Give the model its own output layer instead of reusing the embedding."`
	Format  string `help:"llama2c (a .bin and tokenizer.bin beside it), hf (a directory) or gguf." default:"llama2c" enum:"llama2c,hf,gguf"`
	DType   string `help:"Matrix dtype: float32, bfloat16, float16 (hf, gguf); q8_0, q4_0, q4_k, q5_k, q6_k, iq4_nl, iq4_xs, mxfp4, and q4_k_m, q5_k_m (Q6_K for the output layer and half of attention v and MLP down, as llama.cpp's mixes) (gguf); awq4_g32, awq4_g64, awq4_g128 (hf: AutoAWQ's int4 layout for the projections, float16 elsewhere)." default:"float32" enum:"float32,bfloat16,float16,q8_0,q4_0,q4_k,q5_k,q6_k,iq4_nl,iq4_xs,mxfp4,q4_k_m,q5_k_m,awq4_g32,awq4_g64,awq4_g128" name:"dtype"`
	Seed    uint64 `help:"Random seed." default:"0"`
	Out     string `help:"Where to write (a file; a directory for hf)." required:"" type:"path"`
}

func (c *modelRandomCmd) Run() error {
	shape, ok := random.Presets[c.Shape]
	if !ok {
		return fmt.Errorf("unknown --shape %q; presets: %s", c.Shape, strings.Join(random.PresetNames(), ", "))
	}
	for _, o := range []struct {
		flag int
		dst  *int
	}{{c.Dim, &shape.Dim}, {c.Hidden, &shape.Hidden}, {c.Layers, &shape.Layers}, {c.Heads, &shape.Heads}, {c.KVHeads, &shape.KVHeads}, {c.Vocab, &shape.Vocab}, {c.SeqLen, &shape.SeqLen}} {
		if o.flag != 0 {
			*o.dst = o.flag
		}
	}
	if c.Heads != 0 && c.KVHeads == 0 {
		shape.KVHeads = c.Heads
	}
	shape.Tied = shape.Tied && !c.Untied
	mix := strings.HasSuffix(c.DType, "_m")
	dtype, err := tensor.ParseDType(strings.TrimSuffix(c.DType, "_m"))
	if err != nil {
		return err
	}
	if err := random.Write(c.Out, random.Options{Shape: shape, Format: c.Format, DType: dtype, Seed: c.Seed, MixQ6K: mix}); err != nil {
		return err
	}
	fmt.Printf("wrote %s: %s, dim %d, hidden %d, %d layers, %d heads (%d kv), vocab %d, seq_len %d, tied %v, %s\n",
		c.Out, c.Format, shape.Dim, shape.Hidden, shape.Layers, shape.Heads, shape.KVHeads, shape.Vocab, shape.SeqLen, shape.Tied, c.DType)
	return nil
}
