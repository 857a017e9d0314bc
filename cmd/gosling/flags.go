package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/parallel"
	"github.com/gosling-ai/gosling/sample"
	"github.com/gosling-ai/gosling/vision"
)

// engineFlags are the flags shared by every command that loads a model.
type engineFlags struct {
	ModelPath string `help:"Model: a Hugging Face directory, a .gguf file, or a llama2.c checkpoint." required:"" type:"path"`
	Tokenizer string `help:"Tokenizer (tokenizer.json, its directory, a .gguf or a llama2.c tokenizer .bin); overrides the model's." type:"path"`
	Device    string `help:"Device: auto (CUDA when a GPU and its libraries load, else the CPU), cpu, cuda." default:"auto"`
	Threads   int    `help:"CPU worker threads (0: one per core)." default:"0"`
	MaxImages int    `help:"Most images one request may carry (vision-language models)." default:"16"`
	// vLLM's flag: the image processor's keyword arguments as JSON.
	MMProcessorKwargs string `help:"Image processor settings over preprocessor_config.json, as JSON: Qwen2-VL's min_pixels and max_pixels; Gemma 3's do_pan_and_scan, pan_and_scan_min_crop_size, pan_and_scan_max_num_crops, pan_and_scan_min_ratio_to_activate. Requests may override them (mm_processor_kwargs)." name:"mm-processor-kwargs" placeholder:"JSON"`

	AttentionBackend         string `help:"Attention backend for both phases (see 'gosling backends'), or auto." default:"auto"`
	PrefillBackend           string `help:"Attention backend for prefill (extend) batches." name:"prefill-attention-backend"`
	DecodeBackend            string `help:"Attention backend for decode batches." name:"decode-attention-backend"`
	Attn                     string `help:"Shorthand for --prefill-attention-backend P --decode-attention-backend D." placeholder:"PREFILL,DECODE"`
	SpeculativeAttentionMode string `help:"Which backend verifies draft tokens: prefill or decode." default:"prefill" enum:"prefill,decode"`
	// SGLang's speculative-decoding flags; validated (with defaults per
	// algorithm) by engine.New before any weights load.
	SpeculativeAlgorithm      string `help:"Speculative decoding: NGRAM (drafts copied from the request's own prompt and output), STANDALONE (a smaller draft model), EAGLE or EAGLE3 (a head fed the target's hidden states)."`
	SpeculativeDraftModelPath string `help:"STANDALONE: the draft model (same tokenizer as the target); EAGLE, EAGLE3: the head's directory (config.json, safetensors)." type:"path"`
	// Unset (nil) means the algorithm's default; a given value must be
	// at least 1, so a 0 is an error rather than a silent default.
	SpeculativeNumSteps       *int   `help:"Depth of the draft tree: the most drafted tokens one step can accept (default: NGRAM num-draft-tokens - 1, STANDALONE 3, EAGLE 5)."`
	SpeculativeEagleTopk      *int   `help:"Branching of the draft tree: children per node (default: NGRAM 4, STANDALONE 1, EAGLE 4)."`
	SpeculativeNumDraftTokens *int   `help:"Tokens per request in a verify step, the last accepted one included (default: NGRAM 8, STANDALONE num-steps x topk + 1, EAGLE 8, or num-steps + 1 for a chain)."`
	PageSize                  *int   `help:"KV cache page size in tokens (default 16 on the CPU, 1 on CUDA)."`
	KVCacheDType              string `help:"KV cache storage: auto (float32; bf16 on a GPU serving 16-bit weights, and for a GGUF file of quantized blocks on the CPU), float32, bf16, fp8_e4m3." default:"auto" name:"kv-cache-dtype"`
	KVCacheTokens             int    `help:"KV cache capacity in tokens (0: sized from max running requests and context)." default:"0" name:"kv-cache-tokens" aliases:"max-total-tokens"`
	ContextLength             int    `help:"Maximum tokens per request (0: the model's max_position_embeddings)." default:"0"`
	AllowLongerContext        bool   `help:"Allow a --context-length past the positions the model was trained for (its output degrades there)."`
	DType                     string `help:"Weight dtype: auto (as stored), float32, bfloat16, float16; activations are float32." default:"auto" enum:"auto,float32,bfloat16,float16" name:"dtype"`
	Quantization              string `help:"Quantise weight matrices at load: none, q8_0 (GGUF Q8_0 weights are served as stored), fp8 (linear layers in e4m3 with per-channel scales, activations per token; a GPU of compute capability 8.9+, or the CPU's reference path)." default:"none" enum:"none,q8_0,fp8"`

	MaxRunningRequests int     `help:"Maximum requests decoded together." default:"32"`
	LoadFormat         string  `help:"auto (read the checkpoint), or dummy (only config.json; random weights of its shapes, for benchmarks)." default:"auto" enum:"auto,dummy"`
	MemFractionStatic  float64 `help:"GPU: share of memory for weights and KV cache together (the KV cache gets what the weights leave)." default:"0.85"`
	ChunkedPrefillSize int     `help:"Prompt tokens one request prefills per step; longer prompts continue over several steps (-1: off)." default:"2048"`
	MaxPrefillTokens   int     `help:"Prefill token budget of one scheduler step." default:"4096"`
	SchedulePolicy     string  `help:"Admission order: fcfs, or lpm (longest cached prefix first)." default:"fcfs" enum:"fcfs,lpm"`
	DisableRadixCache  bool    `help:"Do not share KV pages between requests with a common prefix."`
	CUDAGraphMaxBS     int     `help:"GPU: largest decode batch replayed from a CUDA graph; smaller batches are padded to 1, 2, 4, 8, 16, 24, ... (0: max running requests)." default:"0" name:"cuda-graph-max-bs"`
	DisableCUDAGraph   bool    `help:"GPU: run every decode step without CUDA graphs." name:"disable-cuda-graph"`

	// SGLang's distributed flags, checked against each other, the model
	// and the network: --tp-size ranks in this process, or spread over
	// --nnodes processes (hosts) started with the same command line.
	TPSize       int    `help:"Tensor parallelism: ranks the model is split over, one device each (GPUs 0..N-1 of each host on CUDA; the CPU runs them on its cores)." default:"1" name:"tp-size" aliases:"tp,tensor-parallel-size"`
	NNodes       int    `help:"Hosts (processes) the --tp-size ranks span, --tp-size/--nnodes each; give every host the same command with its own --node-rank." default:"1" name:"nnodes"`
	NodeRank     int    `help:"This host's index among --nnodes: node 0 serves (or generates, or measures); the others run their ranks for it until it closes." default:"0" name:"node-rank"`
	DistInitAddr string `help:"HOST:PORT where node 0 meets the other nodes and hands out the NCCL communicator id (with --nnodes > 1)." name:"dist-init-addr"`
	DistTimeout  int    `help:"Seconds the nodes wait for each other at --dist-init-addr (they may start in any order)." default:"600" name:"dist-timeout"`
	// SGLang's and vLLM's names; the custom all-reduce is off unless
	// enabled (engine's customAllReduceDefault says why).
	DisableCustomAllReduce bool `help:"Run every all-reduce through NCCL (the default; see --enable-custom-all-reduce)." name:"disable-custom-all-reduce"`
	EnableCustomAllReduce  bool `help:"CUDA, --tp-size > 1 on one host: the decode-sized all-reduces (up to 4 MiB; GOSLING_CUSTOM_AR_MAX_BYTES) run as kernels that write straight into the other GPUs' memory (NVLink or PCIe peer access) instead of through NCCL; an error where the GPUs have no peer access." name:"enable-custom-all-reduce"`

	// SGLang's name: the scheduler prepares the next step while the
	// device runs this one, unless this is given.
	DisableOverlapSchedule bool `help:"Schedule each step only after the previous one's tokens are taken, instead of while it runs." name:"disable-overlap-schedule"`
}

