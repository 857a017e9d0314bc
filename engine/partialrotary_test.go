package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/model/safetensors"
)

// No transformers reference rotates part of each head, so the partial
// rotary tests (Phi-4-mini's partial_rotary_factor) run reference-tiny's
// phi3 weights under a changed factor against phi3Float64, a float64
// forward written here from transformers' Phi-3 definition. That forward
// is first held to reference.json at factor 1, where transformers made the
// numbers.

// partialRotaryFactors are the factors tried on phi3's 16-value heads:
// 8 and 12 rotated values.
var partialRotaryFactors = []float64{0.5, 0.75}

// TestPartialRotary: with a partial_rotary_factor, every CPU backend,
// page sizes 1 and 16, with and without chunked prefill, gives prompt
// log-probabilities within 2e-4 of the float64 forward.
func TestPartialRotary(t *testing.T) {
	dir := shared.Path(t, "models/reference-tiny/phi3")
	var ref reference
	readJSON(t, filepath.Join(dir, "reference.json"), &ref)
	full := phi3Float64(t, dir, 1, ref.InputIDs)
	if d := maxAbsDiff(full, ref.PromptLogprobs); d > 2e-4 {
		t.Fatalf("the float64 forward is %.3g from transformers at partial_rotary_factor 1", d)
	} else {
		t.Logf("float64 forward against transformers at factor 1: max |Δ| %.2e", d)
	}
	for _, factor := range partialRotaryFactors {
		want := phi3Float64(t, dir, factor, ref.InputIDs)
		// The factor must matter, or the comparison below proves nothing.
		if d := maxAbsDiff(want, full); d < 1e-2 {
			t.Fatalf("factor %v moves the float64 logprobs by only %.3g", factor, d)
		}
		partial := partialRotaryModel(t, dir, factor)
		for _, choice := range attentionChoices() {
			for _, pageSize := range []int{1, 16} {
				t.Run(fmt.Sprintf("factor%v/%s/page%d", factor, choiceName(choice), pageSize), func(t *testing.T) {
					cfg := choice
					cfg.ModelPath, cfg.PageSize = partial, pageSize
					checkLogprobs(t, newEngine(t, cfg), ref.InputIDs, want, 2e-4)
				})
			}
		}
	}
}

// TestGPUPartialRotary is TestPartialRotary on the GPU in float32 (weights
// and KV cache), every CUDA backend, page sizes 1 and 16.
func TestGPUPartialRotary(t *testing.T) {
	needGPU(t)
	dir := shared.Path(t, "models/reference-tiny/phi3")
	var ref reference
	readJSON(t, filepath.Join(dir, "reference.json"), &ref)
	for _, factor := range partialRotaryFactors {
		want := phi3Float64(t, dir, factor, ref.InputIDs)
		partial := partialRotaryModel(t, dir, factor)
		for _, e := range gpuBackends() {
			for _, pageSize := range []int{1, 16} {
				t.Run(fmt.Sprintf("factor%v/%s/page%d", factor, e.Name, pageSize), func(t *testing.T) {
					eng := newEngine(t, engine.Config{ModelPath: partial, Device: "cuda", DType: "float32", KVCacheDType: "float32",
						AttentionBackend: e.Name, PageSize: pageSize, MaxRunningRequests: 4, ContextLength: 256})
					checkLogprobs(t, eng, ref.InputIDs, want, 2e-4)
				})
			}
		}
	}
}

// checkLogprobs runs ids' prompt log-probabilities through e and holds
// each to want within tol.
func checkLogprobs(t *testing.T, e *engine.Engine, ids []int, want []float64, tol float64) {
	t.Helper()
	res, err := e.Generate(context.Background(), engine.Request{InputIDs: ids, Sampling: greedy(0), PromptLogprobs: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.PromptLogprobs) != len(ids) {
		t.Fatalf("%d prompt logprobs for %d tokens", len(res.PromptLogprobs), len(ids))
	}
	got := make([]float64, len(want))
	for i := range want {
		got[i] = float64(*res.PromptLogprobs[i+1])
	}
	d := maxAbsDiff(got, want)
	t.Logf("max |Δ prompt logprob| = %.2e", d)
	if d > tol {
		t.Fatalf("max |Δ prompt logprob| %.3g, bound %.3g", d, tol)
	}
}

func maxAbsDiff(a, b []float64) float64 {
	worst := 0.0
	for i := range a {
		worst = max(worst, math.Abs(a[i]-b[i]))
	}
	return worst
}

// partialRotaryModel is dir with its config's partial_rotary_factor set
// to factor (the weights are dir's).
func partialRotaryModel(t *testing.T, dir string, factor float64) string {
	t.Helper()
	var cfg map[string]any
	readJSON(t, filepath.Join(dir, "config.json"), &cfg)
	rp, ok := cfg["rope_parameters"].(map[string]any)
	if !ok {
		t.Fatalf("%s/config.json has no rope_parameters object", dir)
	}
	rp["partial_rotary_factor"] = factor
	out := t.TempDir()
	data, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "config.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	weights, err := filepath.Abs(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(weights, filepath.Join(out, "model.safetensors")); err != nil {
		t.Fatal(err)
	}
	return out
}

