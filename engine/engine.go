// Package engine is gosling's embeddable API: load a model, submit
// requests, receive streamed tokens. One scheduler goroutine owns the model
// and the KV cache; Generate calls from any goroutine hand requests to it.
package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/attention/registry"
	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/device/cpu"
	"github.com/gosling-ai/gosling/engine/runner"
	"github.com/gosling-ai/gosling/engine/sched"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/model"
	modelregistry "github.com/gosling-ai/gosling/model/registry"
	"github.com/gosling-ai/gosling/spec"
	"github.com/gosling-ai/gosling/tensor"
	"github.com/gosling-ai/gosling/tokenizer"
	"github.com/gosling-ai/gosling/vision"
)

// Config selects the model and how it runs.
type Config struct {
	ModelPath     string
	TokenizerPath string // overrides the checkpoint's tokenizer, or supplies one
	// ChatTemplate overrides the tokenizer's chat template: a Jinja
	// source, or the path of a file holding one.
	ChatTemplate string
	Device       string // "cpu" (default)
	Threads      int    // 0: one per core

	AttentionBackend string // "auto" or a registry name, for both phases
	PrefillBackend   string // overrides AttentionBackend for extend batches
	DecodeBackend    string // overrides AttentionBackend for decode batches
	// SpeculativeAttentionMode sends target verification to the "prefill"
	// (default) or "decode" backend.
	SpeculativeAttentionMode string
	// Speculative decoding, SGLang's flags (package spec): the algorithm
	// ("" off, NGRAM, STANDALONE, EAGLE, EAGLE3), the draft model or EAGLE
	// head, the tree's depth, branching and size (root included); 0 takes
	// the algorithm's default, and Settings reports the values in use.
	SpeculativeAlgorithm      string
	SpeculativeDraftModelPath string
	SpeculativeNumSteps       int
	SpeculativeEagleTopk      int
	SpeculativeNumDraftTokens int
	PageSize                  int    // KV page size in tokens (0: attention.DefaultPageSize)
	PageSizeSet               bool   // the user chose PageSize; Resolve may not change it
	KVCacheDType              string // auto, float32, bf16, fp8_e4m3
	// KVCacheTokens is the KV capacity in tokens; 0 sizes it to
	// MaxRunningRequests full contexts, capped by KVCacheBytes.
	KVCacheTokens int
	// KVCacheBytes caps the default size (default 2 GiB on the host); in
	// Settings it is the memory the KV cache takes.
	KVCacheBytes       int64
	MaxRunningRequests int // default 32
	// LoadFormat "dummy" reads only config.json and makes random weights
	// of the model's shapes (for benchmarks); "auto" (default) reads the
	// checkpoint.
	LoadFormat string
	// MemFractionStatic is the share of GPU memory for weights and KV
	// cache together (default 0.85); the KV cache gets what the weights leave.
	MemFractionStatic float64
	// ChunkedPrefillSize caps the prompt tokens one request prefills per
	// step (longer prompts continue over several steps); <= 0 disables.
	ChunkedPrefillSize int
	// MaxPrefillTokens is the prefill token budget of one step (default 4096).
	MaxPrefillTokens int
	// MaxForwardTokens caps the tokens of one step's forward, decodes
	// included (0: the larger of MaxPrefillTokens and ChunkedPrefillSize,
	// or of MaxPrefillTokens and ContextLength with chunking off, and no
	// less than every running request's decode or verified tree). On a
	// GPU the KV cache leaves room for the activations of a forward this
	// large, measured at start-up (memory.go); in Settings, the cap in use.
	MaxForwardTokens  int
	SchedulePolicy    string // "fcfs" (default) or "lpm" (longest prefix match first)
	DisableRadixCache bool
	ContextLength     int // default: the model's max_position_embeddings
	// AllowLongerContext lets ContextLength exceed the positions the model
	// was trained for (SGLang's SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN):
	// beyond them its output degrades, so it must be asked for.
	AllowLongerContext bool
	// DType serves weights as stored ("auto") or converted at load to
	// "float32", "bfloat16" or "float16"; activations are float32.
	DType string
	// Quantization "q8_0" quantises matrices to Q8_0 at load ("none": off).
	Quantization string
	// CUDAGraphMaxBS is the largest decode batch run through a CUDA graph
	// (0: MaxRunningRequests); DisableCUDAGraph runs every step eagerly.
	CUDAGraphMaxBS   int
	DisableCUDAGraph bool
	// DisableOverlapSchedule runs every step synchronously: the next step
	// is scheduled only after the previous one's tokens are taken
	// (overlap.go).
	DisableOverlapSchedule bool
	// MaxImages is the most images one request may carry (0: DefaultMaxImages).
	MaxImages int
	// ImageOptions override the model's preprocessor_config.json for every
	// request (a request's own options override these in turn).
	ImageOptions vision.Options
	// TPSize splits the model over this many tensor-parallel ranks, one
	// device each (a host's GPUs 0, 1, ... on CUDA); 0 or 1: one rank. See
	// tp.go. NNodes > 1 spreads them over that many processes (hosts),
	// TPSize/NNodes each: node NodeRank runs ranks NodeRank·TPSize/NNodes
	// onwards, and node 0, which also runs the scheduler, meets the others
	// at DistInitAddr (HOST:PORT); nodes other than 0 run RunNode. See
	// tpnodes.go.
	TPSize       int
	NNodes       int
	NodeRank     int
	DistInitAddr string
	// DistTimeout is how long the nodes wait for each other (0: 10 minutes).
	DistTimeout time.Duration
	// The custom all-reduce: CUDA ranks all in this process run their
	// decode-sized all-reduces (up to cuda.ARPlan's MaxBytes, 4 MiB) as
	// kernels over peer memory (cuda.P2PRank) instead of NCCL; larger
	// ones stay with NCCL. Neither flag: as customAllReduceDefault says
	// (tp.go; off, as measured), falling back to NCCL with a warning
	// where the GPUs have no peer access when it is on.
	// EnableCustomAllReduce insists (an error where it cannot run);
	// DisableCustomAllReduce keeps every all-reduce on NCCL.
	EnableCustomAllReduce  bool
	DisableCustomAllReduce bool

	Logger *slog.Logger
}

