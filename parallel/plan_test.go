package parallel_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/model/registry"
	"github.com/gosling-ai/gosling/parallel"
	"github.com/gosling-ai/gosling/tensor"
)

// TestShardShapes pins the shard shapes of representative tensors of
// every architecture, worked out by hand from each config (hidden 64,
// vocabulary 512): heads split whole, KV heads replicated when fewer than
// the ranks, fused projections cut per part, experts sliced.
func TestShardShapes(t *testing.T) {
	for _, tc := range []struct {
		model  string
		size   int
		tensor string
		want   []int
	}{
		// 8 heads of 8, 2 KV heads, intermediate 160.
		{"llama_gqa", 2, "model.layers.0.self_attn.q_proj.weight", []int{32, 64}},
		{"llama_gqa", 2, "model.layers.0.self_attn.k_proj.weight", []int{8, 64}},
		{"llama_gqa", 4, "model.layers.0.self_attn.k_proj.weight", []int{8, 64}}, // replicated pairs
		{"llama_gqa", 4, "model.layers.0.self_attn.o_proj.weight", []int{64, 16}},
		{"llama_gqa", 2, "model.layers.0.mlp.gate_proj.weight", []int{80, 64}},
		{"llama_gqa", 2, "model.layers.0.mlp.down_proj.weight", []int{64, 80}},
		{"llama_gqa", 4, "model.layers.0.input_layernorm.weight", []int{64}},
		{"llama_gqa", 2, "lm_head.weight", []int{256, 64}},
		// 4 heads of 16, 2 KV heads; q/k/v biases.
		{"qwen2_bias", 2, "model.layers.0.self_attn.q_proj.bias", []int{32}},
		{"qwen2_bias", 4, "model.layers.0.self_attn.v_proj.bias", []int{16}},
		{"qwen3_qknorm", 2, "model.layers.0.self_attn.q_norm.weight", []int{32}}, // head_dim 32, replicated
		// Phi-3: qkv [64+32+32, 64] → q 32 + k 16 + v 16; gate_up [320, 64] → 80 + 80.
		{"phi3", 2, "model.layers.0.self_attn.qkv_proj.weight", []int{64, 64}},
		{"phi3", 4, "model.layers.0.self_attn.qkv_proj.weight", []int{16 + 16 + 16, 64}},
		{"phi3", 2, "model.layers.0.mlp.gate_up_proj.weight", []int{160, 64}},
		// Gemma: head_dim 32.
		{"gemma2_softcap_swa", 2, "model.layers.0.self_attn.q_proj.weight", []int{64, 64}},
		{"gemma2_softcap_swa", 4, "model.layers.0.self_attn.o_proj.weight", []int{64, 32}},
		{"gemma3_text", 2, "model.layers.0.pre_feedforward_layernorm.weight", []int{64}},
		// Experts of 48, a shared expert of 96 (Qwen2-MoE).
		{"qwen2_moe", 2, "model.layers.0.mlp.experts.3.up_proj.weight", []int{24, 64}},
		{"qwen2_moe", 4, "model.layers.0.mlp.shared_expert.down_proj.weight", []int{64, 24}},
		{"qwen2_moe", 4, "model.layers.0.mlp.gate.weight", []int{8, 64}},
		{"qwen2_moe", 2, "model.layers.0.mlp.shared_expert_gate.weight", []int{1, 64}},
		{"qwen3_moe", 4, "model.layers.0.mlp.experts.7.down_proj.weight", []int{64, 12}},
		{"mixtral", 2, "model.layers.0.block_sparse_moe.experts.0.w1.weight", []int{80, 64}},
		{"mixtral", 2, "model.layers.0.block_sparse_moe.experts.0.w2.weight", []int{64, 80}},
		{"mixtral", 4, "model.layers.0.block_sparse_moe.gate.weight", []int{8, 64}},
		// GPT-OSS: experts x·W [8, 64, 2·160] and [8, 160, 64], sinks per head.
		{"gpt_oss", 2, "model.layers.0.mlp.experts.gate_up_proj", []int{8, 64, 160}},
		{"gpt_oss", 4, "model.layers.0.mlp.experts.gate_up_proj_bias", []int{8, 80}},
		{"gpt_oss", 2, "model.layers.0.mlp.experts.down_proj", []int{8, 80, 64}},
		{"gpt_oss", 2, "model.layers.0.mlp.experts.down_proj_bias", []int{8, 64}},
		{"gpt_oss", 4, "model.layers.0.self_attn.sinks", []int{1}},
		{"gpt_oss", 2, "model.layers.0.self_attn.o_proj.bias", []int{64}},
		{"gpt_oss", 2, "model.layers.0.mlp.router.weight", []int{8, 64}},
		// DeepSeek-V3 MLA: 4 heads, nope 32 + rope 16, v 32, ranks 48/32.
		{"deepseek_v3_mla_moe", 2, "model.layers.0.self_attn.q_b_proj.weight", []int{96, 48}},
		{"deepseek_v3_mla_moe", 2, "model.layers.0.self_attn.kv_b_proj.weight", []int{128, 32}},
		{"deepseek_v3_mla_moe", 4, "model.layers.0.self_attn.o_proj.weight", []int{64, 32}},
		{"deepseek_v3_mla_moe", 4, "model.layers.0.self_attn.kv_a_proj_with_mqa.weight", []int{48, 64}},
		{"deepseek_v3_mla_moe", 2, "model.layers.0.self_attn.q_a_proj.weight", []int{48, 64}},
		{"deepseek_v3_mla_moe", 2, "model.layers.1.mlp.shared_experts.gate_proj.weight", []int{24, 64}},
		{"deepseek_v3_mla_moe", 2, "model.layers.1.mlp.gate.e_score_correction_bias", []int{8}},
	} {
		t.Run(fmt.Sprintf("%s/tp%d/%s", tc.model, tc.size, tc.tensor), func(t *testing.T) {
			ck, err := model.Open(shared.Path(t, "models/reference-tiny/"+tc.model))
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			plan, err := parallel.NewPlan(&ck.Config, tc.size)
			if err != nil {
				t.Fatal(err)
			}
			w, err := ck.Weights.Tensor(tc.tensor)
			if err != nil {
				t.Fatal(err)
			}
			for r := range tc.size {
				s, err := plan.Shard(w, r)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(s.Shape, tc.want) {
					t.Errorf("rank %d: shape %v, want %v", r, s.Shape, tc.want)
				}
				if err := s.Validate(); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// TestShardsReproduceLinears: for every tensor of every reference-tiny
// text model over 2 and 4 fake ranks, the shards hold exactly the whole
// tensor's values at their places (every element held by some rank), and
// on random inputs the linear layers' outputs come back: column-parallel
// shards' outputs concatenate to the whole output, row-parallel shards'
// partial outputs (inputs cut the same way, the bias on rank 0) sum to it.
func TestShardsReproduceLinears(t *testing.T) {
	for _, name := range textModels {
		ck, err := model.Open(shared.Path(t, "models/reference-tiny/"+name))
		if err != nil {
			t.Fatal(err)
		}
		for _, size := range []int{2, 4} {
			plan, err := parallel.NewPlan(&ck.Config, size)
			if err != nil {
				continue // TestTPMatchesSingleRank checks the refusal
			}
			t.Run(fmt.Sprintf("%s/tp%d", name, size), func(t *testing.T) {
				checked := 0
				for _, tn := range ck.Weights.Names() {
					w, err := ck.Weights.Tensor(tn)
					if err != nil {
						t.Fatal(err)
					}
					checkPlacement(t, plan, w)
					if checkLinear(t, plan, ck.Weights, w) {
						checked++
					}
				}
				if checked == 0 {
					t.Fatal("no linear layer checked")
				}
			})
		}
		ck.Close()
	}
}

// place maps shard element i of rank's shard to its flat index in the
// whole tensor.
func place(full []int, spec parallel.Spec, plan *parallel.Plan, rank int) func(i int) int {
	switch spec.Kind {
	case parallel.Vocab:
		start, _ := plan.VocabShard(rank)
		inner := 1
		for _, d := range full[1:] {
			inner *= d
		}
		return func(i int) int {
			if j := start*inner + i; j < full[0]*inner {
				return j
			}
			return -1 // padding
		}
	case parallel.Split:
		inner := 1
		for _, d := range full[spec.Dim+1:] {
			inner *= d
		}
		var index []int // shard index along Dim → whole index
		for _, s := range spec.Segments {
			for k := range s.Len {
				index = append(index, s.Start+k)
			}
		}
		return func(i int) int {
			in := i % inner
			d := i / inner % len(index)
			o := i / inner / len(index)
			return (o*full[spec.Dim]+index[d])*inner + in
		}
	}
	return func(i int) int { return i }
}

func checkPlacement(t *testing.T, plan *parallel.Plan, w tensor.Weight) {
	t.Helper()
	whole := w.Float32()
	held := make([]bool, len(whole))
	for r := range plan.Size {
		spec, err := plan.Spec(w.Name, w.Shape, r)
		if err != nil {
			t.Fatal(err)
		}
		s, err := plan.Shard(w, r)
		if err != nil {
			t.Fatal(err)
		}
		vals := s.Float32()
		at := place(w.Shape, spec, plan, r)
		for i, v := range vals {
			j := at(i)
			switch {
			case spec.Kind == parallel.AddOnce && r > 0:
				if v != 0 {
					t.Fatalf("%s rank %d: add-once tensor has %v at %d, want 0", w.Name, r, v, i)
				}
				continue
			case j < 0:
				if v != 0 {
					t.Fatalf("%s rank %d: vocabulary padding holds %v", w.Name, r, v)
				}
				continue
			case v != whole[j]:
				t.Fatalf("%s rank %d: shard element %d is %v, the whole tensor's %d is %v", w.Name, r, i, v, j, whole[j])
			}
			held[j] = true
		}
	}
	if i := slices.Index(held, false); i >= 0 {
		t.Fatalf("%s: element %d is held by no rank", w.Name, i)
	}
}

// checkLinear checks the outputs of w when it is a linear layer's weight
// ([out, in] 2-D, or GPT-OSS's x·W experts [E, in, out]); false for other
// tensors.
func checkLinear(t *testing.T, plan *parallel.Plan, ws model.WeightSource, w tensor.Weight) bool {
	t.Helper()
	leaf := w.Name[strings.LastIndex(strings.TrimSuffix(w.Name, ".weight"), ".")+1:]
	leaf = strings.TrimSuffix(leaf, ".weight")
	spec0, _ := plan.Spec(w.Name, w.Shape, 0)
	xw := len(w.Shape) == 3 // GPT-OSS experts, x·W
	if !(len(w.Shape) == 2 && strings.HasSuffix(w.Name, ".weight") || xw && !strings.HasSuffix(leaf, "bias")) || spec0.Kind == parallel.Vocab {
		return false
	}
	experts, in, out := 1, w.Shape[1], w.Shape[0]
	if xw {
		experts, in, out = w.Shape[0], w.Shape[1], w.Shape[2]
	}
	var bias []float32
	biasName := strings.TrimSuffix(w.Name, ".weight") + ".bias"
	if xw {
		biasName = w.Name + "_bias"
	}
	if ws.Has(biasName) {
		b, _ := ws.Tensor(biasName)
		bias = b.Float32()
	}
	rng := rand.New(rand.NewPCG(1, uint64(len(w.Name))))
	x := make([]float32, in)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	// apply is x·Wᵀ (+b) for expert e of a weight of the given dims.
	apply := func(vals []float32, b []float32, e, in, out int, x []float32) []float64 {
		y := make([]float64, out)
		for o := range out {
			for i := range in {
				if xw {
					y[o] += float64(vals[(e*in+i)*out+o]) * float64(x[i])
				} else {
					y[o] += float64(vals[o*in+i]) * float64(x[i])
				}
			}
			if b != nil {
				y[o] += float64(b[e*out+o])
			}
		}
		return y
	}
	whole := w.Float32()
	for e := range experts {
		want := apply(whole, bias, e, in, out, x)
		sum := make([]float64, out)
		for r := range plan.Size {
			spec, _ := plan.Spec(w.Name, w.Shape, r)
			s, err := plan.Shard(w, r)
			if err != nil {
				t.Fatal(err)
			}
			var sb []float32
			if bias != nil {
				b, _ := ws.Tensor(biasName)
				if b, err = plan.Shard(b, r); err != nil {
					t.Fatal(err)
				}
				sb = b.Float32()
			}
			sIn, sOut := s.Shape[len(s.Shape)-1], s.Shape[len(s.Shape)-2]
			if xw {
				sIn, sOut = s.Shape[1], s.Shape[2]
			}
			switch {
			case spec.Kind == parallel.Split && spec.RowParallel:
				if spec.Dim != 1 { // in of [out, in] and of [E, in, out]
					t.Fatalf("%s: row-parallel cut of dimension %d", w.Name, spec.Dim)
				}
				var xs []float32
				for _, seg := range spec.Segments {
					xs = append(xs, x[seg.Start:seg.Start+seg.Len]...)
				}
				for o, v := range apply(s.Float32(), sb, e, sIn, sOut, xs) {
					sum[o] += v
				}
			case spec.Kind == parallel.Split:
				got := apply(s.Float32(), sb, e, sIn, sOut, x)
				var index []int
				for _, seg := range spec.Segments {
					for k := range seg.Len {
						index = append(index, seg.Start+k)
					}
				}
				for k, o := range index {
					if math.Abs(got[k]-want[o]) > 1e-9 {
						t.Fatalf("%s rank %d: column output %d is %v, the whole layer's %d is %v", w.Name, r, k, got[k], o, want[o])
					}
				}
			default: // replicated
				got := apply(s.Float32(), sb, e, sIn, sOut, x)
				if d := maxAbs(got, want); d != 0 {
					t.Fatalf("%s rank %d: replicated output differs by %v", w.Name, r, d)
				}
			}
		}
		if spec0.RowParallel {
			if d := maxAbs(sum, want); d > 1e-9 {
				t.Fatalf("%s expert %d: the partial sums miss the whole output by %v", w.Name, e, d)
			}
		}
	}
	return true
}

func maxAbs(a, b []float64) float64 {
	worst := 0.0
	for i := range a {
		worst = max(worst, math.Abs(a[i]-b[i]))
	}
	return worst
}

// TestDummyShards: with --load-format dummy each rank makes only its own
// shards: a contiguous shard stays synthetic (no bytes: a GPU fills it),
// any other holds exactly its own values, and both agree with the whole
// dummy tensor.
func TestDummyShards(t *testing.T) {
	dir := shared.Path(t, "models/reference-tiny/phi3")
	arch, err := registry.Lookup("Phi3ForCausalLM")
	if err != nil {
		t.Fatal(err)
	}
	ck, err := model.OpenDummy(dir, arch.WeightShapes, tensor.BF16)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := parallel.NewPlan(&ck.Config, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		synthetic bool
	}{
		{"model.layers.0.self_attn.qkv_proj.weight", false}, // q, k and v parts
		{"model.layers.0.mlp.gate_up_proj.weight", false},   // gate and up parts
		{"model.layers.0.mlp.down_proj.weight", false},      // columns
		{"model.layers.0.self_attn.o_proj.weight", false},   // columns
		{"model.embed_tokens.weight", true},                 // rows
		{"lm_head.weight", true},
	} {
		w, err := ck.Weights.Tensor(tc.name)
		if err != nil {
			t.Fatal(err)
		}
		for r := range plan.Size {
			src := &parallel.Source{WS: ck.Weights, Plan: plan, Rank: r}
			s, err := src.Tensor(tc.name)
			if err != nil {
				t.Fatal(err)
			}
			if spec, _ := plan.Spec(tc.name, w.Shape, r); spec.Kind == parallel.Vocab {
				if s, err = plan.Shard(s, r); err != nil { // what Ops prepares
					t.Fatal(err)
				}
			}
			if tc.synthetic != (s.Data == nil && s.Synthetic != nil) {
				t.Errorf("%s rank %d: synthetic %v (data %d bytes), want %v", tc.name, r, s.Synthetic != nil, len(s.Data), tc.synthetic)
			}
			if s.Data != nil && len(s.Data) != 2*s.NumElements() {
				t.Errorf("%s rank %d: %d bytes for a bf16 shard of %d values", tc.name, r, len(s.Data), s.NumElements())
			}
		}
		checkPlacement(t, plan, w)
	}
}

// TestPlanRefusals: counts that do not split say which and why.
func TestPlanRefusals(t *testing.T) {
	llama8b := model.Config{Architecture: "LlamaForCausalLM", HiddenSize: 4096, NumHeads: 32, NumKVHeads: 8,
		HeadDim: 128, IntermediateSize: 14336, VocabSize: 128256, NumLayers: 32}
	for _, tc := range []struct {
		name string
		cfg  func(c *model.Config)
		size int
		want string
	}{
		{"heads", nil, 3, "the model's 32 attention heads do not divide evenly among 3 ranks"},
		{"kv heads", func(c *model.Config) { c.NumHeads, c.NumKVHeads = 48, 8 }, 6, "the model's 8 KV heads neither divide evenly among 6 ranks nor evenly replicate over them"},
		{"intermediate", func(c *model.Config) { c.IntermediateSize = 14335 }, 2, "intermediate_size 14335 does not divide evenly among 2 ranks"},
		{"vision", func(c *model.Config) { c.Vision = &model.VisionConfig{} }, 2, "tensor parallelism of vision towers is not planned yet"},
		{"zero", nil, 0, "at least 1 rank"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := llama8b
			if tc.cfg != nil {
				tc.cfg(&c)
			}
			_, err := parallel.NewPlan(&c, tc.size)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	// 8 KV heads over 16 ranks replicate each over two; 32 heads split.
	c := llama8b
	p, err := parallel.NewPlan(&c, 16)
	if err != nil {
		t.Fatal(err)
	}
	if rc := p.RankConfig(); rc.NumHeads != 2 || rc.NumKVHeads != 1 || rc.IntermediateSize != 896 {
		t.Fatalf("rank config heads %d, KV heads %d, intermediate %d", rc.NumHeads, rc.NumKVHeads, rc.IntermediateSize)
	}
}

// TestShardViews: a contiguous shard of a memory-mapped checkpoint is a
// view of the mapping at the rank's offset (nothing copied or read); a
// row-parallel shard copies the rank's columns only.
func TestShardViews(t *testing.T) {
	ck, err := model.Open(shared.Path(t, "models/reference-tiny/llama_gqa"))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	plan, err := parallel.NewPlan(&ck.Config, 2)
	if err != nil {
		t.Fatal(err)
	}
	src := &parallel.Source{WS: ck.Weights, Plan: plan, Rank: 1}
	q, _ := ck.Weights.Tensor("model.layers.0.self_attn.q_proj.weight") // [64, 64] f32
	s, err := src.Tensor(q.Name)
	if err != nil {
		t.Fatal(err)
	}
	if unsafe.SliceData(s.Data) != &q.Data[32*64*4] || len(s.Data) != 32*64*4 {
		t.Errorf("rank 1's q rows are not a view of the mapping at row 32")
	}
	o, _ := ck.Weights.Tensor("model.layers.0.self_attn.o_proj.weight")
	if s, err = src.Tensor(o.Name); err != nil {
		t.Fatal(err)
	}
	if len(s.Data) != len(o.Data)/2 {
		t.Errorf("rank 1's o columns take %d bytes, want %d", len(s.Data), len(o.Data)/2)
	}
}
