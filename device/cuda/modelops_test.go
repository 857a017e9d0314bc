package cuda

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/tensor"
)

// ModelOps tests that need no GPU: options, weight planning and conversion,
// the arena, the pinned staging, the upload cache and argument checks.
// The GPU half is modelops_gpu_test.go.

func TestModelOpsOptions(t *testing.T) {
	for _, tc := range []struct {
		dt DType
		ok bool
	}{{F32, true}, {BF16, true}, {F16, true}, {tensor.Q8_0, false}, {tensor.FP8E4M3, false}} {
		err := ModelOpsOptions{WeightDType: tc.dt}.Validate()
		if (err == nil) != tc.ok {
			t.Errorf("%v: Validate() = %v", tc.dt, err)
		}
	}
	oe := catchOpError(t, func() { NewModelOps(nil, nil, nil, 0, ModelOpsOptions{WeightDType: tensor.Q8_0}) })
	if oe.Op != "NewModelOps" || !strings.Contains(oe.Error(), "float16") {
		t.Errorf("NewModelOps with Q8_0 weights: %v", oe)
	}
}

// catchOpError runs fn, which must panic with an *OpError.
func catchOpError(t *testing.T, fn func()) (oe *OpError) {
	t.Helper()
	defer func() {
		p := recover()
		var ok bool
		if oe, ok = p.(*OpError); !ok {
			t.Fatalf("panic value %v (%T), want *OpError", p, p)
		}
	}()
	fn()
	return nil
}

// storedWeight encodes values as a stored weight of dtype dt.
func storedWeight(t *testing.T, vals []float32, dt DType, shape ...int) tensor.Weight {
	t.Helper()
	w, err := tensor.Convert(tensor.FromFloat32("w", vals, shape...), dt)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestPlanWeight(t *testing.T) {
	rng := rand.New(rand.NewPCG(30, 30))
	f32 := storedWeight(t, randn(rng, 10*64, 1), F32, 10, 64)
	for _, tc := range []struct {
		name  string
		w     tensor.Weight
		dt    DType
		chunk int
		want  weightPlan
		err   string
	}{
		{"f32 direct", f32, F32, 3 * 256, weightPlan{Out: 10, In: 64, DType: F32, RowBytes: 256, Direct: true, RowsPerChunk: 3}, ""},
		{"f32 to bf16", f32, BF16, 1 << 20, weightPlan{Out: 10, In: 64, DType: BF16, RowBytes: 128, RowsPerChunk: 8192}, ""},
		{"row over chunk", f32, F32, 100, weightPlan{Out: 10, In: 64, DType: F32, RowBytes: 256, Direct: true, RowsPerChunk: 1}, ""},
		{"q8_0", storedWeight(t, randn(rng, 4*64, 1), tensor.Q8_0, 4, 64), BF16, 1 << 20, weightPlan{Out: 4, In: 64, DType: BF16, RowBytes: 128, RowsPerChunk: 8192}, ""},
		{"1-D", tensor.FromFloat32("w", make([]float32, 8), 8), F32, 1 << 20, weightPlan{}, "2-D"},
		{"3-D", tensor.FromFloat32("w", make([]float32, 8), 2, 2, 2), F32, 1 << 20, weightPlan{}, "2-D"},
		{"zero rows", tensor.FromFloat32("w", nil, 0, 8), F32, 1 << 20, weightPlan{}, "2-D"},
		{"short data", tensor.Weight{Name: "w", DType: F32, Shape: []int{2, 4}, Data: make([]byte, 31)}, F32, 1 << 20, weightPlan{}, "needs 32 bytes"},
		{"q8_0 target", f32, tensor.Q8_0, 1 << 20, weightPlan{}, "not supported"},
		{"unknown dtype", tensor.Weight{Name: "w", DType: 99, Shape: []int{2, 4}, Data: make([]byte, 32)}, F32, 1 << 20, weightPlan{}, "cannot decode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := planWeight(tc.w, tc.dt, tc.chunk)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("plan = %+v, want %+v", got, tc.want)
			}
		})
	}
	p := weightPlan{Out: 10, RowsPerChunk: 3}
	if got, want := p.Chunks(), [][2]int{{0, 3}, {3, 6}, {6, 9}, {9, 10}}; !slices.Equal(got, want) {
		t.Errorf("chunks %v, want %v", got, want)
	}
}

