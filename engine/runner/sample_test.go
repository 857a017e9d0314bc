package runner

import (
	"math"
	"reflect"
	"slices"
	"testing"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/device/cpu"
	"github.com/gosling-ai/gosling/engine/sched"
	"github.com/gosling-ai/gosling/internal/fakedevice"
	"github.com/gosling-ai/gosling/sample"
	"github.com/gosling-ai/gosling/spec"
	"github.com/gosling-ai/gosling/tensor"
)

func testRequest(p sample.Params, logprobs bool, outputs int) *testReq {
	return &testReq{sampler: sample.NewSampler(p, nil), logprobs: logprobs, Req: sched.Req{Tokens: make([]int, outputs)}}
}

// Device-ready requests are drawn on the device with their settings and
// step; penalised and logprob requests and prompt-scoring rows are gathered
// to the host, in order, and nothing else is copied.
func TestPlaceDeviceLogits(t *testing.T) {
	const rows, vocab = 7, 5
	host := tensor.New(rows, vocab)
	for i := range host.HostData() {
		host.HostData()[i] = float32(i)
	}
	seed := uint64(99)
	plain := sample.DefaultParams()
	plain.Temperature, plain.TopK, plain.TopP, plain.MinP, plain.Seed = 0.5, 7, 0.9, 0.02, &seed
	penalised := sample.DefaultParams()
	penalised.RepetitionPenalty = 1.2
	greedyP := sample.DefaultParams()
	greedyP.Temperature = 0

	decode := testRequest(plain, false, 3)        // row 0, device
	pen := testRequest(penalised, false, 0)       // row 1, host
	scored := testRequest(greedyP, false, 0)      // rows 2-4 scored, row 4 drawn on the device
	withLogprobs := testRequest(greedyP, true, 0) // row 5, host
	midPrompt := testRequest(plain, false, 0)     // row 6, nothing
	uses := []logitUse[*testReq]{
		{r: decode, sampleRow: 0, scoreRow: 0, step: decode.NumOutput()},
		{r: pen, sampleRow: 1, scoreRow: 1},
		{r: scored, sampleRow: 4, scoreRow: 2, scoreN: 3},
		{r: withLogprobs, sampleRow: 5, scoreRow: 5},
		{r: midPrompt, sampleRow: -1, scoreRow: 6},
	}
	f := fakedevice.New()
	sl, err := placeDeviceLogits(f, f.Put(host), uses, make([]rowMask, len(uses)))
	if err != nil {
		t.Fatal(err)
	}
	wantRows := []device.SampleRow{
		{Row: 0, Temperature: 0.5, TopK: 7, TopP: 0.9, MinP: 0.02, Seed: 99, Step: 3},
		{Row: 4, Temperature: 0, TopK: 0, TopP: 1, MinP: 0, Seed: scored.sampler.Settings().Seed},
	}
	if len(f.Sampled) != 1 || !reflect.DeepEqual(f.Sampled[0], wantRows) {
		t.Fatalf("sampled %+v, want one call with %+v", f.Sampled, wantRows)
	}
	if len(f.Gathers) != 1 || !slices.Equal(f.Gathers[0], []int32{1, 2, 3, 4, 5}) || f.Copies != 1 {
		t.Fatalf("gathered %v with %d copies, want rows [1 2 3 4 5] in one copy", f.Gathers, f.Copies)
	}
	if d := next(sl, decode, 0); d.ID != 1000 || d.Logits != nil {
		t.Errorf("decode row: %+v, want the device's 1000", d)
	}
	if d := next(sl, scored, 4); d.ID != 1004 || d.Logits != nil {
		t.Errorf("scored request's draw: %+v, want the device's 1004", d)
	}
	// The host rows are the right ones, and host draws use them.
	for _, row := range []int{1, 2, 3, 4, 5} {
		if got := sl.Host.Row(sl.HostIndex(row)); !slices.Equal(got, host.Row(row)) {
			t.Errorf("host row for logits row %d is %v, want %v", row, got, host.Row(row))
		}
	}
	if first := sl.HostIndex(2); sl.HostIndex(3) != first+1 || sl.HostIndex(4) != first+2 {
		t.Error("a request's scoring rows are not consecutive on the host")
	}
	if d := next(sl, withLogprobs, 5); d.ID != vocab-1 || !slices.Equal(d.Logits, host.Row(5)) {
		t.Errorf("logprobs row: %+v, want the host argmax %d of row 5", d, vocab-1)
	}
	if d := next(sl, pen, 1); !slices.Equal(d.Logits, host.Row(1)) {
		t.Errorf("penalised row drawn from %v, want row 1 %v", d.Logits, host.Row(1))
	}

	// Every row needed: one whole copy, no gather. None: no copy at all.
	f = fakedevice.New()
	all := []logitUse[*testReq]{{r: pen, sampleRow: 0}, {r: scored, sampleRow: 6, scoreRow: 1, scoreN: 6}}
	if _, err := placeDeviceLogits(f, f.Put(host), all, make([]rowMask, len(all))); err != nil || len(f.Gathers) != 0 || f.Copies != 1 {
		t.Errorf("all rows: err %v, %d gathers, %d copies; want one copy", err, len(f.Gathers), f.Copies)
	}
	f = fakedevice.New()
	sl, err = placeDeviceLogits(f, f.Put(host), []logitUse[*testReq]{{r: decode, sampleRow: 3}, {r: midPrompt, sampleRow: -1}}, make([]rowMask, 2))
	if err != nil || len(f.Gathers) != 0 || f.Copies != 0 || next(sl, decode, 3).ID != 1003 {
		t.Errorf("device rows only: err %v, %d gathers, %d copies", err, len(f.Gathers), f.Copies)
	}
}

