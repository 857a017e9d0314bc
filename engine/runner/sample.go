package runner

import (
	"fmt"
	"math"
	"time"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/engine/sched"
	"github.com/gosling-ai/gosling/sample"
	"github.com/gosling-ai/gosling/spec"
	"github.com/gosling-ai/gosling/tensor"
)

// Sampling on the device. On a GPU the model leaves its logits there
// (model.Runnable.Forward): [rows, vocab] float32, 32 MiB a step for a
// 128K vocabulary at batch 64. Requests that need only what the device
// sampler has (temperature, top-k, top-p, min-p, a seed) get their next
// token from it, and only the ids cross to the host. A constrained
// request's token mask (its grammar's Allowed bitmask) goes up with the
// step's sampling parameters and the device's sampler applies it, so
// structured output stays on the device too. Rows the host must see —
// penalised requests, logprobs, prompt scoring — are gathered and copied
// back, and go through the host sampler as on the CPU, masked there.
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
	// tree: the verified tree whose nodes the scoring rows are (nil: none).
	// A request that samples on the device has them decided there: a
	// greedy one's argmaxed, a sampled one's verified node by node
	// (device.SpecVerifier); tree acceptance needs only the results.
	tree *spec.Tree
}

// StepLogits are one step's logits as the requests read them.
type StepLogits struct {
	Host    tensor.Host // the rows the host reads (HostIndex says which is which)
	hostRow []int       // logits row → row of host, -1 when not brought; nil: the identity
	ids     []int       // logits row → token drawn on the device, -1 when none, noneAllowed; nil: none
	// verdicts: logits row → the device's decision of a tree node
	// (device.SpecVerifier), Token -1 when none; nil: none.
	verdicts []device.NodeVerdict
}

// noneAllowed in StepLogits.ids marks a row whose grammar allows no token.
const noneAllowed = -2

// Draw is a request's next token (-1: its grammar allows none) and the
// host logits row it was drawn from (nil when the device drew it).
type Draw struct {
	ID     int
	Logits []float32
}

// deviceSamples reports whether r's tokens are drawn on the device: it
// needs nothing the device sampler lacks (penalties, logprobs).
func deviceSamples[R Request](r R) bool {
	return !r.WantsLogprobs() && !r.Sampler().Settings().Penalties
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
	// Constrained device rows' masks, on the workers (each has usually
	// been computed while the forward ran: constraint Prefetch).
	masks := make([]rowMask, len(uses))
	rn.workers.For(len(uses), 4, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			masks[i] = deviceMask(uses[i])
		}
	})
	var sl *StepLogits
	err := rn.rt.Run(func() (err error) {
		sl, err = placeDeviceLogits(dev, logits, uses, masks)
		return err
	})
	return sl, err
}

// rowMask is a device row's token mask: bits nil without a grammar; none
// when the grammar allows no token.
type rowMask struct {
	bits []uint64
	none bool
}

// deviceMask is u's token mask when the device draws its token.
func deviceMask[R Request](u logitUse[R]) rowMask {
	c := u.r.Constraint()
	if c == nil || u.sampleRow < 0 || !deviceSamples(u.r) {
		return rowMask{}
	}
	bits, ok := c.Allowed()
	return rowMask{bits: bits, none: !ok}
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
	for i, c := range chunks {
		if rows[i].Sample >= 0 && c.Req.Constraint() != nil && draws[i].Logits != nil {
			rn.counts.hostConstrained.Add(1)
		}
	}
	rn.drawn = time.Now()
	return sl, draws, nil
}

