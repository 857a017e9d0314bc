package engine

import (
	"errors"

	"github.com/gosling-ai/gosling/device/cuda"
	"github.com/gosling-ai/gosling/tensor"
)

// Sampling on the device. On a GPU the model leaves its logits there
// (model.Runnable.Forward): [rows, vocab] float32, 32 MiB a step for a
// 128K vocabulary at batch 64. Requests that need only what the device
// sampler has (temperature, top-k, top-p, min-p, a seed) get their next
// token from it, and only the ids cross to the host. Rows the host must
// see — penalised requests, logprobs, prompt scoring — are gathered and
// copied back, and go through the host sampler as on the CPU.
//
// A request keeps one path for its whole life (the choice depends only on
// its parameters), so a seeded request is reproducible on a GPU; the
// device's random stream is not the host sampler's (cuda.SampleRow).

// logitsDevice is what sampling needs from the device holding the logits
// (cuda.ModelOps).
type logitsDevice interface {
	Sample(logits tensor.T, rows []cuda.SampleRow) ([]int32, error)
	GatherRows(x tensor.T, rows []int32) tensor.T
	ToHost(x tensor.T) tensor.T
}

// logitUse is what one request of a step needs from the logits.
type logitUse struct {
	r         *request
	sampleRow int // the row its next token comes from; -1: none this step
	scoreRow  int // the first of its prompt-scoring rows
	scoreN    int // how many (0: none)
}

// stepLogits are one step's logits as the requests read them.
type stepLogits struct {
	host    tensor.T // the rows the host reads
	hostRow []int    // logits row → row of host, -1 when not brought; nil: the identity
	ids     []int    // logits row → token drawn on the device, -1 when none; nil: none
}

// drawn is a request's next token and the host logits row it was drawn
// from (nil when the device drew it).
type drawn struct {
	id     int
	logits []float32
}

// deviceSamples reports whether r's tokens are drawn on the device: it
// needs nothing the device sampler lacks (penalties, logprobs, grammar
// masks).
func deviceSamples(r *request) bool {
	return r.constraint == nil && !r.Logprobs && r.TopLogprobs == 0 && !r.sampler.Settings().Penalties
}

// placeLogits samples what it can where the logits are and brings the rest
// to the host. Host logits (the CPU) are used as they are.
func (e *Engine) placeLogits(logits tensor.T, uses []logitUse) (*stepLogits, error) {
	if !logits.OnDevice() {
		return &stepLogits{host: logits}, nil
	}
	if e.gpu == nil {
		return nil, errors.New("the model returned device logits, but the engine runs on the CPU")
	}
	var sl *stepLogits
	err := e.forward(func() (err error) {
		sl, err = placeDeviceLogits(e.gpu.ops, logits, uses)
		return err
	})
	return sl, err
}

// placeDeviceLogits draws the device rows of uses on dev, then copies the
// rows the host needs: all of them in one copy, or just those, gathered.
func placeDeviceLogits(dev logitsDevice, logits tensor.T, uses []logitUse) (*stepLogits, error) {
	n := logits.Rows()
	sl := &stepLogits{hostRow: make([]int, n), ids: make([]int, n)}
	needHost := make([]bool, n)
	var rows []cuda.SampleRow
	for _, u := range uses {
		for k := range u.scoreN {
			needHost[u.scoreRow+k] = true
		}
		if u.sampleRow < 0 {
			continue
		}
		if !deviceSamples(u.r) {
			needHost[u.sampleRow] = true
			continue
		}
		s := u.r.sampler.Settings()
		rows = append(rows, cuda.SampleRow{
			Row: u.sampleRow, Temperature: float32(s.Temperature), TopK: s.TopK,
			TopP: float32(s.TopP), MinP: float32(s.MinP),
			Seed: s.Seed, Step: uint64(len(u.r.outputIDs)),
		})
	}
	for i := range sl.ids {
		sl.ids[i] = -1
	}
	if len(rows) > 0 {
		ids, err := dev.Sample(logits, rows)
		if err != nil {
			return nil, err
		}
		for i, row := range rows {
			sl.ids[row.Row] = int(ids[i])
		}
	}
	var gather []int32
	for row, need := range needHost {
		sl.hostRow[row] = -1
		if need {
			sl.hostRow[row] = len(gather)
			gather = append(gather, int32(row))
		}
	}
	switch {
	case len(gather) == n:
		sl.host = dev.ToHost(logits)
	case len(gather) > 0:
		sl.host = dev.ToHost(dev.GatherRows(logits, gather))
	}
	return sl, nil
}

// hostIndex is the row of sl.host holding logits row i. A request's
// prompt-scoring rows stay consecutive.
func (sl *stepLogits) hostIndex(i int) int {
	if sl.hostRow == nil {
		return i
	}
	if sl.hostRow[i] < 0 {
		panic("engine: logits row not brought to the host") // placeDeviceLogits brings every row a use names
	}
	return sl.hostRow[i]
}

// next is r's next token from logits row i: the device's draw, or the host
// sampler's.
func (sl *stepLogits) next(r *request, i int) drawn {
	if sl.ids != nil && sl.ids[i] >= 0 {
		return drawn{id: sl.ids[i]}
	}
	row := sl.host.Row(sl.hostIndex(i))
	if r.constraint != nil && !r.constraint.applyMask(row) {
		return drawn{id: -1}
	}
	return drawn{id: r.sampler.Sample(row), logits: row}
}