// The chunked conversion must give the bytes of a whole-tensor conversion,
// from every stored dtype, and a direct plan must not copy.
func TestPlanWeightRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 31))
	const out = 37
	for _, src := range []DType{F32, F16, BF16, tensor.Q8_0, tensor.FP8E4M3, tensor.Q4_0, tensor.Q4_K, tensor.Q5_K, tensor.Q6_K, tensor.IQ4_XS} {
		in := 96 // whole Q8_0 blocks
		if tensor.BlockValues(src) > 32 {
			in = 256 // one K-quant super-block
		}
		vals := randn(rng, out*in, 1)
		for _, dst := range []DType{F32, BF16, F16} {
			t.Run(fmt.Sprintf("%v_to_%v", src, dst), func(t *testing.T) {
				w := storedWeight(t, vals, src, out, in)
				plan, err := planWeight(w, dst, 5*in*ElemSize(dst)+7) // 5 rows a chunk, 8 chunks
				if err != nil {
					t.Fatal(err)
				}
				if plan.RowsPerChunk != 5 || len(plan.Chunks()) != 8 {
					t.Fatalf("plan %+v, %d chunks", plan, len(plan.Chunks()))
				}
				var got []byte
				for _, c := range plan.Chunks() {
					b, err := plan.rows(w, c[0], c[1])
					if err != nil {
						t.Fatal(err)
					}
					if len(b) != (c[1]-c[0])*plan.RowBytes {
						t.Fatalf("chunk %v: %d bytes", c, len(b))
					}
					if plan.Direct && unsafe.SliceData(b) != &w.Data[c[0]*plan.RowBytes] {
						t.Errorf("direct chunk %v is a copy", c)
					}
					got = append(got, b...)
				}
				want, err := tensor.Convert(w, dst)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want.Data) || len(got) != plan.Bytes() {
					t.Errorf("converted bytes differ from tensor.Convert (%d vs %d bytes)", len(got), len(want.Data))
				}
			})
		}
	}
}

func TestArena(t *testing.T) {
	mem := newFakeMemory(0)
	alloc := NewAllocator(mem)
	a := newArena(alloc)
	sizes := []int{100, 4096, 100, 0, 70000}
	step := func() []DevicePtr {
		var ptrs []DevicePtr
		for _, n := range sizes {
			b, err := a.alloc(n)
			if err != nil {
				t.Fatal(err)
			}
			if b.Ptr == 0 {
				t.Fatal("null buffer")
			}
			ptrs = append(ptrs, b.Ptr)
		}
		return ptrs
	}
	first := step()
	if n, bytes := a.held(); n != len(sizes) || bytes != 100+4096+100+1+70000 {
		t.Errorf("held %d buffers, %d bytes", n, bytes)
	}
	if err := a.reset(); err != nil {
		t.Fatal(err)
	}
	if st := alloc.Stats(); st.InUse != 0 {
		t.Errorf("after reset %d bytes in use", st.InUse)
	}
	// A forward repeating the same sizes gets the same addresses, from the cache.
	before := alloc.Stats().DeviceAllocs
	for range 3 {
		if got := step(); !slices.Equal(got, first) {
			t.Errorf("addresses %v, want %v", got, first)
		}
		if err := a.reset(); err != nil {
			t.Fatal(err)
		}
	}
	if st := alloc.Stats(); st.DeviceAllocs != before {
		t.Errorf("steady state made %d device allocations", st.DeviceAllocs-before)
	}

	// Release frees at once; the memory serves the next request of its class.
	ptrs := step()
	held, err := a.release(ptrs[1])
	if err != nil || !held {
		t.Fatalf("release: %v %v", held, err)
	}
	if held, err := a.release(ptrs[1]); held || err != nil {
		t.Errorf("second release: %v %v", held, err)
	}
	if held, err := a.release(0xdead); held || err != nil {
		t.Errorf("release of an unknown pointer: %v %v", held, err)
	}
	if b, _ := a.alloc(4000); b.Ptr != ptrs[1] {
		t.Errorf("released block not reused: %#x, want %#x", b.Ptr, ptrs[1])
	}

	// Adopted buffers are freed with the rest.
	foreign, err := alloc.Alloc(12345)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.adopt(foreign.Ptr); err != nil {
		t.Fatal(err)
	}
	heldBefore, _ := a.held()
	if err := a.adopt(foreign.Ptr); err != nil { // held already: nothing changes
		t.Errorf("adopting a held buffer: %v", err)
	}
	if n, _ := a.held(); n != heldBefore {
		t.Errorf("adopting a held buffer twice: %d buffers held, want %d", n, heldBefore)
	}
	if err := a.adopt(0); err == nil {
		t.Error("adopting null succeeded")
	}
	if err := a.reset(); err != nil {
		t.Fatal(err)
	}
	if st := alloc.Stats(); st.InUse != 0 || mem.freedBad != 0 {
		t.Errorf("after reset: %d bytes in use, %d bad frees", st.InUse, mem.freedBad)
	}

	// Releases out of allocation order (an MLP's gate and up after its
	// down has its output) still leave the allocator's free lists as the
	// forward found them: the next forward gets the same addresses, which
	// a captured graph replaying the first needs.
	mixed := func() []DevicePtr {
		var ptrs []DevicePtr
		take := func() DevicePtr {
			b, err := a.alloc(256)
			if err != nil {
				t.Fatal(err)
			}
			ptrs = append(ptrs, b.Ptr)
			return b.Ptr
		}
		gate, up := take(), take()
		_ = take() // the down projection's output
		for _, p := range []DevicePtr{gate, up} {
			if _, err := a.release(p); err != nil {
				t.Fatal(err)
			}
		}
		take()
		take()
		take()
		if err := a.reset(); err != nil {
			t.Fatal(err)
		}
		return ptrs
	}
	first = mixed()
	for i := range 3 {
		if got := mixed(); !slices.Equal(got, first) {
			t.Fatalf("forward %d: addresses %v, want %v", i+1, got, first)
		}
	}
	if st := alloc.Stats(); st.InUse != 0 {
		t.Errorf("after reset %d bytes in use", st.InUse)
	}

	// Out of memory surfaces as an error and holds nothing.
	small := newArena(NewAllocator(newFakeMemory(1 << 10)))
	if _, err := small.alloc(1 << 20); err == nil {
		t.Error("allocation over the limit succeeded")
	}
	if n, _ := small.held(); n != 0 {
		t.Errorf("failed allocation held %d buffers", n)
	}

	// Out of memory with released blocks of another class: they go back
	// to the device, and the allocation succeeds.
	spare := newArena(NewAllocator(newFakeMemory(2048)))
	b, err := spare.alloc(1024)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := spare.release(b.Ptr); err != nil {
		t.Fatal(err)
	}
	if _, err := spare.alloc(1500); err != nil {
		t.Errorf("an allocation that fits once the released block is freed: %v", err)
	}
	if err := spare.reset(); err != nil {
		t.Error(err)
	}
}

