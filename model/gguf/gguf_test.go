package gguf

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/tensor"
)

// The tests write their own GGUF files with the encoder below, so that
// every value type, tensor type and corruption is covered without fixtures.

type kv struct {
	key   string
	value any // Go type selects the GGUF type; arrays are array{}
}

type array struct {
	elem  ValueType
	items []any
}

type testTensor struct {
	name string
	dims []uint64 // GGUF order, innermost first
	typ  GGMLType
	data []byte
}

type encoder struct{ buf []byte }

func (e *encoder) u32(v uint32) { e.buf = binary.LittleEndian.AppendUint32(e.buf, v) }
func (e *encoder) u64(v uint64) { e.buf = binary.LittleEndian.AppendUint64(e.buf, v) }
func (e *encoder) str(s string) { e.u64(uint64(len(s))); e.buf = append(e.buf, s...) }

func typeOf(v any) ValueType {
	switch v.(type) {
	case uint8:
		return TypeUint8
	case int8:
		return TypeInt8
	case uint16:
		return TypeUint16
	case int16:
		return TypeInt16
	case uint32:
		return TypeUint32
	case int32:
		return TypeInt32
	case float32:
		return TypeFloat32
	case bool:
		return TypeBool
	case string:
		return TypeString
	case array:
		return TypeArray
	case uint64:
		return TypeUint64
	case int64:
		return TypeInt64
	case float64:
		return TypeFloat64
	}
	panic("test encoder: unsupported value type")
}

func (e *encoder) value(v any) {
	switch x := v.(type) {
	case uint8:
		e.buf = append(e.buf, x)
	case int8:
		e.buf = append(e.buf, byte(x))
	case uint16:
		e.buf = binary.LittleEndian.AppendUint16(e.buf, x)
	case int16:
		e.buf = binary.LittleEndian.AppendUint16(e.buf, uint16(x))
	case uint32:
		e.u32(x)
	case int32:
		e.u32(uint32(x))
	case float32:
		e.u32(math.Float32bits(x))
	case bool:
		b := byte(0)
		if x {
			b = 1
		}
		e.buf = append(e.buf, b)
	case string:
		e.str(x)
	case array:
		e.u32(uint32(x.elem))
		e.u64(uint64(len(x.items)))
		for _, item := range x.items {
			e.value(item)
		}
	case uint64:
		e.u64(x)
	case int64:
		e.u64(uint64(x))
	case float64:
		e.u64(math.Float64bits(x))
	}
}

// encodeGGUF lays out a file the way llama.cpp does: tensors in order,
// each at an offset aligned to alignment.
func encodeGGUF(version uint32, kvs []kv, tensors []testTensor, alignment int) []byte {
	e := &encoder{}
	e.buf = append(e.buf, "GGUF"...)
	e.u32(version)
	e.u64(uint64(len(tensors)))
	e.u64(uint64(len(kvs)))
	for _, p := range kvs {
		e.str(p.key)
		e.u32(uint32(typeOf(p.value)))
		e.value(p.value)
	}
	var data []byte
	for _, tt := range tensors {
		for len(data)%alignment != 0 {
			data = append(data, 0)
		}
		e.str(tt.name)
		e.u32(uint32(len(tt.dims)))
		for _, d := range tt.dims {
			e.u64(d)
		}
		e.u32(uint32(tt.typ))
		e.u64(uint64(len(data)))
		data = append(data, tt.data...)
	}
	for len(e.buf)%alignment != 0 {
		e.buf = append(e.buf, 0)
	}
	return append(e.buf, data...)
}

func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func f32Bytes(values ...float32) []byte {
	var out []byte
	for _, v := range values {
		out = binary.LittleEndian.AppendUint32(out, math.Float32bits(v))
	}
	return out
}

func u16Bytes(conv func(float32) uint16, values ...float32) []byte {
	var out []byte
	for _, v := range values {
		out = binary.LittleEndian.AppendUint16(out, conv(v))
	}
	return out
}

// q8Block encodes one Q8_0 block: an f16 scale and 32 int8 quants.
func q8Block(scale float32, quants [32]int8) []byte {
	out := binary.LittleEndian.AppendUint16(nil, tensor.F32ToF16(scale))
	for _, q := range quants {
		out = append(out, byte(q))
	}
	return out
}

