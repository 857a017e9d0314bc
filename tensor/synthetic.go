package tensor

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"sync"
	"unsafe"
)

// Synthetic describes a weight whose values are generated, not stored (the
// random weights of --load-format dummy). Element i of the flat, row-major
// tensor is Value(i), a pure function of (Seed, i) (a counter-based
// generator: splitmix64's mix of Seed + i·φ), rounded to nearest even to the
// weight's DType. Any part of a synthetic weight can therefore be made
// independently and in any order: on every core of the host (Fill,
// FillParallel) or on a GPU, whose fill kernel (device/cuda/kernels/fill.cu)
// computes the same bits.
//
// A Weight with a Synthetic may leave Data nil; Weight.Materialize makes the
// bytes for consumers that need them. Converting a synthetic weight to
// another float dtype rounds the generator's float32 values to that dtype
// again (rather than the already rounded ones): both are equally random, and
// this way a device can fill a weight in whatever dtype it stores, with no
// host data at all.
type Synthetic struct {
	Seed uint64
	// Values are uniform in [Offset-Scale, Offset+Scale): Scale 0 is the
	// constant Offset (a norm's scale of 1).
	Scale, Offset float32
}

// splitmix64's constants: φ·2⁶⁴ steps the counter, the others mix.
const (
	synStep = 0x9e3779b97f4a7c15
	synMix1 = 0xbf58476d1ce4e5b9
	synMix2 = 0x94d049bb133111eb
)

// Value is element i before rounding to a dtype: Offset + Scale·u with u
// the top 24 bits of the mixed counter as a float32 uniform in [-1, 1)
// (exact), multiplied and then added, each rounded to nearest even (never
// fused, so the GPU computes the same float32).
func (s Synthetic) Value(i int) float32 {
	return s.at(s.Seed + uint64(i)*synStep)
}

// at is the value of counter z (Seed + i·synStep): loops step z by synStep.
func (s Synthetic) at(z uint64) float32 {
	z = (z ^ z>>30) * synMix1
	z = (z ^ z>>27) * synMix2
	z ^= z >> 31
	u := float32(int32(z>>40)-1<<23) * (1.0 / (1 << 23))
	return float32(s.Scale*u) + s.Offset // the conversion forbids an FMA
}

// Skip is the synthetic weight whose element i is s's element n+i: the
// part of s from element n on, as a synthetic weight a device still fills
// itself (a rank's contiguous shard of a dummy weight).
func (s Synthetic) Skip(n int) Synthetic {
	s.Seed += uint64(n) * synStep
	return s
}

// NameSeed is the seed of a named tensor: FNV-1a of the name, mixed.
func NameSeed(name string) uint64 {
	h := uint64(0xcbf29ce484222325)
	for i := 0; i < len(name); i++ {
		h ^= uint64(name[i])
		h *= 0x100000001b3
	}
	h = (h ^ h>>30) * synMix1
	h = (h ^ h>>27) * synMix2
	return h ^ h>>31
}

// syntheticDType reports whether synthetic weights can be stored as d.
func syntheticDType(d DType) error {
	switch d {
	case F32, F16, BF16:
		return nil
	}
	return fmt.Errorf("synthetic weights are F32, F16 or BF16, not %v", d)
}

// Fill stores elements [first, first+n) rounded to dt into dst, which
// holds n elements of dt (4n bytes for F32, 2n for F16 and BF16),
// little-endian. It runs on the calling goroutine; FillParallel splits the
// work over every core. It panics on other dtypes (Weight.Validate refuses
// them first) and on a dst of a partial element.
func (s Synthetic) Fill(dt DType, first int, dst []byte) {
	if err := syntheticDType(dt); err != nil {
		panic("tensor.Synthetic.Fill: " + err.Error())
	}
	size := 2
	if dt == F32 {
		size = 4
	}
	if len(dst)%size != 0 {
		panic(fmt.Sprintf("tensor.Synthetic.Fill: %d bytes is not a whole number of %v values", len(dst), dt))
	}
	n := len(dst) / size
	if n == 0 {
		return
	}
	z := s.Seed + uint64(first)*synStep
	if nativeLittleEndian && uintptr(unsafe.Pointer(&dst[0]))%uintptr(size) == 0 {
		if dt == F32 {
			out := unsafe.Slice((*uint32)(unsafe.Pointer(&dst[0])), n)
			for j := range out {
				out[j] = math.Float32bits(s.at(z))
				z += synStep
			}
			return
		}
		out := unsafe.Slice((*uint16)(unsafe.Pointer(&dst[0])), n)
		if dt == BF16 {
			for j := range out {
				out[j] = F32ToBF16(s.at(z))
				z += synStep
			}
		} else {
			for j := range out {
				out[j] = F32ToF16(s.at(z))
				z += synStep
			}
		}
		return
	}
	for j := range n {
		v := s.at(z)
		z += synStep
		switch dt {
		case F32:
			binary.LittleEndian.PutUint32(dst[4*j:], math.Float32bits(v))
		case BF16:
			binary.LittleEndian.PutUint16(dst[2*j:], F32ToBF16(v))
		default:
			binary.LittleEndian.PutUint16(dst[2*j:], F32ToF16(v))
		}
	}
}