// phi3Float64 is transformers' Phi3ForCausalLM in float64 over ids: the
// prompt log-probabilities of ids[1:]. Per layer: RMSNorm, the fused
// qkv_proj, RoPE (rotate-half) over the first int(head_dim·factor) values
// of each q and k head with inv_freq θ^(-2i/rot), causal GQA attention
// scaled by head_dim^-0.5, o_proj; RMSNorm, the fused gate_up_proj,
// silu(gate)·up, down_proj; each added to the residual. Then the final
// norm and lm_head.
func phi3Float64(t *testing.T, dir string, factor float64, ids []int) []float64 {
	t.Helper()
	var c struct {
		Hidden  int     `json:"hidden_size"`
		Inter   int     `json:"intermediate_size"`
		Layers  int     `json:"num_hidden_layers"`
		Heads   int     `json:"num_attention_heads"`
		KVHeads int     `json:"num_key_value_heads"`
		Vocab   int     `json:"vocab_size"`
		Eps     float64 `json:"rms_norm_eps"`
		Rope    struct {
			Theta float64 `json:"rope_theta"`
		} `json:"rope_parameters"`
		Tie bool `json:"tie_word_embeddings"`
	}
	readJSON(t, filepath.Join(dir, "config.json"), &c)
	if c.Tie {
		t.Fatal("phi3Float64 reads an untied lm_head")
	}
	f, err := safetensors.Open(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := func(name string, shape ...int) [][]float64 {
		tw, err := f.Tensor(name)
		if err != nil {
			t.Fatal(err)
		}
		vals := tw.Float32()
		rows, cols := 1, shape[len(shape)-1]
		if len(shape) == 2 {
			rows = shape[0]
		}
		if len(vals) != rows*cols {
			t.Fatalf("%s has %d values, want %v", name, len(vals), shape)
		}
		out := make([][]float64, rows)
		for r := range out {
			out[r] = make([]float64, cols)
			for j := range cols {
				out[r][j] = float64(vals[r*cols+j])
			}
		}
		return out
	}
	h, hd := c.Hidden, c.Hidden/c.Heads
	qd, kvd := c.Heads*hd, c.KVHeads*hd
	rot := int(float64(hd) * factor)
	n := len(ids)
	norm := func(x []float64, g []float64) []float64 {
		ss := 0.0
		for _, v := range x {
			ss += v * v
		}
		inv := 1 / math.Sqrt(ss/float64(len(x))+c.Eps)
		out := make([]float64, len(x))
		for i, v := range x {
			out[i] = v * inv * g[i]
		}
		return out
	}
	matvec := func(m [][]float64, x []float64) []float64 {
		out := make([]float64, len(m))
		for r, row := range m {
			s := 0.0
			for j, v := range row {
				s += v * x[j]
			}
			out[r] = s
		}
		return out
	}
	rope := func(head []float64, pos int) {
		half := rot / 2
		for i := range half {
			ang := float64(pos) * math.Pow(c.Rope.Theta, -float64(2*i)/float64(rot))
			cs, sn := math.Cos(ang), math.Sin(ang)
			a, b := head[i], head[i+half]
			head[i], head[i+half] = a*cs-b*sn, a*sn+b*cs
		}
	}
	embed := w("model.embed_tokens.weight", c.Vocab, h)
	x := make([][]float64, n)
	for i, id := range ids {
		x[i] = append([]float64(nil), embed[id]...)
	}
	for l := range c.Layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		qkvW := w(p+"self_attn.qkv_proj.weight", qd+2*kvd, h)
		oW := w(p+"self_attn.o_proj.weight", h, qd)
		guW := w(p+"mlp.gate_up_proj.weight", 2*c.Inter, h)
		downW := w(p+"mlp.down_proj.weight", h, c.Inter)
		inNorm := w(p+"input_layernorm.weight", h)[0]
		postNorm := w(p+"post_attention_layernorm.weight", h)[0]
		q, k, v := make([][]float64, n), make([][]float64, n), make([][]float64, n)
		for i := range n {
			qkv := matvec(qkvW, norm(x[i], inNorm))
			q[i], k[i], v[i] = qkv[:qd], qkv[qd:qd+kvd], qkv[qd+kvd:]
			for hh := range c.Heads {
				rope(q[i][hh*hd:(hh+1)*hd], i)
			}
			for hh := range c.KVHeads {
				rope(k[i][hh*hd:(hh+1)*hd], i)
			}
		}
		for i := range n {
			attn := make([]float64, qd)
			for hh := range c.Heads {
				kh := hh / (c.Heads / c.KVHeads)
				qh := q[i][hh*hd : (hh+1)*hd]
				scores := make([]float64, i+1)
				best := math.Inf(-1)
				for j := range i + 1 {
					s := 0.0
					for d := range hd {
						s += qh[d] * k[j][kh*hd+d]
					}
					scores[j] = s / math.Sqrt(float64(hd))
					best = max(best, scores[j])
				}
				sum := 0.0
				for j := range scores {
					scores[j] = math.Exp(scores[j] - best)
					sum += scores[j]
				}
				for j := range scores {
					for d := range hd {
						attn[hh*hd+d] += scores[j] / sum * v[j][kh*hd+d]
					}
				}
			}
			for r, o := range matvec(oW, attn) {
				x[i][r] += o
			}
			gu := matvec(guW, norm(x[i], postNorm))
			act := make([]float64, c.Inter)
			for j := range act {
				g := gu[j]
				act[j] = g / (1 + math.Exp(-g)) * gu[c.Inter+j]
			}
			for r, o := range matvec(downW, act) {
				x[i][r] += o
			}
		}
	}
	final := w("model.norm.weight", h)[0]
	head := w("lm_head.weight", c.Vocab, h)
	lp := make([]float64, n-1)
	for i := range n - 1 {
		logits := matvec(head, norm(x[i], final))
		best := math.Inf(-1)
		for _, v := range logits {
			best = max(best, v)
		}
		sum := 0.0
		for _, v := range logits {
			sum += math.Exp(v - best)
		}
		lp[i] = logits[ids[i+1]] - best - math.Log(sum)
	}
	return lp
}
