package cuda_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/attention/gpu"
	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/device/cuda"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/model/llama"
	"github.com/gosling-ai/gosling/model/registry"
	"github.com/gosling-ai/gosling/tensor"
)

// BenchmarkFakeDryRun is the host time of one decode step's dry run
// (ModelOps.RunGraph runs it before every graph replay, with the GPU idle)
// for a 32-layer Llama with the splitkv CUDA backend, on the emulated GPU:
// the dry run enqueues nothing, so the emulation costs nothing but
// allocation bookkeeping and the figure is the real host cost.
func BenchmarkFakeDryRun(b *testing.B) {
	ck := dummyLlama(b, 32, tensor.F32)
	ops := cuda.NewFakeModelOps(b)
	forward := fakeDecodeStep(b, ck, ops)
	first, reason, err := ops.DryRun(forward)
	if err != nil || reason != "" {
		b.Fatalf("dry run: %v %s", err, reason)
	}
	b.ResetTimer()
	for range b.N {
		sig, _, err := ops.DryRun(forward)
		if err != nil || sig != first {
			b.Fatalf("dry run: signature %x, first %x, err %v", sig, first, err)
		}
	}
}

// dummyLlama is a Llama of random weights in dt, hidden 128, of the
// given depth.
func dummyLlama(t testing.TB, layers int, dt tensor.DType) *model.Checkpoint {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf(`{"architectures": ["LlamaForCausalLM"], "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": %d,
		"num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512, "max_position_embeddings": 1024, "rms_norm_eps": 1e-5}`, layers)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	ck, err := model.OpenDummy(dir, llama.WeightShapes, dt)
	if err != nil {
		t.Fatal(err)
	}
	return ck
}

// fakeDecodeStep builds ck's model on ops with the splitkv CUDA backend
// over the emulated GPU and returns a decode step of one request after a
// 16-token prefix, for dry runs.
func fakeDecodeStep(t testing.TB, ck *model.Checkpoint, ops *cuda.ModelOps) func() error {
	t.Helper()
	m, err := registry.Build(ck, ops)
	if err != nil {
		t.Fatal(err)
	}
	cache, attn := fakeSplitKV(t, m, ops, 1, 256, 2)
	seq, _ := cache.NewSeq()
	const prefix = 16
	if ok, err := cache.Grow(seq, prefix+1); !ok || err != nil {
		t.Fatal(ok, err)
	}
	batch := &forward.Batch{Mode: forward.Decode, KV: cache, ReqRows: []int32{int32(seq.Row)}, PrefixLens: []int32{prefix},
		ExtendLens: []int32{1}, InputIDs: []int32{5}, Positions: []int32{prefix},
		OutSlots: []int32{cache.Table.Row(seq.Row)[prefix]}, LogitRows: []int32{0}}
	if err := batch.Finalize(); err != nil {
		t.Fatal(err)
	}
	if err := attn.Plan(batch); err != nil {
		t.Fatal(err)
	}
	return func() error { _, err := m.Forward(batch, attn); return err }
}

// fakeSplitKV is the splitkv CUDA backend for m over the emulated GPU,
// on a device KV cache of tokens tokens in pages of pageSize for reqs
// requests, its outputs in the forward's arena as device/cudadev wires
// them.
func fakeSplitKV(t testing.TB, m model.Runnable, ops *cuda.ModelOps, pageSize, tokens, reqs int) (*kvcache.Cache, attention.Backend) {
	t.Helper()
	rt := gpu.NewRuntime(ops.Device(), ops.Kernels())
	rt.Forward = ops
	t.Cleanup(func() { rt.Close() })
	return deviceAttention(t, rt, gpu.SplitKVEntry, m.KVSpec(), m.AttentionLayers(), pageSize, tokens, reqs)
}

// deviceAttention is entry's backend on rt over a device KV cache of spec
// (tokens tokens in pages of pageSize for reqs requests), both closed
// with the test.
func deviceAttention(t testing.TB, rt *gpu.Runtime, entry attention.Entry, spec kvcache.Spec, layers []attention.Layer, pageSize, tokens, reqs int) (*kvcache.Cache, attention.Backend) {
	t.Helper()
	cache, err := kvcache.NewCacheWithPool(spec, pageSize, tokens, reqs, tokens, func(spec kvcache.Spec, slots, ps int) (*kvcache.Pool, error) {
		return kvcache.NewDevicePool(spec, slots, ps, rt.PoolMemory())
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cache.Pool.Free() })
	attn, err := entry.New(attention.Options{Device: "cuda", KV: cache, Layers: layers, Runtime: fakeRuntime{rt: rt}})
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := attn.(interface{ Close() error }); ok { // native holds nothing to close
		t.Cleanup(func() { c.Close() })
	}
	return cache, attn
}

