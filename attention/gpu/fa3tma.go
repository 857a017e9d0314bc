package gpu

import (
	"fmt"

	"github.com/gosling-ai/gosling/device/cuda"
	"github.com/gosling-ai/gosling/tensor"
)

// attn_fa3's producer loads a launch's K/V tiles, and Q, either by the
// tensor memory accelerator (cp.async.bulk.tensor through tensor maps) or
// by a cp.async gather through the page table (kernels/attn_kernels.cu,
// "Hopper prefill/extend"). The kernel's tma argument says which; this
// file decides it and describes the maps.

const (
	fa3TMAKV = 1 // tma bit 0: K/V tiles of whole page runs by the accelerator
	fa3TMAQ  = 2 // tma bit 1: Q too
	// fa3TMAMinPage is the smallest page a box copies: a page run of 16
	// rows of 128 bytes keeps every box's shared-memory start 2 KiB
	// aligned, on the 1 KiB atoms of the 128-byte swizzle.
	fa3TMAMinPage = 16
	// fa3Panel is the columns of one swizzled panel of a Q, K or V tile
	// (128 bytes of a 16-bit row): a box's inner dim.
	fa3Panel = 64
	// fa3TMAAlign is the alignment asked of a mapped tensor's base.
	fa3TMAAlign = 128
)

// fa3Shape is what decides an attn_fa3 launch's loads: head dim, heads,
// the pool's page size and the 16-bit dtype q and the cache share; q
// (Tokens rows of QStride elements, heads of D) and the pool's K and V
// (Slots rows of KStride / VStride elements, KV heads of D).
type fa3Shape struct {
	D, Heads, KVHeads, PageSize int
	DType                       tensor.DType
	Q                           cuda.DevicePtr
	QStride, Tokens             int
	K, V                        cuda.DevicePtr
	KStride, VStride, Slots     int
}

// fa3Loads is what one launch's producer takes by the accelerator: the
// tma bits and the maps they name (described; encoded at launch).
type fa3Loads struct {
	bits    int
	q, k, v cuda.TiledMap
}

// fa3LoadsFor picks the loads of a launch. K and V go by the accelerator
// over pages of 16 keys or more (a multiple of 16: the kernel copies a
// tile as min(page, F3_BN) rows per box, a box per page run): 2D maps over
// the pool's [Slots, KVHeads·D] rows, boxes of 64 columns × that run, the
// 128-byte swizzle. Q goes by it too when a GQA group is a power of two
// (so that the 128 packed rows of a block are exactly F3_BM/group tokens
// × group heads): a 3D map over q's [Tokens, Heads, D], boxes of 64
// columns × group heads × F3_BM/group tokens. Every map must meet the
// driver's rules and start 128-byte aligned; otherwise the gather runs.
func fa3LoadsFor(s fa3Shape) fa3Loads {
	if s.PageSize < fa3TMAMinPage || s.PageSize%fa3TMAMinPage != 0 || s.D%fa3Panel != 0 ||
		(s.DType != tensor.BF16 && s.DType != tensor.F16) || s.KVHeads <= 0 || s.Heads%s.KVHeads != 0 {
		return fa3Loads{}
	}
	run := min(s.PageSize, fa3Keys(s.D))
	kv := func(base cuda.DevicePtr, stride int) cuda.TiledMap {
		return cuda.TiledMap{DType: s.DType, Base: base, Dims: []uint64{uint64(s.KVHeads * s.D), uint64(s.Slots)},
			Strides: []uint64{uint64(2 * stride)}, Box: []uint32{fa3Panel, uint32(run)}, Swizzle128: true}
	}
	l := fa3Loads{k: kv(s.K, s.KStride), v: kv(s.V, s.VStride)}
	if !fa3Mappable(l.k) || !fa3Mappable(l.v) {
		return fa3Loads{}
	}
	l.bits = fa3TMAKV
	if group := s.Heads / s.KVHeads; group&(group-1) == 0 && group <= fa3Rows {
		l.q = cuda.TiledMap{DType: s.DType, Base: s.Q, Dims: []uint64{uint64(s.D), uint64(s.Heads), uint64(s.Tokens)},
			Strides: []uint64{uint64(2 * s.D), uint64(2 * s.QStride)}, Box: []uint32{fa3Panel, uint32(group), uint32(fa3Rows / group)},
			Swizzle128: true}
		if fa3Mappable(l.q) {
			l.bits |= fa3TMAQ
		}
	}
	return l
}