// TestArenaReleaseSince: a model that gives back each layer's
// activations (ModelOps.ReleaseSince) holds one layer's worth at its
// peak, whatever its depth; what keep names and what was taken before
// the mark stay; and a forward repeated gets the same addresses, as a
// captured graph needs.
func TestArenaReleaseSince(t *testing.T) {
	alloc := NewAllocator(newFakeMemory(0))
	a := newArena(alloc)
	take := func(n int) DevicePtr {
		b, err := a.alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		return b.Ptr
	}
	const layers = 12
	forward := func() []DevicePtr {
		alloc.ResetPeak()
		residual := take(4096)
		ptrs := []DevicePtr{residual}
		var kept DevicePtr
		for l := range layers {
			mark := a.mark()
			q, kv, out := take(8192), take(2048), take(8192)
			ptrs = append(ptrs, q, kv, out)
			if l == 0 {
				kept = kv // a cached upload, read again by later layers
			}
			if err := a.releaseSince(mark, func(p DevicePtr) bool { return p == kept }); err != nil {
				t.Fatal(err)
			}
		}
		if _, ok := a.index[kept]; !ok {
			t.Error("the buffer keep named was released")
		}
		if _, ok := a.index[residual]; !ok {
			t.Error("a buffer taken before the mark was released")
		}
		if err := a.reset(); err != nil {
			t.Fatal(err)
		}
		return ptrs
	}
	first := forward()
	// The residual, the kept block, and one layer: q, out and a block
	// for kv once the kept one left the class's spare.
	layer := int64(SizeClass(8192)*2 + SizeClass(2048))
	if peak, want := alloc.Stats().PeakInUse, int64(SizeClass(4096))+int64(SizeClass(2048))+layer; peak != want {
		t.Errorf("peak %d bytes over %d layers, want %d (one layer's)", peak, layers, want)
	}
	for i := range 3 {
		if got := forward(); !slices.Equal(got, first) {
			t.Fatalf("forward %d: addresses differ from the first", i+1)
		}
	}
	if st := alloc.Stats(); st.InUse != 0 {
		t.Errorf("after reset %d bytes in use", st.InUse)
	}
}

