package cuda

import "testing"

// TestGPUQuantOps: compact Q8_0, Q4_K, Q5_K and Q6_K matrices on the GPU
// against the CPU's dequantised reference (quantOpsSuite): qembed and
// qwiden bit for bit, qgemv for decode batches (x staged with and
// without the norm, and read in place where 4·rows·in bytes exceed the
// shared memory; ks 1, 2 and 4 warps a row; a pair of rows straddling two
// matrices of a group; the MLP's gate and up with the SiLU·mul epilogue)
// and the widened GEMM for larger ones, within the
// accumulation-order bounds qgemvTol and qwideTol state.
func TestGPUQuantOps(t *testing.T) {
	dev, k := needKernels(t)
	_, lt := needLt(t)
	o := NewModelOps(dev, k, lt, dev.Stream, ModelOpsOptions{WeightDType: BF16, KeepQuantized: true})
	defer o.Close()
	quantOpsSuite(t, o, []quantShape{
		{outs: []int{1040, 256, 257}, in: 4096, rows: []int{1, 2, 3, 8, 16, 40}, inter: 1536},
		{outs: []int{512}, in: 14336, rows: []int{1, 4}},
		{outs: []int{3, 1}, in: 256, rows: []int{1, 7, 9}},
	})
}
