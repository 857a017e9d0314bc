// Package llama2c reads karpathy/llama2.c checkpoints (the "legacy" export
// that run.c reads) through a read-only memory map and serves the weights
// under Hugging Face names.
//
// File layout, little-endian:
//
//	header: 7 × int32: dim, hidden_dim, n_layers, n_heads, n_kv_heads,
//	        vocab_size (negative: the classifier is not shared), seq_len
//	float32 arrays, each layer-major:
//	  token_embedding [vocab, dim]
//	  rms_att [L, dim]
//	  wq [L, dim, dim]  wk [L, kv_dim, dim]  wv [L, kv_dim, dim]  wo [L, dim, dim]
//	  rms_ffn [L, dim]
//	  w1 [L, hidden, dim]  w2 [L, dim, hidden]  w3 [L, hidden, dim]
//	  rms_final [dim]
//	  freq_cis_real [seq_len, head_size/2]  freq_cis_imag (same; unused)
//	  wcls [vocab, dim] only when the classifier is not shared
//
// kv_dim = dim / n_heads * n_kv_heads. The q and k rows are in Meta's
// original interleaved RoPE layout (pairs x[2i], x[2i+1]), not Hugging
// Face's rotate-half layout: the model must rotate interleaved.
package llama2c

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/gosling-ai/gosling/model/internal/mmap"
	"github.com/gosling-ai/gosling/tensor"
)

// HeaderBytes is the size of the header.
const HeaderBytes = 7 * 4

// versionedMagic starts the later "version 1/2" exports ("ak42"), which
// run.c does not read.
const versionedMagic = 0x616b3432

// Header limits, far above any llama2.c model (Llama 2 70B has dim 8192,
// 80 layers), chosen so that the size computation cannot overflow int64
// whatever a corrupt header says: at most 2^12·2^20·2^20·4 per array.
const (
	maxWidth  = 1 << 20 // dim, hidden_dim, n_heads, n_kv_heads
	maxLayers = 1 << 12
	maxVocab  = 1 << 22
	maxSeqLen = 1 << 24
)

// Header is the checkpoint's configuration.
type Header struct {
	Dim, HiddenDim, NumLayers, NumHeads, NumKVHeads, VocabSize, SeqLen int
	// SharedClassifier is true when the output layer reuses the token
	// embedding (the header's vocab_size was positive).
	SharedClassifier bool
}

// HeadDim is the size of one attention head.
func (h Header) HeadDim() int { return h.Dim / h.NumHeads }

// KVDim is the width of the k and v projections.
func (h Header) KVDim() int { return h.HeadDim() * h.NumKVHeads }

// fileBytes is the exact size a checkpoint with this header must have.
func (h Header) fileBytes() int64 {
	dim, hidden, layers := int64(h.Dim), int64(h.HiddenDim), int64(h.NumLayers)
	vocab, kvDim, headDim := int64(h.VocabSize), int64(h.KVDim()), int64(h.HeadDim())
	floats := vocab*dim + // token_embedding
		layers*dim + // rms_att
		layers*dim*dim + 2*layers*kvDim*dim + layers*dim*dim + // wq wk wv wo
		layers*dim + // rms_ffn
		3*layers*hidden*dim + // w1 w2 w3
		dim + // rms_final
		int64(h.SeqLen)*headDim // freq_cis_real and _imag: seq_len × head_size/2 each
	if !h.SharedClassifier {
		floats += vocab * dim
	}
	return HeaderBytes + 4*floats
}

// File is an opened llama2.c checkpoint. It satisfies model.WeightSource.
type File struct {
	Path   string
	Header Header

	m       *mmap.File
	tensors map[string]tensor.Weight
	names   []string
}

// Open maps path, checks that its size matches its header exactly, and
// indexes every weight under its Hugging Face name.
func Open(path string) (*File, error) {
	m, err := mmap.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open llama2.c checkpoint: %w", err)
	}
	f, err := parse(path, m.Data)
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("llama2.c checkpoint %s: %w", path, err)
	}
	f.m = m
	return f, nil
}

// ReadHeader decodes and checks the header at the start of data.
func ReadHeader(data []byte) (Header, error) {
	if len(data) < HeaderBytes {
		return Header{}, fmt.Errorf("file is %d bytes, shorter than the %d-byte header; the file is truncated or not a llama2.c checkpoint", len(data), HeaderBytes)
	}
	var v [7]int
	for i := range v {
		v[i] = int(int32(binary.LittleEndian.Uint32(data[4*i:])))
	}
	if uint32(v[0]) == versionedMagic {
		return Header{}, fmt.Errorf("this is a versioned llama2.c export (magic \"ak42\"); gosling reads the legacy format: export with `python export.py --version 0`")
	}
	h := Header{Dim: v[0], HiddenDim: v[1], NumLayers: v[2], NumHeads: v[3], NumKVHeads: v[4], VocabSize: v[5], SeqLen: v[6]}
	h.SharedClassifier = h.VocabSize > 0
	if h.VocabSize < 0 {
		h.VocabSize = -h.VocabSize
	}
	for _, field := range []struct {
		name       string
		value, max int
	}{
		{"dim", h.Dim, maxWidth}, {"hidden_dim", h.HiddenDim, maxWidth}, {"n_layers", h.NumLayers, maxLayers},
		{"n_heads", h.NumHeads, maxWidth}, {"n_kv_heads", h.NumKVHeads, maxWidth},
		{"vocab_size", h.VocabSize, maxVocab}, {"seq_len", h.SeqLen, maxSeqLen},
	} {
		if field.value <= 0 || field.value > field.max {
			return Header{}, fmt.Errorf("header %s = %d is out of range; this is not a llama2.c checkpoint (header %v)", field.name, field.value, v)
		}
	}
	if h.Dim%h.NumHeads != 0 || h.NumHeads%h.NumKVHeads != 0 || h.HeadDim()%2 != 0 {
		return Header{}, fmt.Errorf("header dim %d, n_heads %d, n_kv_heads %d are inconsistent (heads must divide dim, kv heads must divide heads, head size must be even); this is not a llama2.c checkpoint", h.Dim, h.NumHeads, h.NumKVHeads)
	}
	return h, nil
}