// fakeStaging is a stagingBackend over Go memory that logs its fences.
type fakeStaging struct {
	log            []string
	allocs, frees  int
	live           map[*byte]int
	failAllocAbove int
}

func newFakeStaging() *fakeStaging { return &fakeStaging{live: map[*byte]int{}} }

func (f *fakeStaging) HostAlloc(n int) ([]byte, error) {
	if f.failAllocAbove > 0 && n > f.failAllocAbove {
		return nil, errors.New("fake: no pinned memory")
	}
	b := make([]byte, n)
	f.live[&b[0]] = n
	f.allocs++
	f.log = append(f.log, fmt.Sprintf("alloc%d", n))
	return b, nil
}

func (f *fakeStaging) HostFree(b []byte) error {
	if _, ok := f.live[&b[0]]; !ok {
		return errors.New("fake: bad host free")
	}
	delete(f.live, &b[0])
	f.frees++
	f.log = append(f.log, fmt.Sprintf("free%d", len(b)))
	return nil
}

func (f *fakeStaging) Record(half int) error {
	f.log = append(f.log, fmt.Sprintf("record%d", half))
	return nil
}

func (f *fakeStaging) Wait(half int) error {
	f.log = append(f.log, fmt.Sprintf("wait%d", half))
	return nil
}

func (f *fakeStaging) takeLog() string {
	s := strings.Join(f.log, " ")
	f.log = nil
	return s
}

func TestStaging(t *testing.T) {
	fake := newFakeStaging()
	s := staging{be: fake}
	type span struct{ lo, hi uintptr }
	var spans []span
	take := func(n int) []byte {
		t.Helper()
		b, err := s.take(n)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != n || cap(b) != n {
			t.Fatalf("take(%d): len %d cap %d", n, len(b), cap(b))
		}
		if n > 0 {
			lo := uintptr(unsafe.Pointer(&b[0]))
			if lo%stagingAlign != 0 {
				t.Errorf("take(%d) at %#x: not %d-byte aligned", n, lo, stagingAlign)
			}
			for _, sp := range spans {
				if lo < sp.hi && sp.lo < lo+uintptr(n) {
					t.Fatalf("take(%d) overlaps an earlier upload of this forward", n)
				}
			}
			spans = append(spans, span{lo, lo + uintptr(n)})
		}
		return b
	}
	flip := func() {
		t.Helper()
		if err := s.flip(); err != nil {
			t.Fatal(err)
		}
		spans = nil
	}

	// Forward 1 on half 0: one chunk, allocated lazily.
	if fake.allocs != 0 {
		t.Fatal("staging allocated before use")
	}
	take(4)
	take(100)
	take(0)
	take(4096)
	if got := fake.takeLog(); got != "alloc65536" {
		t.Errorf("forward 1: %q", got)
	}
	// Forward 2 on half 1: half 0 fenced, half 1 never was, so no wait.
	flip()
	take(8)
	if got := fake.takeLog(); got != "record0 alloc65536" {
		t.Errorf("forward 2: %q", got)
	}
	// Forward 3 back on half 0: waits for its fence from forward 1.
	flip()
	take(8)
	if got := fake.takeLog(); got != "record1 wait0" {
		t.Errorf("forward 3: %q", got)
	}
	// Forward 4 needs more than a chunk: half 1 grows by a doubled chunk...
	flip()
	take(60000)
	take(60000)
	take(300000)
	if got := fake.takeLog(); got != "record0 wait1 alloc131072 alloc300000" {
		t.Errorf("forward 4: %q", got)
	}
	// ... an idle forward 5 fences nothing ...
	flip()
	if got := fake.takeLog(); got != "record1 wait0" {
		t.Errorf("forward 5: %q", got)
	}
	// ... and forward 6 merges half 1's chunks into one of their total.
	flip()
	if got := fake.takeLog(); got != "wait1 free65536 free131072 free300000 alloc496608" {
		t.Errorf("forward 6: %q", got)
	}
	take(400000)
	if got := fake.takeLog(); got != "" {
		t.Errorf("forward 6 after the merge: %q", got)
	}
	if got, want := s.pinnedBytes(), 65536+496608; got != want {
		t.Errorf("pinned %d bytes, want %d", got, want)
	}

	// Staged values are copied byte for byte.
	vals := []int32{1, -2, 1 << 30, 7}
	b, err := stageValues(&s, vals)
	if err != nil {
		t.Fatal(err)
	}
	if got := unsafe.Slice((*int32)(unsafe.Pointer(&b[0])), len(vals)); !slices.Equal(got, vals) {
		t.Errorf("staged %v, want %v", got, vals)
	}
	fvals := []float32{1.5, -0.25}
	b, _ = stageValues(&s, fvals)
	if got := unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(fvals)); !slices.Equal(got, fvals) {
		t.Errorf("staged %v, want %v", got, fvals)
	}

	if err := s.close(); err != nil {
		t.Fatal(err)
	}
	if fake.allocs != fake.frees || len(fake.live) != 0 || s.pinnedBytes() != 0 {
		t.Errorf("after close: %d allocs, %d frees, %d live", fake.allocs, fake.frees, len(fake.live))
	}

	// A failed pinned allocation is an error, not a short slice.
	fake = newFakeStaging()
	fake.failAllocAbove = 1 << 20
	s = staging{be: fake}
	if _, err := s.take(2 << 20); err == nil {
		t.Error("take over the pinned limit succeeded")
	}
}

