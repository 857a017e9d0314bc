package gpu

import (
	"fmt"
	"slices"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/device/cuda"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/tensor"
)

// Activation dtypes the kernels take for q, k, v and the output.
var activationDTypes = []tensor.DType{tensor.F32, tensor.BF16, tensor.F16}

// CheckDevice is attention.CheckShapes for a CUDA backend: q, k and v
// (none for MLA) in device memory, in one of the dtypes the kernels take,
// and a KV pool in device memory. It returns their device views, which is
// all the backend's own code takes (an MLA layer's v is the zero Device).
func CheckDevice(q, k, v tensor.T, layer *attention.Layer, b *forward.Batch) (qd, kd, vd tensor.Device, err error) {
	var ds [3]tensor.Device
	shaped := [3]attention.Shaped{q, k, v}
	for i, t := range [3]tensor.T{q, k, v} {
		if i == 2 && layer.MLA {
			continue // attention.CheckShapes refuses a v
		}
		if ds[i], err = t.Device(); err != nil || !t.OnDevice() {
			return qd, kd, vd, fmt.Errorf("attention layer %d: %c is not on the GPU", layer.Index, "qkv"[i])
		}
		if t.DType != q.DType || !slices.Contains(activationDTypes, t.DType) {
			return qd, kd, vd, fmt.Errorf("attention layer %d: %c is %v; q, k, v must share one of F32, BF16, F16", layer.Index, "qkv"[i], t.DType)
		}
		shaped[i] = ds[i]
	}
	if err := attention.CheckShapes(shaped[0], shaped[1], shaped[2], layer, b); err != nil {
		return qd, kd, vd, err
	}
	if b.Mode != forward.Encode {
		if pool := b.KV.Pool; pool.Device == nil || layer.Index >= len(pool.Device.K) {
			return qd, kd, vd, fmt.Errorf("attention layer %d: the KV pool is not in GPU memory (use kvcache.NewDevicePool)", layer.Index)
		}
	}
	return ds[0], ds[1], ds[2], nil
}

// KVSource is where a layer's keys and values are read: the pool, or the
// forward's own k and v in Encode mode. Row j of the plan's page mapping
// starts at K + j·KStride elements (V likewise); an MLA layer's V is K.
type KVSource struct {
	K, V             cuda.DevicePtr
	KStride, VStride int
	DType            tensor.DType
	KScale, VScale   float32 // fp8 dequantisation (1 otherwise)
}

// SourceOf resolves the KV source of a layer.
func SourceOf(p *Plan, k, v tensor.Device, layer *attention.Layer, b *forward.Batch) KVSource {
	if p.Encode {
		s := KVSource{K: cuda.DevicePtr(k.Ptr), KStride: k.Cols(), DType: k.DType, KScale: 1, VScale: 1}
		s.V, s.VStride = s.K, s.KStride
		if !layer.MLA {
			s.V, s.VStride = cuda.DevicePtr(v.Ptr), v.Cols()
		}
		return s
	}
	pool := b.KV.Pool
	li := layer.Index
	s := KVSource{K: cuda.DevicePtr(pool.Device.K[li]), KStride: pool.Spec.KWidth(), DType: pool.Spec.DType, KScale: 1, VScale: 1}
	s.V, s.VStride = s.K, s.KStride
	if !layer.MLA {
		s.V, s.VStride = cuda.DevicePtr(pool.Device.V[li]), pool.Spec.VWidth()
	}
	if s.DType == tensor.FP8E4M3 {
		s.KScale, s.VScale = pool.KScale[li], pool.VScale[li]
		if layer.MLA { // the value is the latent key's prefix, stored with the key's scale
			s.VScale = s.KScale
		}
	}
	return s
}

// StoreKV writes the new tokens' k and v into the pool at the plan's
// OutSlots (nothing in Encode mode). FP8 values are stored divided by the
// layer's scale, as kvcache.Pool does on the CPU.
func (rt *Runtime) StoreKV(p *Plan, k, v tensor.Device, layer *attention.Layer, pool *kvcache.Pool) error {
	if p.Encode || p.NumTokens == 0 {
		return nil
	}
	if _, err := KernelSuffix(k.DType); err != nil {
		return err
	}
	if _, err := KernelSuffix(pool.Spec.DType); err != nil {
		return err
	}
	li := layer.Index
	kInv, vInv := float32(1), float32(1)
	if pool.Spec.DType == tensor.FP8E4M3 {
		kInv, vInv = 1/pool.KScale[li], 1/pool.VScale[li]
	}
	var vCache, vSrc cuda.DevicePtr
	vStride := 0
	if !layer.MLA {
		vCache, vSrc, vStride = cuda.DevicePtr(pool.Device.V[li]), cuda.DevicePtr(v.Ptr), v.Cols()
	}
	return rt.launchAttnStore(cuda.LaunchConfig{Grid: cuda.D1(p.NumTokens), Block: cuda.D1(128)}, k.DType, pool.Spec.DType,
		attnStoreArgs{KCache: cuda.DevicePtr(pool.Device.K[li]), VCache: vCache, K: cuda.DevicePtr(k.Ptr), V: vSrc, Slots: p.OutSlots,
			KWidth: pool.Spec.KWidth(), VWidth: pool.Spec.VWidth(), KStride: k.Cols(), VStride: vStride,
			KInvScale: kInv, VInvScale: vInv})
}

