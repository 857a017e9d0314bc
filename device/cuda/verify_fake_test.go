package cuda_test

import (
	"fmt"
	"testing"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/attention/gpu"
	"github.com/gosling-ai/gosling/device/cuda"
	"github.com/gosling-ai/gosling/engine/runner"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/model/registry"
	"github.com/gosling-ai/gosling/spec"
	"github.com/gosling-ai/gosling/tensor"
)

// TestFakeVerifyBF16Records: verify steps of a bf16 model over a bf16
// KV cache run as CUDA graphs (ModelOps.RunGraph over the emulated GPU's
// stream capture): the first step's dry run and capture record the same
// operations, so it is captured, and the next steps replay it. Such a
// step's float32 queries (a verify batch's q, k and v come out of one
// fused float32 product) are rounded to bf16 for the tensor-core
// kernels in scratch memory that lives while the layer's bf16 output,
// which o_proj reads and the forward keeps, is taken: both must come
// from the forward's arena, or the allocator's free list comes back from
// each forward reordered and the capture finds its buffers at other
// addresses than its dry run ("the captured forward differs from its
// dry run"). Chains (no mask) and trees (the tree mask), one and two
// requests, flash and splitkv.
func TestFakeVerifyBF16Records(t *testing.T) {
	for _, entry := range []attention.Entry{gpu.FlashEntry, gpu.SplitKVEntry} {
		for _, shape := range []string{"chain", "tree"} {
			for _, reqs := range []int{1, 2} {
				t.Run(fmt.Sprintf("%s/%s/%d", entry.Name, shape, reqs), func(t *testing.T) {
					ck := dummyLlama(t, 3, tensor.BF16)
					ops := cuda.NewFakeModelOpsWith(t, cuda.ModelOpsOptions{WeightDType: tensor.BF16})
					m, err := registry.Build(ck, ops)
					if err != nil {
						t.Fatal(err)
					}
					rt := gpu.NewRuntime(ops.Device(), ops.Kernels())
					rt.Forward = ops
					t.Cleanup(func() { rt.Close() })
					kv := m.KVSpec()
					kv.DType = tensor.BF16
					cache, attn := deviceAttention(t, rt, entry, kv, m.AttentionLayers(), 16, 512, reqs)
					const prefix, n = 20, 6
					b := &forward.Batch{Mode: forward.TargetVerify, KV: cache}
					var trees []*spec.Tree
					for r := range reqs {
						seq, _ := cache.NewSeq()
						if ok, err := cache.Grow(seq, prefix+n); !ok || err != nil {
							t.Fatal(ok, err)
						}
						tree := spec.NewTree(1 + r)
						for i := 1; i < n; i++ {
							parent := i - 1
							if shape == "tree" {
								parent = (i - 1) / 2
							}
							tree.Add(parent, 10*r+i)
						}
						trees = append(trees, &tree)
						b.ReqRows = append(b.ReqRows, int32(seq.Row))
						b.PrefixLens = append(b.PrefixLens, prefix)
						b.ExtendLens = append(b.ExtendLens, n)
						runner.AppendTree(b, cache.Table.Row(seq.Row), prefix, &tree)
					}
					runner.AttachTreeMasks(b, trees)
					if (b.CustomMask != nil) != (shape == "tree") {
						t.Fatalf("%s: mask %v", shape, b.CustomMask != nil)
					}
					if err := b.Finalize(); err != nil {
						t.Fatal(err)
					}
					if err := attn.Plan(b); err != nil {
						t.Fatal(err)
					}
					checkCapturedThenReplayed(t, ops, func() error { _, err := m.Forward(b, attn); return err })
				})
			}
		}
	}
}