func TestUploadCache(t *testing.T) {
	var c uploadCache
	pos := []int32{0, 1, 2}
	c.add(pos, 0x100)
	pos[0] = 9 // the cache keeps its own copy
	if _, ok := c.find(pos); ok {
		t.Error("found changed values")
	}
	if p, ok := c.find([]int32{0, 1, 2}); !ok || p != 0x100 {
		t.Errorf("find = %#x %v", p, ok)
	}
	for i := range len(c.entries) {
		c.add([]int32{int32(100 + i)}, DevicePtr(0x200+i))
	}
	if _, ok := c.find([]int32{0, 1, 2}); ok {
		t.Error("oldest entry not evicted")
	}
	if p, ok := c.find([]int32{101}); !ok || p != 0x201 {
		t.Errorf("find = %#x %v", p, ok)
	}
	c.clear()
	if _, ok := c.find([]int32{101}); ok {
		t.Error("found after clear")
	}
}

// devT is a float32 device tensor at a made-up address (for argument checks).
func devT(shape ...int) tensor.T {
	return tensor.Device{Shape: shape, Ptr: 0x1000, DType: F32}.T()
}

type foreignMatrix struct{}

func (foreignMatrix) Out() int { return 4 }
func (foreignMatrix) In() int  { return 4 }

type foreignVector struct{}

func (foreignVector) Len() int { return 4 }

