package model

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/internal/shared"
)

// TestOpenRealCheckpoints opens every model under ../shared/models, checks
// the config each format yields, and reads every tensor.
func TestOpenRealCheckpoints(t *testing.T) {
	shared.Path(t, "models")
	stories := Config{
		Architecture: "LlamaForCausalLM", ModelType: "llama", HiddenSize: 64, IntermediateSize: 172, NumLayers: 5,
		NumHeads: 8, NumKVHeads: 4, HeadDim: 8, VocabSize: 512, MaxPositions: 512, RMSNormEps: 1e-5, HiddenAct: "silu",
		TieWordEmbeddings: true, RopeTheta: 10000, RopeInterleaved: true,
		BOSTokenID: 1, EOSTokenIDs: []int{2}, PadTokenID: -1, TorchDType: "float32",
	}
	type check struct {
		path      string
		format    Format
		want      func(c *Config) // edits a copy of the expected config; nil skips the comparison
		tokenizer func(t *testing.T, ts TokenizerSource)
		genEOS    []int
	}
	refTiny := func(arch, dir string, edit func(c *Config)) check {
		return check{
			path:   "reference-tiny/" + dir,
			format: FormatHF,
			want: func(c *Config) {
				*c = Config{
					Architecture: arch, HiddenSize: 64, IntermediateSize: 160, NumLayers: 3, NumHeads: 4, NumKVHeads: 2,
					HeadDim: 16, VocabSize: 512, MaxPositions: 1024, RMSNormEps: 1e-6, HiddenAct: "silu", RopeTheta: 10000,
					BOSTokenID: 1, EOSTokenIDs: []int{2}, PadTokenID: 0, TorchDType: "float32",
				}
				edit(c)
			},
			tokenizer: func(t *testing.T, ts TokenizerSource) {
				if ts.HFDir != "" || ts.GGUFMetadata != nil || ts.Llama2CPath != "" {
					t.Errorf("tokenizer %+v, want none (no tokenizer.json)", ts)
				}
			},
			genEOS: []int{2},
		}
	}
	cases := []check{
		{path: "stories260K/stories260K.bin", format: FormatLlama2C, want: func(c *Config) {},
			tokenizer: func(t *testing.T, ts TokenizerSource) {
				if filepath.Base(ts.Llama2CPath) != "tok512.bin" {
					t.Errorf("tokenizer %+v, want the sibling tok512.bin", ts)
				}
			}},
		{path: "stories260K/stories260K.gguf", format: FormatGGUF, want: func(c *Config) {
			c.MaxPositions = 2048       // what the converter wrote
			c.TieWordEmbeddings = false // the converter wrote output.weight
		}, tokenizer: func(t *testing.T, ts TokenizerSource) {
			if model, _ := ts.GGUFMetadata["tokenizer.ggml.model"].(string); model != "llama" || ts.HFDir != "" || ts.Llama2CPath != "" {
				t.Errorf("tokenizer %+v, want the GGUF metadata only", ts)
			}
		}},
		{path: "stories260K-hf", format: FormatHF, want: func(c *Config) {
			c.RopeInterleaved = false // the HF export permuted q/k to rotate-half
		}, tokenizer: func(t *testing.T, ts TokenizerSource) {
			if filepath.Base(ts.HFDir) != "stories260K-hf" || ts.GGUFMetadata != nil {
				t.Errorf("tokenizer %+v, want the model directory", ts)
			}
		}},
		{path: "aidreams260K/aidreams260K.bin", format: FormatLlama2C, want: func(c *Config) {
			c.NumLayers, c.NumHeads, c.NumKVHeads, c.HeadDim, c.MaxPositions = 4, 4, 4, 16, 128
		}, tokenizer: func(t *testing.T, ts TokenizerSource) {
			if filepath.Base(ts.Llama2CPath) != "tok512_aidreams.bin" {
				t.Errorf("tokenizer %+v, want the sibling tok512_aidreams.bin", ts)
			}
		}},
		refTiny("LlamaForCausalLM", "llama_gqa", func(c *Config) {
			c.ModelType, c.NumHeads, c.HeadDim = "llama", 8, 8
		}),
		refTiny("LlamaForCausalLM", "llama_mha_tied", func(c *Config) {
			c.ModelType, c.NumKVHeads, c.TieWordEmbeddings, c.RopeTheta = "llama", 4, true, 500000
		}),
		refTiny("Qwen2ForCausalLM", "qwen2_bias", func(c *Config) {
			c.ModelType, c.AttentionBias, c.RopeTheta = "qwen2", true, 1e6
			c.LayerTypes = []string{"full_attention", "full_attention", "full_attention"}
		}),
		refTiny("Qwen3ForCausalLM", "qwen3_qknorm", func(c *Config) {
			c.ModelType, c.QKNorm, c.HeadDim, c.RopeTheta = "qwen3", true, 32, 1e6
			c.LayerTypes = []string{"full_attention", "full_attention", "full_attention"}
		}),
		refTiny("MistralForCausalLM", "mistral_swa", func(c *Config) {
			c.ModelType, c.SlidingWindow = "mistral", 24
		}),
		refTiny("Gemma2ForCausalLM", "gemma2_softcap_swa", func(c *Config) {
			c.ModelType, c.HeadDim, c.HiddenAct, c.SlidingWindow = "gemma2", 32, "gelu_pytorch_tanh", 24
			c.LayerTypes = []string{"sliding_attention", "full_attention", "sliding_attention"}
			c.QueryPreAttnScalar, c.AttnLogitSoftcap, c.FinalLogitSoftcap = 32, 20, 15
		}),
		refTiny("DeepseekV3ForCausalLM", "deepseek_v3_mla_moe", func(c *Config) {
			c.ModelType, c.NumKVHeads, c.RopeInterleaved = "deepseek_v3", 4, true
			c.MLA = MLAConfig{QLoraRank: 48, KVLoraRank: 32, QKNopeHeadDim: 32, QKRopeHeadDim: 16, VHeadDim: 32}
			c.MoE = MoEConfig{NumRoutedExperts: 8, ExpertsKey: "n_routed_experts", NumSharedExperts: 1, NumExpertsPerTok: 2,
				IntermediateSize: 48, SharedIntermediateSize: 48, FirstKDenseReplace: 1, LayerFreq: 1, NumGroups: 2, TopKGroups: 1, NormTopKProb: true, RoutedScaling: 1,
				ScoringFunc: "sigmoid", TopKMethod: "noaux_tc"}
		}),
	}
	for _, tc := range cases {
		t.Run(tc.path, func(t *testing.T) {
			path := shared.Path(t, filepath.Join("models", tc.path))
			ck, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			if ck.Format != tc.format || ck.Path != path {
				t.Errorf("format %q path %q, want %q %q", ck.Format, ck.Path, tc.format, path)
			}
			want := stories
			tc.want(&want)
			if !configsEqual(ck.Config, want) {
				t.Errorf("config\n got  %+v\n want %+v", ck.Config, want)
			}
			tc.tokenizer(t, ck.Tokenizer)
			if !slices.Equal(ck.Generation.EOSTokenIDs, tc.genEOS) {
				t.Errorf("generation EOS %v, want %v", ck.Generation.EOSTokenIDs, tc.genEOS)
			}
			names := ck.Weights.Names()
			if len(names) == 0 || !slices.IsSorted(names) {
				t.Fatalf("Names() = %v", names)
			}
			for _, name := range names {
				w, err := ck.Weights.Tensor(name)
				if err != nil {
					t.Fatal(err)
				}
				if err := w.Validate(); err != nil || w.Name != name {
					t.Errorf("%s: %v (name %q)", name, err, w.Name)
				}
			}
			_, err = ck.Weights.Tensor("model.layers.99.mlp.up_proj.weight")
			if err == nil || !strings.Contains(err.Error(), "model.layers.99.mlp.up_proj.weight") || !strings.Contains(err.Error(), filepath.Base(path)) {
				t.Errorf("missing tensor error %v must name the tensor and the file", err)
			}
		})
	}
}