// NewOutput allocates the attention output [NumTokens, NumHeads*HeadDimV]
// in dt; the caller owns it (Runtime.FreeOutput).
func (rt *Runtime) NewOutput(p *Plan, layer *attention.Layer, dt tensor.DType) (tensor.Device, error) {
	cols := layer.NumHeads * layer.HeadDimV
	buf, err := rt.allocOutput(p.NumTokens * cols * elemBytes(dt))
	if err != nil {
		return tensor.Device{}, err
	}
	return tensor.Device{Shape: []int{p.NumTokens, cols}, Ptr: uintptr(buf.Ptr), DType: dt}, nil
}

// allocOutput is the memory of an output (scratch: the forward's when
// set).
func (rt *Runtime) allocOutput(bytes int) (cuda.Buffer, error) { return rt.scratch(bytes) }

// FreeOutput gives back an output NewOutput made that will not be
// returned (a failed launch).
func (rt *Runtime) FreeOutput(t tensor.Device) { rt.release(cuda.Buffer{Ptr: cuda.DevicePtr(t.Ptr)}) }

// Kernel picks the fused attention kernel.
type Kernel int

const (
	// KernelAuto: tensor cores for 16-bit activations on sm_80 and newer
	// (when the tile fits in shared memory), else the CUDA-core kernel.
	KernelAuto Kernel = iota
	// KernelCUDACore: float32 arithmetic throughout (float32 activations).
	KernelCUDACore
)

// Split cuts every request's keys into Splits chunks of Chunk keys, each
// attended separately and merged through their log-sum-exps; Splits <= 1
// attends in one pass.
type Split struct{ Splits, Chunk int }

// mmaTile is the key tile and shared memory of the tensor-core kernel for
// a head dim, or ok=false when the kernel does not apply.
func (rt *Runtime) mmaTile(dk int) (bn, smem int, ok bool) {
	if rt.Dev.Info.Arch() < 80 {
		return 0, 0, false
	}
	dkp := (dk + 15) &^ 15
	optin := max(rt.Dev.Info.MaxSharedOptin, 48<<10)
	for _, bn := range []int{64, 32} {
		smem := 2 * (mmaRows*(dkp+8) + bn*(dkp+8) + bn*(mmaDVChunk+8)) // attn_mma's Launch note
		if smem <= optin && (bn == 32 || dk <= 256) {
			return bn, smem, true
		}
	}
	return 0, 0, false
}

// usesFA2 reports whether Attend with KernelAuto runs attn_fa2: sm_80 or
// newer, 16-bit queries over a cache (or, encoding, k and v) of the same
// dtype, dk == dv of 64 or 128 (f16: 64 only), a power-of-two page size, no custom mask.
// attn_mma takes the other tensor-core cases.
func (rt *Runtime) usesFA2(p *Plan, layer *attention.Layer, q, kv tensor.DType) bool {
	d := layer.HeadDim
	return rt.Dev.Info.Arch() >= 80 && (q == tensor.BF16 || (q == tensor.F16 && d == 64)) && kv == q &&
		(d == 64 || d == 128) && tiledExtend(p, layer)
}

// tiledExtend is what attn_fa2 and attn_fa3 both need: no MLA, equal key
// and value head dims, no custom mask, a power-of-two page size.
func tiledExtend(p *Plan, layer *attention.Layer) bool {
	return !layer.MLA && layer.HeadDim == layer.HeadDimV && p.Mask == 0 && p.PageSize > 0 && p.PageSize&(p.PageSize-1) == 0
}

// usesFA3 reports whether Attend with KernelAuto runs attn_fa3: an sm_90
// GPU whose kernels were built for sm_90a, 16-bit queries over a cache of
// the same dtype (or bf16 queries over an fp8 cache at head dim 64 or
// 128), dk == dv of 64, 128 or 256, a power-of-two page size and no custom
// mask.
func (rt *Runtime) usesFA3(p *Plan, layer *attention.Layer, q, kv tensor.DType) bool {
	d := layer.HeadDim
	cache := kv == q || (kv == tensor.FP8E4M3 && q == tensor.BF16 && d != 256)
	return rt.hopper && !rt.NoHopper && (q == tensor.BF16 || q == tensor.F16) && cache &&
		(d == 64 || d == 128 || d == 256) && tiledExtend(p, layer)
}

