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

// Gemv sets y_i = x·w_iᵀ + bias_i for up to three matrices sharing x, for
// 1 <= m <= GemvMaxRows rows of x, in one launch.
//
//	x: [m, in] in wdt (F32 or BF16, the weights' dtype)
func (k *Kernels) Gemv(s Stream, x DevicePtr, m, in int, wdt DType, ts ...GemvTarget) error {
	if m < 1 || m > GemvMaxRows || in%8 != 0 || len(ts) == 0 || len(ts) > gemvMaxGroup {
		return fmt.Errorf("gemv: %d rows of %d into %d matrices (at most %d rows and %d matrices; in a multiple of 8)", m, in, len(ts), GemvMaxRows, gemvMaxGroup)
	}
	var name string
	switch wdt {
	case F32:
		name = "gemv_f32"
	case BF16:
		name = "gemv_bf16"
	default:
		return fmt.Errorf("gemv: weights in %v", wdt)
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
	return k.launch(name, LaunchConfig{Grid: D1(blocks), Block: D1(32 * gemvWarps)}, s, args)
}
