package random

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"strings"

	"github.com/gosling-ai/gosling/tensor"
)

type kv struct {
	key   string
	value any
}

const ggufAlignment = 32

// ggufNames maps Hugging Face names to llama.cpp's.
var ggufNames = strings.NewReplacer(
	"model.embed_tokens.", "token_embd.",
	"model.norm.", "output_norm.",
	"lm_head.", "output.",
	"model.layers.", "blk.",
	".input_layernorm.", ".attn_norm.",
	".self_attn.q_proj.", ".attn_q.",
	".self_attn.k_proj.", ".attn_k.",
	".self_attn.v_proj.", ".attn_v.",
	".self_attn.o_proj.", ".attn_output.",
	".post_attention_layernorm.", ".ffn_norm.",
	".mlp.gate_proj.", ".ffn_gate.",
	".mlp.up_proj.", ".ffn_up.",
	".mlp.down_proj.", ".ffn_down.",
)

var ggmlTypes = map[tensor.DType]uint32{
	tensor.F32: 0, tensor.F16: 1, tensor.Q8_0: 8, tensor.BF16: 30, tensor.Q4_0: 2,
	tensor.Q4_K: 12, tensor.Q5_K: 13, tensor.Q6_K: 14, tensor.IQ4_NL: 20, tensor.IQ4_XS: 23,
}

// writeGGUF writes a GGUF v3 file of architecture "llama" with the
// tokenizer embedded. Its q and k rows are in llama.cpp's interleaved RoPE
// layout by construction (they are random).
func writeGGUF(path string, o Options) error {
	s := o.Shape
	md := []kv{
		{"general.architecture", "llama"},
		{"general.name", "gosling random"},
		{"general.alignment", uint32(ggufAlignment)},
		{"llama.context_length", uint32(s.SeqLen)},
		{"llama.embedding_length", uint32(s.Dim)},
		{"llama.block_count", uint32(s.Layers)},
		{"llama.feed_forward_length", uint32(s.Hidden)},
		{"llama.attention.head_count", uint32(s.Heads)},
		{"llama.attention.head_count_kv", uint32(s.KVHeads)},
		{"llama.attention.layer_norm_rms_epsilon", float32(s.NormEps)},
		{"llama.rope.freq_base", float32(s.RopeTheta)},
	}
	md = append(md, ggufTokenizer(s.Vocab)...)
	specs := s.tensors()

	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write gguf: %w", err)
	}
	cw := &countingWriter{w: bufio.NewWriterSize(f, 1<<20)}
	le := func(v any) { _ = binary.Write(cw, binary.LittleEndian, v) }
	str := func(v string) {
		le(uint64(len(v)))
		cw.Write([]byte(v))
	}
	cw.Write([]byte("GGUF"))
	le(uint32(3))
	le(uint64(len(specs)))
	le(uint64(len(md)))
	for _, e := range md {
		str(e.key)
		writeValue(cw, e.value, le, str)
	}
	offset := uint64(0)
	for _, t := range specs {
		d := o.dtypeOf(t)
		str(ggufNames.Replace(t.name))
		le(uint32(len(t.shape)))
		for _, dim := range reversed(t.shape) {
			le(uint64(dim))
		}
		le(ggmlTypes[d])
		le(offset)
		offset += alignUp(uint64(bytesOf(d, t)))
	}
	pad := func() {
		for cw.n%ggufAlignment != 0 {
			cw.Write([]byte{0})
		}
	}
	pad()
	for _, t := range specs {
		data, _ := o.encoded(t)
		cw.Write(data)
		pad()
	}
	if err := cw.w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("write gguf: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write gguf: %w", err)
	}
	return nil
}

func alignUp(n uint64) uint64 { return (n + ggufAlignment - 1) / ggufAlignment * ggufAlignment }

// writeValue writes a metadata value's type tag and value.
func writeValue(w *countingWriter, v any, le func(any), str func(string)) {
	const (
		typeUint32  = 4
		typeInt32   = 5
		typeFloat32 = 6
		typeString  = 8
		typeArray   = 9
	)
	switch x := v.(type) {
	case uint32:
		le(uint32(typeUint32))
		le(x)
	case float32:
		le(uint32(typeFloat32))
		le(math.Float32bits(x))
	case string:
		le(uint32(typeString))
		str(x)
	case []string:
		le(uint32(typeArray))
		le(uint32(typeString))
		le(uint64(len(x)))
		for _, s := range x {
			str(s)
		}
	case []float32:
		le(uint32(typeArray))
		le(uint32(typeFloat32))
		le(uint64(len(x)))
		le(x)
	case []int32:
		le(uint32(typeArray))
		le(uint32(typeInt32))
		le(uint64(len(x)))
		le(x)
	default:
		panic(fmt.Sprintf("gguf metadata value of type %T", v))
	}
}

type countingWriter struct {
	w *bufio.Writer
	n int
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += n
	return n, err
}
