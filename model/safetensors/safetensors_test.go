package safetensors

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/tensor"
)

// testTensor is one tensor to write into a synthetic file.
type testTensor struct {
	name  string
	dtype string
	shape []int
	data  []byte
}

// encodeFile lays tensors out back to back, as the reference writer does,
// with the header padded to 8 bytes so that F32 data stays aligned.
func encodeFile(t *testing.T, tensors []testTensor) []byte {
	t.Helper()
	header := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	var body []byte
	for _, tt := range tensors {
		header[tt.name] = map[string]any{
			"dtype":        tt.dtype,
			"shape":        tt.shape,
			"data_offsets": []int{len(body), len(body) + len(tt.data)},
		}
		body = append(body, tt.data...)
	}
	js, err := json.Marshal(header)
	if err != nil {
		t.Fatal(err)
	}
	return assemble(string(js), body)
}

// assemble writes the length prefix, a header (padded with spaces to a
// multiple of 8) and the data section.
func assemble(header string, body []byte) []byte {
	for len(header)%8 != 0 {
		header += " "
	}
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	out = append(out, header...)
	return append(out, body...)
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

func f16Bytes(values ...float32) []byte {
	var out []byte
	for _, v := range values {
		out = binary.LittleEndian.AppendUint16(out, tensor.F32ToF16(v))
	}
	return out
}

func bf16Bytes(values ...float32) []byte {
	var out []byte
	for _, v := range values {
		out = binary.LittleEndian.AppendUint16(out, tensor.F32ToBF16(v))
	}
	return out
}

func TestDecodeDTypes(t *testing.T) {
	// Values exact in every dtype, so decoding must return them bit for bit.
	values := []float32{1, -2, 0.5, 3.25, -0.125, 1024}
	tensors := []testTensor{
		{"a.f32", "F32", []int{2, 3}, f32Bytes(values...)},
		{"b.f16", "F16", []int{3, 2}, f16Bytes(values...)},
		{"c.bf16", "BF16", []int{6}, bf16Bytes(values...)},
		{"d.empty", "F32", []int{0, 4}, nil},
	}
	path := writeFile(t, t.TempDir(), "model.safetensors", encodeFile(t, tensors))
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	if got, want := f.Names(), []string{"a.f32", "b.f16", "c.bf16", "d.empty"}; !slices.Equal(got, want) {
		t.Errorf("Names() = %v, want %v", got, want)
	}
	if f.Metadata["format"] != "pt" {
		t.Errorf("Metadata = %v, want format=pt", f.Metadata)
	}
	for _, tt := range tensors[:3] {
		w, err := f.Tensor(tt.name)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(w.Shape, tt.shape) || w.Name != tt.name {
			t.Errorf("%s: name %q shape %v, want shape %v", tt.name, w.Name, w.Shape, tt.shape)
		}
		if got := w.Float32(); !slices.Equal(got, values) {
			t.Errorf("%s (%v) decodes to %v, want %v", tt.name, w.DType, got, values)
		}
	}
	if w, err := f.Tensor("d.empty"); err != nil || w.NumElements() != 0 {
		t.Errorf("empty tensor: %v, %v", w, err)
	}
	if !f.Has("a.f32") || f.Has("nope") {
		t.Error("Has is wrong")
	}
	_, err = f.Tensor("nope")
	assertError(t, err, "tensor nope not found", path)
}

func TestSharded(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "model-00001-of-00002.safetensors", encodeFile(t, []testTensor{
		{"model.embed_tokens.weight", "F32", []int{2, 2}, f32Bytes(1, 2, 3, 4)},
		{"model.norm.weight", "BF16", []int{2}, bf16Bytes(5, 6)},
	}))
	writeFile(t, dir, "model-00002-of-00002.safetensors", encodeFile(t, []testTensor{
		{"lm_head.weight", "F16", []int{2, 2}, f16Bytes(7, 8, 9, 10)},
		{"extra.not_in_index", "F32", []int{1}, f32Bytes(11)},
	}))
	index := writeIndex(t, dir, map[string]string{
		"model.embed_tokens.weight": "model-00001-of-00002.safetensors",
		"model.norm.weight":         "model-00001-of-00002.safetensors",
		"lm_head.weight":            "model-00002-of-00002.safetensors",
	})
	s, err := OpenIndex(index)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if len(s.Shards) != 2 {
		t.Fatalf("opened %d shards, want 2 (each once)", len(s.Shards))
	}
	want := map[string][]float32{
		"model.embed_tokens.weight": {1, 2, 3, 4},
		"model.norm.weight":         {5, 6},
		"lm_head.weight":            {7, 8, 9, 10},
		"extra.not_in_index":        {11},
	}
	for name, values := range want {
		w, err := s.Tensor(name)
		if err != nil {
			t.Fatal(err)
		}
		if got := w.Float32(); !slices.Equal(got, values) {
			t.Errorf("%s = %v, want %v", name, got, values)
		}
	}
	if got := s.Names(); len(got) != 4 || !slices.IsSorted(got) {
		t.Errorf("Names() = %v", got)
	}
	_, err = s.Tensor("missing.weight")
	assertError(t, err, "tensor missing.weight not found", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
}

func writeIndex(t *testing.T, dir string, weightMap map[string]string) string {
	t.Helper()
	js, err := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": 0}, "weight_map": weightMap})
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, dir, IndexFile, js)
}

