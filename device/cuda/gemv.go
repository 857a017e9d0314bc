package cuda

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"

	"github.com/gosling-ai/gosling/device"
)

// GemvMaxRows and gemvWarps are generated from kernels/kernels.decl.
const (
	gemvMaxGroup  = 3 // matrices per launch
	gemvWantWarps = 8192
	// gemvBlocksPerSM blocks of GEMV_WARPS warps stay resident per SM (32
	// warps: enough loads in flight to cover the memory latency); the grid
	// strides over the rows beyond.
	gemvBlocksPerSM = 4
)

// gemvRowLimit is the most rows of x that go to the skinny kernels
// rather than cuBLASLt. The kernels take up to GemvMaxRows, but each row
// costs them another pass over x in shared memory per weight, while
// cuBLASLt's tuned algorithms (blaslt_tune.go) stay at the weight-read
// time: past one row cuBLASLt is as fast or faster. GOSLING_GEMV_MAX_ROWS
// (0..GemvMaxRows) overrides it, to measure that crossing on a GPU.
var gemvRowLimit = func() int {
	if v, err := strconv.Atoi(os.Getenv("GOSLING_GEMV_MAX_ROWS")); err == nil && v >= 0 && v <= GemvMaxRows {
		return v
	}
	return 1
}()

// gemvRows reports whether a batch of rows rows of x is decode-sized: the
// skinny kernels take it.
func gemvRows(rows int) bool { return rows >= 1 && rows <= gemvRowLimit }

// gemvApplies reports whether Linear of rows rows by m runs on the skinny
// kernel: a decode-sized batch, weights the kernels take (gemvWeights),
// rows of whole 16-byte groups, and a 16-byte aligned x.
func gemvApplies(rows int, m *Matrix, x DevicePtr) bool {
	return gemvRows(rows) && m.in%8 == 0 && gemvWeights(m.dtype) && uintptr(x)%16 == 0
}

// gemvWeights reports whether the gemv kernels, the MoE ones included,
// take weights in dt: float32, bf16 or f16.
func gemvWeights(dt DType) bool { return dt == F32 || dt == BF16 || dt == F16 }

// gemvTakes reports whether the plain gemv kernels (Gemv, GemvSwiGLU)
// take weights in dt: gemvWeights' types and FP8 (e4m3, with scales).
func gemvTakes(dt DType) bool { return gemvWeights(dt) || dt == FP8E4M3 }

// gemvX is the type x comes in to a direct (unstaged) gemv over weights
// in dt, and that GemvSwiGLU writes its output in: the weights' own, or
// bf16 for FP8 (device.FP8Skinny rounds x to bf16).
func gemvX(dt DType) DType {
	if dt == FP8E4M3 {
		return BF16
	}
	return dt
}

// gemvRowsOf is gemvRows for weights in dt: FP8 matrices stream through
// the skinny kernels for every batch device.FP8Skinny names, where no
// cuBLASLt GEMM reads a byte a weight without a pass to quantise x.
func gemvRowsOf(rows int, dt DType) bool {
	if dt == FP8E4M3 {
		return rows >= 1 && rows <= device.FP8SkinnyRows
	}
	return gemvRows(rows)
}

// The FP8 rows the skinny kernels serve fit their accumulators.
const _ = uint(GemvMaxRows - device.FP8SkinnyRows)

// GemvTarget is one matrix of a Gemv launch and where its result goes.
type GemvTarget struct {
	Y, W, Bias DevicePtr // y [m, Out] float32; w [Out, in]; bias [Out] float32 or 0
	Out        int
	// Scale: an FP8 matrix's float32 scales, one per SBr×SBc block, SGc
	// blocks a row (one per row: SBr 1, SGc 1); 0 for other dtypes.
	Scale         DevicePtr
	SBr, SBc, SGc int
}

