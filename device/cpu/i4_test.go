package cpu

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/gosling-ai/gosling/tensor"
)

// randAWQ is an n×k AWQ4 weight of random blocks (randBlocks) whose
// zero points are uniform over 0…16 (16: a GPTQ zero stored as 15 plus
// one).
func randAWQ(rng *rand.Rand, dt tensor.DType, n, k int) tensor.Weight {
	w := randBlocks(rng, dt, n, k)
	for b := 0; b < len(w.Data); b += tensor.BlockBytes(dt) {
		binary.LittleEndian.PutUint16(w.Data[b+2:], uint16(rng.IntN(17)))
	}
	return w
}

var awqDTypes = []tensor.DType{tensor.AWQ4_G32, tensor.AWQ4_G64, tensor.AWQ4_G128}

// TestI4Linear: AWQ4 weights of every group size are served in I4 panels
// (their own dtype, at 4 bits and a scale and zero point per group) and
// multiply float32 activations as their dequantized values do, to float32
// rounding (checkLinear's bound), on every kernel set: partial panels,
// one and several groups, one tile through the I4 kernels (up to the
// set's height) and several through the F32 kernels over widened blocks,
// one worker and several, and a bias.
func TestI4Linear(t *testing.T) {
	rng := rand.New(rand.NewPCG(24, 4))
	pool := NewWorkers(2)
	defer pool.Close()
	eachKernelSet(t, func(t *testing.T) {
		for _, dt := range awqDTypes {
			for _, shape := range [][2]int{{33, 128}, {64, 768}} {
				l := NewLinear(randAWQ(rng, dt, shape[0], shape[1]), nil)
				if l.DType() != dt || l.packed.kind != kindI4 {
					t.Fatalf("%v served as %v (kind %d)", dt, l.DType(), l.packed.kind)
				}
				if want := int64(shape[0]) * int64(shape[1]) / int64(tensor.BlockValues(dt)) * int64(i4GroupBytes(tensor.BlockValues(dt))) / panelWidth; l.Bytes() != want {
					t.Errorf("%v [%d×%d]: %d bytes, want %d", dt, shape[0], shape[1], l.Bytes(), want)
				}
				for _, m := range []int{1, 2, 3, 6, 7, 13} {
					checkLinear(t, nil, l, randInput(rng, m, shape[1]))
				}
			}
		}
		bias := randVec(rng, 96, 1)
		l := NewLinear(randAWQ(rng, tensor.AWQ4_G128, 96, 1280), bias)
		for _, m := range []int{1, 24} {
			checkLinear(t, pool, l, randInput(rng, m, 1280))
		}
	})
}

// TestI4Refusals: a row that is not whole groups, and a zero point past
// the panels' byte, are errors naming the tensor and its type.
func TestI4Refusals(t *testing.T) {
	w := tensor.Weight{Name: "model.layers.0.mlp.down_proj.weight", DType: tensor.AWQ4_G128, Shape: []int{2, 96}}
	if _, err := packWeight(w, weightBytes); err == nil || !contains(err.Error(), "model.layers.0.mlp.down_proj.weight", "AWQ4_G128") {
		t.Errorf("packWeight of a 96-wide AWQ4_G128 row: %v", err)
	}
	w = randAWQ(rand.New(rand.NewPCG(1, 2)), tensor.AWQ4_G32, 2, 64)
	w.Name = "model.layers.0.mlp.up_proj.weight"
	binary.LittleEndian.PutUint16(w.Data[tensor.BlockBytes(w.DType)+2:], 300)
	if _, err := packWeight(w, weightBytes); err == nil || !contains(err.Error(), "model.layers.0.mlp.up_proj.weight", "AWQ4_G32", "zero point 300") {
		t.Errorf("packWeight of a zero point of 300: %v", err)
	}
}

// TestWidenI4: the kernel sets' widening of I4 panel blocks is widenI4's
// Go loop bit for bit (both exact), for every group size, and writes
// nothing past the block.
func TestWidenI4(t *testing.T) {
	rng := rand.New(rand.NewPCG(24, 5))
	for _, ks := range asmSets {
		for gi, dt := range awqDTypes {
			wk := ks.widenI4[gi]
			if wk == nil {
				continue
			}
			group := i4Groups[gi]
			p, err := packWeight(randAWQ(rng, dt, 40, 3*group), weightBytes)
			if err != nil {
				t.Fatal(err)
			}
			for pi := range p.panels {
				want := make([]float32, 3*group*panelWidth)
				widenI4(want, p.data[pi*p.stride:][:p.stride], group)
				got := make([]float32, len(want)+16)
				for i := range got {
					got[i] = -7
				}
				wk(unsafe.Pointer(&got[0]), p.panel(pi), 3)
				for i, v := range want {
					if math.Float32bits(got[i]) != math.Float32bits(v) {
						t.Fatalf("%s %v panel %d: value %d = %v, want %v", ks.name, dt, pi, i, got[i], v)
					}
				}
				for i := len(want); i < len(got); i++ {
					if got[i] != -7 {
						t.Fatalf("%s %v: wrote past the block at %d", ks.name, dt, i)
					}
				}
			}
		}
	}
}
