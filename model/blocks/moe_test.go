package blocks

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/device/cpu"
	"github.com/gosling-ai/gosling/tensor"
)

// expertCase is a layer's expert weights: gate and up in one dtype, down
// in another (a GGUF Q4_K_M layer keeps its down in Q6_K).
type expertCase struct {
	gateUp, down  tensor.DType
	hidden, inter int
}

// groupedCases are the weights the CPU groups: every kind of packed
// panel (float, Q8_0, the QK formats of both super-block sizes, I4 of
// AWQ and GPTQ, MXFP4 served as BF16). The float ones have partial
// panels (80 and 72 are not multiples of 32); the block formats need
// widths of whole super-blocks.
var groupedCases = []expertCase{
	{tensor.F32, tensor.F32, 72, 80},
	{tensor.BF16, tensor.BF16, 72, 80},
	{tensor.F16, tensor.F16, 72, 80},
	{tensor.Q8_0, tensor.Q8_0, 96, 64},
	{tensor.Q4_0, tensor.Q4_0, 96, 64},
	{tensor.Q4_K, tensor.Q6_K, 256, 256},
	{tensor.IQ4_XS, tensor.Q5_K, 256, 256},
	{tensor.MXFP4, tensor.MXFP4, 64, 96},
	{tensor.AWQ4_G32, tensor.AWQ4_G128, 128, 256},
}

// randMatrix is an [out, in] matrix of dtype d on ops, of values about
// scale, and a bias when bias is set.
func randMatrix(t *testing.T, ops *cpu.Ops, rng *rand.Rand, d tensor.DType, name string, out, in int, scale float64, bias bool) device.Matrix {
	t.Helper()
	w, err := tensor.Convert(tensor.FromFloat32(name, randValues(rng, out*in, scale), out, in), d)
	if err != nil {
		t.Fatal(err)
	}
	var b []float32
	if bias {
		b = randValues(rng, out, 0.1)
	}
	m, err := ops.Matrix(w, b)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// randMoE is a mixture of n experts of c's shapes choosing k per token,
// with biases and the clamped SwiGLU when clamped (GPT-OSS), silu·up
// otherwise.
func randMoE(t *testing.T, ops *cpu.Ops, rng *rand.Rand, c expertCase, n, k int, clamped bool) *MoE {
	t.Helper()
	m := &MoE{Router: device.Router{TopK: k, Softmax: true, NormTopK: !clamped, Scale: 1}}
	m.Gate = randMatrix(t, ops, rng, tensor.F32, "router", n, c.hidden, 1, clamped)
	for e := range n {
		p := fmt.Sprintf("experts.%d.", e)
		mlp := &MLP{
			Gate: randMatrix(t, ops, rng, c.gateUp, p+"gate_proj", c.inter, c.hidden, 0.3, clamped),
			Up:   randMatrix(t, ops, rng, c.gateUp, p+"up_proj", c.inter, c.hidden, 0.3, clamped),
			Down: randMatrix(t, ops, rng, c.down, p+"down_proj", c.hidden, c.inter, 0.3, clamped),
		}
		if clamped {
			mlp.Act = func(ops device.Ops, gate, up tensor.T) {
				ops.(device.ClampedSwiGLUOps).ClampedSwiGLU(gate, up, gptOSSTestAlpha, gptOSSTestLimit)
			}
		}
		m.Experts = append(m.Experts, mlp)
	}
	return m
}

// GPT-OSS's activation constants (its config's swiglu_limit and the
// model's alpha); the limit clamps values of this test's size.
const gptOSSTestAlpha, gptOSSTestLimit = 1.702, 7.0

// randValues is n normal values times scale.
func randValues(rng *rand.Rand, n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64() * scale)
	}
	return v
}

func randRows(rng *rand.Rand, rows, cols int) tensor.T {
	return tensor.From(randValues(rng, rows*cols, 1), rows, cols)
}