func parse(path string, data []byte) (*File, error) {
	h, err := ReadHeader(data)
	if err != nil {
		return nil, err
	}
	if want := h.fileBytes(); want != int64(len(data)) {
		return nil, fmt.Errorf("file is %d bytes but its header (dim %d, hidden_dim %d, n_layers %d, n_heads %d, n_kv_heads %d, vocab_size %d, shared classifier %v, seq_len %d) implies %d; the file is truncated or not a llama2.c checkpoint",
			len(data), h.Dim, h.HiddenDim, h.NumLayers, h.NumHeads, h.NumKVHeads, h.VocabSize, h.SharedClassifier, h.SeqLen, want)
	}

	f := &File{Path: path, Header: h, tensors: map[string]tensor.Weight{}}
	pos := HeaderBytes
	// take consumes the next array of shape [count, shape...] and returns
	// one weight per leading index.
	take := func(count int, shape ...int) []tensor.Weight {
		elems := 1
		for _, d := range shape {
			elems *= d
		}
		out := make([]tensor.Weight, count)
		for i := range out {
			end := pos + 4*elems
			out[i] = tensor.Weight{DType: tensor.F32, Shape: slices.Clone(shape), Data: data[pos:end:end]}
			pos = end
		}
		return out
	}
	layers := h.NumLayers
	embed := take(1, h.VocabSize, h.Dim)[0]
	rmsAtt := take(layers, h.Dim)
	wq := take(layers, h.Dim, h.Dim)
	wk := take(layers, h.KVDim(), h.Dim)
	wv := take(layers, h.KVDim(), h.Dim)
	wo := take(layers, h.Dim, h.Dim)
	rmsFFN := take(layers, h.Dim)
	w1 := take(layers, h.HiddenDim, h.Dim)
	w2 := take(layers, h.Dim, h.HiddenDim)
	w3 := take(layers, h.HiddenDim, h.Dim)
	rmsFinal := take(1, h.Dim)[0]
	take(2, h.SeqLen, h.HeadDim()/2) // freq_cis_real, freq_cis_imag: recomputed by the model

	f.add("model.embed_tokens.weight", embed)
	f.add("model.norm.weight", rmsFinal)
	if !h.SharedClassifier {
		f.add("lm_head.weight", take(1, h.VocabSize, h.Dim)[0])
	}
	for i := range layers {
		prefix := fmt.Sprintf("model.layers.%d.", i)
		f.add(prefix+"input_layernorm.weight", rmsAtt[i])
		f.add(prefix+"self_attn.q_proj.weight", wq[i])
		f.add(prefix+"self_attn.k_proj.weight", wk[i])
		f.add(prefix+"self_attn.v_proj.weight", wv[i])
		f.add(prefix+"self_attn.o_proj.weight", wo[i])
		f.add(prefix+"post_attention_layernorm.weight", rmsFFN[i])
		f.add(prefix+"mlp.gate_proj.weight", w1[i])
		f.add(prefix+"mlp.down_proj.weight", w2[i])
		f.add(prefix+"mlp.up_proj.weight", w3[i])
	}
	if pos != len(data) {
		// fileBytes and the reads above describe one layout twice; this
		// catches them drifting apart.
		return nil, fmt.Errorf("internal error: read %d of %d bytes", pos, len(data))
	}
	slices.Sort(f.names)
	return f, nil
}

func (f *File) add(name string, w tensor.Weight) {
	w.Name = name
	f.tensors[name] = w
	f.names = append(f.names, name)
}

// Tensor returns the weight with the given Hugging Face name; Data aliases
// the memory map.
func (f *File) Tensor(name string) (tensor.Weight, error) {
	w, ok := f.tensors[name]
	if !ok {
		return tensor.Weight{}, fmt.Errorf("tensor %s not found in %s (a llama2.c checkpoint)", name, f.Path)
	}
	if f.m == nil {
		return tensor.Weight{}, fmt.Errorf("tensor %s: %s is closed", name, f.Path)
	}
	return w, nil
}

// Has reports whether the checkpoint holds the named weight.
func (f *File) Has(name string) bool {
	_, ok := f.tensors[name]
	return ok
}

// Names lists every weight, sorted.
func (f *File) Names() []string { return slices.Clone(f.names) }

// Close unmaps the file; weights obtained before become invalid.
func (f *File) Close() error {
	if f.m == nil {
		return nil
	}
	err := f.m.Close()
	f.m = nil
	if err != nil {
		return fmt.Errorf("close %s: %w", f.Path, err)
	}
	return nil
}