// gemvTarget is m as a Gemv target writing y.
func (m *Matrix) gemvTarget(y DevicePtr) GemvTarget {
	t := GemvTarget{Y: y, W: m.ptr, Bias: m.bias, Out: m.out}
	if f := m.fp8; f != nil {
		t.Scale, t.SBr, t.SBc, t.SGc = f.scale, f.br, f.bc, f.gc
	}
	return t
}

// gemvScales checks that ts (the matrices of one launch over weights in
// dt) carry scales exactly when they are FP8, in one block shape that
// the kernels take (whole 16-byte loads a block), and returns it.
func gemvScales(dt DType, in int, ts ...GemvTarget) (br, bc, gc int, err error) {
	if dt != FP8E4M3 {
		for _, t := range ts {
			if t.Scale != 0 {
				return 0, 0, 0, fmt.Errorf("gemv: scales with %v weights", dt)
			}
		}
		return 0, 0, 0, nil
	}
	br, bc, gc = ts[0].SBr, ts[0].SBc, ts[0].SGc
	for _, t := range ts {
		switch {
		case t.Scale == 0:
			return 0, 0, 0, errors.New("gemv: FP8 weights without scales")
		case t.SBr != br || t.SBc != bc || t.SGc != gc:
			return 0, 0, 0, fmt.Errorf("gemv: FP8 scale blocks of %dx%d and %dx%d in one launch", br, bc, t.SBr, t.SBc)
		}
	}
	if br < 1 || bc < 1 || bc%device.FP8Align != 0 || gc != (in+bc-1)/bc || in%device.FP8Align != 0 {
		return 0, 0, 0, fmt.Errorf("gemv: FP8 rows of %d in scale blocks of %dx%d, %d a row (multiples of %d)", in, br, bc, gc, device.FP8Align)
	}
	return br, bc, gc, nil
}

// gemvCheck checks the shape every gemv kernel takes (1..GemvMaxRows rows
// of a multiple of 8 values, gemvWeights, x within the shared
// memory when staged).
func gemvCheck(m, in int, wdt DType, staged bool) error {
	switch {
	case m < 1 || m > GemvMaxRows || in%8 != 0:
		return fmt.Errorf("gemv: %d rows of %d (at most %d rows; in a multiple of 8)", m, in, GemvMaxRows)
	case !gemvTakes(wdt):
		return fmt.Errorf("gemv: weights in %v", wdt)
	case staged && !gemvStages(m, in, wdt):
		return fmt.Errorf("gemv: %d×%d x staged for %v weights exceeds the kernels' shared memory", m, in, wdt)
	}
	return nil
}

// gemvSplit is how many warps share a row: enough that the launch has
// about gemvWantWarps warps, while each share keeps at least four 16-byte
// loads per lane. in counts 16-bit values (gemvSplitIn).
func gemvSplit(rows, in int) int {
	ks := 1
	for ks < gemvWarps && rows*ks < gemvWantWarpsEnv && in/(2*ks*32*8) >= 4 {
		ks *= 2
	}
	return ks
}

// gemvWantWarpsEnv is gemvWantWarps, or GOSLING_GEMV_WANT_WARPS
// (256..65536) to sweep it on a GPU.
var gemvWantWarpsEnv = func() int {
	if v, err := strconv.Atoi(os.Getenv("GOSLING_GEMV_WANT_WARPS")); err == nil && v >= 256 && v <= 65536 {
		return v
	}
	return gemvWantWarps
}()

// gemvSplitRounds is gemvSplit for gemv_<w>_swiglu, whose tasks (a gate
// row and its up row) are twice as long: among the splits that keep four
// loads per lane, the one whose tasks fill the resident warps in the most
// nearly whole number of rounds, so that few warps idle in the last one
// (14336 pair-rows on 4224 warps: 3.4 rounds unsplit, 6.8 split in two).
func gemvSplitRounds(rows, in, warps int) int {
	best, bestWaste := 1, math.Inf(1)
	for ks := 1; ks <= gemvWarps; ks *= 2 {
		if ks > 1 && in/(ks*32*8) < 4 {
			break
		}
		rounds := float64(rows*ks) / float64(warps)
		if waste := math.Ceil(rounds) / rounds; waste < bestWaste-0.02 {
			best, bestWaste = ks, waste
		}
	}
	return best
}

