package random

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
)

// writeLlama2C writes run.c's legacy checkpoint (see model/llama2c for the
// layout) and tokenizer.bin beside it.
func writeLlama2C(path string, o Options) error {
	s := o.Shape
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write llama2.c checkpoint: %w", err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	vocab := int32(s.Vocab)
	if !s.Tied {
		vocab = -vocab
	}
	header := []int32{int32(s.Dim), int32(s.Hidden), int32(s.Layers), int32(s.Heads), int32(s.KVHeads), vocab, int32(s.SeqLen)}
	if err := binary.Write(w, binary.LittleEndian, header); err != nil {
		f.Close()
		return err
	}
	floats := func(v []float32) {
		buf := make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(x))
		}
		w.Write(buf)
	}
	byName := map[string]spec{}
	for _, t := range s.tensors() {
		byName[t.name] = t
	}
	emit := func(name string) { floats(o.values(byName[name])) }
	perLayer := func(part string) {
		for l := range s.Layers {
			emit(fmt.Sprintf("model.layers.%d.%s.weight", l, part))
		}
	}
	emit("model.embed_tokens.weight")
	perLayer("input_layernorm")
	perLayer("self_attn.q_proj")
	perLayer("self_attn.k_proj")
	perLayer("self_attn.v_proj")
	perLayer("self_attn.o_proj")
	perLayer("post_attention_layernorm")
	perLayer("mlp.gate_proj")
	perLayer("mlp.down_proj")
	perLayer("mlp.up_proj")
	emit("model.norm.weight")
	half := s.HeadDim() / 2
	re, im := make([]float32, s.SeqLen*half), make([]float32, s.SeqLen*half)
	for p := range s.SeqLen {
		for i := range half {
			freq := 1 / math.Pow(s.RopeTheta, float64(2*i)/float64(s.HeadDim()))
			re[p*half+i] = float32(math.Cos(float64(p) * freq))
			im[p*half+i] = float32(math.Sin(float64(p) * freq))
		}
	}
	floats(re)
	floats(im)
	if !s.Tied {
		emit("lm_head.weight")
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("write llama2.c checkpoint: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write llama2.c checkpoint: %w", err)
	}
	return writeLlama2CTokenizer(filepath.Join(filepath.Dir(path), "tokenizer.bin"), s.Vocab)
}