func TestMetadataAllTypes(t *testing.T) {
	kvs := []kv{
		{"general.architecture", "llama"},
		{"u8", uint8(200)},
		{"i8", int8(-100)},
		{"u16", uint16(60000)},
		{"i16", int16(-30000)},
		{"u32", uint32(4000000000)},
		{"i32", int32(-2000000000)},
		{"f32", float32(1.5)},
		{"bool.true", true},
		{"bool.false", false},
		{"str", "héllo"},
		{"u64", uint64(1) << 40},
		{"i64", int64(-1) << 40},
		{"f64", 1e-300},
		{"arr.str", array{TypeString, []any{"a", "", "ccc"}}},
		{"arr.f32", array{TypeFloat32, []any{float32(0.5), float32(-1)}}},
		{"arr.i32", array{TypeInt32, []any{int32(1), int32(-2)}}},
		{"arr.nested", array{TypeArray, []any{array{TypeUint8, []any{uint8(1), uint8(2)}}, array{TypeUint8, nil}}}},
		{"arr.empty", array{TypeBool, nil}},
	}
	for _, version := range []uint32{2, 3} {
		path := writeFile(t, t.TempDir(), "m.gguf", encodeGGUF(version, kvs, nil, DefaultAlignment))
		f, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]any{
			"general.architecture": "llama",
			"u8":                   uint8(200), "i8": int8(-100), "u16": uint16(60000), "i16": int16(-30000),
			"u32": uint32(4000000000), "i32": int32(-2000000000), "f32": float32(1.5),
			"bool.true": true, "bool.false": false, "str": "héllo",
			"u64": uint64(1) << 40, "i64": int64(-1) << 40, "f64": 1e-300,
			"arr.str":    []any{"a", "", "ccc"},
			"arr.f32":    []any{float32(0.5), float32(-1)},
			"arr.i32":    []any{int32(1), int32(-2)},
			"arr.nested": []any{[]any{uint8(1), uint8(2)}, []any{}},
			"arr.empty":  []any{},
		}
		if !reflect.DeepEqual(f.Metadata, want) {
			t.Errorf("v%d metadata:\n got %#v\nwant %#v", version, f.Metadata, want)
		}
		if f.Version != version || f.Architecture() != "llama" || f.Alignment != DefaultAlignment {
			t.Errorf("version %d arch %q alignment %d", f.Version, f.Architecture(), f.Alignment)
		}
		f.Close()
	}
}

func TestMetadataHelpers(t *testing.T) {
	md := map[string]any{"u32": uint32(7), "i64": int64(-3), "f32": float32(0.25), "s": "x", "b": true, "a": []any{1}, "huge": uint64(math.MaxUint64)}
	if v, ok := Int(md, "u32"); !ok || v != 7 {
		t.Errorf("Int(u32) = %v %v", v, ok)
	}
	if v, ok := Int(md, "i64"); !ok || v != -3 {
		t.Errorf("Int(i64) = %v %v", v, ok)
	}
	if _, ok := Int(md, "huge"); ok {
		t.Error("Int(huge) converted a uint64 beyond int64")
	}
	if _, ok := Int(md, "f32"); ok {
		t.Error("Int accepted a float")
	}
	if v, ok := Float(md, "f32"); !ok || v != 0.25 {
		t.Errorf("Float(f32) = %v %v", v, ok)
	}
	if v, ok := Float(map[string]any{"eps": float32(1e-5)}, "eps"); !ok || v != 1e-5 {
		t.Errorf("Float(float32(1e-5)) = %v %v, want exactly 1e-5", v, ok)
	}
	if v, ok := Float(md, "u32"); !ok || v != 7 {
		t.Errorf("Float(u32) = %v %v", v, ok)
	}
	if v, ok := String(md, "s"); !ok || v != "x" {
		t.Errorf("String = %v %v", v, ok)
	}
	if v, ok := Bool(md, "b"); !ok || !v {
		t.Errorf("Bool = %v %v", v, ok)
	}
	if v, ok := Array(md, "a"); !ok || len(v) != 1 {
		t.Errorf("Array = %v %v", v, ok)
	}
	if _, ok := String(md, "absent"); ok {
		t.Error("String(absent) ok")
	}
}