// fa3SharedMem is attn_fa3's dynamic shared memory at head dim d: Q, the
// K/V stages (F3_STAGES, F3_BN) and, over an fp8 cache, the staging rows
// of one K and one V tile. The kernel declares it 1024-aligned, so it
// needs no slack for the swizzled tiles.
func fa3SharedMem(d int, fp8 bool) int {
	keys := fa3Keys(d)
	n := (fa3Rows + 2*fa3Stages(d)*keys) * d * 2
	if fp8 {
		n += 2 * keys * d
	}
	return n
}

// UsesMMA reports whether Attend with KernelAuto runs on tensor cores.
func (rt *Runtime) UsesMMA(layer *attention.Layer, dt tensor.DType) bool {
	_, _, ok := rt.mmaTile(layer.HeadDim)
	return ok && (dt == tensor.BF16 || dt == tensor.F16)
}

// decodeKeysPerStep is the attn_decode variant's keys per warp step (KU):
// several for a batch, one for a lone request, whose many splits already
// fill the GPU (see the kernel).
func decodeKeysPerStep(tokens, dpl int) int {
	switch {
	case tokens < 2:
		return 1
	case dpl > 4:
		return 2
	}
	return 4
}

// decodeGroupKernel is the attn_decode variant (G: 1, 2, 4 or 8 query
// heads of registers per KV head) that holds group query heads.
func decodeGroupKernel(group int) int {
	g := 1
	for g < group {
		g *= 2
	}
	return g
}

// UsesDecode reports whether Attend with KernelAuto runs a decode kernel
// (one new token per request, no custom mask, equal key and value head
// dims of 64, 128 or 256): the tensor-core one (decodeTC) or, for float32
// queries with at most eight query heads per KV head, attn_decode.
func (rt *Runtime) UsesDecode(p *Plan, layer *attention.Layer, dt tensor.DType) bool {
	dk := layer.HeadDim
	if p.Encode || p.MaxExtend != 1 || p.Mask != 0 || layer.MLA || dk != layer.HeadDimV || (dk != 64 && dk != 128 && dk != 256) {
		return false
	}
	if _, ok := rt.decodeTC(p, layer, dt); ok {
		return true
	}
	return dt == tensor.F32 && layer.NumHeads/layer.NumKVHeads <= decodeGroupMax
}

// kvDType is the dtype the plan's keys are read in: the pool's, or in
// Encode mode the activations' (q's dtype, which k and v share).
func kvDType(p *Plan, q tensor.DType) tensor.DType {
	if p.Encode || p.Batch == nil || p.Batch.KV == nil || p.Batch.KV.Pool == nil {
		return q
	}
	return p.Batch.KV.Pool.Spec.DType
}

// dtcKernel is a launch of attn_dtc (the tensor-core decode kernel):
// its query and KV dtypes, head dim and head tiles, shared memory, and
// the bytes of one key's K and V row as stored.
type dtcKernel struct {
	si, sk         tensor.DType
	d, nh          int
	smem, keyBytes int
}

// decodeTC picks the tensor-core decode kernel for a decode plan: sm_80 or
// newer, a bf16 or fp8 KV cache (queries in float32, or bf16 over bf16,
// or 16-bit over fp8), a power-of-two page size, and at most 16 query heads per
// KV head (8 at head dim 256), the B tiles' columns (NH of attn_dtc).
func (rt *Runtime) decodeTC(p *Plan, layer *attention.Layer, dt tensor.DType) (dtcKernel, bool) {
	if rt.Dev.Info.Arch() < 80 || p.Batch == nil || p.Batch.KV == nil || p.Batch.KV.Pool == nil {
		return dtcKernel{}, false
	}
	kv := kvDType(p, dt)
	switch {
	case kv == tensor.FP8E4M3:
	case kv == tensor.BF16:
		if dt != tensor.F32 && dt != kv {
			return dtcKernel{}, false
		}
	default:
		return dtcKernel{}, false
	}
	d, group := layer.HeadDim, layer.NumHeads/layer.NumKVHeads
	nh := (group + 7) / 8
	if nh > 2 || (d == 256 && nh > 1) || p.PageSize <= 0 || p.PageSize&(p.PageSize-1) != 0 {
		return dtcKernel{}, false
	}
	if _, err := KernelSuffix(dt); err != nil {
		return dtcKernel{}, false
	}
	// Shared memory (dtc_smem in attn_kernels.cu): per warp STAGES stages
	// of a K and a V tile of DTC_KEYS keys as stored, fp8 with a bf16 copy
	// of one; decode_finish reuses it for the warps' states.
	kb, stages, conv := 2, dtcStages, 0
	if kv == tensor.FP8E4M3 {
		kb, stages, conv = 1, dtcStagesFP8, 2*dtcKeys*d*2
	}
	if d == 256 {
		stages = dtcStages256
	}
	smem := decodeWarps * (stages*2*dtcKeys*d*kb + conv)
	smem = max(smem, decodeWarps*group*(d+2)*4)
	return dtcKernel{si: dt, sk: kv, d: d, nh: nh, smem: smem, keyBytes: 2 * d * kb}, true
}