// checkParallel validates the distributed flags, so none of them is
// accepted and ignored.
func (f *engineFlags) checkParallel() error {
	l := parallel.Launch{TPSize: f.TPSize, NNodes: f.NNodes, NodeRank: f.NodeRank, DistInitAddr: f.DistInitAddr}
	if l.Single() {
		return nil
	}
	cfg, err := f.modelConfig()
	if err != nil {
		return err
	}
	if f.DistTimeout <= 0 {
		return fmt.Errorf("--dist-timeout must be positive, got %d", f.DistTimeout)
	}
	return l.Validate(&cfg, time.Duration(f.DistTimeout)*time.Second)
}

// runNode runs this host's ranks when the command was started on a node
// other than 0 (--node-rank > 0): every host gets the same command line,
// as with SGLang, and only node 0 serves, generates or measures. It
// reports whether it ran.
func (f *engineFlags) runNode(cfg engine.Config) (bool, error) {
	if f.NodeRank == 0 {
		return false, nil
	}
	fmt.Fprintf(os.Stderr, "gosling: node %d of %d: running its ranks for node 0 at %s\n", f.NodeRank, f.NNodes, f.DistInitAddr)
	// SIGINT and SIGTERM keep their default, ending the process at once
	// (even while it waits for node 0): node 0 then stops with the reason.
	return true, engine.RunNode(context.Background(), cfg)
}

