package tensor

import (
	"bytes"
	"math"
	"runtime"
	"slices"
	"testing"
)

// The generator is pinned: device/cuda/kernels/fill.cu restates it, and a
// change here that the kernel does not share would make GPU and CPU dummy
// models differ. These values were computed from the definition by an
// independent (Python) implementation.
func TestSyntheticValuePinned(t *testing.T) {
	s := Synthetic{Seed: 0x0123456789abcdef, Scale: 0.035}
	got := []uint32{math.Float32bits(s.Value(0)), math.Float32bits(s.Value(1)), math.Float32bits(s.Value(1 << 40))}
	want := []uint32{pinned0, pinned1, pinned2}
	if !slices.Equal(got, want) {
		t.Errorf("Value bits %#x, want %#x", got, want)
	}
	if NameSeed("model.embed_tokens.weight") != pinnedSeed {
		t.Errorf("NameSeed = %#x, want %#x", NameSeed("model.embed_tokens.weight"), uint64(pinnedSeed))
	}
}

const (
	pinned0    = 0x3c635db3 // 0.01387732
	pinned1    = 0xbcee9c4f // -0.029127268
	pinned2    = 0xbcdb5d4d // -0.026777888
	pinnedSeed = 0x1acb025cf390dc05
)

// Value is a pure function of (seed, i) in [Offset-Scale, Offset+Scale),
// uniform: mean Offset, standard deviation Scale/√3.
func TestSyntheticDistribution(t *testing.T) {
	s := Synthetic{Seed: NameSeed("w"), Scale: 0.035, Offset: 0.5}
	const n = 1 << 20
	var sum, sq float64
	var buckets [10]int
	for i := range n {
		v := s.Value(i)
		if v != s.Value(i) {
			t.Fatal("Value is not deterministic")
		}
		if v < s.Offset-s.Scale || v >= s.Offset+s.Scale {
			t.Fatalf("value %d = %v outside [%v, %v)", i, v, s.Offset-s.Scale, s.Offset+s.Scale)
		}
		d := float64(v - s.Offset)
		sum += d
		sq += d * d
		buckets[int((d/float64(s.Scale)+1)/2*10)]++
	}
	mean, std := sum/n, math.Sqrt(sq/n-(sum/n)*(sum/n))
	if math.Abs(mean) > 1e-4 || math.Abs(std-0.035/math.Sqrt(3)) > 1e-4 {
		t.Errorf("mean %v (want 0.5), std %v (want %v)", mean+0.5, std, 0.035/math.Sqrt(3))
	}
	for b, c := range buckets {
		if math.Abs(float64(c)-n/10) > 0.01*n/10 {
			t.Errorf("bucket %d of 10 holds %d of %d values", b, c, n)
		}
	}
	if (Synthetic{Seed: 3, Offset: 1}).Value(12345) != 1 {
		t.Error("Scale 0 is not the constant Offset")
	}
	if NameSeed("a.weight") == NameSeed("b.weight") || NameSeed("x") != NameSeed("x") {
		t.Error("NameSeed does not tell names apart, or is not deterministic")
	}
}

// Fill stores Value rounded to the dtype; FillParallel, any chunking and
// any alignment of dst give the same bytes.
func TestSyntheticFill(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(5)) // more parts than cores: odd chunk edges
	s := Synthetic{Seed: 99, Scale: 2, Offset: -1}
	const first, n = 1000, 7*syntheticChunk + 13
	for _, dt := range []DType{F32, BF16, F16} {
		size, _ := dt.RowBytes(1)
		serial := make([]byte, n*size)
		s.Fill(dt, first, serial)
		par := make([]byte, n*size)
		s.FillParallel(dt, first, par)
		if !bytes.Equal(serial, par) {
			t.Errorf("%v: parallel fill differs from serial", dt)
		}
		pieces := make([]byte, n*size)
		for lo := 0; lo < n; lo += 777 {
			hi := min(lo+777, n)
			s.Fill(dt, first+lo, pieces[lo*size:hi*size])
		}
		if !bytes.Equal(serial, pieces) {
			t.Errorf("%v: a fill in pieces differs", dt)
		}
		odd := make([]byte, n*size+1)[1:] // unaligned: the portable path
		s.Fill(dt, first, odd)
		if !bytes.Equal(serial, odd) {
			t.Errorf("%v: an unaligned fill differs", dt)
		}
		vals := make([]float32, n)
		DecodeInto(dt, serial, vals)
		want := make([]float32, n)
		for i := range want {
			want[i] = s.Value(first + i)
			switch dt {
			case BF16:
				want[i] = BF16ToF32(F32ToBF16(want[i]))
			case F16:
				want[i] = F16ToF32(F32ToF16(want[i]))
			}
		}
		if !slices.Equal(vals, want) {
			t.Errorf("%v: the bytes are not Value rounded to the dtype", dt)
		}
		f32 := make([]float32, n)
		s.FillFloat32(dt, first, f32)
		if !slices.Equal(f32, want) {
			t.Errorf("%v: FillFloat32 differs from the decoded bytes", dt)
		}
	}
}