// configsEqual compares configs, treating nil and empty slices alike.
func configsEqual(a, b Config) bool {
	if !slices.Equal(a.LayerTypes, b.LayerTypes) || !slices.Equal(a.EOSTokenIDs, b.EOSTokenIDs) {
		return false
	}
	if (a.RopeScaling == nil) != (b.RopeScaling == nil) || (a.RopeScaling != nil && !reflect.DeepEqual(a.RopeScaling, b.RopeScaling)) {
		return false
	}
	a.LayerTypes, b.LayerTypes, a.EOSTokenIDs, b.EOSTokenIDs, a.RopeScaling, b.RopeScaling = nil, nil, nil, nil, nil, nil
	return fmt.Sprint(a) == fmt.Sprint(b)
}

// TestCrossFormatEquality proves the three readers agree on the layouts:
// stories260K.bin and stories260K.gguf hold the same floats (both in the
// interleaved RoPE layout), and the Hugging Face export holds them too,
// with each head's q/k rows permuted to rotate-half: HF row j < d/2 is
// original row 2j, HF row d/2+j is original row 2j+1.
func TestCrossFormatEquality(t *testing.T) {
	bin := openShared(t, "models/stories260K/stories260K.bin")
	ggufCk := openShared(t, "models/stories260K/stories260K.gguf")
	hf := openShared(t, "models/stories260K-hf")
	cfg := bin.Config

	same := func(name string, want []float32, source *Checkpoint, permuteHeads int) {
		t.Helper()
		w, err := source.Weights.Tensor(name)
		if err != nil {
			t.Fatal(err)
		}
		got := w.Float32()
		if permuteHeads > 0 {
			got = hfToInterleaved(got, permuteHeads, cfg.HeadDim, w.Cols())
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s differs between %s and %s", name, bin.Path, source.Path)
		}
	}
	reference := func(name string) []float32 {
		t.Helper()
		w, err := bin.Weights.Tensor(name)
		if err != nil {
			t.Fatal(err)
		}
		return w.Float32()
	}

	embed := reference("model.embed_tokens.weight")
	for _, name := range []string{"model.embed_tokens.weight", "model.norm.weight"} {
		same(name, reference(name), ggufCk, 0)
		same(name, reference(name), hf, 0)
	}
	// The GGUF converter wrote the tied classifier out as output.weight.
	same("lm_head.weight", embed, ggufCk, 0)
	if bin.Weights.Has("lm_head.weight") || hf.Weights.Has("lm_head.weight") {
		t.Error("tied checkpoints must not list lm_head.weight")
	}
	for i := range cfg.NumLayers {
		for _, part := range []string{
			"input_layernorm", "post_attention_layernorm", "self_attn.v_proj", "self_attn.o_proj",
			"mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "self_attn.q_proj", "self_attn.k_proj",
		} {
			name := fmt.Sprintf("model.layers.%d.%s.weight", i, part)
			want := reference(name)
			same(name, want, ggufCk, 0)
			heads := 0
			switch part {
			case "self_attn.q_proj":
				heads = cfg.NumHeads
			case "self_attn.k_proj":
				heads = cfg.NumKVHeads
			}
			same(name, want, hf, heads)
		}
	}
	// The permutation is not the identity, so the check above has teeth.
	q, _ := hf.Weights.Tensor("model.layers.0.self_attn.q_proj.weight")
	if slices.Equal(q.Float32(), reference("model.layers.0.self_attn.q_proj.weight")) {
		t.Error("HF q_proj equals the interleaved one unpermuted; the export should differ")
	}
}