// Engine runs one model.
type Engine struct {
	// The device side, which the engine opens and closes: the runtime,
	// the model on it (rank 0's under tensor parallelism), attention, KV
	// cache and the host workers; the runner borrows them for the steps.
	rt      device.Runtime
	model   model.Runnable
	attn    attention.Backend
	kv      *kvcache.Cache
	workers *cpu.Workers
	tp      *tpGroup // nil: one rank; else this process's view of the ranks (tp.go)
	// rn builds, runs and draws each step over the above (rank 0's
	// runner: the group's Run reaches the others'); set once attention is.
	rn         *runner.Runner[*request]
	cfg        Config
	checkpoint *model.Checkpoint
	tok        *tokenizer.Tokenizer // nil when the model has none
	closeOnce  sync.Once
	closeErr   error
	radix      *kvcache.RadixCache // nil when disabled
	sched      *sched.Scheduler[*request]
	eosIDs     []int
	log        *slog.Logger
	chat       chatTemplateOnce
	spec       *speculator // nil: no speculative decoding
	stats      statsCounters
	vision     *visionState // nil for text-only models
	gvocab     grammarVocab
	ov         overlapState
	// forwardTokens is the most tokens of one forward (sched's
	// MaxForwardTokens); activationReserve the device memory kept for
	// the activations of such a forward (0 on the host).
	forwardTokens     int
	activationReserve int64

	submit  chan *request
	control chan func() // work to run on the scheduler goroutine
	stop    chan struct{}
	done    chan struct{}
}