// Host logits (the CPU) are read as they are, every draw on the host.
func TestPlaceHostLogits(t *testing.T) {
	host := tensor.From([]float32{0, 3, 1, 2, 9, 4}, 2, 3)
	e := &Runner[*testReq]{rt: cpu.NewRuntime(nil)}
	p := sample.DefaultParams()
	p.Temperature = 0
	r := testRequest(p, false, 0)
	sl, err := e.placeLogits(host, []logitUse[*testReq]{{r: r, sampleRow: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if d := next(sl, r, 1); d.ID != 1 || !slices.Equal(d.Logits, host.Row(1)) {
		t.Errorf("host draw %+v, want 1 from row 1", d)
	}
	if _, err := e.placeLogits(tensor.Device{Shape: []int{1, 3}, Ptr: 0x1000}.T(), nil); err == nil {
		t.Error("device logits without a GPU were accepted")
	}
}

// A verified tree's rows: a greedy request that samples on the device has
// every node argmaxed there (greedy rows); a sampled request's drafted
// nodes are verified there (device.SpecVerifier), each with its drafted
// children in order and the step of its depth, its padding left out; a
// greedy one's with logprobs comes to the host for sample.Sampler.Verify,
// and so does a sampled one's on a device without a verifier or with a
// node wider than device.MaxVerifyDrafts. DeviceID and DeviceVerdict tell
// them apart.
func TestPlaceTreeLogits(t *testing.T) {
	const rows, vocab = 10, 12
	host := tensor.New(rows, vocab)
	for i := range host.HostData() {
		host.HostData()[i] = float32(i % 7)
	}
	greedyP := sample.DefaultParams()
	greedyP.Temperature = 0
	topOne := sample.DefaultParams()
	topOne.TopK = 1 // greedy too
	seed := uint64(31)
	warm := sample.DefaultParams()
	warm.Temperature, warm.TopK, warm.Seed = 0.7, 9, &seed
	chain := spec.NewTree(1)
	chain.Add(0, 2)
	root := spec.NewTree(1)
	tree := spec.NewTree(3) // node 0: children 5 (node 1), 6 (node 2); node 1: child 7 (node 3)
	n1 := tree.Add(0, 5)
	tree.Add(0, 6)
	tree.Add(n1, 7)
	tree.PadTo(5)                       // node 4: padding
	g := testRequest(greedyP, false, 0) // rows 0-1, device argmax
	k1 := testRequest(topOne, false, 0) // row 2, device argmax
	s := testRequest(warm, false, 4)    // rows 3-7, device verify (row 7 padding)
	lp := testRequest(greedyP, true, 0) // rows 8-9, host
	uses := []logitUse[*testReq]{
		{r: g, sampleRow: -1, scoreRow: 0, scoreN: 2, tree: &chain},
		{r: k1, sampleRow: -1, scoreRow: 2, scoreN: 1, tree: &root},
		{r: s, sampleRow: -1, scoreRow: 3, scoreN: 5, step: 4, tree: &tree},
		{r: lp, sampleRow: -1, scoreRow: 8, scoreN: 2, tree: &chain},
	}
	f := fakedevice.New()
	sl, err := placeDeviceLogits(f, f.Put(host), uses, make([]rowMask, len(uses)))
	if err != nil {
		t.Fatal(err)
	}
	var want []device.SampleRow
	for row := range 3 {
		want = append(want, device.SampleRow{Row: row})
	}
	if len(f.Sampled) != 1 || !reflect.DeepEqual(f.Sampled[0], want) {
		t.Fatalf("sampled %+v, want greedy rows 0-2", f.Sampled)
	}
	base := device.SampleRow{Temperature: 0.7, TopK: 9, TopP: 1, Seed: 31}
	node := func(row, step int, drafts ...int32) device.VerifyRow {
		r := base
		r.Row, r.Step = row, uint64(step)
		return device.VerifyRow{SampleRow: r, Drafts: drafts}
	}
	wantVerify := []device.VerifyRow{node(3, 4, 5, 6), node(4, 5, 7), node(5, 5), node(6, 6)}
	if len(f.Checked) != 1 || !reflect.DeepEqual(f.Checked[0], wantVerify) {
		t.Fatalf("verified %+v, want %+v", f.Checked, wantVerify)
	}
	if len(f.Gathers) != 1 || !slices.Equal(f.Gathers[0], []int32{8, 9}) || f.Copies != 1 {
		t.Fatalf("gathered %v with %d copies, want rows [8 9] in one copy", f.Gathers, f.Copies)
	}
	for row := range rows {
		id := sl.DeviceID(row)
		c, tok, ok := sl.DeviceVerdict(row)
		switch {
		case row < 3 && (id != 1000+row || ok):
			t.Errorf("row %d: device id %d, verdict %v, want id %d", row, id, ok, 1000+row)
		case row >= 3 && row < 7 && (id != -1 || !ok || tok < 0 || tok >= vocab || c < -1 || c >= len(wantVerify[row-3].Drafts)):
			t.Errorf("row %d: device id %d, verdict (%d, %d, %v); want a verdict", row, id, c, tok, ok)
		case row == 7 && (id != -1 || ok):
			t.Errorf("padding row 7: device id %d, verdict %v", id, ok)
		case row >= 8 && (id != -1 || ok):
			t.Errorf("row %d: device id %d, verdict %v for a host-verified row", row, id, ok)
		case row >= 8 && !slices.Equal(sl.Host.Row(sl.HostIndex(row)), host.Row(row)):
			t.Errorf("host row for logits row %d is %v, want %v", row, sl.Host.Row(sl.HostIndex(row)), host.Row(row))
		}
	}
	if (&StepLogits{Host: tensor.Host{Shape: host.Shape, Data: host.HostData()}}).DeviceID(0) != -1 {
		t.Error("host logits reported a device draw")
	}

	// No verifier, or a node of MaxVerifyDrafts+1 drafts: the sampled
	// rows come to the host.
	wide := spec.NewTree(0)
	for tok := 1; tok <= device.MaxVerifyDrafts+1; tok++ {
		wide.Add(0, tok)
	}
	for _, c := range []struct {
		name  string
		plain bool // hide SpecVerify
		tree  *spec.Tree
	}{{"no verifier", true, &tree}, {"wide node", false, &wide}} {
		f := fakedevice.New()
		var dev device.Sampler = f
		if c.plain {
			dev = struct{ device.Sampler }{f}
		}
		n := c.tree.Len()
		u := []logitUse[*testReq]{{r: s, sampleRow: -1, scoreRow: 0, scoreN: n, step: 4, tree: c.tree}}
		sl, err := placeDeviceLogits(dev, f.Put(tensor.New(n, vocab)), u, make([]rowMask, 1))
		if err != nil {
			t.Fatal(err)
		}
		if len(f.Checked) != 0 || len(f.Sampled) != 0 || f.Copies != 1 {
			t.Errorf("%s: %d verify calls, %d sample calls, %d copies; want the rows copied", c.name, len(f.Checked), len(f.Sampled), f.Copies)
		}
		if _, _, ok := sl.DeviceVerdict(0); ok {
			t.Errorf("%s: a device verdict", c.name)
		}
	}
}

// fixedMask is a grammar's state that allows the same tokens at every
// step (none when mask is all zero).
type fixedMask []uint64

func (m fixedMask) Allowed() ([]uint64, bool) {
	return m, slices.ContainsFunc(m, func(w uint64) bool { return w != 0 })
}

// Constrained requests that sample on the device send their grammar's
// mask with their row, in the row's place, and nothing comes back but the
// ids; one whose grammar allows nothing is not drawn and gets -1; one the
// host samples (logprobs) is gathered and masked there, as on the CPU.
func TestPlaceConstrainedLogits(t *testing.T) {
	const rows, vocab = 5, 70
	host := tensor.New(rows, vocab)
	for i := range host.HostData() {
		host.HostData()[i] = float32(i % vocab) // each row's argmax: the last id
	}
	greedyP := sample.DefaultParams()
	greedyP.Temperature = 0
	seed := uint64(4)
	warm := sample.DefaultParams()
	warm.Temperature, warm.TopK, warm.Seed = 0.8, 5, &seed
	only := func(ids ...int) fixedMask {
		m := make(fixedMask, (vocab+63)/64)
		for _, id := range ids {
			m[id/64] |= 1 << (id % 64)
		}
		return m
	}
	g := testRequest(greedyP, false, 2) // row 0, device, id 3 only
	g.constraint = only(3)
	s := testRequest(warm, false, 5) // row 1, device, ids 1 and 65
	s.constraint = only(1, 65)
	none := testRequest(greedyP, false, 0) // row 2, nothing allowed
	none.constraint = only()
	lp := testRequest(greedyP, true, 0) // row 3, host, ids 10 and 20
	lp.constraint = only(10, 20)
	plain := testRequest(greedyP, false, 0) // row 4, device, unmasked
	uses := []logitUse[*testReq]{
		{r: g, sampleRow: 0, scoreRow: 0, step: 2},
		{r: s, sampleRow: 1, scoreRow: 1, step: 5},
		{r: none, sampleRow: 2, scoreRow: 2},
		{r: lp, sampleRow: 3, scoreRow: 3},
		{r: plain, sampleRow: 4, scoreRow: 4},
	}
	masks := make([]rowMask, len(uses))
	for i, u := range uses {
		masks[i] = deviceMask(u)
	}
	if masks[3].bits != nil || masks[4].bits != nil || !masks[2].none || masks[0].none {
		t.Fatalf("masks %+v: want rows 0-2's only, row 2's empty", masks)
	}
	f := fakedevice.New()
	sl, err := placeDeviceLogits(f, f.Put(host), uses, masks)
	if err != nil {
		t.Fatal(err)
	}
	want := []device.SampleRow{
		{Row: 0, TopP: 1, Seed: g.sampler.Settings().Seed, Step: 2, Mask: only(3)},
		{Row: 1, Temperature: 0.8, TopK: 5, TopP: 1, Seed: 4, Step: 5, Mask: only(1, 65)},
		{Row: 4, TopP: 1, Seed: plain.sampler.Settings().Seed},
	}
	if len(f.Sampled) != 1 || !reflect.DeepEqual(f.Sampled[0], want) {
		t.Fatalf("sampled %+v,\nwant %+v", f.Sampled, want)
	}
	if len(f.Gathers) != 1 || !slices.Equal(f.Gathers[0], []int32{3}) {
		t.Fatalf("gathered %v, want row 3 alone", f.Gathers)
	}
	for i, r := range []*testReq{g, s, plain} {
		row := []int{0, 1, 4}[i]
		if d := next(sl, r, row); d.ID != 1000+row || d.Logits != nil {
			t.Errorf("row %d: %+v, want the device's %d", row, d, 1000+row)
		}
	}
	if d := next(sl, none, 2); d.ID != -1 || sl.DeviceID(2) != -1 {
		t.Errorf("nothing allowed: %+v (device id %d), want -1", d, sl.DeviceID(2))
	}
	if d := next(sl, lp, 3); d.ID != 20 || d.Logits[69] != float32(math.Inf(-1)) || d.Logits[10] != 10 {
		t.Errorf("host-sampled constrained row: %+v, want id 20 from the masked row", d)
	}

	// The CPU: every draw on the host, masked.
	rn := &Runner[*testReq]{rt: cpu.NewRuntime(nil)}
	cpuHost := tensor.New(2, vocab)
	for i := range cpuHost.HostData() {
		cpuHost.HostData()[i] = float32(i % vocab)
	}
	sl, err = rn.placeLogits(cpuHost, []logitUse[*testReq]{{r: g, sampleRow: 0}, {r: none, sampleRow: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if d := next(sl, g, 0); d.ID != 3 {
		t.Errorf("CPU constrained greedy draw %+v, want 3", d)
	}
	if d := next(sl, none, 1); d.ID != -1 {
		t.Errorf("CPU draw with nothing allowed %+v, want -1", d)
	}
}

// maskRow forbids every id whose bit is clear, past the mask's end too.
func TestMaskRow(t *testing.T) {
	row := make([]float32, 130)
	maskRow(row, []uint64{1<<0 | 1<<63, math.MaxUint64})
	for i, x := range row {
		if want := i == 0 || (i >= 63 && i < 128); (x == 0) != want {
			t.Errorf("id %d: %v", i, x)
		}
	}
}