// placeDeviceLogits draws the device rows of uses on dev, each masked by
// masks[i] (deviceMask), decides on dev the tree nodes of sampled requests
// that it can (deviceVerifies), then copies the rows the host needs: all
// of them in one copy, or just those, gathered. A row whose grammar
// allows nothing is not drawn (noneAllowed).
func placeDeviceLogits[R Request](dev device.Sampler, logits tensor.T, uses []logitUse[R], masks []rowMask) (*StepLogits, error) {
	n := logits.Rows()
	sl := &StepLogits{hostRow: make([]int, n), ids: make([]int, n)}
	needHost := make([]bool, n)
	for i := range sl.ids {
		sl.ids[i] = -1
	}
	verifier, _ := dev.(device.SpecVerifier)
	var rows []device.SampleRow
	var verify []device.VerifyRow
	for i, u := range uses {
		if u.tree != nil && u.r.Constraint() == nil && deviceSamples(u.r) {
			s := u.r.Sampler().Settings()
			if greedy(s) {
				// Greedy verification needs each node's argmax, which the
				// device sampler picks as the host's would (lowest id on
				// ties): ids cross, not vocabulary-wide rows.
				for k := range u.scoreN {
					rows = append(rows, device.SampleRow{Row: u.scoreRow + k})
				}
				continue
			}
			if verifier != nil && deviceVerifies(u.tree) {
				verify = appendVerifyRows(verify, u, s)
				continue
			}
			// Otherwise the rows go to the host, whose sampler runs the
			// rejection sampling (sample.Sampler.Verify).
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
		if masks[i].none {
			sl.ids[u.sampleRow] = noneAllowed
			continue
		}
		row := sampleRow(u.sampleRow, u.r.Sampler().Settings(), u.step)
		row.Mask = masks[i].bits
		rows = append(rows, row)
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
	if len(verify) > 0 {
		got, err := verifier.SpecVerify(logits, verify)
		if err != nil {
			return nil, err
		}
		sl.verdicts = make([]device.NodeVerdict, n)
		for i := range sl.verdicts {
			sl.verdicts[i].Token = -1
		}
		for i, row := range verify {
			sl.verdicts[row.Row] = got[i]
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

// deviceVerifies reports whether t's nodes fit the device's verifier:
// none has more than device.MaxVerifyDrafts drafted children.
func deviceVerifies(t *spec.Tree) bool {
	children := make([]int, t.Len())
	for i := 1; i < t.Len()-t.Pad; i++ {
		if children[t.Parents[i]]++; children[t.Parents[i]] > device.MaxVerifyDrafts {
			return false
		}
	}
	return true
}

// appendVerifyRows appends the drafted nodes of u's tree (the padding is
// never reached) as rows for device.SpecVerifier, with s's parameters;
// each node's step is u's plus its depth, the output index of the token
// it emits, so the nodes along one path draw distinct random numbers.
func appendVerifyRows[R Request](verify []device.VerifyRow, u logitUse[R], s sample.Settings) []device.VerifyRow {
	t := u.tree
	depth := make([]int, t.Len())
	for node := range t.Len() - t.Pad {
		if node > 0 {
			depth[node] = depth[t.Parents[node]] + 1
		}
		var drafts []int32
		for _, c := range t.Children(node) {
			drafts = append(drafts, int32(t.Tokens[c]))
		}
		verify = append(verify, device.VerifyRow{SampleRow: sampleRow(u.scoreRow+node, s, u.step+depth[node]), Drafts: drafts})
	}
	return verify
}

// sampleRow is logits row row drawn on the device with s's parameters as
// output token step.
func sampleRow(row int, s sample.Settings, step int) device.SampleRow {
	return device.SampleRow{Row: row, Temperature: float32(s.Temperature), TopK: s.TopK,
		TopP: float32(s.TopP), MinP: float32(s.MinP), Seed: s.Seed, Step: uint64(step)}
}

// greedy reports whether s always draws the argmax.
func greedy(s sample.Settings) bool { return s.Temperature <= 0 || s.TopK == 1 }

// DeviceID is the token the device drew from logits row i, or -1.
func (sl *StepLogits) DeviceID(i int) int {
	if sl.ids == nil {
		return -1
	}
	return max(sl.ids[i], -1)
}

// DeviceVerdict is the device's decision of the tree node at logits row
// i (device.SpecVerifier): the index of the accepted child among the
// node's drafted children (-1: none) and the token emitted; ok false when
// the device decided none there.
func (sl *StepLogits) DeviceVerdict(i int) (child, token int, ok bool) {
	if sl.verdicts == nil || sl.verdicts[i].Token < 0 {
		return -1, -1, false
	}
	return int(sl.verdicts[i].Child), int(sl.verdicts[i].Token), true
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
	if sl.ids != nil && sl.ids[i] == noneAllowed {
		return Draw{ID: -1}
	}
	row := sl.Host.Row(sl.HostIndex(i))
	if c := r.Constraint(); c != nil {
		mask, ok := c.Allowed()
		if !ok {
			return Draw{ID: -1}
		}
		maskRow(row, mask)
	}
	return Draw{ID: r.Sampler().Sample(row), Logits: row}
}

// maskRow sets the logits of the ids mask forbids (bit id%64 of word
// id/64 clear, or past its end) to -Inf.
func maskRow(row []float32, mask []uint64) {
	negInf := float32(math.Inf(-1))
	for w := 0; w*64 < len(row); w++ {
		bits := uint64(0)
		if w < len(mask) {
			bits = mask[w]
		}
		if bits == math.MaxUint64 {
			continue
		}
		end := min(w*64+64, len(row))
		for id := w * 64; id < end; id++ {
			if bits&(1<<(id-w*64)) == 0 {
				row[id] = negInf
			}
		}
	}
}
