package cuda

import "fmt"

// GemvMaxRows is the most rows of x the skinny-linear kernel (kernels/gemv.cu)
// takes; larger batches go to cuBLASLt.
const GemvMaxRows = 8

const (
	gemvWarps     = 8 // GEMV_WARPS
	gemvMaxGroup  = 3 // matrices per launch
	gemvWantWarps = 8192
	// gemvBlocksPerSM blocks of GEMV_WARPS warps stay resident per SM (32
	// warps: enough loads in flight to cover the memory latency); the grid
	// strides over the rows beyond.
	gemvBlocksPerSM = 4
)

// gemvApplies reports whether Linear of rows rows by m runs on the skinny
// kernel: a decode-sized batch, float32 or bf16 weights, rows of whole
// 16-byte groups, and a 16-byte aligned x.
func gemvApplies(rows int, m *Matrix, x DevicePtr) bool {
	return rows >= 1 && rows <= GemvMaxRows && m.in%8 == 0 && (m.dtype == F32 || m.dtype == BF16) && uintptr(x)%16 == 0
}

// GemvTarget is one matrix of a Gemv launch and where its result goes.
type GemvTarget struct {
	Y, W, Bias DevicePtr // y [m, Out] float32; w [Out, in]; bias [Out] float32 or 0
	Out        int
}

// gemvSplit is how many warps share a row: enough that the launch has
// about gemvWantWarps warps, while each share keeps at least four 16-byte
// loads per lane.
func gemvSplit(rows, in int) int {
	ks := 1
	for ks < gemvWarps && rows*ks < gemvWantWarps && in/(2*ks*32*8) >= 4 {
		ks *= 2
	}
	return ks
}

// gemvStagedBytes bounds the shared memory of gemv_bf16_xs (x staged as
// bf16), within the 48 KiB every launch may use.
const gemvStagedBytes = 48 << 10

// gemvStages reports whether float32 x goes straight to the bf16 kernel,
// staged in shared memory, instead of through a converted copy.
func gemvStages(m, in int, wdt DType) bool { return wdt == BF16 && 2*m*in <= gemvStagedBytes }

// Gemv sets y_i = x·w_iᵀ + bias_i for up to three matrices sharing x, for
// 1 <= m <= GemvMaxRows rows of x, in one launch.
//
//	x: [m, in] in xdt: the weights' dtype wdt (F32 or BF16), or F32 with
//	   BF16 weights when gemvStages (rounded to bf16 in shared memory)
func (k *Kernels) Gemv(s Stream, x DevicePtr, xdt DType, m, in int, wdt DType, ts ...GemvTarget) error {
	if m < 1 || m > GemvMaxRows || in%8 != 0 || len(ts) == 0 || len(ts) > gemvMaxGroup {
		return fmt.Errorf("gemv: %d rows of %d into %d matrices (at most %d rows and %d matrices; in a multiple of 8)", m, in, len(ts), GemvMaxRows, gemvMaxGroup)
	}
	var name string
	smem := 0
	switch {
	case wdt == F32 && xdt == F32:
		name = "gemv_f32"
	case wdt == BF16 && xdt == BF16:
		name = "gemv_bf16"
	case wdt == BF16 && xdt == F32 && gemvStages(m, in, wdt):
		name, smem = "gemv_bf16_xs", 2*m*in
	default:
		return fmt.Errorf("gemv: weights in %v, x in %v (%d×%d)", wdt, xdt, m, in)
	}
	rows := 0
	for _, t := range ts {
		if t.Out < 1 {
			return fmt.Errorf("gemv: a matrix of %d rows", t.Out)
		}
		rows += t.Out
	}
	ks := gemvSplit(rows, in)
	args := new(Args).Ptr(x).Int32(m).Int32(in).Int32(ks)
	for i := range gemvMaxGroup {
		var t GemvTarget
		if i < len(ts) {
			t = ts[i]
		}
		args.Ptr(t.Y).Ptr(t.W).Ptr(t.Bias).Int32(t.Out)
	}
	perBlock := gemvWarps / ks
	blocks := (rows + perBlock - 1) / perBlock
	if sms := k.dev.Info.SMs; sms > 0 {
		perSM := gemvBlocksPerSM
		if k.gemvBlocksPerSM > 0 {
			perSM = k.gemvBlocksPerSM
		}
		blocks = min(blocks, sms*perSM)
	}
	return k.launch(name, LaunchConfig{Grid: D1(blocks), Block: D1(32 * gemvWarps), SharedMem: smem}, s, args)
}
