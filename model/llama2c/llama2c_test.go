package llama2c

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/internal/shared"
)

// synthetic writes a checkpoint whose every float is its own index in the
// float section, so that each weight's position in the file can be checked.
func synthetic(t *testing.T, h Header) (path string, data []byte) {
	t.Helper()
	vocab := int32(h.VocabSize)
	if !h.SharedClassifier {
		vocab = -vocab
	}
	for _, v := range []int32{int32(h.Dim), int32(h.HiddenDim), int32(h.NumLayers), int32(h.NumHeads), int32(h.NumKVHeads), vocab, int32(h.SeqLen)} {
		data = binary.LittleEndian.AppendUint32(data, uint32(v))
	}
	floats := (h.fileBytes() - HeaderBytes) / 4
	for i := range floats {
		data = binary.LittleEndian.AppendUint32(data, math.Float32bits(float32(i)))
	}
	path = filepath.Join(t.TempDir(), "model.bin")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path, data
}

func TestLayout(t *testing.T) {
	for _, shared := range []bool{true, false} {
		h := Header{Dim: 8, HiddenDim: 12, NumLayers: 2, NumHeads: 4, NumKVHeads: 2, VocabSize: 10, SeqLen: 6, SharedClassifier: shared}
		path, _ := synthetic(t, h)
		f, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if f.Header != h {
			t.Errorf("header %+v, want %+v", f.Header, h)
		}
		// Offsets (in floats) of each array, from the layout in the package doc.
		dim, hid, kv, L, V := 8, 12, 4, 2, 10
		embed := 0
		rmsAtt := embed + V*dim
		wq := rmsAtt + L*dim
		wk := wq + L*dim*dim
		wv := wk + L*kv*dim
		wo := wv + L*kv*dim
		rmsFFN := wo + L*dim*dim
		w1 := rmsFFN + L*dim
		w2 := w1 + L*hid*dim
		w3 := w2 + L*dim*hid
		rmsFinal := w3 + L*hid*dim
		wcls := rmsFinal + dim + 2*6*(dim/4/2)
		cases := []struct {
			name  string
			first int
			shape []int
		}{
			{"model.embed_tokens.weight", embed, []int{V, dim}},
			{"model.norm.weight", rmsFinal, []int{dim}},
			{"model.layers.1.input_layernorm.weight", rmsAtt + dim, []int{dim}},
			{"model.layers.1.self_attn.q_proj.weight", wq + dim*dim, []int{dim, dim}},
			{"model.layers.1.self_attn.k_proj.weight", wk + kv*dim, []int{kv, dim}},
			{"model.layers.0.self_attn.v_proj.weight", wv, []int{kv, dim}},
			{"model.layers.1.self_attn.v_proj.weight", wv + kv*dim, []int{kv, dim}},
			{"model.layers.1.self_attn.o_proj.weight", wo + dim*dim, []int{dim, dim}},
			{"model.layers.1.post_attention_layernorm.weight", rmsFFN + dim, []int{dim}},
			{"model.layers.1.mlp.gate_proj.weight", w1 + hid*dim, []int{hid, dim}},
			{"model.layers.1.mlp.down_proj.weight", w2 + dim*hid, []int{dim, hid}},
			{"model.layers.1.mlp.up_proj.weight", w3 + hid*dim, []int{hid, dim}},
		}
		if !shared {
			cases = append(cases, struct {
				name  string
				first int
				shape []int
			}{"lm_head.weight", wcls, []int{V, dim}})
		}
		for _, tc := range cases {
			w, err := f.Tensor(tc.name)
			if err != nil {
				t.Fatal(err)
			}
			values := w.Float32()
			if !slices.Equal(w.Shape, tc.shape) || w.Name != tc.name {
				t.Errorf("%s: name %q shape %v, want %v", tc.name, w.Name, w.Shape, tc.shape)
			}
			if values[0] != float32(tc.first) || values[len(values)-1] != float32(tc.first+len(values)-1) {
				t.Errorf("%s spans floats %v..%v, want from %d", tc.name, values[0], values[len(values)-1], tc.first)
			}
		}
		want := 2 + 9*L
		if !shared {
			want++ // lm_head
		}
		if got := len(f.Names()); got != want {
			t.Errorf("%d tensors, want %d", got, want)
		}
		if f.Has("lm_head.weight") == shared {
			t.Errorf("shared=%v but Has(lm_head.weight) = %v", shared, !shared)
		}
		_, err = f.Tensor("model.layers.2.mlp.up_proj.weight")
		assertError(t, err, "model.layers.2.mlp.up_proj.weight not found", path)
		f.Close()
	}
}