// A synthetic weight without bytes: Validate accepts it, DecodeRow and
// Float32 give what the materialised bytes decode to, Convert keeps float
// dtypes synthetic and quantises the generator's values.
func TestSyntheticWeight(t *testing.T) {
	syn := &Synthetic{Seed: NameSeed("w"), Scale: 0.035}
	w := Weight{Name: "w", DType: BF16, Shape: []int{6, 64}, Synthetic: syn}
	if err := w.Validate(); err != nil {
		t.Fatal(err)
	}
	m, err := w.Materialize()
	if err != nil {
		t.Fatal(err)
	}
	if w.Data != nil || m.Synthetic != syn || len(m.Data) != 6*64*2 || m.Validate() != nil {
		t.Fatalf("Materialize: %d bytes, synthetic %v, source changed %v", len(m.Data), m.Synthetic, w.Data != nil)
	}
	if again, _ := m.Materialize(); &again.Data[0] != &m.Data[0] {
		t.Error("a weight with bytes was made again")
	}
	if !slices.Equal(w.Float32(), m.Float32()) {
		t.Error("Float32 of the synthetic weight differs from its bytes")
	}
	row, mrow := make([]float32, 64), make([]float32, 64)
	w.DecodeRow(4, row)
	m.DecodeRow(4, mrow)
	if !slices.Equal(row, mrow) {
		t.Error("DecodeRow of the synthetic weight differs from its bytes")
	}

	f32, err := Convert(w, F32)
	if err != nil || f32.Data != nil || f32.Synthetic != syn || f32.DType != F32 {
		t.Fatalf("Convert to F32: %+v, %v", f32, err)
	}
	if got := f32.Float32(); got[5] != syn.Value(5) {
		t.Errorf("F32 of a synthetic weight: %v, want the generator's %v", got[5], syn.Value(5))
	}
	q, err := Convert(w, Q8_0)
	if err != nil {
		t.Fatal(err)
	}
	plain := FromFloat32("w", f32.Float32(), 6, 64)
	wantQ, _ := Convert(plain, Q8_0)
	if q.Synthetic != nil || !bytes.Equal(q.Data, wantQ.Data) {
		t.Error("Q8_0 of a synthetic weight is not the quantised generator values")
	}

	bad := Weight{Name: "q", DType: Q8_0, Shape: []int{1, 32}, Synthetic: syn}
	if bad.Validate() == nil {
		t.Error("a synthetic Q8_0 weight validated")
	}
	if _, err := bad.Materialize(); err == nil {
		t.Error("a synthetic Q8_0 weight was materialised")
	}
	short := m
	short.Data = short.Data[:10]
	if short.Validate() == nil {
		t.Error("a synthetic weight with the wrong number of bytes validated")
	}
}

func BenchmarkSyntheticFill(b *testing.B) {
	s := Synthetic{Seed: 1, Scale: 0.035}
	const n = 1 << 24
	for _, bc := range []struct {
		name string
		dt   DType
		fill func(DType, int, []byte)
	}{{"serial/bf16", BF16, s.Fill}, {"parallel/bf16", BF16, s.FillParallel}, {"serial/f32", F32, s.Fill}, {"parallel/f32", F32, s.FillParallel}} {
		b.Run(bc.name, func(b *testing.B) {
			size, _ := bc.dt.RowBytes(1)
			dst := make([]byte, n*size)
			b.SetBytes(int64(len(dst)))
			for b.Loop() {
				bc.fill(bc.dt, 0, dst)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/value")
		})
	}
}