func TestTensorTypes(t *testing.T) {
	values := []float32{1, -2, 0.5, 3.25, -0.125, 1024}
	var quants [2][32]int8
	var q8Want []float32
	var q8Data []byte
	for b, scale := range []float32{0.5, -0.25} {
		for j := range quants[b] {
			quants[b][j] = int8(j*8 - 128 + b)
			q8Want = append(q8Want, scale*float32(quants[b][j]))
		}
		q8Data = append(q8Data, q8Block(scale, quants[b])...)
	}
	tensors := []testTensor{
		{"f32", []uint64{3, 2}, GGMLF32, f32Bytes(values...)},
		{"f16", []uint64{2, 3}, GGMLF16, u16Bytes(tensor.F32ToF16, values...)},
		{"bf16", []uint64{6}, GGMLBF16, u16Bytes(tensor.F32ToBF16, values...)},
		{"q8_0", []uint64{32, 2}, GGMLQ8_0, q8Data},
		{"iq2_xxs", []uint64{256}, 16, make([]byte, 66)},
	}
	for _, alignment := range []int{32, 64} {
		kvs := []kv{{"general.architecture", "llama"}}
		if alignment != DefaultAlignment {
			kvs = append(kvs, kv{"general.alignment", uint32(alignment)})
		}
		path := writeFile(t, t.TempDir(), "m.gguf", encodeGGUF(3, kvs, tensors, alignment))
		f, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if f.Alignment != alignment || f.DataOffset%int64(alignment) != 0 {
			t.Errorf("alignment %d, data at %d; want %d", f.Alignment, f.DataOffset, alignment)
		}
		for _, tc := range []struct {
			name  string
			dtype tensor.DType
			shape []int
			want  []float32
		}{
			{"f32", tensor.F32, []int{2, 3}, values},
			{"f16", tensor.F16, []int{3, 2}, values},
			{"bf16", tensor.BF16, []int{6}, values},
			{"q8_0", tensor.Q8_0, []int{2, 32}, q8Want},
		} {
			w, err := f.Tensor(tc.name)
			if err != nil {
				t.Fatal(err)
			}
			if w.DType != tc.dtype || !slices.Equal(w.Shape, tc.shape) {
				t.Errorf("%s: %v %v, want %v %v (PyTorch order: GGUF dims reversed)", tc.name, w.DType, w.Shape, tc.dtype, tc.shape)
			}
			if err := w.Validate(); err != nil {
				t.Error(err)
			}
			if got := w.Float32(); !slices.Equal(got, tc.want) {
				t.Errorf("%s decodes to %v, want %v", tc.name, got, tc.want)
			}
		}
		if !f.Has("iq2_xxs") {
			t.Error("an unsupported tensor must still be listed")
		}
		_, err = f.Tensor("iq2_xxs")
		assertError(t, err, "tensor iq2_xxs", "ggml type IQ2_XXS", "supported: F32, F16, BF16, Q8_0, Q4_0", path)
		_, err = f.Tensor("absent")
		assertError(t, err, "tensor absent not found", path)
		if got := f.Names(); !slices.Equal(got, []string{"bf16", "f16", "f32", "iq2_xxs", "q8_0"}) {
			t.Errorf("Names() = %v", got)
		}
		f.Close()
	}
}

func TestOpenErrors(t *testing.T) {
	good := encodeGGUF(3, []kv{{"general.architecture", "llama"}}, []testTensor{{"w", []uint64{4}, GGMLF32, f32Bytes(1, 2, 3, 4)}}, 32)
	withVersion := func(v uint32) []byte {
		b := slices.Clone(good)
		binary.LittleEndian.PutUint32(b[4:], v)
		return b
	}
	cases := []struct {
		name string
		data []byte
		want []string
	}{
		{"bad magic", append([]byte("GGML"), good[4:]...), []string{`bad magic "GGML"`, "not a GGUF file"}},
		{"empty", nil, []string{"truncated"}},
		{"version 1", withVersion(1), []string{"version 1 is not supported"}},
		{"version 4", withVersion(4), []string{"unsupported GGUF version 4"}},
		{"big endian", withVersion(3 << 24), []string{"big-endian"}},
		{"data beyond file", good[:len(good)-1], []string{"tensor w", "beyond", "truncated"}},
		{"Q8_0 row not whole blocks", encodeGGUF(3, nil, []testTensor{{"q", []uint64{16}, GGMLQ8_0, make([]byte, 34)}}, 32), []string{"tensor q", "not a multiple of 32"}},
		{"too many dims", encodeGGUF(3, nil, []testTensor{{"w", []uint64{1, 1, 1, 1, 1}, GGMLF32, f32Bytes(1)}}, 32), []string{"tensor w has 5 dimensions"}},
		{"huge dims", encodeGGUF(3, nil, []testTensor{{"w", []uint64{1 << 62, 1 << 62}, GGMLF32, f32Bytes(1)}}, 32), []string{"tensor w", "too large"}},
		{"duplicate key", encodeGGUF(3, []kv{{"a", uint8(1)}, {"a", uint8(2)}}, nil, 32), []string{"metadata key a appears twice"}},
		{"bad alignment", encodeGGUF(3, []kv{{"general.alignment", uint32(24)}}, nil, 32), []string{"general.alignment 24"}},
		{"bad bool", encodeGGUF(3, []kv{{"b", uint8(7)}}, nil, 32), []string{}},
		{"huge array", encodeGGUF(3, []kv{{"a", array{TypeUint32, nil}}}, nil, 32), []string{}},
	}
	// Patch the two cases the encoder cannot express directly.
	cases[11].data[4+4+8+8+8+1] = byte(TypeBool) // "b": type u8 → bool, value 7
	cases[11].want = []string{"bool value 7"}
	binary.LittleEndian.PutUint64(cases[12].data[4+4+8+8+8+1+4+4:], 1<<60)
	cases[12].want = []string{"metadata a", "cannot fit"}

	dir := t.TempDir()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, dir, strings.ReplaceAll(tc.name, " ", "_")+".gguf", tc.data)
			f, err := Open(path)
			if err == nil {
				f.Close()
			}
			assertError(t, err, append(tc.want, path)...)
		})
	}
}