// mlaKernel is a launch of attn_mla (m tiles of 16 query heads per block)
// or, wg set, of attn_mla_wg (64 heads per block), and its shared memory.
type mlaKernel struct {
	mt, smem int
	wg       bool
}

// heads is the query heads one block serves.
func (k mlaKernel) heads() int {
	if k.wg {
		return mlaWGHeads
	}
	return 16 * k.mt
}

// mlaWGSharedMem is attn_mla_wg's dynamic shared memory (MLA_WG_SMEM): Q,
// the K tile stages, P's fragments and the rows' rescale factors. The
// kernel declares it 1024-aligned, so it needs no slack; its static
// barriers take another 1024 bytes.
const mlaWGSharedMem = (mlaWGHeads+mlaWGStages*mlaWGKeys)*mlaRow + 128*16*4 + 128*2*4

// mlaWGMinHeads is the fewest query heads attn_mla_wg serves: its block
// is 64 heads, and at 16 or 32 attn_mla reads at the memory's rate
// already (docs/gpu-attention.md), where most of the wgmma rows would be
// padding.
const mlaWGMinHeads = 33

// mlaDecode picks the MLA decode kernel: sm_80 or newer, a decode plan
// (one new token per request, no custom mask) of an MLA layer of
// DeepSeek's latent shape, bf16 queries over a bf16 cache, no softcap, a
// power-of-two page size. On sm_90a (the module holds attn_fa3's Hopper
// kernels) above 32 heads it is attn_mla_wg, unless NoHopper or NoMLAWG;
// else attn_mla with up to 64 heads per block (16, 32 or 64).
func (rt *Runtime) mlaDecode(p *Plan, layer *attention.Layer, dt tensor.DType) (mlaKernel, bool) {
	if rt.Dev.Info.Arch() < 80 || p.Encode || p.MaxExtend != 1 || p.Mask != 0 || !layer.MLA || layer.NumKVHeads != 1 ||
		layer.HeadDim != mlaDK || layer.HeadDimV != mlaDV || layer.LogitSoftcap != 0 || dt != tensor.BF16 ||
		p.PageSize <= 0 || p.PageSize&(p.PageSize-1) != 0 || kvDType(p, dt) != tensor.BF16 {
		return mlaKernel{}, false
	}
	if rt.hopper && !rt.NoHopper && !rt.NoMLAWG && layer.NumHeads >= mlaWGMinHeads && mlaWGSharedMem+1024 <= rt.Dev.Info.MaxSharedOptin {
		return mlaKernel{smem: mlaWGSharedMem, wg: true}, true
	}
	mt := 4
	switch {
	case layer.NumHeads <= 16:
		mt = 1
	case layer.NumHeads <= 32:
		mt = 2
	}
	// mla_smem in attn_kernels.cu: Q, the K tile stages, P, the row sums.
	smem := 16*mt*mlaRow + mlaStages(mt)*mlaKeys*mlaRow + 16*mt*mlaPRow + (mlaKeys/8)*16*mt*4
	if smem > rt.Dev.Info.MaxSharedOptin {
		return mlaKernel{}, false
	}
	return mlaKernel{mt: mt, smem: smem}, true
}

// Blocks is the number of thread blocks Attend launches per split, the
// measure of parallelism a split policy works from.
func (rt *Runtime) Blocks(p *Plan, layer *attention.Layer, dt tensor.DType) int {
	if rt.UsesDecode(p, layer, dt) {
		return p.NumTokens * layer.NumKVHeads
	}
	if mk, ok := rt.mlaDecode(p, layer, dt); ok {
		return p.NumTokens * ((layer.NumHeads + mk.heads() - 1) / mk.heads())
	}
	if rt.usesFA3(p, layer, dt, kvDType(p, dt)) || rt.usesFA2(p, layer, dt, kvDType(p, dt)) {
		// Both tile 128 rows.
		group := layer.NumHeads / layer.NumKVHeads
		n := 0
		for r := range p.NumReqs {
			ext := int(p.Words[p.ReqAt+r*reqFields+reqExtLen])
			n += (ext*group + fa2Rows - 1) / fa2Rows
		}
		return n * layer.NumKVHeads
	}
	if rt.UsesMMA(layer, dt) {
		group := layer.NumHeads / layer.NumKVHeads
		n := 0
		for r := range p.NumReqs {
			ext := int(p.Words[p.ReqAt+r*reqFields+reqExtLen])
			n += (ext*group + mmaRows - 1) / mmaRows
		}
		return n * layer.NumKVHeads * ((layer.HeadDimV + mmaDVChunk - 1) / mmaDVChunk)
	}
	return p.NumTokens * layer.NumHeads
}

