package cuda

import (
	"bytes"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/tensor"
)

// Synthetic weights made on the device against the host generator, bit for
// bit: here on fakeGPU (its fill kernels restate kernels/fill.cu), and on a
// GPU in fill_gpu_test.go.

var fillCases = []struct {
	first, n int
	syn      tensor.Synthetic
}{
	{0, 1, tensor.Synthetic{Seed: 1, Scale: 0.035}},
	{0, 1000, tensor.Synthetic{Seed: tensor.NameSeed("model.layers.0.mlp.up_proj.weight"), Scale: 0.035}},
	{12345, 4099, tensor.Synthetic{Seed: 0xffff_ffff_ffff_fff0, Scale: 3, Offset: -0.5}},
	{0, 257, tensor.Synthetic{Seed: 7, Offset: 1}}, // a norm's scale
	{1 << 33, 3000, tensor.Synthetic{Seed: 42, Scale: 1e-3, Offset: 1e-2}},
}

// checkSyntheticFill fills n elements from first on the device and compares
// them with syn.Fill.
func checkSyntheticFill(t *testing.T, dev *Device, k *Kernels, dt DType, first, n int, syn tensor.Synthetic) {
	t.Helper()
	p := alloc(t, dev, n*ElemSize(dt))
	if err := k.FillSynthetic(dev.Stream, p, first, n, dt, syn); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, n*ElemSize(dt))
	if err := CopyDtoH(dev, got, p); err != nil {
		t.Fatal(err)
	}
	want := make([]byte, len(got))
	syn.FillParallel(dt, first, want)
	if !bytes.Equal(got, want) {
		for i := range got {
			if got[i] != want[i] {
				e := i / ElemSize(dt)
				t.Fatalf("%v [%d, +%d) %+v: element %d (byte %d) differs: device % x, host % x", dt, first, n, syn, first+e, i,
					got[e*ElemSize(dt):][:ElemSize(dt)], want[e*ElemSize(dt):][:ElemSize(dt)])
			}
		}
	}
}

// checkSyntheticMatrix: ModelOps.Matrix of a synthetic weight with no host
// data holds what the host generator makes in the weight dtype, which is
// also what uploading the materialised weight gives.
func checkSyntheticMatrix(t *testing.T, e opsEnv, wdt DType) {
	o := e.newOps(t, wdt)
	syn := &tensor.Synthetic{Seed: tensor.NameSeed("lm_head.weight"), Scale: 0.035}
	const out, in = 37, 300
	want := make([]byte, out*in*ElemSize(wdt))
	syn.Fill(wdt, 0, want)
	download := func(m any) []byte {
		t.Helper()
		got := make([]byte, len(want))
		if err := CopyDtoH(e.dev, got, m.(*Matrix).Ptr()); err != nil {
			t.Fatal(err)
		}
		return got
	}
	for _, stored := range []DType{wdt, F32, BF16} {
		w := tensor.Weight{Name: "lm_head.weight", DType: stored, Shape: []int{out, in}, Synthetic: syn}
		launches := e.fakeLaunches(o.Stream())
		m, err := o.Matrix(w, nil)
		if err != nil {
			t.Fatal(err)
		}
		if e.fake != nil && e.fakeLaunches(o.Stream()) != launches+1 {
			t.Errorf("stored %v: %d launches for a synthetic matrix, want the one fill", stored, e.fakeLaunches(o.Stream())-launches)
		}
		if m.(*Matrix).DType() != wdt {
			t.Errorf("stored %v: matrix in %v, want %v", stored, m.(*Matrix).DType(), wdt)
		}
		if got := download(m); !bytes.Equal(got, want) {
			t.Errorf("stored %v, weights %v: the device fill differs from the host generator", stored, wdt)
		}
	}
	// The host path: the same weight, materialised and not synthetic, uploads
	// the same bytes.
	mw, err := (tensor.Weight{Name: "w", DType: wdt, Shape: []int{out, in}, Synthetic: syn}).Materialize()
	if err != nil {
		t.Fatal(err)
	}
	mw.Synthetic = nil
	m, err := o.Matrix(mw, make([]float32, out))
	if err != nil {
		t.Fatal(err)
	}
	if got := download(m); !bytes.Equal(got, want) {
		t.Errorf("weights %v: the uploaded materialised weight differs from the host generator", wdt)
	}
}

// fakeLaunches counts the kernels launched on s (0 on a real GPU).
func (e opsEnv) fakeLaunches(s Stream) int {
	if e.fake == nil {
		return 0
	}
	e.fake.mu.Lock()
	defer e.fake.mu.Unlock()
	return e.fake.launchesOn[s]
}

func TestFakeFillSynthetic(t *testing.T) {
	dev, k, lt, fake := openFakeDevice(t)
	t.Cleanup(func() { dev.Close() }) // after the buffers' cleanups
	for _, dt := range []DType{F32, BF16, F16} {
		for _, c := range fillCases {
			checkSyntheticFill(t, dev, k, dt, c.first, c.n, c.syn)
		}
	}
	env := opsEnv{dev: dev, k: k, lt: lt, fake: fake}
	for _, wdt := range []DType{F32, BF16, F16} {
		t.Run(wdt.String(), func(t *testing.T) { checkSyntheticMatrix(t, env, wdt) })
	}
	if err := k.FillSynthetic(dev.Stream, 0, 0, 4, tensor.Q8_0, tensor.Synthetic{}); err == nil || !strings.Contains(err.Error(), "Q8_0") {
		t.Errorf("a Q8_0 fill: %v", err)
	}
}

// TestPlanWeightSynthetic: the host path of a synthetic weight without
// bytes (plan.rows) makes the generator's rows in the weight dtype.
func TestPlanWeightSynthetic(t *testing.T) {
	syn := &tensor.Synthetic{Seed: 9, Scale: 0.5}
	w := tensor.Weight{Name: "w", DType: BF16, Shape: []int{10, 64}, Synthetic: syn}
	for _, dt := range []DType{F32, BF16, F16} {
		p, err := planWeight(w, dt, 3*64*ElemSize(dt))
		if err != nil {
			t.Fatal(err)
		}
		var got []byte
		for _, c := range p.Chunks() {
			rows, err := p.rows(w, c[0], c[1])
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, rows...)
		}
		want := make([]byte, p.Bytes())
		syn.Fill(dt, 0, want)
		if !bytes.Equal(got, want) {
			t.Errorf("%v: rows of a synthetic weight differ from the generator", dt)
		}
	}
	if _, err := planWeight(tensor.Weight{Name: "q", DType: tensor.Q8_0, Shape: []int{1, 32}, Synthetic: syn}, BF16, 1<<20); err == nil {
		t.Error("a synthetic Q8_0 weight was planned")
	}
}
