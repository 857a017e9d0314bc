// Package fakedevice is a device.Sampler over host memory, for the tests
// of code that places logits on a device and reads them back (the
// runner's drawing, the drafters): which rows were drawn there, gathered
// and copied is what those tests check, and no GPU is needed to see it.
package fakedevice

import (
	"slices"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/sample"
	"github.com/gosling-ai/gosling/tensor"
)

// Sampler keeps "device" tensors as handles into host tensors. Its draw
// of logits row r is token 1000+r, so a test sees which row each draw
// came from.
type Sampler struct {
	Data    map[uintptr]tensor.T
	next    uintptr
	Sampled [][]device.SampleRow // each Sample call's rows
	Checked [][]device.VerifyRow // each SpecVerify call's rows
	Gathers [][]int32            // each GatherRows call's rows
	Copies  int                  // ToHost calls
}

// New is an empty Sampler.
func New() *Sampler { return &Sampler{Data: map[uintptr]tensor.T{}} }

// Put keeps h and returns its device handle.
func (f *Sampler) Put(h tensor.T) tensor.T {
	f.next += 0x100
	f.Data[f.next] = h
	return tensor.Device{Shape: slices.Clone(h.Shape), Ptr: f.next, DType: tensor.F32}.T()
}

// Sample draws 1000 + the logits row of each of rows.
func (f *Sampler) Sample(logits tensor.T, rows []device.SampleRow) ([]int32, error) {
	f.Sampled = append(f.Sampled, rows)
	ids := make([]int32, len(rows))
	for i, r := range rows {
		ids[i] = int32(1000 + r.Row)
	}
	return ids, nil
}

// SpecVerify decides each node as the device's verifier does, on its own:
// sample.Sampler.Verify over the node's logits row with a sampler of the
// row's parameters seeded from (Seed, Step) alone, so a node's random
// numbers are its own and the same (seed, step) gives the same verdict.
func (f *Sampler) SpecVerify(logits tensor.T, rows []device.VerifyRow) ([]device.NodeVerdict, error) {
	f.Checked = append(f.Checked, rows)
	h := f.Data[logits.DevPtr()]
	out := make([]device.NodeVerdict, len(rows))
	for i, r := range rows {
		seed := mix(r.Seed ^ mix(r.Step+1))
		s := sample.NewSampler(sample.Params{Temperature: float64(r.Temperature), TopK: r.TopK, TopP: float64(r.TopP),
			MinP: float64(r.MinP), RepetitionPenalty: 1, Seed: &seed}, nil)
		drafts := make([]int, len(r.Drafts))
		for j, d := range r.Drafts {
			drafts[j] = int(d)
		}
		c, tok := s.Verify(h.Row(r.Row), drafts)
		out[i] = device.NodeVerdict{Child: int32(c), Token: int32(tok)}
	}
	return out, nil
}

// mix is splitmix64's finaliser: distinct (seed, step) pairs get
// unrelated seeds.
func mix(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// GatherRows is rows of x, in order, as a new device tensor.
func (f *Sampler) GatherRows(x tensor.T, rows []int32) tensor.T {
	f.Gathers = append(f.Gathers, rows)
	h := f.Data[x.DevPtr()]
	out := tensor.New(len(rows), h.Cols())
	for i, r := range rows {
		copy(out.Row(i), h.Row(int(r)))
	}
	return f.Put(out)
}

// ToHost is the host tensor behind x.
func (f *Sampler) ToHost(x tensor.T) tensor.T {
	f.Copies++
	return f.Data[x.DevPtr()]
}

var (
	_ device.Sampler      = (*Sampler)(nil)
	_ device.SpecVerifier = (*Sampler)(nil)
)
