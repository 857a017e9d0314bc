package registry

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/device/cpu"
	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/model/internal/modeltest"
	"github.com/gosling-ai/gosling/model/safetensors"
	"github.com/gosling-ai/gosling/sample"
	"github.com/gosling-ai/gosling/tensor"
)

// quantizeMXFP4 quantizes one row (a multiple of 32 values) as the OCP MX
// format does: each group's scale is 2^(floor(log2(amax)) - 2), which
// puts its largest value in E2M1's top binade (4..6), and each value is
// the nearest code.
func quantizeMXFP4(row []float32) (blocks, scales []byte) {
	for g := 0; g < len(row); g += 32 {
		amax := 0.0
		for _, v := range row[g : g+32] {
			amax = max(amax, math.Abs(float64(v)))
		}
		e := 0
		if amax > 0 {
			e = int(math.Floor(math.Log2(amax))) - 2
		}
		e = min(max(e, -127), 127)
		scales = append(scales, byte(e+127))
		codes := make([]byte, 32)
		for i, v := range row[g : g+32] {
			x, best := float64(v)/math.Ldexp(1, e), math.Inf(1)
			for c, q := range model.FP4Values {
				if d := math.Abs(x - float64(q)); d < best {
					best, codes[i] = d, byte(c)
				}
			}
		}
		for j := range 16 {
			blocks = append(blocks, codes[2*j]|codes[2*j+1]<<4)
		}
	}
	return blocks, scales
}

func f32Bytes(v []float32) []byte {
	out := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(x))
	}
	return out
}

func bf16Bytes(v []float32) []byte {
	out := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(out[2*i:], tensor.F32ToBF16(x))
	}
	return out
}

// writeMXFP4 copies the gpt_oss reference twice: once with its experts
// stored as MXFP4 blocks and scales (as published GPT-OSS checkpoints
// are), once with the same dequantized values in the unquantized x·W
// layout (bfloat16, which holds them exactly).
func writeMXFP4(t *testing.T, dir string) (quantized, dequantized string) {
	t.Helper()
	ck, err := model.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	var cfg map[string]any
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err == nil {
		err = json.Unmarshal(data, &cfg)
	}
	if err != nil {
		t.Fatal(err)
	}
	quantized, dequantized = t.TempDir(), t.TempDir()
	var qts, dts []safetensors.Tensor
	for _, name := range ck.Weights.Names() {
		w, err := ck.Weights.Tensor(name)
		if err != nil {
			t.Fatal(err)
		}
		v := w.Float32()
		if !strings.HasSuffix(name, "experts.gate_up_proj") && !strings.HasSuffix(name, "experts.down_proj") {
			st := safetensors.Tensor{Name: name, DType: "F32", Shape: w.Shape, Data: f32Bytes(v)}
			qts, dts = append(qts, st), append(dts, st)
			continue
		}
		// x·W [experts, in, out]: MXFP4 stores each output's row of inputs.
		experts, in, out := w.Shape[0], w.Shape[1], w.Shape[2]
		var blocks, scales []byte
		deq := make([]float32, len(v))
		row, back := make([]float32, in), make([]float32, in)
		for e := range experts {
			for o := range out {
				for i := range in {
					row[i] = v[(e*in+i)*out+o]
				}
				b, s := quantizeMXFP4(row)
				model.DecodeMXFP4(b, s, back)
				for i := range in {
					deq[(e*in+i)*out+o] = back[i]
				}
				blocks, scales = append(blocks, b...), append(scales, s...)
			}
		}
		qts = append(qts,
			safetensors.Tensor{Name: name + "_blocks", DType: "U8", Shape: []int{experts, out, in / 32, 16}, Data: blocks},
			safetensors.Tensor{Name: name + "_scales", DType: "U8", Shape: []int{experts, out, in / 32}, Data: scales})
		dts = append(dts, safetensors.Tensor{Name: name, DType: "BF16", Shape: w.Shape, Data: bf16Bytes(deq)})
	}
	for path, ts := range map[string][]safetensors.Tensor{quantized: qts, dequantized: dts} {
		if err := safetensors.Write(filepath.Join(path, "model.safetensors"), ts); err != nil {
			t.Fatal(err)
		}
		c := cfg
		if path == quantized {
			c["quantization_config"] = map[string]any{"quant_method": "mxfp4",
				"modules_to_not_convert": []string{"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"}}
		}
		data, _ := json.Marshal(c)
		if err := os.WriteFile(filepath.Join(path, "config.json"), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return quantized, dequantized
}

// TestMXFP4Experts: GPT-OSS with MXFP4 experts (blocks and scales, as
// published) loads dequantized: its logits equal, bit for bit, those of
// the same model with the dequantized values stored plainly, and its
// prompt log-probabilities stay near transformers' on the unquantized
// weights, within what 4-bit weights cost.
func TestMXFP4Experts(t *testing.T) {
	dir := shared.Path(t, "models/reference-tiny/gpt_oss")
	ref := modeltest.LoadReference(t, dir)
	quantized, dequantized := writeMXFP4(t, dir)
	ck, got := promptLogits(t, quantized, ref.InputIDs)
	if ck.Weights.Has("model.layers.0.mlp.experts.gate_up_proj_blocks") || !ck.Weights.Has("model.layers.0.mlp.experts.7.up_proj.bias") {
		t.Error("the MXFP4 stacks must be presented as per-expert tensors")
	}
	_, want := promptLogits(t, dequantized, ref.InputIDs)
	if d := maxDiff(want, got); d != 0 {
		t.Errorf("MXFP4 load vs dequantized checkpoint: max |Δ logit| = %.3g, want 0", d)
	}
	// Dequantized on demand (as the engine has it on the CPU), the same.
	lazy, err := model.Open(quantized)
	if err != nil {
		t.Fatal(err)
	}
	defer lazy.Close()
	if !model.DequantizeLazily(lazy.Weights) {
		t.Fatal("an MXFP4 checkpoint's weights do not dequantize lazily")
	}
	m, err := Build(lazy, cpu.NewOps(nil))
	if err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(want, modeltest.PromptLogits(t, m, ref.InputIDs)); d != 0 {
		t.Errorf("MXFP4 dequantized lazily vs dequantized checkpoint: max |Δ logit| = %.3g, want 0", d)
	}
	_, full := promptLogits(t, dir, ref.InputIDs)
	lp, worst, sum := make([]float32, len(got[0])), 0.0, 0.0
	for i, want := range ref.PromptLogprobs {
		sample.LogSoftmax(got[i], lp)
		d := math.Abs(float64(lp[ref.InputIDs[i+1]]) - want)
		worst, sum = max(worst, d), sum+d
	}
	t.Logf("MXFP4 vs transformers float32: prompt logprobs max |Δ| %.3g, mean %.3g; logits max |Δ| %.3g", worst, sum/float64(len(ref.PromptLogprobs)), maxDiff(full, got))
}