// gemvSplitIn is the width gemvSplit and gemvSplitRounds count for rows
// of in weights in dt: an FP8 row is the bytes of half as many 16-bit
// values.
func gemvSplitIn(in int, dt DType) int {
	if dt == FP8E4M3 {
		return in / 2
	}
	return in
}

// residentGemvWarps is how many gemv warps the GPU holds at once.
func (k *Kernels) residentGemvWarps() int {
	if sms := k.dev.Info.SMs; sms > 0 {
		return sms * k.gemvPerSM() * gemvWarps
	}
	return gemvWantWarps / 2
}

// gemvPerSM is how many gemv blocks stay resident per SM.
func (k *Kernels) gemvPerSM() int {
	if k.gemvBlocksPerSM > 0 {
		return k.gemvBlocksPerSM // a test's or benchmark's setting
	}
	return gemvBlocksPerSMEnv
}

// gemvBlocksPerSMEnv is gemvBlocksPerSM, or GOSLING_GEMV_BLOCKS_PER_SM
// (1..16) to sweep it on a GPU.
var gemvBlocksPerSMEnv = func() int {
	if v, err := strconv.Atoi(os.Getenv("GOSLING_GEMV_BLOCKS_PER_SM")); err == nil && v >= 1 && v <= 16 {
		return v
	}
	return gemvBlocksPerSM
}()

// gemvStagedBytes bounds the shared memory of the _fx kernels (x staged
// in the weights' type): the 48 KiB every launch may use, less 1 KiB for
// the kernel's static shared memory (the row shares and block_sum's
// partial sums).
const gemvStagedBytes = 47 << 10

// gemvStaticSmem bounds the gemv kernels' static shared memory: part
// [GEMV_WARPS][2][GEMV_MAX_ROWS] floats (gemv_sum of a gate/up pair) and
// block_sum's 32 partial sums.
const gemvStaticSmem = 4*gemvWarps*2*GemvMaxRows + 4*32

// GemvStage is how a _fx launch transforms float32 x on its way into
// shared memory: GemvRound or GemvRMSNorm (kernels/kernels.decl).
type GemvStage int32

// gemvFP8StaticSmem bounds the FP8 kernels' static shared memory: the
// other kernels', and gemv_tile_sum's part [GEMV_WARPS][2][2][32] floats.
const gemvFP8StaticSmem = gemvStaticSmem + 4*gemvWarps*2*2*32

// gemvFP8StagedBytes is gemvStagedBytes for the FP8 kernels, whose static
// shared memory is larger.
const gemvFP8StagedBytes = 48<<10 - gemvFP8StaticSmem

// gemvStages reports whether m rows of float32 x of width in fit staged
// for weights in wdt in shared memory (gemvStagedSize).
func gemvStages(m, in int, wdt DType) bool {
	if wdt == FP8E4M3 {
		return gemvStagedSize(m, in, wdt) <= gemvFP8StagedBytes
	}
	return gemvStagedSize(m, in, wdt) <= gemvStagedBytes
}

// gemvStagedSize is the shared memory of m rows of x of width in staged
// for weights in wdt: in their type, or for FP8 in bf16, each row padded
// as the larger of the two FP8 layouts asks (kernels/gemv.cu: in + 8
// values, gemv_fp8_ldt, on the tensor-core path; a multiple of 512,
// gemv_fp8_ld, on the CUDA cores').
func gemvStagedSize(m, in int, wdt DType) int {
	if wdt == FP8E4M3 {
		return 2 * m * max(in+8, (in+511)&^511)
	}
	return ElemSize(wdt) * m * in
}