// checkConfig applies the defaults to cfg and checks the settings that
// need no model, returning the speculative settings too.
func checkConfig(cfg Config) (Config, spec.Config, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Device == "" {
		cfg.Device = "cpu"
	}
	if cfg.PageSize < 0 || cfg.PageSizeSet && cfg.PageSize == 0 {
		return cfg, spec.Config{}, fmt.Errorf("--page-size must be positive, got %d", cfg.PageSize)
	}
	for _, f := range []struct {
		flag  string
		value int
	}{{"--context-length", cfg.ContextLength}, {"--threads", cfg.Threads}, {"--kv-cache-tokens", cfg.KVCacheTokens},
		{"--max-running-requests", cfg.MaxRunningRequests}, {"--max-prefill-tokens", cfg.MaxPrefillTokens}, {"--cuda-graph-max-bs", cfg.CUDAGraphMaxBS},
		{"MaxForwardTokens", cfg.MaxForwardTokens},
		{"--tp-size", cfg.TPSize}} {
		if f.value < 0 {
			return cfg, spec.Config{}, fmt.Errorf("%s must not be negative, got %d", f.flag, f.value)
		}
	}
	if cfg.MaxRunningRequests <= 0 {
		cfg.MaxRunningRequests = 32
	}
	cfg.TPSize = max(cfg.TPSize, 1)
	if cfg.MaxPrefillTokens <= 0 {
		cfg.MaxPrefillTokens = 4096
	}
	if cfg.ChunkedPrefillSize == 0 {
		cfg.ChunkedPrefillSize = 2048
	}
	switch cfg.SchedulePolicy {
	case "":
		cfg.SchedulePolicy = "fcfs"
	case "fcfs", "lpm":
	default:
		return cfg, spec.Config{}, fmt.Errorf("--schedule-policy must be fcfs or lpm, got %q", cfg.SchedulePolicy)
	}
	// Speculative settings are checked before any weights load, so a
	// wrong combination fails at once.
	sc, err := specConfig(cfg)
	if err != nil {
		return cfg, sc, err
	}
	if err := checkNodes(&cfg); err != nil {
		return cfg, sc, err
	}
	if cfg.EnableCustomAllReduce && cfg.DisableCustomAllReduce {
		return cfg, sc, errors.New("--enable-custom-all-reduce and --disable-custom-all-reduce contradict each other")
	}
	if cfg.EnableCustomAllReduce && (cfg.TPSize <= 1 || cfg.NNodes > 1 || cfg.Device != "cuda") {
		return cfg, sc, errors.New("--enable-custom-all-reduce is for --tp-size > 1 on --device cuda, every rank on this host (no --nnodes)")
	}
	if _, err := parseWeightDType(cfg.DType, cfg.Quantization); err != nil {
		return cfg, sc, err
	}
	return cfg, sc, nil
}