// TestGroupedExpertsCPU: the CPU's grouped experts (cpu.Ops'
// device.ExpertOps: one sort by expert, one parallel pass of gate, up
// and the activation, one of down and the weighted combine) add to the
// residual what running the experts one by one (GatherRows, the MLP's
// products, ScatterAddRows per expert) adds, for every kind of weight
// the CPU groups, 1 to 513 tokens, top-1 to top-8, silu·up and GPT-OSS's
// clamped SwiGLU with biases, on one worker and two.
//
// Bound: both paths multiply the same packed weights by the same packed
// (for Q8_0 and the QK formats, the same quantised) activations with the
// same micro-kernels, and add each token's experts in the same order
// (ascending expert). What differs is float32 summation order alone:
// where a dot product over the inputs is cut into k-blocks depends on
// how many tiles a task holds, and element-wise loops split into vector
// and scalar parts at other indices. Each is a float32 rounding of the
// same sum, so a value may move by a few units in the last place of the
// largest partial sums it adds: |grouped − one by one| ≤ 2⁻¹⁶·(1 +
// max|one-by-one output|) per token allows 2⁸ such units, far below any
// real defect (a row added to the wrong token, a missed bias, a wrong
// activation or weight), each of which moves values by their own size.
func TestGroupedExpertsCPU(t *testing.T) {
	const nExperts = 16
	for _, workers := range []int{1, 2} {
		pool := cpu.NewWorkers(workers)
		defer pool.Close()
		ops := cpu.NewOps(pool)
		for _, c := range groupedCases {
			for _, clamped := range []bool{false, true} {
				rng := rand.New(rand.NewPCG(uint64(c.hidden), uint64(c.inter)))
				for _, k := range []int{1, 2, 8} {
					one := randMoE(t, ops, rng, c, nExperts, k, clamped)
					grouped := *one
					act := device.ExpertActivation{}
					if clamped {
						act = device.ExpertActivation{Clamped: true, Alpha: gptOSSTestAlpha, Limit: gptOSSTestLimit}
					}
					if err := grouped.Group(ops, act); err != nil {
						t.Fatal(err)
					}
					if grouped.group == nil {
						t.Fatalf("%v/%v experts were not grouped", c.gateUp, c.down)
					}
					for _, tokens := range []int{1, 7, 64, 513} {
						name := fmt.Sprintf("workers%d/%v,%v/clamped=%v/top%d/tokens%d", workers, c.gateUp, c.down, clamped, k, tokens)
						x := randRows(rng, tokens, c.hidden)
						want, got := randRows(rng, tokens, c.hidden), tensor.New(tokens, c.hidden)
						copy(got.HostData(), want.HostData())
						before := append([]float32(nil), want.HostData()...)
						one.AddTo(ops, want, x)
						grouped.AddTo(ops, got, x)
						checkGrouped(t, name, got, want, before)
					}
				}
			}
		}
	}
}

// checkGrouped compares the grouped residual with the one-by-one one
// (TestGroupedExpertsCPU's bound), and checks that the experts added
// something (a grouped path that did nothing would otherwise pass
// against a one-by-one that did nothing).
func checkGrouped(t *testing.T, name string, got, want tensor.T, before []float32) {
	t.Helper()
	worst, moved := 0.0, 0.0
	for r := range want.Rows() {
		g, w := got.Row(r), want.Row(r)
		scale := 0.0
		for i := range w {
			scale = max(scale, math.Abs(float64(w[i])))
			moved = max(moved, math.Abs(float64(w[i]-before[r*len(w)+i])))
		}
		bound := math.Ldexp(1+scale, -16)
		for i := range w {
			d := math.Abs(float64(g[i]) - float64(w[i]))
			worst = max(worst, d/bound)
			if d > bound || math.IsNaN(float64(g[i])) {
				t.Fatalf("%s: token %d value %d: grouped %g, one by one %g (bound %.2g)", name, r, i, g[i], w[i], bound)
			}
		}
	}
	if moved < 1e-3 {
		t.Fatalf("%s: the experts changed the residual by at most %g", name, moved)
	}
	if testing.Verbose() {
		t.Logf("%s: worst |Δ| = %.3f of the bound", name, worst)
	}
}

// TestGroupedExpertsDecline: the CPU leaves to one-by-one what it does
// not group (an expert whose gate and up differ in dtype, and every
// group under GOSLING_MOE_UNGROUPED=1), and refuses matrices of
// mismatched shapes, naming the tensor.
func TestGroupedExpertsDecline(t *testing.T) {
	pool := cpu.NewWorkers(2)
	defer pool.Close()
	ops := cpu.NewOps(pool)
	rng := rand.New(rand.NewPCG(5, 6))
	c := expertCase{tensor.BF16, tensor.BF16, 64, 32}
	m := randMoE(t, ops, rng, c, 4, 2, false)
	m.Experts[2].Up = randMatrix(t, ops, rng, tensor.F32, "experts.2.up_proj", c.inter, c.hidden, 0.3, false)
	if err := m.Group(ops, device.ExpertActivation{}); err != nil || m.group != nil {
		t.Errorf("gate BF16, up F32: group %v, error %v; want one by one", m.group, err)
	}

	m = randMoE(t, ops, rng, c, 4, 2, false)
	t.Setenv("GOSLING_MOE_UNGROUPED", "1")
	if err := m.Group(ops, device.ExpertActivation{}); err != nil || m.group != nil {
		t.Errorf("GOSLING_MOE_UNGROUPED=1: group %v, error %v; want one by one", m.group, err)
	}
	t.Setenv("GOSLING_MOE_UNGROUPED", "")

	m.Experts[3].Down = randMatrix(t, ops, rng, tensor.BF16, "experts.3.down_proj", c.hidden, c.inter+32, 0.3, false)
	err := m.Group(ops, device.ExpertActivation{})
	if err == nil || !containsAll(err.Error(), "experts.3.down_proj", "[64, 64]", "[64, 32]") {
		t.Errorf("a down of the wrong shape: %v", err)
	}
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