func TestModelOpsArgumentChecks(t *testing.T) {
	rope := &device.Rope{HeadDim: 8, InvFreq: make([]float32, 4)}
	m := &Matrix{out: 6, in: 4, dtype: F32, ptr: 0x2000}
	v := &Vector{n: 8, ptr: 0x3000}
	// o has no device: every check must fire before any device work.
	o := &ModelOps{}
	for _, tc := range []struct {
		op, want string
		call     func()
	}{
		{"Linear", "does not fit", func() { o.Linear(devT(3, 5), m) }},
		{"Linear", "not a device tensor", func() { o.Linear(tensor.New(3, 4), m) }},
		{"Linear", "activations are F32", func() { o.Linear(tensor.Device{Shape: []int{3, 4}, Ptr: 1, DType: BF16}.T(), m) }},
		{"Linear", "not prepared by a cuda.ModelOps", func() { o.Linear(devT(3, 4), foreignMatrix{}) }},
		{"LinearGroup", "does not fit", func() { o.LinearGroup(devT(3, 4), m, &Matrix{out: 2, in: 5}) }},
		{"Embed", "not prepared by a cuda.ModelOps", func() { o.Embed(nil, []int32{1}) }},
		{"RMSNorm", "does not divide", func() { o.RMSNorm(devT(2, 12), v, 1e-6) }},
		{"RMSNorm", "not prepared by a cuda.ModelOps", func() { o.RMSNorm(devT(2, 8), foreignVector{}, 1e-6) }},
		{"Rope", "positions for", func() { o.Rope(devT(3, 16), []int32{0, 1}, rope) }},
		{"Rope", "nil rope", func() { o.Rope(devT(3, 16), []int32{0, 1, 2}, nil) }},
		{"SiLUMul", "differ in shape", func() { o.SiLUMul(devT(2, 8), devT(2, 9)) }},
		{"GeLUTanhMul", "differ in shape", func() { o.GeLUTanhMul(devT(2, 8), devT(8, 2)) }},
		{"Add", "differ in shape", func() { o.Add(devT(2, 8), devT(16)) }},
		{"Add", "not a device tensor", func() { o.Add(devT(2, 8), tensor.New(2, 8)) }},
		{"Scale", "no shape", func() { o.Scale(tensor.Device{Ptr: 1}.T(), 2) }},
		{"Softcap", "positive", func() { o.Softcap(devT(4), 0) }},
		{"Softcap", "positive", func() { o.Softcap(devT(4), -1) }},
		{"GatherRows", "outside [0, 3)", func() { o.GatherRows(devT(3, 4), []int32{0, 3}) }},
		{"GatherRows", "outside [0, 3)", func() { o.GatherRows(devT(3, 4), []int32{-1}) }},
		{"ToHost", "cannot read", func() { o.ToHost(tensor.Device{Shape: []int{2}, Ptr: 1, DType: tensor.Q8_0}.T()) }},
		{"Upload", "already on the device", func() { o.Upload(devT(2)) }},
		{"Upload", "holds 6 values", func() { o.Upload(tensor.Host{Shape: []int{2, 3}, Data: make([]float32, 5)}.T()) }},
	} {
		oe := catchOpError(t, tc.call)
		if oe.Op != tc.op || !strings.Contains(oe.Error(), tc.want) {
			t.Errorf("%s: got %q, want op %s and %q", tc.op, oe.Error(), tc.op, tc.want)
		}
		if !errors.Is(oe, oe.Err) {
			t.Errorf("%s: OpError does not unwrap", tc.op)
		}
	}
	// Calls with nothing to do return without the device.
	host := tensor.From([]float32{1, 2}, 2)
	if got := o.ToHost(host); &got.HostData()[0] != &host.HostData()[0] {
		t.Error("ToHost of a host tensor copied it")
	}
	o.Rope(devT(0, 16), nil, rope)          // no tokens
	o.Rope(devT(2, 6), []int32{0, 1}, rope) // rows narrower than a head
	if o.Name() != "cuda" {
		t.Errorf("Name() = %q", o.Name())
	}
}

func TestModelOpsShapeHelpers(t *testing.T) {
	for _, tc := range []struct {
		width, n, heads int
		ok              bool
	}{{128, 128, 1, true}, {128, 32, 4, true}, {96, 1, 96, true}, {128, 48, 0, false}, {128, 0, 0, false}, {128, 256, 0, false}} {
		heads, err := normHeads(tc.width, tc.n)
		if (err == nil) != tc.ok || heads != tc.heads {
			t.Errorf("normHeads(%d, %d) = %d, %v", tc.width, tc.n, heads, err)
		}
	}
	for _, tc := range []struct {
		headDim, nFreq, width int
		heads, rot            int
		err                   string
	}{
		{64, 32, 256, 4, 64, ""},
		{64, 40, 256, 4, 64, ""},   // extra frequencies are ignored
		{64, 16, 256, 4, 32, ""},   // partial rotary
		{64, 32, 200, 3, 64, ""},   // trailing values outside a whole head stay
		{64, 32, 0, 0, 64, ""},     // an empty row
		{7, 3, 28, 0, 0, "even"},   // odd head dim
		{0, 3, 28, 0, 0, "even"},   // no head dim
		{8, 0, 32, 0, 0, "no fre"}, // no frequencies
	} {
		r := &device.Rope{HeadDim: tc.headDim, InvFreq: make([]float32, tc.nFreq)}
		heads, rot, err := ropeShape(r, tc.width, 5, 5)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ropeShape(%+v, %d): err %v, want %q", tc, tc.width, err, tc.err)
			}
			continue
		}
		if err != nil || heads != tc.heads || rot != tc.rot {
			t.Errorf("ropeShape(%+v) = %d heads, rot %d, %v", tc, heads, rot, err)
		}
	}
	if got := withCols([]int{2, 3, 4}, 9); !slices.Equal(got, []int{2, 3, 9}) {
		t.Errorf("withCols = %v", got)
	}
	shape := []int{2, 4}
	withCols(shape, 1)
	if shape[1] != 4 {
		t.Error("withCols changed its argument")
	}
	if err := checkRows([]int32{0, 2, 2, 1}, 3); err != nil {
		t.Error(err)
	}
	if err := checkRows(nil, 0); err != nil {
		t.Error(err)
	}
}