// hfToInterleaved undoes the rotate-half permutation of a [heads*d, cols]
// q or k matrix: interleaved row 2j is HF row j, 2j+1 is HF row d/2+j.
func hfToInterleaved(hf []float32, heads, d, cols int) []float32 {
	out := make([]float32, len(hf))
	for h := range heads {
		for j := range d / 2 {
			copy(out[(h*d+2*j)*cols:][:cols], hf[(h*d+j)*cols:][:cols])
			copy(out[(h*d+2*j+1)*cols:][:cols], hf[(h*d+d/2+j)*cols:][:cols])
		}
	}
	return out
}

func openShared(t *testing.T, rel string) *Checkpoint {
	t.Helper()
	ck, err := Open(shared.Path(t, rel))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	return ck
}

// --- synthetic checkpoints -------------------------------------------------

const tinyConfig = `{"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":4,"intermediate_size":8,
"num_hidden_layers":1,"num_attention_heads":2,"num_key_value_heads":1,"vocab_size":3,"eos_token_id":2,"bos_token_id":1}`

// safetensorsBytes encodes F32 tensors (name → shape, values 0, 1, 2, ...).
func safetensorsBytes(t *testing.T, shapes map[string][]int) []byte {
	t.Helper()
	names := make([]string, 0, len(shapes))
	for name := range shapes {
		names = append(names, name)
	}
	slices.Sort(names)
	header := map[string]any{}
	var body []byte
	for _, name := range names {
		n := 1
		for _, d := range shapes[name] {
			n *= d
		}
		header[name] = map[string]any{"dtype": "F32", "shape": shapes[name], "data_offsets": []int{len(body), len(body) + 4*n}}
		for i := range n {
			body = binary.LittleEndian.AppendUint32(body, math.Float32bits(float32(i)))
		}
	}
	js, err := json.Marshal(header)
	if err != nil {
		t.Fatal(err)
	}
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(js)))
	return append(append(out, js...), body...)
}