// TestFakeActivationPeak: the dry run of a prefill allocates its
// activations and reports their peak (ModelOps.ActivationPeak), which is
// what the engine sizes the KV cache around. Each layer's activations
// go back to the forward's arena at its end (device.Scoped, the
// attention outputs included), so the peak of a model 4 times deeper is
// the same, and it grows with the tokens.
func TestFakeActivationPeak(t *testing.T) {
	peak := func(layers, tokens int) int64 {
		ck := dummyLlama(t, layers, tensor.F32)
		ops := cuda.NewFakeModelOps(t)
		m, err := registry.Build(ck, ops)
		if err != nil {
			t.Fatal(err)
		}
		cache, attn := fakeSplitKV(t, m, ops, 16, tokens, 1)
		seq, _ := cache.NewSeq()
		if ok, err := cache.Grow(seq, tokens); !ok || err != nil {
			t.Fatal(ok, err)
		}
		b := &forward.Batch{Mode: forward.Extend, KV: cache, ReqRows: []int32{int32(seq.Row)}, PrefixLens: []int32{0},
			ExtendLens: []int32{int32(tokens)}, LogitRows: []int32{int32(tokens - 1)}}
		for i := range tokens {
			b.InputIDs = append(b.InputIDs, int32(i%512))
			b.Positions = append(b.Positions, int32(i))
			b.OutSlots = append(b.OutSlots, cache.Table.Row(seq.Row)[i])
		}
		if err := b.Finalize(); err != nil {
			t.Fatal(err)
		}
		if err := attn.Plan(b); err != nil {
			t.Fatal(err)
		}
		p, err := ops.ActivationPeak(func() error { _, err := m.Forward(b, attn); return err })
		if err != nil {
			t.Fatal(err)
		}
		if st := ops.Device().Mem.Stats(); st.Cached != 0 {
			t.Errorf("%d bytes left in the allocator's cache after the measurement", st.Cached)
		}
		return p
	}
	shallow, deep := peak(2, 256), peak(8, 256)
	if shallow <= 0 || deep != shallow {
		t.Errorf("peak of a 256-token prefill: %d bytes with 2 layers, %d with 8; want equal and positive", shallow, deep)
	}
	// One layer's [T, ·] activations: at least q, k, v and the attention
	// output in float32 (hidden 128, 2 KV heads of 32).
	if min := int64(256 * 4 * (128 + 64 + 64 + 128)); shallow < min {
		t.Errorf("peak %d bytes, below one layer's q, k, v and output (%d)", shallow, min)
	}
	if longer := peak(2, 1024); longer < 3*shallow {
		t.Errorf("peak of a 1024-token prefill %d bytes, of 256 tokens %d: want about 4 times", longer, shallow)
	}
}

// TestFakeMoEDecodeRecords: decode steps of each mixture-of-experts
// reference model, routed on the device, run as CUDA graphs the way the
// engine runs them (ModelOps.RunGraph over the emulated GPU's stream
// capture): the first step's dry run and capture record the same
// operations, so it is captured, and the next steps replay that graph.
// With GOSLING_MOE_HOST_ROUTING=1 (the choice read back) the dry run
// refuses the step for the routing. The emulated GPU does not run
// attention kernels, so the work the steps enqueue is dropped unrun (and
// the host-routed step, which waits for its routing, is only dry run).
func TestFakeMoEDecodeRecords(t *testing.T) {
	for _, name := range []string{"qwen3_moe", "qwen2_moe", "mixtral", "gpt_oss", "deepseek_v3_mla_moe"} {
		t.Run(name, func(t *testing.T) {
			for _, host := range []bool{false, true} {
				if host {
					t.Setenv("GOSLING_MOE_HOST_ROUTING", "1")
				}
				ck, err := model.Open(shared.Path(t, "models/reference-tiny/"+name))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { ck.Close() })
				ops := cuda.NewFakeModelOps(t)
				step := fakeDecodeStep(t, ck, ops)
				if host {
					if _, reason, err := ops.DryRun(step); err != nil || !strings.Contains(reason, "MoE routing") {
						t.Errorf("host routing: dry run %v, refusal %q, want the routing's", err, reason)
					}
					continue
				}
				checkCapturedThenReplayed(t, ops, step)
			}
		})
	}
}

// fakeRuntime hands the emulated GPU's attention runtime to a CUDA backend
// through gpu.Provider, the one thing a backend asks of its
// attention.Options.Runtime; the benchmark drives the ModelOps itself.
type fakeRuntime struct {
	device.Runtime
	rt *gpu.Runtime
}

func (f fakeRuntime) AttentionRuntime() *gpu.Runtime { return f.rt }

// checkCapturedThenReplayed runs step three times through ops.RunGraph
// on the emulated GPU (its queued work dropped unrun): the first must be
// captured, the next two replay that graph.
func checkCapturedThenReplayed(t *testing.T, ops *cuda.ModelOps, step func() error) {
	t.Helper()
	for i, path := range []cuda.GraphPath{cuda.GraphCaptured, cuda.GraphReplayed, cuda.GraphReplayed} {
		run, err := ops.RunGraph(1, step)
		ops.DropQueuedWork()
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if run.Path != path {
			t.Errorf("step %d ran %v (%s), want %v", i, run.Path, run.Reason, path)
		}
	}
}