func fa3Mappable(m cuda.TiledMap) bool { return m.Base%fa3TMAAlign == 0 && m.Validate() == nil }

// fa3Launch is attn_fa3's arguments for a launch whose shared extend
// arguments are args: the loads fa3LoadsFor picks (none with NoTMA or over
// an fp8 cache, which the producer stages and widens), their maps encoded.
// A map the driver refuses leaves its load to the gather, and the first
// such error in TMAError.
func (rt *Runtime) fa3Launch(args attnArgs, s fa3Shape) fa3Args {
	a := fa3Args{attnArgs: args}
	if rt.NoTMA {
		return a
	}
	l := fa3LoadsFor(s)
	if l.bits&fa3TMAKV != 0 {
		k, errK := rt.tensorMap(l.k)
		v, errV := rt.tensorMap(l.v)
		if errK != nil || errV != nil {
			rt.noteTMAError(errK, errV)
			return a
		}
		a.TmK, a.TmV, a.Tma = k, v, fa3TMAKV
		rt.mu.Lock()
		rt.tmaLaunches++
		rt.mu.Unlock()
	}
	if l.bits&fa3TMAQ != 0 {
		if q, err := rt.tensorMap(l.q); err == nil {
			a.TmQ, a.Tma = q, a.Tma|fa3TMAQ
		} else {
			rt.noteTMAError(err)
		}
	}
	return a
}

// tmapKey is a TiledMap as a map key.
type tmapKey struct {
	dtype   tensor.DType
	base    cuda.DevicePtr
	rank    int
	dims    [5]uint64
	strides [4]uint64
	box     [5]uint32
	swizzle bool
}

// tmapCacheCap bounds the runtime's encoded maps (a pool's K and V per
// layer, and the q views of recent launches); past it the cache restarts.
const tmapCacheCap = 512

// tensorMap encodes m, once per distinct map: a pool's maps are the same
// every forward, and a forward replayed as a CUDA graph encodes nothing
// while it is captured.
func (rt *Runtime) tensorMap(m cuda.TiledMap) (cuda.TensorMap, error) {
	k := tmapKey{dtype: m.DType, base: m.Base, rank: m.Rank(), swizzle: m.Swizzle128}
	copy(k.dims[:], m.Dims)
	copy(k.strides[:], m.Strides)
	copy(k.box[:], m.Box)
	rt.mu.Lock()
	tm, ok := rt.tmaps[k]
	rt.mu.Unlock()
	if ok {
		return tm, nil
	}
	// On the device thread, the device's context current.
	if err := rt.Dev.Do(func() (err error) { tm, err = cuda.EncodeTiled(m); return err }); err != nil {
		return tm, err
	}
	rt.mu.Lock()
	if rt.tmaps == nil || len(rt.tmaps) >= tmapCacheCap {
		rt.tmaps = map[tmapKey]cuda.TensorMap{}
	}
	rt.tmaps[k] = tm
	rt.mu.Unlock()
	return tm, nil
}

func (rt *Runtime) noteTMAError(errs ...error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	for _, err := range errs {
		if err != nil && rt.tmaErr == nil {
			rt.tmaErr = fmt.Errorf("attn_fa3 gathers instead of using the tensor memory accelerator: %w", err)
		}
	}
}

// TMALaunches is the number of attn_fa3 launches whose K/V tiles the
// tensor memory accelerator loaded, and TMAError the first tensor map the
// driver refused (nil if none): what tests and benchmarks read to tell
// which producer ran.
func (rt *Runtime) TMALaunches() (int64, error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.tmaLaunches, rt.tmaErr
}
