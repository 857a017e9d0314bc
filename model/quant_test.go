package model

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/model/random"
	"github.com/gosling-ai/gosling/model/safetensors"
	"github.com/gosling-ai/gosling/tensor"
)

func f32s(w tensor.Weight) []float32 {
	out := make([]float32, len(w.Data)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(w.Data[4*i:]))
	}
	return out
}

// TestFP8Checkpoint: an fp8 checkpoint (per-tensor scales, and block
// scales whose tiles do not divide the weights) loads with every projection
// widened to float32 within e4m3's rounding of the original: half a step of
// the 3-bit mantissa (1/16 relative) or of the subnormals (2^-10 of the
// tile's scale). A scale read for the wrong tile breaks the bound.
func TestFP8Checkpoint(t *testing.T) {
	src := shared.Path(t, "models/reference-tiny/llama_gqa")
	orig, err := Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	for _, block := range [][]int{nil, {16, 24}} {
		dst := t.TempDir()
		names, err := random.WriteFP8(src, dst, block)
		if err != nil {
			t.Fatal(err)
		}
		if len(names) == 0 {
			t.Fatal("no weight was quantized")
		}
		ckpt, err := Open(dst)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := safetensors.Open(filepath.Join(dst, "model.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			got, err := ckpt.Weights.Tensor(name)
			if err != nil {
				t.Fatal(err)
			}
			ow, _ := orig.Weights.Tensor(name)
			if got.DType != tensor.F32 || len(got.Shape) != 2 || got.Shape[0] != ow.Shape[0] || got.Shape[1] != ow.Shape[1] {
				t.Fatalf("%s: %v %v, want F32 %v", name, got.DType, got.Shape, ow.Shape)
			}
			scaleName := name + "_scale"
			if block != nil {
				scaleName = name + "_scale_inv"
			}
			sw, err := raw.Tensor(scaleName)
			if err != nil {
				t.Fatal(err)
			}
			scales, g, o := f32s(sw), f32s(got), f32s(ow)
			cols := ow.Shape[1]
			worst := 0.0
			for i := range o {
				s := scales[0]
				if block != nil {
					gc := (cols + block[1] - 1) / block[1]
					s = scales[(i/cols/block[0])*gc+(i%cols)/block[1]]
				}
				d := math.Abs(float64(g[i] - o[i]))
				bound := max(math.Abs(float64(o[i]))/16, float64(s)/1024) * 1.0001
				worst = max(worst, d/bound)
				if d > bound {
					t.Fatalf("block %v, %s[%d]: %g from %g (bound %g)", block, name, i, g[i], o[i], bound)
				}
			}
			if name == names[0] {
				t.Logf("block %v, %s: worst error %.2f of the rounding bound", block, name, worst)
			}
		}
		raw.Close()
		ckpt.Close()
	}
}

// TestQuantConfigRefusals: what gosling cannot read is refused by name.
func TestQuantConfigRefusals(t *testing.T) {
	for _, tc := range []struct{ config, want string }{
		{`{"quantization_config": {"quant_method": "awq", "bits": 4}}`, `quantization_config (awq) has no group_size`},
		{`{"quantization_config": {"quant_method": "awq", "group_size": 128}}`, `quantization_config (awq) has no bits`},
		{`{"quantization_config": {"quant_method": "awq", "w_bit": 3, "q_group_size": 128}}`, `quantization_config.bits 3 is not supported`},
		{`{"quantization_config": {"quant_method": "fp8", "fmt": "e5m2"}}`, `fmt "e5m2" is not supported`},
		{`{"quantization_config": {"quant_method": "fp8", "weight_block_size": [128]}}`, `weight_block_size [128]`},
		{`{"quantization_config": {"bits": 4}}`, `no quant_method`},
		{`{"quantization_config": "fp8"}`, `quantization_config: json: cannot unmarshal string`},
		{`{"quantization_config": {"quant_method": "fp8", "weight_block_size": "128"}}`, `quantization_config: json: cannot unmarshal string into Go struct field quantConfig.quantization_config.weight_block_size`},
		{`{"quantization_config": {"quant_method": "fp8", "weight_block_size": [0, 128]}}`, `weight_block_size [0 128]: want [rows, cols], both positive`},
		{`{"quantization_config": {"quant_method": "fp8", "activation_scheme": "per_group"}}`, `activation_scheme "per_group" is not supported`},
		{`{"quantization_config": {"quant_method": "bitsandbytes", "bits": 4}}`, `quant_method "bitsandbytes" is not supported`},
		{`{"quantization_config": {"quant_method": "gptq", "bits": 4}}`, `quantization_config (gptq) has no group_size`},
		{`{"quantization_config": {"quant_method": "gptq", "group_size": 128}}`, `quantization_config (gptq) has no bits`},
		{`{"quantization_config": {"quant_method": "gptq", "bits": 8, "group_size": 128}}`, `quantization_config.bits 8 is not supported (GPTQ 4-bit only)`},
		{`{"quantization_config": {"quant_method": "gptq", "bits": 3, "group_size": 128}}`, `quantization_config.bits 3 is not supported (GPTQ 4-bit only)`},
		{`{"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 256}}`, `quantization_config.group_size 256 is not supported (GPTQ groups of 32, 64, 128 or -1)`},
		{`{"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 0}}`, `quantization_config.group_size 0 is not supported`},
		{`{"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": true}}`, `quantization_config.desc_act true is not supported`},
		{`{"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 128, "checkpoint_format": "marlin"}}`, `quantization_config.checkpoint_format "marlin" is not supported`},
	} {
		if _, err := parseQuantConfig([]byte(tc.config)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.config, err, tc.want)
		}
	}
	// An fp8 weight in a checkpoint that declares no quantization, and one
	// whose scale is missing.
	src := shared.Path(t, "models/reference-tiny/llama_gqa")
	dst := t.TempDir()
	names, err := random.WriteFP8(src, dst, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dst, "config.json")
	data, _ := os.ReadFile(cfgPath)
	plain := strings.Replace(string(data), `"quantization_config"`, `"not_quantization_config"`, 1)
	if err := os.WriteFile(cfgPath, []byte(plain), 0o644); err != nil {
		t.Fatal(err)
	}
	ckpt, err := Open(dst)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ckpt.Weights.Tensor(names[0]); err == nil || !strings.Contains(err.Error(), "no quantization_config") {
		t.Errorf("fp8 weight without quantization_config: err = %v", err)
	}
	ckpt.Close()
	if err := os.WriteFile(cfgPath, data, 0o644); err != nil {
		t.Fatal(err)
	}
	// Drop the first weight's scale.
	stPath := filepath.Join(dst, "model.safetensors")
	raw, err := safetensors.Open(stPath)
	if err != nil {
		t.Fatal(err)
	}
	var keep []safetensors.Tensor
	dtypeName := map[tensor.DType]string{tensor.F32: "F32", tensor.FP8E4M3: "F8_E4M3"}
	for _, n := range raw.Names() {
		if n == names[0]+"_scale" {
			continue
		}
		w, _ := raw.Tensor(n)
		keep = append(keep, safetensors.Tensor{Name: n, DType: dtypeName[w.DType], Shape: w.Shape, Data: append([]byte(nil), w.Data...)})
	}
	raw.Close()
	if err := safetensors.Write(stPath, keep); err != nil {
		t.Fatal(err)
	}
	if ckpt, err = Open(dst); err != nil {
		t.Fatal(err)
	}
	defer ckpt.Close()
	if _, err := ckpt.Weights.Tensor(names[0]); err == nil || !strings.Contains(err.Error(), "has no "+names[0]+"_scale_inv or "+names[0]+"_scale") {
		t.Errorf("fp8 weight without its scale: err = %v", err)
	}
}