func TestOpenErrors(t *testing.T) {
	h := Header{Dim: 8, HiddenDim: 12, NumLayers: 2, NumHeads: 4, NumKVHeads: 2, VocabSize: 10, SeqLen: 6, SharedClassifier: true}
	_, good := synthetic(t, h)
	header := func(values ...int32) []byte {
		var out []byte
		for _, v := range values {
			out = binary.LittleEndian.AppendUint32(out, uint32(v))
		}
		return append(out, make([]byte, 64)...)
	}
	cases := []struct {
		name string
		data []byte
		want []string
	}{
		{"empty", nil, []string{"shorter than the 28-byte header"}},
		{"truncated", good[:len(good)-4], []string{"but its header", "implies", "truncated"}},
		{"trailing bytes", append(slices.Clone(good), 0, 0, 0, 0), []string{"but its header", "implies"}},
		{"unshared but no wcls", func() []byte {
			b := slices.Clone(good)
			binary.LittleEndian.PutUint32(b[20:], uint32(0xFFFFFFF6)) // vocab -10
			return b
		}(), []string{"shared classifier false", "implies"}},
		{"zero layers", header(8, 12, 0, 4, 2, 10, 6), []string{"n_layers = 0"}},
		{"heads do not divide dim", header(8, 12, 2, 3, 1, 10, 6), []string{"inconsistent"}},
		{"kv heads do not divide heads", header(8, 12, 2, 4, 3, 10, 6), []string{"inconsistent"}},
		{"huge", header(1<<30, 1<<30, 1<<30, 1, 1, 1, 1), []string{"out of range"}},
		{"versioned export", header(0x616b3432, 1, 0, 0, 0, 0, 0), []string{"ak42", "--version 0"}},
	}
	dir := t.TempDir()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".bin")
			if err := os.WriteFile(path, tc.data, 0o644); err != nil {
				t.Fatal(err)
			}
			f, err := Open(path)
			if err == nil {
				f.Close()
			}
			assertError(t, err, append(tc.want, path)...)
		})
	}
}

func TestRealCheckpoints(t *testing.T) {
	cases := []struct {
		path string
		want Header
	}{
		{"models/stories260K/stories260K.bin", Header{Dim: 64, HiddenDim: 172, NumLayers: 5, NumHeads: 8, NumKVHeads: 4, VocabSize: 512, SeqLen: 512, SharedClassifier: true}},
		{"models/aidreams260K/aidreams260K.bin", Header{Dim: 64, HiddenDim: 172, NumLayers: 4, NumHeads: 4, NumKVHeads: 4, VocabSize: 512, SeqLen: 128, SharedClassifier: true}},
	}
	for _, tc := range cases {
		f, err := Open(shared.Path(t, tc.path))
		if err != nil {
			t.Fatal(err)
		}
		if f.Header != tc.want {
			t.Errorf("%s: header %+v, want %+v", tc.path, f.Header, tc.want)
		}
		f.Close()
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
// or a File, never panic.
func FuzzParse(f *testing.F) {
	var seed []byte
	for _, v := range []int32{2, 2, 1, 1, 1, 2, 1} {
		seed = binary.LittleEndian.AppendUint32(seed, uint32(v))
	}
	f.Add(append(seed, make([]byte, 4*40)...))
	f.Fuzz(func(t *testing.T, data []byte) {
		if file, err := parse("fuzz.bin", data); err == nil {
			for _, name := range file.Names() {
				_ = file.tensors[name].Float32()
			}
		}
	})
}
