package modeltest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/attention/native"
	"github.com/gosling-ai/gosling/device/cpu"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/tensor"
)

// Reference is a text model's reference.json: its prompt and transformers'
// log-probability of each next prompt token.
type Reference struct {
	InputIDs       []int     `json:"input_ids"`
	PromptLogprobs []float64 `json:"prompt_logprobs"`
}

// LoadReference reads dir's reference.json.
func LoadReference(t testing.TB, dir string) Reference {
	t.Helper()
	var ref Reference
	data, err := os.ReadFile(filepath.Join(dir, "reference.json"))
	if err == nil {
		err = json.Unmarshal(data, &ref)
	}
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

// PromptLogits runs one prefill of ids through m on the CPU with the
// native backend and returns the logits of every position, [len(ids)]
// rows of the vocabulary (copied).
func PromptLogits(t testing.TB, m model.Runnable, ids []int) [][]float32 {
	t.Helper()
	logits := prefill(t, m, ids, nil)
	out := make([][]float32, len(ids))
	for i := range out {
		out[i] = slices.Clone(logits.Row(i))
	}
	return out
}

// prefill runs ids through m in one prefill with the native backend,
// every position's logits wanted; extend, when set, adds to the batch
// (image embeddings, spans) before it is finalized.
func prefill(t testing.TB, m model.Runnable, ids []int, extend func(b *forward.Batch, attn attention.Backend)) tensor.T {
	t.Helper()
	w := cpu.NewWorkers(1)
	defer w.Close()
	n := len(ids)
	kv, err := kvcache.NewCache(m.KVSpec(), 1, n, 1, n)
	if err != nil {
		t.Fatal(err)
	}
	seq, _ := kv.NewSeq()
	if ok, err := kv.Grow(seq, n); !ok || err != nil {
		t.Fatalf("KV cache: %v", err)
	}
	attn, err := native.Entry.New(attention.Options{Device: "cpu", KV: kv, Runtime: cpu.NewRuntime(w)})
	if err != nil {
		t.Fatal(err)
	}
	b := &forward.Batch{Mode: forward.Extend, ReqRows: []int32{int32(seq.Row)}, PrefixLens: []int32{0}, ExtendLens: []int32{int32(n)}, KV: kv}
	slots := kv.Table.Row(seq.Row)
	for i, id := range ids {
		b.InputIDs = append(b.InputIDs, int32(id))
		b.Positions = append(b.Positions, int32(i))
		b.OutSlots = append(b.OutSlots, slots[i])
		b.LogitRows = append(b.LogitRows, int32(i))
	}
	if extend != nil {
		extend(b, attn)
	}
	if err := b.Finalize(); err != nil {
		t.Fatal(err)
	}
	if err := attn.Plan(b); err != nil {
		t.Fatal(err)
	}
	logits, err := m.Forward(b, attn)
	if err != nil {
		t.Fatal(err)
	}
	return logits
}