// Attend runs the fused attention of one layer over the plan's requests
// and returns the output [NumTokens, NumHeads*HeadDimV] in q's dtype.
func (rt *Runtime) Attend(p *Plan, q, k, v tensor.Device, layer *attention.Layer, b *forward.Batch, kern Kernel, split Split) (tensor.Device, error) {
	return rt.attendInto(p, q, k, v, layer, b, kern, split, false)
}

// StoresKV reports a plan whose decode kernel stores the new tokens' k and
// v itself (AttendStoring): attn_dtc and attn_decode (UsesDecode), and
// attn_mla_wg for the latent row.
func (rt *Runtime) StoresKV(p *Plan, layer *attention.Layer, dt tensor.DType) bool {
	if p.Encode {
		return false
	}
	if rt.UsesDecode(p, layer, dt) {
		return true
	}
	mk, ok := rt.mlaDecode(p, layer, dt)
	return ok && mk.wg
}

// AttendStoring is Attend for a plan whose decode kernel stores k and v
// (StoresKV), inside that kernel instead of by StoreKV: one launch fewer
// per layer.
func (rt *Runtime) AttendStoring(p *Plan, q, k, v tensor.Device, layer *attention.Layer, b *forward.Batch, split Split) (tensor.Device, error) {
	if !rt.StoresKV(p, layer, q.DType) {
		return tensor.Device{}, fmt.Errorf("attention layer %d: the store rides only on the decode kernels", layer.Index)
	}
	if k.DType != q.DType {
		return tensor.Device{}, fmt.Errorf("attention layer %d: the decode kernels store k in q's dtype (%v), not %v", layer.Index, q.DType, k.DType)
	}
	return rt.attendInto(p, q, k, v, layer, b, KernelAuto, split, true)
}

func (rt *Runtime) attendInto(p *Plan, q, k, v tensor.Device, layer *attention.Layer, b *forward.Batch, kern Kernel, split Split, store bool) (tensor.Device, error) {
	out, err := rt.NewOutput(p, layer, q.DType)
	if err != nil || p.NumTokens == 0 {
		return out, err
	}
	if err := rt.attend(p, q, k, v, layer, b, kern, split, out, store); err != nil {
		rt.FreeOutput(out)
		return tensor.Device{}, err
	}
	return out, nil
}