// TestTruncatedPrefixes opens every prefix of a valid file: each must fail
// cleanly (a prefix that ends exactly after the header of a file whose
// tensors all sit later would be caught by the bounds check).
func TestTruncatedPrefixes(t *testing.T) {
	good := encodeGGUF(3,
		[]kv{{"general.architecture", "llama"}, {"toks", array{TypeString, []any{"a", "bc"}}}, {"f", float32(1)}},
		[]testTensor{{"a", []uint64{2, 2}, GGMLF32, f32Bytes(1, 2, 3, 4)}, {"b", []uint64{32}, GGMLQ8_0, q8Block(1, [32]int8{})}},
		32)
	dir := t.TempDir()
	for n := 0; n < len(good); n++ {
		path := writeFile(t, dir, "prefix.gguf", good[:n])
		f, err := Open(path)
		if err == nil {
			f.Close()
			t.Fatalf("prefix of %d/%d bytes opened without error", n, len(good))
		}
		if !strings.Contains(err.Error(), path) {
			t.Fatalf("prefix of %d bytes: error %q does not name the file", n, err)
		}
	}
}

func TestHFName(t *testing.T) {
	cases := map[string]string{
		"token_embd.weight":          "model.embed_tokens.weight",
		"output_norm.weight":         "model.norm.weight",
		"output.weight":              "lm_head.weight",
		"blk.0.attn_norm.weight":     "model.layers.0.input_layernorm.weight",
		"blk.12.attn_q.weight":       "model.layers.12.self_attn.q_proj.weight",
		"blk.1.attn_q.bias":          "model.layers.1.self_attn.q_proj.bias",
		"blk.1.attn_k.weight":        "model.layers.1.self_attn.k_proj.weight",
		"blk.1.attn_k.bias":          "model.layers.1.self_attn.k_proj.bias",
		"blk.1.attn_v.weight":        "model.layers.1.self_attn.v_proj.weight",
		"blk.1.attn_v.bias":          "model.layers.1.self_attn.v_proj.bias",
		"blk.1.attn_output.weight":   "model.layers.1.self_attn.o_proj.weight",
		"blk.2.attn_q_norm.weight":   "model.layers.2.self_attn.q_norm.weight",
		"blk.2.attn_k_norm.weight":   "model.layers.2.self_attn.k_norm.weight",
		"blk.3.ffn_norm.weight":      "model.layers.3.post_attention_layernorm.weight",
		"blk.3.ffn_gate.weight":      "model.layers.3.mlp.gate_proj.weight",
		"blk.3.ffn_up.weight":        "model.layers.3.mlp.up_proj.weight",
		"blk.3.ffn_down.weight":      "model.layers.3.mlp.down_proj.weight",
		"rope_freqs.weight":          "",
		"blk.x.attn_q.weight":        "",
		"blk.01.attn_q.weight":       "",
		"blk.0.attn_q.scale":         "",
		"blk.0.ffn_gate_exps.weight": "",
	}
	for in, want := range cases {
		got, ok := HFName(in)
		if ok != (want != "") || got != want {
			t.Errorf("HFName(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}

func TestRealFile(t *testing.T) {
	path := shared.Path(t, "models/stories260K/stories260K.gguf")
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Version != 3 || len(f.Tensors) != 48 || f.Architecture() != "llama" {
		t.Errorf("version %d, %d tensors, arch %q; want 3, 48, llama", f.Version, len(f.Tensors), f.Architecture())
	}
	if toks, ok := Array(f.Metadata, "tokenizer.ggml.tokens"); !ok || len(toks) != 512 || toks[1] != "<s>" {
		t.Errorf("tokenizer.ggml.tokens: %d entries", len(toks))
	}
	view := NewHFView(f)
	w, err := view.Tensor("model.layers.4.mlp.down_proj.weight")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(w.Shape, []int{64, 172}) || w.Name != "model.layers.4.mlp.down_proj.weight" {
		t.Errorf("down_proj: %q %v, want [64 172]", w.Name, w.Shape)
	}
	if !view.Has("lm_head.weight") || view.Has("output.weight") {
		t.Error("HFView must list output.weight as lm_head.weight only")
	}
	_, err = view.Tensor("model.layers.9.mlp.up_proj.weight")
	assertError(t, err, "model.layers.9.mlp.up_proj.weight not found", path)
}

func assertError(t *testing.T, err error, wants ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one mentioning %q", wants)
	}
	for _, want := range wants {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

// FuzzParse feeds arbitrary bytes to the parser: it must return an error
// or a File, never panic, and every tensor it accepts must be readable.
func FuzzParse(f *testing.F) {
	f.Add(encodeGGUF(3,
		[]kv{{"general.architecture", "llama"}, {"toks", array{TypeString, []any{"a", "bc"}}}, {"n", array{TypeArray, []any{array{TypeInt8, []any{int8(1)}}}}}},
		[]testTensor{{"a", []uint64{2, 2}, GGMLF32, f32Bytes(1, 2, 3, 4)}, {"b", []uint64{32}, GGMLQ8_0, q8Block(1, [32]int8{})}},
		32))
	f.Add([]byte("GGUF\x02\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := parse("fuzz.gguf", data)
		if err != nil {
			return
		}
		for _, info := range file.Tensors {
			if w, err := file.span(info, data); err == nil {
				_ = (tensor.Weight{DType: tensor.F32, Shape: info.Shape(), Data: w}).NumElements()
			}
		}
	})
}

// TestArchitectureNames: the modules whose GGUF names depend on the
// architecture map both ways, as llama.cpp's converter names them.
func TestArchitectureNames(t *testing.T) {
	for _, tc := range []struct{ arch, gguf, hf string }{
		{"gemma3", "blk.1.ffn_norm.weight", "model.layers.1.pre_feedforward_layernorm.weight"},
		{"gemma3", "blk.1.post_attention_norm.weight", "model.layers.1.post_attention_layernorm.weight"},
		{"gemma3", "blk.1.post_ffw_norm.weight", "model.layers.1.post_feedforward_layernorm.weight"},
		{"gpt-oss", "blk.2.post_attention_norm.weight", "model.layers.2.post_attention_layernorm.weight"},
		{"gpt-oss", "blk.2.attn_sinks.weight", "model.layers.2.self_attn.sinks"},
		{"gpt-oss", "blk.2.ffn_gate_inp.bias", "model.layers.2.mlp.router.bias"},
		{"phi3", "blk.0.attn_qkv.weight", "model.layers.0.self_attn.qkv_proj.weight"},
		{"phi3", "blk.0.ffn_up.weight", "model.layers.0.mlp.gate_up_proj.weight"},
		{"qwen2moe", "blk.3.ffn_gate_inp_shexp.weight", "model.layers.3.mlp.shared_expert_gate.weight"},
		{"qwen2moe", "blk.3.ffn_up_shexp.weight", "model.layers.3.mlp.shared_expert.up_proj.weight"},
		{"qwen3moe", "blk.3.ffn_gate_inp.weight", "model.layers.3.mlp.gate.weight"},
		{"llama", "blk.3.ffn_gate_inp.weight", "model.layers.3.block_sparse_moe.gate.weight"},
		{"llama", "blk.3.ffn_norm.weight", "model.layers.3.post_attention_layernorm.weight"},
	} {
		if got, ok := HFNameFor(tc.arch, tc.gguf); !ok || got != tc.hf {
			t.Errorf("HFNameFor(%s, %s) = %q, %v; want %q", tc.arch, tc.gguf, got, ok, tc.hf)
		}
		if got, ok := GGUFName(tc.arch, tc.hf); !ok || got != tc.gguf {
			t.Errorf("GGUFName(%s, %s) = %q, %v; want %q", tc.arch, tc.hf, got, ok, tc.gguf)
		}
	}
	if got, ok := HFNameFor("llama", "blk.0.ffn_gate_exps.weight"); ok {
		t.Errorf("an expert stack has one name: %q", got)
	}
}
