package cuda

import (
	"errors"
	"testing"
)

// DryRun runs forward as RunGraph's dry run does (every stream operation
// signed, none enqueued, inputs staged) and returns the signature, for
// benchmarks of the host cost a graph replay still pays.
func (o *ModelOps) DryRun(forward func() error) (sig uint64, reason string, err error) {
	err = o.dev.Do(func() error {
		var err error
		sig, reason, err = o.recorded(recordDry, forward)
		return err
	})
	return
}

// The attention kernels a float32 decode step launches, known to the
// emulated GPU by name only: a dry run looks them up and skips them; run
// for real they fail, since the fake does not restate them.
func init() {
	names := []string{"attn_store_f32_f32", "attn_merge_f32", "attn_fused_f32_f32"}
	for _, d := range []string{"2_2_", "4_4_", "8_8_"} {
		for _, g := range []string{"g1", "g2", "g4", "g8"} {
			for _, k := range []string{"_k1", "_k2", "_k4"} {
				names = append(names, "attn_decode_f32_"+d+g+k)
			}
		}
	}
	// A bf16 model's verify steps over a bf16 cache: float32 queries
	// rounded to bf16 for the tensor-core kernels (TestFakeVerifyBF16Records).
	for _, d := range []string{"64", "128"} {
		names = append(names, "attn_fa2_bf16_d"+d)
	}
	names = append(names, "attn_mma64_bf16_bf16", "attn_mma32_bf16_bf16", "attn_merge_bf16")
	for _, name := range names {
		if _, ok := fakeKernels[name]; !ok {
			fakeKernels[name] = fakeKernel{0, func(*fakeGPU, string, [3]int, fakeArgs) error {
				return errors.New("fake: attention kernels are not emulated")
			}}
		}
	}
}

// NeedGPUModelOps is a ModelOps of weights in wdt on the test GPU (the
// test skips with one line without one), closed with the test: for the
// tests outside the package that drive ModelOps and the CUDA attention
// backends together.
func NeedGPUModelOps(t testing.TB, wdt DType) *ModelOps {
	t.Helper()
	dev, k := needKernels(t)
	_, lt := needLt(t)
	o := NewModelOps(dev, k, lt, dev.Stream, ModelOpsOptions{WeightDType: wdt})
	t.Cleanup(func() {
		if err := o.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return o
}

// FakeLaunches counts the launches of kernels whose names start with
// prefix on the emulated GPU under o (NewFakeModelOps).
func FakeLaunches(o *ModelOps, prefix string) int { return fakeLaunches(o, prefix) }

// FakeNoRowScales makes the emulated cuBLASLt under o (NewFakeModelOps)
// offer no algorithm for outer-vector scaled products, as cuBLASLt 13 on
// sm_90; set before o's first FP8 GEMM (plans are cached).
func FakeNoRowScales(o *ModelOps) {
	f := fakeOf(o)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.noRowScales = true
}