func (rt *Runtime) attend(p *Plan, q, k, v tensor.Device, layer *attention.Layer, b *forward.Batch, kern Kernel, split Split, out tensor.Device, store bool) error {
	src := SourceOf(p, k, v, layer, b)
	if _, err := KernelSuffix(q.DType); err != nil {
		return err
	}
	if _, err := KernelSuffix(src.DType); err != nil {
		return err
	}
	splits, chunk := max(split.Splits, 1), split.Chunk
	if splits > 1 && chunk <= 0 {
		return fmt.Errorf("split of %d chunks needs a positive chunk size", splits)
	}
	if splits > 1 && splits > maxGridYZ {
		return fmt.Errorf("%d splits over the grid limit", splits)
	}
	dk, dv, H := layer.HeadDim, layer.HeadDimV, layer.NumHeads
	sinks, err := rt.SinksPtr(layer)
	if err != nil {
		return err
	}
	// Sinks are applied by the merge, from the log-sum-exp of the keys:
	// every kernel then writes partials, even for one split.
	var partO, partLSE cuda.Buffer
	if splits > 1 || sinks != 0 {
		if partO, err = rt.scratch(splits * p.NumTokens * H * dv * 4); err != nil {
			return err
		}
		defer rt.release(partO)
		if partLSE, err = rt.scratch(splits * p.NumTokens * H * 4); err != nil {
			return err
		}
		defer rt.release(partLSE)
	}
	args := attnArgs{Q: cuda.DevicePtr(q.Ptr), QStride: q.Cols(),
		KCache: src.K, VCache: src.V, KStride: src.KStride, VStride: src.VStride, KScale: src.KScale, VScale: src.VScale,
		Out: cuda.DevicePtr(out.Ptr), OutStride: out.Cols(), PartO: partO.Ptr, PartLSE: partLSE.Ptr,
		Req: p.Req, TokReq: p.TokReq, TokHi: p.TokHi, TokMask: p.TokMask, Mask: p.Mask, Pages: p.Pages, PageSize: p.PageSize,
		NHeads: H, NKVHeads: layer.NumKVHeads, Dk: dk, Dv: dv, SmScale: layer.Scale, Softcap: layer.LogitSoftcap,
		Window: layer.SlidingWindow, NSplits: splits, Chunk: chunk, NTokens: p.NumTokens}
	merged := false // the decode kernel's last split merged
	// The decode kernels' arguments; attn_dtc and attn_decode add the
	// fused KV store and the in-kernel merge below.
	dargs := decodeArgs{Q: cuda.DevicePtr(q.Ptr), QStride: q.Cols(),
		KCache: src.K, VCache: src.V, KStride: src.KStride, VStride: src.VStride, KScale: src.KScale, VScale: src.VScale,
		Out: cuda.DevicePtr(out.Ptr), OutStride: out.Cols(), PartO: partO.Ptr, PartLSE: partLSE.Ptr,
		Req: p.Req, TokReq: p.TokReq, TokHi: p.TokHi, Pages: p.Pages, PageSize: p.PageSize,
		NHeads: H, NKVHeads: layer.NumKVHeads, SmScale: layer.Scale, Softcap: layer.LogitSoftcap,
		Window: layer.SlidingWindow, NSplits: splits, Chunk: chunk, NTokens: p.NumTokens}
	if mk, ok := rt.mlaDecode(p, layer, q.DType); ok && kern == KernelAuto {
		cfg := cuda.LaunchConfig{Grid: cuda.Dim3{X: (H + mk.heads() - 1) / mk.heads(), Y: p.NumTokens, Z: splits}, Block: cuda.D1(32 * mlaWarps),
			SharedMem: mk.smem}
		if cfg.Grid.Y > maxGridYZ {
			return fmt.Errorf("attention grid %v over the limit", cfg.Grid)
		}
		if mk.wg {
			cfg.Block = cuda.D1(mlaWGThreads)
			if store {
				dargs.KNew, dargs.KnStride, dargs.Slots = cuda.DevicePtr(k.Ptr), k.Cols(), p.OutSlots
			}
			err = rt.launchAttnMLAWG(cfg, q.DType, dargs)
			if err == nil {
				rt.mu.Lock()
				rt.mlaWGLaunches++
				rt.mu.Unlock()
			}
		} else {
			err = rt.launchAttnMLA(cfg, q.DType, mk.mt, dargs)
		}
	} else if kern == KernelAuto && rt.UsesDecode(p, layer, q.DType) {
		group := H / layer.NumKVHeads
		var kNew, vNew, slots, counters cuda.DevicePtr
		kInv, vInv := float32(1), float32(1)
		if store {
			kNew, vNew, slots = cuda.DevicePtr(k.Ptr), cuda.DevicePtr(v.Ptr), p.OutSlots
			if src.DType == tensor.FP8E4M3 {
				kInv, vInv = 1/src.KScale, 1/src.VScale
			}
		}
		// The merging block keeps its weights in the kernel's shared memory.
		if splits > 1 && sinks == 0 && splits <= decodeWarps*(dv+2) && rt.splitCounters.Ptr != 0 && p.NumTokens*layer.NumKVHeads <= splitCounterCap {
			counters, merged = rt.splitCounters.Ptr, true
		}
		dargs.KNew, dargs.VNew, dargs.KnStride, dargs.VnStride = kNew, vNew, k.Cols(), v.Cols()
		dargs.Slots, dargs.KInv, dargs.VInv, dargs.Counters = slots, kInv, vInv, counters
		cfg := cuda.LaunchConfig{Grid: cuda.Dim3{X: p.NumTokens, Y: layer.NumKVHeads, Z: splits}, Block: cuda.D1(32 * decodeWarps),
			SharedMem: decodeWarps * group * (dv + 2) * 4}
		if tc, ok := rt.decodeTC(p, layer, q.DType); ok {
			cfg.SharedMem = tc.smem
			err = rt.launchAttnDTC(cfg, tc.si, tc.sk, tc.d, tc.nh, dargs)
			if err != nil || partO.Ptr == 0 || merged {
				return err
			}
			return rt.merge(p, out, partO, partLSE, splits, H, dv, q.DType, sinks)
		}
		dpl := dk / 32
		ku := decodeKeysPerStep(p.NumTokens, dpl)
		g := decodeGroupMax // the one-key-at-a-time kernel comes for every group size at once
		if ku > 1 {
			g = decodeGroupKernel(group)
		}
		err = rt.launchAttnDecode(cfg, src.DType, dpl, dpl, g, ku, dargs)
	} else if fa3, fa2 := rt.usesFA3(p, layer, q.DType, src.DType), rt.usesFA2(p, layer, q.DType, src.DType); kern == KernelAuto && (fa3 || fa2) {
		// Both tile 128 GQA-packed rows (fa2Rows == fa3Rows).
		group := H / layer.NumKVHeads
		tiles := (p.MaxExtend*group + fa2Rows - 1) / fa2Rows
		cfg := cuda.LaunchConfig{
			Grid:      cuda.Dim3{X: tiles * splits, Y: p.NumReqs, Z: layer.NumKVHeads},
			Block:     cuda.D1(fa2Rows),
			SharedMem: (fa2Rows + 4*fa2Keys(dk)) * dk * 2,
		}
		if cfg.Grid.Y > maxGridYZ || cfg.Grid.Z > maxGridYZ {
			return fmt.Errorf("attention grid %v over the limit", cfg.Grid)
		}
		switch {
		case !fa3:
			err = rt.launchAttnFA2(cfg, q.DType, dk, args)
		case src.DType == tensor.FP8E4M3:
			cfg.Block, cfg.SharedMem = cuda.D1(fa3Threads), fa3SharedMem(dk, true)
			err = rt.launchAttnFA3FP8(cfg, q.DType, dk, fa3Args{attnArgs: args})
		default:
			cfg.Block, cfg.SharedMem = cuda.D1(fa3Threads), fa3SharedMem(dk, false)
			s := fa3Shape{D: dk, Heads: H, KVHeads: layer.NumKVHeads, PageSize: p.PageSize, DType: src.DType,
				Q: cuda.DevicePtr(q.Ptr), QStride: q.Cols(), Tokens: p.NumTokens, K: src.K, V: src.V, KStride: src.KStride, VStride: src.VStride}
			if !p.Encode {
				s.Slots = p.Batch.KV.Pool.NumSlots
			} else {
				s.PageSize = 0 // the forward's own k and v, through the identity plan
			}
			err = rt.launchAttnFA3(cfg, q.DType, dk, rt.fa3Launch(args, s))
		}
	} else if bn, smem, ok := rt.mmaTile(dk); ok && kern == KernelAuto && (q.DType == tensor.BF16 || q.DType == tensor.F16) {
		group := H / layer.NumKVHeads
		tiles := (p.MaxExtend*group + mmaRows - 1) / mmaRows
		cfg := cuda.LaunchConfig{
			Grid:      cuda.Dim3{X: tiles * splits, Y: p.NumReqs, Z: layer.NumKVHeads * ((dv + mmaDVChunk - 1) / mmaDVChunk)},
			Block:     cuda.D1(mmaThreads),
			SharedMem: smem,
		}
		if cfg.Grid.Y > maxGridYZ || cfg.Grid.Z > maxGridYZ {
			return fmt.Errorf("attention grid %v over the limit", cfg.Grid)
		}
		err = rt.launchAttnMMA(cfg, bn, q.DType, src.DType, args)
	} else {
		if dv > fusedMaxDV {
			return fmt.Errorf("attention layer %d: HeadDimV %d is over the CUDA-core kernel's %d", layer.Index, dv, fusedMaxDV)
		}
		cfg := cuda.LaunchConfig{Grid: cuda.Dim3{X: p.NumTokens, Y: H, Z: splits}, Block: cuda.D1(fusedThreads), SharedMem: (dk + fusedWarps*(dv+2)) * 4}
		err = rt.launchAttnFused(cfg, q.DType, src.DType, args)
	}
	if err != nil || partO.Ptr == 0 || merged {
		return err
	}
	return rt.merge(p, out, partO, partLSE, splits, H, dv, q.DType, sinks)
}