// modelConfig reads only the model's config (for --load-format dummy, a
// directory that may hold nothing else).
func (f *engineFlags) modelConfig() (model.Config, error) {
	if f.LoadFormat == "dummy" {
		path := f.ModelPath
		if st, err := os.Stat(path); err == nil && st.IsDir() {
			path = filepath.Join(path, "config.json")
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return model.Config{}, err
		}
		cfg, err := model.ParseHFConfig(data)
		if err != nil {
			return model.Config{}, fmt.Errorf("%s: %w", path, err)
		}
		return cfg, nil
	}
	ck, err := model.Open(f.ModelPath)
	if err != nil {
		return model.Config{}, err
	}
	defer ck.Close()
	return ck.Config, nil
}

func (f *engineFlags) config() (engine.Config, error) {
	if err := f.checkParallel(); err != nil {
		return engine.Config{}, err
	}
	imageOpts, err := vision.ParseOptions([]byte(f.MMProcessorKwargs))
	if err != nil {
		return engine.Config{}, fmt.Errorf("--mm-processor-kwargs: %w", err)
	}
	cfg := engine.Config{ImageOptions: imageOpts,
		ModelPath: f.ModelPath, TokenizerPath: f.Tokenizer, Device: f.Device, Threads: f.Threads, MaxImages: f.MaxImages,
		AttentionBackend: f.AttentionBackend, PrefillBackend: f.PrefillBackend, DecodeBackend: f.DecodeBackend,
		SpeculativeAttentionMode: f.SpeculativeAttentionMode, KVCacheDType: f.KVCacheDType,
		KVCacheTokens: f.KVCacheTokens, ContextLength: f.ContextLength, AllowLongerContext: f.AllowLongerContext,
		MaxRunningRequests: f.MaxRunningRequests,
		ChunkedPrefillSize: f.ChunkedPrefillSize, MaxPrefillTokens: f.MaxPrefillTokens,
		SchedulePolicy: f.SchedulePolicy, DisableRadixCache: f.DisableRadixCache,
		DType: f.DType, Quantization: f.Quantization, MemFractionStatic: f.MemFractionStatic, LoadFormat: f.LoadFormat,
		CUDAGraphMaxBS: f.CUDAGraphMaxBS, DisableCUDAGraph: f.DisableCUDAGraph, DisableOverlapSchedule: f.DisableOverlapSchedule,
		SpeculativeAlgorithm: f.SpeculativeAlgorithm, SpeculativeDraftModelPath: f.SpeculativeDraftModelPath,
		TPSize: f.TPSize, NNodes: f.NNodes, NodeRank: f.NodeRank, DistInitAddr: f.DistInitAddr,
		DistTimeout: time.Duration(f.DistTimeout) * time.Second, EnableCustomAllReduce: f.EnableCustomAllReduce,
		DisableCustomAllReduce: f.DisableCustomAllReduce,
	}
	if f.PageSize != nil {
		cfg.PageSize, cfg.PageSizeSet = *f.PageSize, true
	}
	for _, o := range []struct {
		name string
		flag *int
		dst  *int
	}{{"--speculative-num-steps", f.SpeculativeNumSteps, &cfg.SpeculativeNumSteps},
		{"--speculative-eagle-topk", f.SpeculativeEagleTopk, &cfg.SpeculativeEagleTopk},
		{"--speculative-num-draft-tokens", f.SpeculativeNumDraftTokens, &cfg.SpeculativeNumDraftTokens}} {
		if o.flag == nil {
			continue
		}
		if *o.flag < 1 {
			return cfg, fmt.Errorf("%s must be at least 1, got %d (leave it out for the algorithm's default)", o.name, *o.flag)
		}
		*o.dst = *o.flag
	}
	if f.Attn != "" {
		if f.PrefillBackend != "" || f.DecodeBackend != "" {
			return cfg, fmt.Errorf("--attn and --prefill/--decode-attention-backend are exclusive")
		}
		var err error
		if cfg.PrefillBackend, cfg.DecodeBackend, err = attention.ParseAttn(f.Attn); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// samplingFlags are unset (nil) unless given, so the model's
// generation_config.json can supply the defaults.
type samplingFlags struct {
	MaxNewTokens      int      `help:"Maximum tokens to generate." default:"128"`
	Temperature       *float64 `help:"Sampling temperature (0: greedy). Default: the model's generation config, else 1."`
	TopP              *float64 `help:"Nucleus sampling threshold in (0,1]."`
	TopK              *int     `help:"Keep only the K most likely tokens (-1: all)."`
	MinP              *float64 `help:"Keep tokens with p >= min-p * p(top token)."`
	RepetitionPenalty *float64 `help:"Penalty > 1 discourages tokens already in the prompt or output."`
	FrequencyPenalty  float64  `help:"Subtract this times the count of a token in the output." default:"0"`
	PresencePenalty   float64  `help:"Subtract this from tokens present in the output." default:"0"`
	Seed              *uint64  `help:"Random seed (same seed, same output)."`
	Stop              []string `help:"Stop strings (repeatable)."`
	StopTokenIDs      []int    `help:"Stop token ids." name:"stop-token-ids"`
	IgnoreEOS         bool     `help:"Do not stop at the end-of-sequence token." name:"ignore-eos"`
	NoSkipSpecial     bool     `help:"Keep special tokens in the output text." name:"no-skip-special-tokens"`
}

func (s *samplingFlags) params(gen model.GenerationDefaults) sample.Params {
	p := sample.DefaultParams()
	pick := func(flag, def *float64, dst *float64) {
		switch {
		case flag != nil:
			*dst = *flag
		case def != nil:
			*dst = *def
		}
	}
	pick(s.Temperature, gen.Temperature, &p.Temperature)
	pick(s.TopP, gen.TopP, &p.TopP)
	pick(s.MinP, gen.MinP, &p.MinP)
	pick(s.RepetitionPenalty, gen.RepetitionPenalty, &p.RepetitionPenalty)
	switch {
	case s.TopK != nil:
		p.TopK = *s.TopK
	case gen.TopK != nil:
		p.TopK = *gen.TopK
	}
	p.MaxNewTokens = s.MaxNewTokens
	p.FrequencyPenalty = s.FrequencyPenalty
	p.PresencePenalty = s.PresencePenalty
	p.Seed = s.Seed
	p.Stop = s.Stop
	p.StopTokenIDs = s.StopTokenIDs
	p.IgnoreEOS = s.IgnoreEOS
	p.SkipSpecialTokens = !s.NoSkipSpecial
	return p
}