// New loads the model and starts the scheduler.
func New(cfg Config) (*Engine, error) {
	cfg, sc, err := checkConfig(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.NodeRank > 0 {
		return nil, fmt.Errorf("--node-rank %d runs ranks for node 0 and serves nothing itself: use engine.RunNode", cfg.NodeRank)
	}
	ck, err := openCheckpoint(cfg)
	if err != nil {
		return nil, err
	}
	e := &Engine{cfg: cfg, checkpoint: ck, log: cfg.Logger}
	if err := e.init(sc); err != nil {
		e.release()
		ck.Close()
		return nil, err
	}
	e.submit = make(chan *request)
	e.control = make(chan func())
	e.stop = make(chan struct{})
	e.done = make(chan struct{})
	e.watchNodes()
	go e.loop()
	return e, nil
}

// loadModel starts the host workers, opens the device and builds the
// model (this process's ranks of it under tensor parallelism) as e.model.
func (e *Engine) loadModel() error {
	e.workers = cpu.NewWorkers(e.cfg.Threads)
	if err := e.convertWeights(); err != nil {
		return err
	}
	if err := e.openDevice(); err != nil {
		return err
	}
	if err := e.checkFP8(false); err != nil {
		return err
	}
	// Under tensor parallelism a rank's columns of an expert may cut
	// through a 32-value MXFP4 block (GPT-OSS's 2880 over 4 ranks); the
	// dequantized experts split anywhere.
	if cw, ok := e.rt.Ops().(device.CompactWeights); ok && e.cfg.TPSize <= 1 {
		model.ServeCompact(e.checkpoint.Weights, cw.KeepsCompact)
	}
	if e.rt.KVMemory() == nil {
		convertLazily(e.checkpoint.Weights)
	}
	m, err := e.buildModel()
	e.model = m
	if err != nil {
		return err
	}
	return e.checkFP8(true)
}

func (e *Engine) init(sc spec.Config) error {
	cfg := &e.cfg
	if err := e.loadModel(); err != nil {
		return err
	}
	m := e.model
	if err := e.loadTokenizer(); err != nil {
		return err
	}
	if err := e.initVision(); err != nil {
		return err
	}
	if cfg.ChatTemplate != "" {
		if _, err := e.ChatTemplate(); err != nil {
			return err
		}
	}
	mc := m.Config()
	if cfg.ContextLength > mc.MaxPositions && mc.MaxPositions > 0 && !cfg.AllowLongerContext {
		return fmt.Errorf("--context-length %d is longer than the %d positions the model was trained for (max_position_embeddings); its output would degrade past them. Use a shorter one, or add --allow-longer-context to run it anyway",
			cfg.ContextLength, mc.MaxPositions)
	}
	contextSet := cfg.ContextLength > 0
	if cfg.ContextLength <= 0 {
		cfg.ContextLength = mc.MaxPositions
		if cfg.ContextLength <= 0 {
			cfg.ContextLength = 4096
		}
	}
	kvDType := cfg.KVCacheDType
	if kvDType == "" || strings.EqualFold(kvDType, "auto") {
		switch {
		case e.rt.KVMemory() != nil && e.gpuWeightDType() != tensor.F32:
			// auto: a 16-bit KV cache for 16-bit weights on the GPU, as
			// SGLang and vLLM keep it in the model's dtype (float16
			// weights get bf16, the 16-bit KV type gosling stores).
			kvDType = "bf16"
		case e.rt.KVMemory() == nil && e.servesQuantizedBlocks():
			// auto on the host with GGUF blocks served compact: a batch-1
			// decode reads the KV cache beside weights of 4.5-8.5 bits,
			// so float32 keys and values would rival the weights' bytes
			// within a few hundred tokens (stories110M in Q4_K_M: 38 MB
			// of KV at 512 tokens against 65 MB of weights). llama.cpp
			// keeps such files' KV in 16 bits too (f16 by default).
			kvDType = "bf16"
		}
	}
	plan, err := registry.Resolve(attention.Choice{
		Backend: cfg.AttentionBackend, Prefill: cfg.PrefillBackend, Decode: cfg.DecodeBackend,
		SpeculativeMode: cfg.SpeculativeAttentionMode, PageSize: cfg.PageSize, PageSizeSet: cfg.PageSizeSet,
		KVDType: kvDType,
	}, e.attentionNeed(sc.Enabled()))
	if err != nil {
		return err
	}
	for _, a := range plan.Adjustments {
		e.log.Warn("attention settings adjusted", "setting", a.Setting, "from", a.From, "to", a.To, "reason", a.Reason)
	}
	cfg.PageSize = plan.PageSize
	// Settings() reports what was resolved, not what was asked for.
	cfg.PrefillBackend, cfg.DecodeBackend = plan.Prefill.Name, plan.Decode.Name
	cfg.KVCacheDType = strings.ToLower(plan.KVDType.String())
	cfg.Threads = e.workers.N()
	spec := m.KVSpec()
	spec.DType = plan.KVDType
	e.planWindowRegion(&spec)
	treeTokens := 1
	if sc.Enabled() {
		treeTokens = sc.NumDraftTokens
	}
	logitRows := 0
	if e.forwardTokens, logitRows, err = forwardCaps(cfg, treeTokens, cfg.MaxForwardTokens); err != nil {
		return err
	}
	cfg.MaxForwardTokens = e.forwardTokens
	budgeted := false // the KV cache's size comes from the device's memory
	if cfg.KVCacheBytes <= 0 {
		cfg.KVCacheBytes = 2 << 30 // host memory: a modest default
		if mi, ok := e.rt.(device.MemoryInfo); ok {
			// The profile forward needs no more tokens than the running
			// requests' contexts hold.
			tokens := min(e.forwardTokens, cfg.MaxRunningRequests*cfg.ContextLength)
			var peak int64
			if e.activationReserve, peak, err = e.measureReserve(plan, spec, tokens, min(logitRows, tokens), cfg.MaxRunningRequests*treeTokens); err != nil {
				return err
			}
			if cfg.KVCacheBytes, err = e.kvBytes(mi, e.activationReserve); err != nil {
				return err
			}
			budgeted = true
			if e.activationReserve > 0 {
				e.log.Info("activation memory measured", "forward_tokens", tokens, "logit_rows", min(logitRows, tokens),
					"peak_bytes", peak, "reserve_bytes", e.activationReserve, "kv_cache_bytes", cfg.KVCacheBytes)
			}
		}
	}
	if cfg.KVCacheTokens <= 0 {
		// Windowed layers cost a fixed region; only full layers grow with tokens.
		want := int64(cfg.MaxRunningRequests) * int64(cfg.ContextLength)
		perToken := int64(max(spec.FullLayers()*spec.LayerBytesPerToken(), 1))
		fit := (cfg.KVCacheBytes - int64(spec.SWATokens*(spec.NumLayers-spec.FullLayers())*spec.LayerBytesPerToken())) / perToken
		cfg.KVCacheTokens = int(max(min(want, fit), int64(cfg.ContextLength)))
	}
	if budgeted && contextSet && cfg.KVCacheTokens < cfg.ContextLength {
		return fmt.Errorf("the GPU's KV cache holds %d tokens (%.2f GiB after the weights and %.2f GiB kept for a forward of %d tokens' activations), less than one request of --context-length %d; raise --mem-fraction-static, lower --context-length, or lower --max-prefill-tokens and --chunked-prefill-size",
			cfg.KVCacheTokens, gib(cfg.KVCacheBytes), gib(e.activationReserve), e.forwardTokens, cfg.ContextLength)
	}
	if cfg.KVCacheTokens < cfg.ContextLength {
		e.log.Warn("context length limited to the KV cache capacity", "context_length", cfg.ContextLength, "kv_cache_tokens", cfg.KVCacheTokens)
		cfg.ContextLength = cfg.KVCacheTokens
	}
	if spec.SWATokens >= cfg.KVCacheTokens {
		spec.SWATokens = 0 // the window region would be no smaller than the cache
	}
	e.kv, err = e.newKVCache(spec)
	if err != nil {
		return err
	}
	cfg.KVCacheBytes = e.kv.Pool.Bytes()
	if err := e.loadKVScales(); err != nil {
		return err
	}
	if !cfg.DisableRadixCache {
		e.radix = e.kv.NewRadixCache()
	}
	e.sched = sched.New[*request](sched.Config{MaxRunning: cfg.MaxRunningRequests, MaxPrefillTokens: cfg.MaxPrefillTokens,
		ChunkedPrefillSize: cfg.ChunkedPrefillSize, LPM: cfg.SchedulePolicy == "lpm", KVCacheTokens: cfg.KVCacheTokens,
		MaxForwardTokens: e.forwardTokens, MaxLogitRows: logitRows}, e.kv, e.radix)
	e.logKVLayout(spec)
	opts := attention.Options{Device: cfg.Device, KV: e.kv, Layers: m.AttentionLayers(), Runtime: e.rt}
	if a, ok := e.rt.Ops().(device.Activations); ok {
		opts.Output = a.NewActivation // layer outputs in the forward's recycled memory
	}
	if e.attn, err = plan.Build(opts); err != nil {
		return err
	}
	cfg.AttentionBackend = e.attn.Name()
	e.newRunner()
	if err := e.initSpeculative(sc); err != nil {
		return err
	}
	e.setupGraphs(plan.Decode)
	if err := e.initPeers(plan); err != nil {
		return err
	}
	e.setupOverlap()
	e.eosIDs = slices.Clone(mc.EOSTokenIDs)
	e.eosIDs = append(e.eosIDs, e.checkpoint.Generation.EOSTokenIDs...)
	if e.tok != nil && e.tok.EOS() >= 0 {
		e.eosIDs = append(e.eosIDs, e.tok.EOS())
	}
	slices.Sort(e.eosIDs)
	e.eosIDs = slices.Compact(e.eosIDs)
	e.log.Info("model loaded", "path", e.checkpoint.Path, "format", e.checkpoint.Format,
		"architecture", mc.Architecture, "layers", mc.NumLayers, "hidden", mc.HiddenSize,
		"attention_backend", e.attn.Name(), "page_size", cfg.PageSize, "kv_cache_dtype", spec.DType,
		"kv_cache_tokens", cfg.KVCacheTokens, "kv_bytes_per_token", spec.BytesPerToken(),
		"context_length", cfg.ContextLength, "threads", e.workers.N(), "device_weight_bytes", e.DeviceWeightBytes())
	return nil
}

func (e *Engine) attentionNeed(speculative bool) attention.Need {
	need := attentionNeed(e.cfg.Device, e.cfg.PageSize, e.model.AttentionLayers(), speculative)
	_, need.Multimodal = e.model.(model.VisionRunnable)
	return need
}

// attentionNeed is what a model's layers ask of an attention backend.
func attentionNeed(device string, pageSize int, layers []attention.Layer, speculative bool) attention.Need {
	need := attention.Need{Device: device, PageSize: pageSize, SpecDecoding: speculative}
	for _, l := range layers {
		if !slices.Contains(need.HeadDims, l.HeadDim) {
			need.HeadDims = append(need.HeadDims, l.HeadDim)
		}
		need.SlidingWindow = need.SlidingWindow || l.SlidingWindow > 0
		need.LogitSoftcap = need.LogitSoftcap || l.LogitSoftcap > 0
		need.Sinks = need.Sinks || l.Sinks != nil
		need.MLA = need.MLA || l.MLA
	}
	return need
}

func (e *Engine) loadTokenizer() (err error) {
	e.tok, err = LoadTokenizer(e.checkpoint, e.cfg.TokenizerPath)
	if err != nil {
		return err
	}
	if e.tok == nil {
		e.log.Warn("the model has no tokenizer; only token-id prompts will work (pass --tokenizer PATH for text)", "path", e.checkpoint.Path)
		return nil
	}
	// A tokenizer with more ids than the model's embedding belongs to
	// another model: every prompt would fail (or worse, run with ids
	// that mean something else), so refuse it now. A smaller one is
	// normal: embeddings are often padded past the tokenizer.
	if vocab := e.model.Config().VocabSize; e.tok.VocabSize() > vocab {
		what := "--tokenizer " + e.cfg.TokenizerPath
		if e.cfg.TokenizerPath == "" {
			what = "the checkpoint's tokenizer"
		}
		return fmt.Errorf("%s has %d token ids, but the model's vocabulary has %d: it is not this model's tokenizer; give the one the model was trained with",
			what, e.tok.VocabSize(), vocab)
	}
	return nil
}

// openCheckpoint reads the model, or only its config for dummy weights.
func openCheckpoint(cfg Config) (*model.Checkpoint, error) {
	switch cfg.LoadFormat {
	case "", "auto":
		return model.Open(cfg.ModelPath)
	case "dummy":
	default:
		return nil, fmt.Errorf("--load-format must be auto or dummy, got %q", cfg.LoadFormat)
	}
	data, err := os.ReadFile(configFile(cfg.ModelPath))
	if err != nil {
		return nil, fmt.Errorf("--load-format dummy needs a config.json: %w", err)
	}
	mc, err := model.ParseHFConfig(data)
	if err != nil {
		return nil, err
	}
	arch, err := modelregistry.Lookup(mc.Architecture)
	if err != nil {
		return nil, err
	}
	if arch.WeightShapes == nil {
		return nil, fmt.Errorf("--load-format dummy is not available for %s yet", mc.Architecture)
	}
	dt := tensor.BF16
	if strings.EqualFold(cfg.DType, "float32") {
		dt = tensor.F32
	}
	return model.OpenDummy(cfg.ModelPath, arch.WeightShapes, dt)
}

func configFile(path string) string {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return filepath.Join(path, "config.json")
	}
	return path
}

