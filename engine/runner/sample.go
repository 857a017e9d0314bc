package runner

import (
	"fmt"
	"time"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/engine/sched"
	"github.com/gosling-ai/gosling/sample"
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
// device's random stream is not the host sampler's (device.SampleRow).

// logitUse is what one request of a step needs from the logits.
type logitUse[R Request] struct {
	r         R
	sampleRow int // the row its next token comes from; -1: none this step
	scoreRow  int // the first of its prompt-scoring rows
	scoreN    int // how many (0: none)
	step      int // output tokens before the one drawn
	// tree: the scoring rows are a verified tree's nodes, which a greedy
	// request that samples on the device has argmaxed there (tree acceptance
	// needs only the ids).
	tree bool
}

// StepLogits are one step's logits as the requests read them.
type StepLogits struct {
	Host    tensor.Host // the rows the host reads (HostIndex says which is which)
	hostRow []int       // logits row → row of host, -1 when not brought; nil: the identity
	ids     []int       // logits row → token drawn on the device, -1 when none; nil: none
}

// Draw is a request's next token (-1: its grammar allows none) and the
// host logits row it was drawn from (nil when the device drew it).
type Draw struct {
	ID     int
	Logits []float32
}

// deviceSamples reports whether r's tokens are drawn on the device: it
// needs nothing the device sampler lacks (penalties, logprobs, grammar
// masks).
func deviceSamples[R Request](r R) bool {
	return r.Constraint() == nil && !r.WantsLogprobs() && !r.Sampler().Settings().Penalties
}

// placeLogits samples what it can where the logits are and brings the rest
// to the host. Host logits (the CPU) are used as they are.
func (rn *Runner[R]) placeLogits(logits tensor.T, uses []logitUse[R]) (*StepLogits, error) {
	if h, err := logits.Host(); err == nil {
		return &StepLogits{Host: h}, nil
	}
	dev, ok := rn.rt.(device.Sampler)
	if !ok {
		return nil, fmt.Errorf("the model returned device logits, but the %s runtime cannot sample them", rn.rt.Name())
	}
	var sl *StepLogits
	err := rn.rt.Run(func() (err error) {
		sl, err = placeDeviceLogits(dev, logits, uses)
		return err
	})
	return sl, err
}

// Tokens turns a step's logits into each chunk's next token: drawn where
// the logits are when the device can, else on the host, every request's
// before any is accepted, split over the workers (each sampler is its
// request's own). A chunk with no sampling row (mid-prompt, or a verified
// tree, which the engine walks) draws nothing.
func (rn *Runner[R]) Tokens(logits tensor.T, chunks []sched.Chunk[R], rows []Rows) (*StepLogits, []Draw, error) {
	// What a request needs comes from rows, set when the batch was built:
	// under the overlap schedule the scheduler goroutine changes the
	// request's tokens while this runs.
	uses := make([]logitUse[R], len(chunks))
	for i, c := range chunks {
		uses[i] = logitUse[R]{r: c.Req, sampleRow: rows[i].Sample, scoreRow: rows[i].First, scoreN: rows[i].Score, step: rows[i].Step, tree: rows[i].Tree}
	}
	sl, err := rn.placeLogits(logits, uses)
	if err != nil {
		return nil, nil, err
	}
	draws := make([]Draw, len(chunks))
	rn.workers.For(len(chunks), 4, func(lo, hi int) {
		for i, c := range chunks[lo:hi] {
			if row := rows[lo+i].Sample; row >= 0 {
				draws[lo+i] = next(sl, c.Req, row)
			}
		}
	})
	rn.drawn = time.Now()
	return sl, draws, nil
}

// placeDeviceLogits draws the device rows of uses on dev, then copies the
// rows the host needs: all of them in one copy, or just those, gathered.
func placeDeviceLogits[R Request](dev device.Sampler, logits tensor.T, uses []logitUse[R]) (*StepLogits, error) {
	n := logits.Rows()
	sl := &StepLogits{hostRow: make([]int, n), ids: make([]int, n)}
	needHost := make([]bool, n)
	var rows []device.SampleRow
	for _, u := range uses {
		if u.tree && deviceSamples(u.r) && greedy(u.r.Sampler().Settings()) {
			// Greedy verification needs each node's argmax, which the
			// device sampler picks as the host's would (lowest id on
			// ties): ids cross, not vocabulary-wide rows. Sampled
			// requests' trees go to the host, whose sampler runs the
			// rejection sampling (sample.Sampler.Verify).
			for k := range u.scoreN {
				rows = append(rows, device.SampleRow{Row: u.scoreRow + k})
			}
			continue
		}
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
		s := u.r.Sampler().Settings()
		rows = append(rows, device.SampleRow{
			Row: u.sampleRow, Temperature: float32(s.Temperature), TopK: s.TopK,
			TopP: float32(s.TopP), MinP: float32(s.MinP),
			Seed: s.Seed, Step: uint64(u.step),
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
	var err error
	switch {
	case len(gather) == n:
		sl.Host, err = dev.ToHost(logits).Host()
	case len(gather) > 0:
		sl.Host, err = dev.ToHost(dev.GatherRows(logits, gather)).Host()
	}
	return sl, err
}

// greedy reports whether s always draws the argmax.
func greedy(s sample.Settings) bool { return s.Temperature <= 0 || s.TopK == 1 }

// DeviceID is the token the device drew from logits row i, or -1.
func (sl *StepLogits) DeviceID(i int) int {
	if sl.ids == nil {
		return -1
	}
	return sl.ids[i]
}

// HostIndex is the row of sl.Host holding logits row i. A request's
// prompt-scoring rows stay consecutive.
func (sl *StepLogits) HostIndex(i int) int {
	if sl.hostRow == nil {
		return i
	}
	if sl.hostRow[i] < 0 {
		panic("runner: logits row not brought to the host") // placeDeviceLogits brings every row a use names
	}
	return sl.hostRow[i]
}

// next is r's next token from logits row i: the device's draw, or the host
// sampler's.
func next[R Request](sl *StepLogits, r R, i int) Draw {
	if sl.ids != nil && sl.ids[i] >= 0 {
		return Draw{ID: sl.ids[i]}
	}
	row := sl.Host.Row(sl.HostIndex(i))
	if c := r.Constraint(); c != nil && !c.Mask(row) {
		return Draw{ID: -1}
	}
	return Draw{ID: r.Sampler().Sample(row), Logits: row}
}