// gemvFP8Tiled reports whether FP8 weights in scale blocks of sbr×sbc
// (sgc a row) take the tensor-core path (gemv_fp8_tiled in
// kernels/gemv.cu): one scale a row, or blocks of whole 8-row,
// 128-column tiles.
func gemvFP8Tiled(sbr, sbc, sgc int) bool { return sgc == 1 || (sbc%128 == 0 && sbr%8 == 0) }

// gemvTileSplit is how many warps share an FP8 tile of 8 rows (the
// tensor-core path) for units tiles of in columns, warps resident: as
// gemvSplitRounds, the split whose tasks fill the resident warps in the
// most nearly whole number of rounds, among those that keep each share at
// least 512 columns (four of the kernel's 128-column rounds).
func gemvTileSplit(units, in, warps int) int {
	best, bestWaste := 1, math.Inf(1)
	for ks := 1; ks <= gemvWarps; ks *= 2 {
		if ks > 1 && in/(512*ks) < 1 {
			break
		}
		rounds := float64(units*ks) / float64(warps)
		if waste := math.Ceil(rounds) / rounds; waste < bestWaste-0.02 {
			best, bestWaste = ks, waste
		}
	}
	return best
}

// GemvCall is one launch of the skinny-linear kernel: y_i = x·w_iᵀ + bias_i
// (y_i += … with Accumulate) for up to three matrices sharing x, for
// 1 <= M <= GemvMaxRows rows of x.
type GemvCall struct {
	// X is [M, In]. Staged: float32, transformed by Stage into shared
	// memory in the weights' type (requires gemvStages). Not staged: in
	// gemvX(WDType).
	X      DevicePtr
	Staged bool
	Stage  GemvStage
	Norm   DevicePtr // GemvRMSNorm: [In] float32
	Eps    float32
	M, In  int
	WDType DType // F32, BF16, F16 or FP8E4M3
	// Accumulate adds the result to y (a residual add) instead of
	// overwriting it.
	Accumulate bool
	Targets    []GemvTarget
}

// Gemv enqueues c on s.
func (k *Kernels) Gemv(s Stream, c GemvCall) error {
	if len(c.Targets) == 0 || len(c.Targets) > gemvMaxGroup {
		return fmt.Errorf("gemv: %d matrices (at most %d)", len(c.Targets), gemvMaxGroup)
	}
	if err := gemvCheck(c.M, c.In, c.WDType, c.Staged); err != nil {
		return err
	}
	launch := k.launchGemv
	smem := 0
	if c.Staged {
		if (c.Stage == GemvRMSNorm && c.Norm == 0) || c.Stage < GemvRound || c.Stage > GemvRMSNorm {
			return fmt.Errorf("gemv: stage %d without its operand", c.Stage)
		}
		launch = k.launchGemvStaged
		smem = gemvStagedSize(c.M, c.In, c.WDType)
	} else if c.Stage != GemvRound {
		return fmt.Errorf("gemv: stage %d needs staged float32 x", c.Stage)
	}
	rows, tiles := 0, 0
	for _, t := range c.Targets {
		if t.Out < 1 {
			return fmt.Errorf("gemv: a matrix of %d rows", t.Out)
		}
		rows += t.Out
		tiles += (t.Out + 7) / 8
	}
	sbr, sbc, sgc, err := gemvScales(c.WDType, c.In, c.Targets...)
	if err != nil {
		return err
	}
	ks := gemvSplit(rows, gemvSplitIn(c.In, c.WDType))
	if c.WDType == FP8E4M3 && gemvFP8Tiled(sbr, sbc, sgc) { // a warp's unit is a tile of 8 rows
		rows = tiles
		ks = gemvTileSplit(tiles, c.In, k.residentGemvWarps())
	}
	acc := 0
	if c.Accumulate {
		acc = 1
	}
	var t [gemvMaxGroup]GemvTarget
	copy(t[:], c.Targets)
	args := gemvArgs{X: c.X, Norm: c.Norm, Eps: c.Eps, Mode: int(c.Stage), Accumulate: acc, M: c.M, In: c.In, Ks: ks,
		Y0: t[0].Y, W0: t[0].W, B0: t[0].Bias, Out0: t[0].Out,
		Y1: t[1].Y, W1: t[1].W, B1: t[1].Bias, Out1: t[1].Out,
		Y2: t[2].Y, W2: t[2].W, B2: t[2].Bias, Out2: t[2].Out,
		S0: t[0].Scale, S1: t[1].Scale, S2: t[2].Scale, Sbr: sbr, Sbc: sbc, Sgc: sgc}
	return launch(s, k.gemvLaunch(rows, ks, smem), c.WDType, args)
}