// LoadTokenizer loads the tokenizer at override when given, else the one
// the checkpoint carries; it returns nil, nil when there is none.
func LoadTokenizer(ck *model.Checkpoint, override string) (*tokenizer.Tokenizer, error) {
	src := ck.Tokenizer
	switch {
	case override != "":
		return tokenizer.Load(override)
	case src.HFDir != "":
		return tokenizer.Load(src.HFDir)
	case src.GGUFMetadata != nil:
		tok, err := tokenizer.FromGGUFMetadata(src.GGUFMetadata)
		if err != nil {
			return nil, fmt.Errorf("tokenizer in %s: %w", ck.Path, err)
		}
		return tok, nil
	case src.Llama2CPath != "":
		return tokenizer.FromLlama2C(src.Llama2CPath)
	}
	return nil, nil
}

// Tokenizer is the model's tokenizer, or nil.
func (e *Engine) Tokenizer() *tokenizer.Tokenizer { return e.tok }

// ModelConfig is the loaded architecture's configuration; under tensor
// parallelism rank 0's (its share of the heads and intermediate sizes,
// the whole vocabulary).
func (e *Engine) ModelConfig() *model.Config { return e.model.Config() }

// Checkpoint is what was read from the model path.
func (e *Engine) Checkpoint() *model.Checkpoint { return e.checkpoint }