func TestOpenErrors(t *testing.T) {
	good := encodeFile(t, []testTensor{{"w", "F32", []int{2}, f32Bytes(1, 2)}})
	cases := []struct {
		name string
		data []byte
		want []string
	}{
		{"empty", nil, []string{"too short", "truncated"}},
		{"header length beyond file", good[:20], []string{"header length", "exceeds the file size 20"}},
		{"bad JSON", assemble(`{"w": {"dtype": "F32",`, nil), []string{"header is not valid JSON"}},
		{"data beyond file", good[:len(good)-1], []string{"tensor w", "data_offsets [0, 8]", "beyond", "truncated"}},
		{"size mismatch", assemble(`{"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, f32Bytes(1, 2)), []string{"tensor w", "needs 12 bytes", "span 8"}},
		{"negative shape", assemble(`{"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,8]}}`, f32Bytes(1, 2)), []string{"tensor w", "shape [-1]"}},
		{"reversed offsets", assemble(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}}`, f32Bytes(1, 2)), []string{"tensor w", "data_offsets [8 0]"}},
		{"missing field", assemble(`{"w":{"dtype":"F32","shape":[2]}}`, f32Bytes(1, 2)), []string{"tensor w", "needs dtype, shape and data_offsets"}},
		{"entry not an object", assemble(`{"w":[1,2]}`, nil), []string{"tensor w", "malformed"}},
	}
	dir := t.TempDir()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, dir, strings.ReplaceAll(tc.name, " ", "_")+".safetensors", tc.data)
			f, err := Open(path)
			if err == nil {
				f.Close()
			}
			assertError(t, err, append(tc.want, path)...)
		})
	}
	_, err := Open(filepath.Join(dir, "absent.safetensors"))
	assertError(t, err, "absent.safetensors", "no such file")
}

func TestUnsupportedDType(t *testing.T) {
	path := writeFile(t, t.TempDir(), "model.safetensors", encodeFile(t, []testTensor{
		{"ok", "F32", []int{1}, f32Bytes(1)},
		{"position_ids", "I64", []int{2}, make([]byte, 16)},
	}))
	f, err := Open(path)
	if err != nil {
		t.Fatalf("a tensor of an unsupported dtype must not block opening: %v", err)
	}
	defer f.Close()
	if !f.Has("position_ids") {
		t.Error("Has(position_ids) = false")
	}
	_, err = f.Tensor("position_ids")
	assertError(t, err, "unsupported dtype I64 in tensor position_ids", path, "supported: F32, F16, BF16")
	if _, err := f.Tensor("ok"); err != nil {
		t.Error(err)
	}
}

// TestTruncatedPrefixes opens every prefix of a valid file: each must fail
// with an error, none may panic or succeed.
func TestTruncatedPrefixes(t *testing.T) {
	good := encodeFile(t, []testTensor{
		{"a", "F32", []int{2, 2}, f32Bytes(1, 2, 3, 4)},
		{"b", "BF16", []int{3}, bf16Bytes(1, 2, 3)},
	})
	dir := t.TempDir()
	for n := 0; n < len(good); n++ {
		path := writeFile(t, dir, "prefix.safetensors", good[:n])
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

func TestIndexErrors(t *testing.T) {
	shard := encodeFile(t, []testTensor{{"a", "F32", []int{1}, f32Bytes(1)}})
	cases := []struct {
		name      string
		index     string
		weightMap map[string]string
		want      []string
	}{
		{"bad JSON", `{"weight_map": {`, nil, []string{"not valid JSON"}},
		{"empty weight map", `{"weight_map": {}}`, nil, []string{"no weight_map entries"}},
		{"tensor not in shard", "", map[string]string{"a": "s.safetensors", "b": "s.safetensors"}, []string{"maps tensor b to", "s.safetensors", "does not contain it"}},
		{"missing shard", "", map[string]string{"a": "absent.safetensors"}, []string{"absent.safetensors", "no such file"}},
		{"shard outside directory", "", map[string]string{"a": "../s.safetensors"}, []string{`shard "../s.safetensors"`, "file name in the index's directory"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, dir, "s.safetensors", shard)
			var path string
			if tc.weightMap != nil {
				path = writeIndex(t, dir, tc.weightMap)
			} else {
				path = writeFile(t, dir, IndexFile, []byte(tc.index))
			}
			s, err := OpenIndex(path)
			if err == nil {
				s.Close()
			}
			assertError(t, err, append(tc.want, path)...)
		})
	}
}

func TestRealCheckpoint(t *testing.T) {
	path := shared.Path(t, "models/stories260K-hf/model.safetensors")
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// 5 layers × 9 tensors + embedding + final norm (tied: no lm_head).
	if n := len(f.Names()); n != 47 {
		t.Errorf("%d tensors, want 47", n)
	}
	w, err := f.Tensor("model.layers.0.self_attn.k_proj.weight")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(w.Shape, []int{32, 64}) || w.DType != tensor.F32 {
		t.Errorf("k_proj: %v %v, want F32 [32 64]", w.DType, w.Shape)
	}
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
// or a File whose weights all validate, never panic.
func FuzzParse(f *testing.F) {
	f.Add(assemble(`{"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},`+
		`"b":{"dtype":"BF16","shape":[3],"data_offsets":[16,22]},"c":{"dtype":"I64","shape":[1],"data_offsets":[22,30]}}`,
		make([]byte, 30)))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := parse("fuzz.safetensors", data)
		if err != nil {
			return
		}
		for _, e := range file.tensors {
			if e.err == nil {
				if err := e.weight.Validate(); err != nil {
					t.Fatalf("accepted an invalid weight: %v", err)
				}
				_ = e.weight.Float32()
			}
		}
	})
}