// gemvLaunch is the launch shape for rows rows split ks ways: blocks of
// GEMV_WARPS warps, enough to fill the GPU once (the kernels stride over
// the rest).
func (k *Kernels) gemvLaunch(rows, ks, smem int) LaunchConfig {
	return k.gemvLaunchPer(rows, ks, smem, k.gemvPerSM())
}

// gemvLaunchPer is gemvLaunch for a kernel of which perSM blocks stay
// resident per SM.
func (k *Kernels) gemvLaunchPer(rows, ks, smem, perSM int) LaunchConfig {
	perBlock := gemvWarps / ks
	blocks := (rows + perBlock - 1) / perBlock
	if sms := k.dev.Info.SMs; sms > 0 {
		blocks = min(blocks, sms*perSM)
	}
	return LaunchConfig{Grid: D1(blocks), Block: D1(32 * gemvWarps), SharedMem: smem}
}

// GemvSwiGLUCall is one launch of gemv_<w>_swiglu: an MLP's gate and up
// projections of RMSNorm(x) with the gated activation in the epilogue,
//
//	H = silu(xn·Gateᵀ + bg) · (xn·Upᵀ + bu),  xn = x / sqrt(mean(x²) + Eps) · Norm
//
// X: [M, In] float32, staged (gemvStages); H: [M, Gate.Out] in
// gemvX(WDType), for the down projection to read directly. Gate.Y and
// Up.Y are unused.
type GemvSwiGLUCall struct {
	X, Norm  DevicePtr
	Eps      float32
	M, In    int
	WDType   DType // F32, BF16, F16 or FP8E4M3
	H        DevicePtr
	Gate, Up GemvTarget
}

// GemvSwiGLU enqueues c on s.
func (k *Kernels) GemvSwiGLU(s Stream, c GemvSwiGLUCall) error {
	err := gemvCheck(c.M, c.In, c.WDType, true)
	switch {
	case err != nil:
		return err
	case c.Gate.Out < 1 || c.Gate.Out != c.Up.Out:
		return fmt.Errorf("gemv swiglu: gate of %d rows, up of %d", c.Gate.Out, c.Up.Out)
	case c.Norm == 0 || c.H == 0:
		return errors.New("gemv swiglu: no norm or no output")
	}
	sbr, sbc, sgc, err := gemvScales(c.WDType, c.In, c.Gate, c.Up)
	if err != nil {
		return err
	}
	units := c.Gate.Out
	ks := gemvSplitRounds(units, gemvSplitIn(c.In, c.WDType), k.residentGemvWarps())
	if c.WDType == FP8E4M3 && gemvFP8Tiled(sbr, sbc, sgc) { // a warp's unit is a tile of 8 rows of each
		units = (c.Gate.Out + 7) / 8
		ks = gemvTileSplit(units, c.In, k.residentGemvWarps())
	}
	return k.launchGemvSwiGLU(s, k.gemvLaunch(units, ks, gemvStagedSize(c.M, c.In, c.WDType)), c.WDType,
		gemvSwiGLUArgs{X: c.X, Norm: c.Norm, Eps: c.Eps, M: c.M, In: c.In, Ks: ks, H: c.H,
			Wg: c.Gate.W, Bg: c.Gate.Bias, Wu: c.Up.W, Bu: c.Up.Bias, Inter: c.Gate.Out,
			Sg: c.Gate.Scale, Su: c.Up.Scale, Sbr: sbr, Sbc: sbc, Sgc: sgc})
}