// merge combines split partials into out (attn_merge), scaling each row by
// its head's sink share when sinks (device [heads] logits) is set.
func (rt *Runtime) merge(p *Plan, out tensor.Device, partO, partLSE cuda.Buffer, splits, heads, dv int, dt tensor.DType, sinks cuda.DevicePtr) error {
	return rt.launchAttnMerge(cuda.LaunchConfig{Grid: cuda.Dim3{X: p.NumTokens, Y: heads, Z: 1}, Block: cuda.D1(128), SharedMem: splits * 4}, dt,
		attnMergeArgs{Out: cuda.DevicePtr(out.Ptr), OutStride: out.Cols(), PartO: partO.Ptr, PartLSE: partLSE.Ptr,
			NSplits: splits, NTokens: p.NumTokens, NHeads: heads, Dv: dv, Sinks: sinks})
}

const maxGridYZ = 65535

// ChooseSplit is the split-KV policy: enough chunks that blocks·splits
// fill the GPU about waves times over (blocksPerSplit from Blocks), chunks
// of at least minChunk keys, a multiple of 64 (the kernel's key tile), and
// at most maxSplits of them.
func ChooseSplit(sms, blocksPerSplit, maxSeq int) Split {
	return chooseSplit(sms, blocksPerSplit, maxSeq, 64)
}