func writeFiles(t *testing.T, dir string, files map[string][]byte) string {
	t.Helper()
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestOpenShardedHF(t *testing.T) {
	dir := writeFiles(t, t.TempDir(), map[string][]byte{
		"config.json":                      []byte(tinyConfig),
		"generation_config.json":           []byte(`{"temperature":0.7,"top_k":40,"eos_token_id":[2,5]}`),
		"tokenizer.json":                   []byte(`{}`),
		"model-00001-of-00002.safetensors": safetensorsBytes(t, map[string][]int{"model.embed_tokens.weight": {3, 4}}),
		"model-00002-of-00002.safetensors": safetensorsBytes(t, map[string][]int{"model.norm.weight": {4}}),
		"model.safetensors.index.json": []byte(`{"metadata":{},"weight_map":{
			"model.embed_tokens.weight":"model-00001-of-00002.safetensors",
			"model.norm.weight":"model-00002-of-00002.safetensors"}}`),
	})
	ck, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if g := ck.Generation; *g.Temperature != 0.7 || *g.TopK != 40 || g.TopP != nil || !slices.Equal(g.EOSTokenIDs, []int{2, 5}) {
		t.Errorf("generation %+v", g)
	}
	if ck.Tokenizer.HFDir != dir {
		t.Errorf("tokenizer %+v, want HFDir %s", ck.Tokenizer, dir)
	}
	// config.json does not say, and there is no lm_head: the weights decide.
	if !ck.Config.TieWordEmbeddings {
		t.Error("TieWordEmbeddings = false for a checkpoint without lm_head")
	}
	if got := ck.Weights.Names(); !slices.Equal(got, []string{"model.embed_tokens.weight", "model.norm.weight"}) {
		t.Errorf("Names() = %v", got)
	}
	w, err := ck.Weights.Tensor("model.norm.weight")
	if err != nil || !slices.Equal(w.Float32(), []float32{0, 1, 2, 3}) {
		t.Errorf("model.norm.weight = %v, %v", w.Float32(), err)
	}
	_, err = ck.Weights.Tensor("lm_head.weight")
	assertError(t, err, "tensor lm_head.weight not found", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
}

func TestOpenErrors(t *testing.T) {
	weights := safetensorsBytes(t, map[string][]int{"model.embed_tokens.weight": {3, 4}})
	ggufHeader := func(version uint32) []byte {
		b := append([]byte("GGUF"), binary.LittleEndian.AppendUint32(nil, version)...)
		return append(b, make([]byte, 16)...) // no tensors, no metadata
	}
	cases := []struct {
		name  string
		files map[string][]byte
		open  string // relative to the case's directory; "" opens the directory
		want  []string
	}{
		{"missing config.json", map[string][]byte{"model.safetensors": weights}, "", []string{"has no config.json"}},
		{"missing config.json beside a gguf", map[string][]byte{"m.gguf": ggufHeader(3)}, "", []string{"has no config.json", "m.gguf", "pass the file's path"}},
		{"bad JSON in config.json", map[string][]byte{"config.json": []byte(`{"hidden_size": 4,`), "model.safetensors": weights}, "", []string{"config.json", "invalid JSON"}},
		{"wrong type in config.json", map[string][]byte{"config.json": []byte(`{"hidden_size": "4"}`), "model.safetensors": weights}, "", []string{"config.json", "hidden_size: want int, got a JSON string"}},
		{"invalid config", map[string][]byte{"config.json": []byte(`{"hidden_size": 4, "num_hidden_layers": 0}`), "model.safetensors": weights}, "", []string{"config.json", "no num_hidden_layers (or it is 0)"}},
		{"no weights", map[string][]byte{"config.json": []byte(tinyConfig)}, "", []string{"neither model.safetensors nor model.safetensors.index.json"}},
		{"pytorch weights", map[string][]byte{"config.json": []byte(tinyConfig), "pytorch_model.bin": nil}, "", []string{"PyTorch .bin weights", "convert them to safetensors"}},
		{"truncated safetensors", map[string][]byte{"config.json": []byte(tinyConfig), "model.safetensors": weights[:len(weights)-1]}, "", []string{"model.safetensors", "truncated"}},
		{"bad JSON in generation_config.json", map[string][]byte{"config.json": []byte(tinyConfig), "model.safetensors": weights, "generation_config.json": []byte(`{`)}, "", []string{"generation_config.json", "invalid JSON"}},
		{"bad index", map[string][]byte{"config.json": []byte(tinyConfig), "model.safetensors.index.json": []byte(`[`)}, "", []string{"model.safetensors.index.json", "not valid JSON"}},
		{"config.json passed as the model", map[string][]byte{"config.json": []byte(tinyConfig)}, "config.json", []string{"JSON file", "pass the directory"}},
		{"safetensors passed as the model", map[string][]byte{"model.safetensors": weights}, "model.safetensors", []string{"carries no config", "config.json"}},
		{"GGUF bad version", map[string][]byte{"m.gguf": ggufHeader(9)}, "m.gguf", []string{"m.gguf", "unsupported GGUF version 9"}},
		{"GGUF truncated", map[string][]byte{"m.gguf": ggufHeader(3)[:12]}, "m.gguf", []string{"m.gguf", "truncated"}},
		{"GGUF without architecture", map[string][]byte{"m.gguf": ggufHeader(3)}, "m.gguf", []string{"m.gguf", "no general.architecture"}},
		{"llama2.c size mismatch", map[string][]byte{"m.bin": llama2cHeader(8, 16, 1, 2, 2, 3, 4)}, "m.bin", []string{"m.bin", "but its header", "implies"}},
		{"tiny file", map[string][]byte{"m.bin": []byte("GG")}, "m.bin", []string{"m.bin", "shorter than the 28-byte header"}},
		{"absent path", nil, "nothing-here", []string{"nothing-here does not exist"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeFiles(t, t.TempDir(), tc.files)
			path := filepath.Join(dir, tc.open)
			ck, err := Open(path)
			if err == nil {
				ck.Close()
			}
			assertError(t, err, tc.want...)
			if err != nil && !strings.Contains(err.Error(), dir) {
				t.Errorf("error %q does not name the path", err)
			}
		})
	}
}

func llama2cHeader(values ...int32) []byte {
	var out []byte
	for _, v := range values {
		out = binary.LittleEndian.AppendUint32(out, uint32(v))
	}
	return out
}

func TestLlama2CTokenizerDiscovery(t *testing.T) {
	// A valid 1-layer checkpoint: dim 2, hidden 2, 1 head, vocab 2, seq 1.
	floats := 2*2 + 2 + 4 + 2*4 + 4 + 2 + 3*4 + 2 + 2*1*1
	checkpoint := append(llama2cHeader(2, 2, 1, 1, 1, 2, 1), make([]byte, 4*floats)...)
	cases := []struct {
		name  string
		files []string
		want  string
	}{
		{"tokenizer.bin wins", []string{"tokenizer.bin", "tok512.bin"}, "tokenizer.bin"},
		{"single tok*.bin", []string{"tok512.bin", "notes.bin"}, "tok512.bin"},
		{"ambiguous", []string{"tok512.bin", "tok4096.bin"}, ""},
		{"none", []string{"vocab.bin"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			files := map[string][]byte{"model.bin": checkpoint}
			for _, f := range tc.files {
				files[f] = []byte("x")
			}
			dir := writeFiles(t, t.TempDir(), files)
			ck, err := Open(filepath.Join(dir, "model.bin"))
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			want := ""
			if tc.want != "" {
				want = filepath.Join(dir, tc.want)
			}
			if ck.Tokenizer.Llama2CPath != want {
				t.Errorf("Llama2CPath = %q, want %q", ck.Tokenizer.Llama2CPath, want)
			}
		})
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