// KVBytesPerToken is the KV storage one token takes over all layers that
// keep every token (windowed layers hold a fixed region instead).
func (e *Engine) KVBytesPerToken() int {
	spec := e.kv.Pool.Spec
	return spec.FullLayers() * spec.LayerBytesPerToken()
}

// Settings are the effective settings after defaults were applied.
func (e *Engine) Settings() Config { return e.cfg }

// ErrClosed is returned for requests submitted after Close.
var ErrClosed = errors.New("engine is shut down")

// Done is closed when the scheduler stops: after Close, or on its own
// when the engine cannot go on (a tensor-parallel rank failed; Err says
// why). A server watches it to go down with the engine.
func (e *Engine) Done() <-chan struct{} { return e.done }

// Err is why the engine stopped on its own, nil while it runs and after
// a plain Close.
func (e *Engine) Err() error {
	select {
	case <-e.done:
		return e.failed()
	default:
		return nil
	}
}

// Generate runs one request to completion, streaming through req.OnDelta.
// Cancelling ctx aborts the request and frees its KV pages; the partial
// result comes back with FinishReason "abort" and ctx's error.
func (e *Engine) Generate(ctx context.Context, req Request) (*Result, error) {
	r, err := e.newRequest(req)
	if err != nil {
		return nil, badRequest(err)
	}
	select {
	case e.submit <- r:
	case <-e.stop:
		return nil, ErrClosed
	case <-e.done: // stopped on its own
		return nil, e.Err()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	for {
		select {
		case <-r.notify:
			for _, d := range r.takeDeltas() {
				if req.OnDelta != nil {
					req.OnDelta(d)
				}
			}
		case <-r.finished:
			for _, d := range r.takeDeltas() {
				if req.OnDelta != nil {
					req.OnDelta(d)
				}
			}
			if r.err != nil {
				return r.result, r.err
			}
			return r.result, nil
		case <-ctx.Done():
			r.cancel()
			<-r.finished
			return r.result, ctx.Err()
		}
	}
}

// Close stops the scheduler (aborting requests in flight) and releases the
// model. Later calls return the first call's result.
func (e *Engine) Close() error {
	e.closeOnce.Do(func() {
		close(e.stop)
		<-e.done
		e.release()
		e.closeErr = e.checkpoint.Close()
	})
	return e.closeErr
}

// release frees the device side (the drafters, the KV pool in its
// memory, weights, kernels) and the host workers.
func (e *Engine) release() {
	if e.spec != nil {
		// First: a drafter's KV may live in the device's memory.
		if e.spec.draft != nil {
			e.spec.draft.close()
		}
		if e.spec.eagle != nil {
			e.spec.eagle.close()
		}
		e.spec.draft, e.spec.eagle = nil, nil
	}
	if e.tp != nil {
		// Graphs first: a communicator's destroy waits for the graphs
		// that captured its collectives.
		if err := e.tp.releaseGraphs(e.rt); err != nil {
			e.log.Warn("releasing the tensor-parallel ranks' CUDA graphs", "err", err)
		}
		if err := e.tp.close(); err != nil {
			e.log.Warn("closing the tensor-parallel ranks", "err", err)
		}
	}
	if e.kv != nil {
		// Before the device closes: a device pool's memory is its.
		if err := e.kv.Pool.Free(); err != nil {
			e.log.Warn("freeing the KV cache", "err", err)
		}
	}
	if e.rt != nil {
		if err := e.rt.Close(); err != nil {
			e.log.Warn("closing the device", "err", err)
		}
		e.rt = nil
	}
	if e.workers != nil {
		e.workers.Close()
	}
}