// FillParallel is Fill split into chunks over GOMAXPROCS goroutines; the
// bytes are the same as Fill's (every element depends only on its index).
func (s Synthetic) FillParallel(dt DType, first int, dst []byte) {
	size := 2
	if dt == F32 {
		size = 4
	}
	if syntheticDType(dt) != nil || len(dst)%size != 0 {
		s.Fill(dt, first, dst) // which panics with the reason
		return
	}
	parallelChunks(len(dst)/size, func(lo, hi int) { s.Fill(dt, first+lo, dst[lo*size:hi*size]) })
}

// FillFloat32 writes elements [first, first+len(dst)) as a weight of dtype
// dt holds them, widened back to float32 (what DecodeInto of the filled
// bytes gives). It runs on every core for large dst.
func (s Synthetic) FillFloat32(dt DType, first int, dst []float32) {
	if err := syntheticDType(dt); err != nil {
		panic("tensor.Synthetic.FillFloat32: " + err.Error())
	}
	parallelChunks(len(dst), func(lo, hi int) {
		out := dst[lo:hi]
		switch dt {
		case F32:
			for j := range out {
				out[j] = s.Value(first + lo + j)
			}
		case BF16:
			for j := range out {
				out[j] = BF16ToF32(F32ToBF16(s.Value(first + lo + j)))
			}
		default:
			for j := range out {
				out[j] = F16ToF32(F32ToF16(s.Value(first + lo + j)))
			}
		}
	})
}

// syntheticChunk is the fewest elements one goroutine of a parallel fill
// takes (about 100 µs of work): smaller tensors fill on the caller.
const syntheticChunk = 1 << 16

// parallelChunks runs fn over [0, n) in contiguous chunks, on up to
// GOMAXPROCS goroutines.
func parallelChunks(n int, fn func(lo, hi int)) {
	splitRun(n, min(runtime.GOMAXPROCS(0), n/syntheticChunk), fn)
}

// splitRun runs fn over [0, n) cut into parts pieces, each on a goroutine
// of its own (on the caller's when parts <= 1).
func splitRun(n, parts int, fn func(lo, hi int)) {
	if parts <= 1 {
		if n > 0 {
			fn(0, n)
		}
		return
	}
	var wg sync.WaitGroup
	for p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(p*n/parts, (p+1)*n/parts)
		}()
	}
	wg.Wait()
}

// Materialize returns w with its bytes: w itself when it has Data or is
// neither synthetic nor lazy, else a copy whose Data is made from
// w.Synthetic or w.Lazy on every core (Synthetic is kept, so a device can
// still fill its own copy).
func (w Weight) Materialize() (Weight, error) {
	if w.Data != nil || w.Synthetic == nil && w.Lazy == nil {
		return w, nil
	}
	if err := w.Validate(); err != nil {
		return Weight{}, err
	}
	if w.Synthetic == nil {
		rowBytes, _ := w.DType.RowBytes(w.Cols())
		data := make([]byte, rowBytes*w.Rows())
		encodeRows(w, w.DType, rowBytes, data)
		w.Shape, w.Data, w.Lazy = append([]int(nil), w.Shape...), data, nil
		return w, nil
	}
	bytes, err := w.DType.RowBytes(w.NumElements())
	if err != nil {
		return Weight{}, fmt.Errorf("tensor %s: %w", w.Name, err)
	}
	w.Shape = append([]int(nil), w.Shape...)
	w.Data = make([]byte, bytes)
	w.Synthetic.FillParallel(w.DType, 0, w.Data)
	return w, nil
}