// ChooseDecodeSplit is ChooseSplit for the decode kernel, which has no key
// tile: chunks of 16 keys, so that a short context still spreads over the
// GPU (a warp walks its keys one after another, so fewer keys per block
// is less latency).
func ChooseDecodeSplit(sms, blocksPerSplit, maxSeq int) Split {
	return chooseSplit(sms, blocksPerSplit, maxSeq, 16)
}

// ChooseStreamSplit is the split policy of a kernel that streams its keys
// at the memory's rate (the tensor-core decode). An SM's time is the
// blocks it runs times each block's bytes plus a fixed cost per block
// (filling its pipeline, writing its partials); an SM left with a single
// block keeps too few rows in flight and runs at loneRate of its
// bandwidth; and the last block of each (token, KV head) merges the
// splits' partials (partialBytes each) at mergeRate of an SM's rate, a
// serial tail. It picks the split count (up to 64, chunks of at least 64
// keys, a multiple of 16) that minimises the sum.
func ChooseStreamSplit(sms, blocksPerSplit, maxSeq, keyBytes, partialBytes int) Split {
	const (
		perBlock  = 64 << 10 // bytes' worth of fixed cost per block
		loneRate  = 0.85
		mergeRate = 0.25
		maxSplits = 64
		minChunk  = 64
	)
	if blocksPerSplit <= 0 || sms <= 0 || maxSeq <= minChunk {
		return Split{Splits: 1}
	}
	best, bestCost := 1, 0.0
	for s := 1; s <= maxSplits && (maxSeq+s-1)/s >= minChunk; s++ {
		perSM := (blocksPerSplit*s + sms - 1) / sms
		cost := float64(perSM) * (float64(maxSeq)*float64(keyBytes)/float64(s) + perBlock)
		if perSM == 1 {
			cost /= loneRate
		}
		if s > 1 {
			cost += float64(s*partialBytes) / mergeRate
		}
		if s == 1 || cost < bestCost*0.98 { // a clear gain only
			best, bestCost = s, cost
		}
	}
	return FixedSplit(maxSeq, best)
}

// ChooseWaveSplit is the split policy of a kernel that holds one block
// per SM (attn_mla_wg, whose shared memory is the SM's): its blocks run in
// waves of sms, each streaming its chunk of keys (keyBytes a key) at one
// SM's rate after a pipeline fill worth fillBytes; with splits, each block
// also writes its float32 partials (partialBytes), which attn_merge reads
// back spread over every SM. It picks the split count (up to 64, chunks of
// at least 64 keys) that minimises the sum: splits that fill idle SMs in
// the same wave pay for themselves, a second wave or the partials' round
// trip for the same keys does not.
func ChooseWaveSplit(sms, blocksPerSplit, maxSeq, keyBytes, fillBytes, partialBytes int) Split {
	const (
		maxSplits = 64
		minChunk  = 64
	)
	if blocksPerSplit <= 0 || sms <= 0 || maxSeq <= minChunk {
		return Split{Splits: 1}
	}
	best, bestCost := Split{Splits: 1}, 0.0
	for n := 1; n <= maxSplits && (maxSeq+n-1)/n >= minChunk; n++ {
		sp := FixedSplit(maxSeq, n)
		chunk := maxSeq
		if sp.Splits > 1 {
			chunk = sp.Chunk
		}
		blocks := blocksPerSplit * sp.Splits
		waves := (blocks + sms - 1) / sms
		keys := (chunk + minChunk - 1) / minChunk * minChunk // whole tiles of 64 keys
		cost := float64(waves) * float64(keys*keyBytes+fillBytes)
		if sp.Splits > 1 {
			cost += float64(waves*partialBytes) + 2*float64(blocks)*float64(partialBytes)/float64(sms)
		}
		if n == 1 || cost < bestCost*0.98 { // a clear gain only
			best, bestCost = sp, cost
		}
	}
	return best
}

// chooseSplit: chunks of at least (and a multiple of) minChunk keys.
func chooseSplit(sms, blocksPerSplit, maxSeq, minChunk int) Split {
	const (
		waves     = 4
		maxSplits = 64
	)
	if blocksPerSplit <= 0 || maxSeq <= minChunk {
		return Split{Splits: 1}
	}
	want := (waves*sms + blocksPerSplit - 1) / blocksPerSplit
	want = min(want, maxSplits, (maxSeq+minChunk-1)/minChunk)
	if want <= 1 {
		return Split{Splits: 1}
	}
	chunk := (maxSeq + want - 1) / want
	chunk = (chunk + minChunk - 1) / minChunk * minChunk
	splits := (maxSeq + chunk - 1) / chunk
	if splits <= 1 {
		return Split{Splits: 1}
	}
	return Split{Splits: splits, Chunk: chunk}
}
