package runner

import (
	"slices"
	"testing"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/device/cpu"
	"github.com/gosling-ai/gosling/engine/sched"
	"github.com/gosling-ai/gosling/internal/fakedevice"
	"github.com/gosling-ai/gosling/sample"
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
	sl, err := placeDeviceLogits(f, f.Put(host), uses)
	if err != nil {
		t.Fatal(err)
	}
	wantRows := []device.SampleRow{
		{Row: 0, Temperature: 0.5, TopK: 7, TopP: 0.9, MinP: 0.02, Seed: 99, Step: 3},
		{Row: 4, Temperature: 0, TopK: 0, TopP: 1, MinP: 0, Seed: scored.sampler.Settings().Seed},
	}
	if len(f.Sampled) != 1 || !slices.Equal(f.Sampled[0], wantRows) {
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
	if _, err := placeDeviceLogits(f, f.Put(host), all); err != nil || len(f.Gathers) != 0 || f.Copies != 1 {
		t.Errorf("all rows: err %v, %d gathers, %d copies; want one copy", err, len(f.Gathers), f.Copies)
	}
	f = fakedevice.New()
	sl, err = placeDeviceLogits(f, f.Put(host), []logitUse[*testReq]{{r: decode, sampleRow: 3}, {r: midPrompt, sampleRow: -1}})
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
// every node argmaxed there (greedy rows) and nothing copied; a sampled
// request's, and a greedy one's with logprobs, come to the host for
// sample.Sampler.Verify; deviceID tells the two apart.
func TestPlaceTreeLogits(t *testing.T) {
	const rows, vocab = 9, 4
	host := tensor.New(rows, vocab)
	for i := range host.HostData() {
		host.HostData()[i] = float32(i % 7)
	}
	greedyP := sample.DefaultParams()
	greedyP.Temperature = 0
	topOne := sample.DefaultParams()
	topOne.TopK = 1 // greedy too
	warm := sample.DefaultParams()
	warm.Temperature = 0.7
	g := testRequest(greedyP, false, 0) // rows 0-2, device
	k1 := testRequest(topOne, false, 0) // rows 3-4, device
	s := testRequest(warm, false, 0)    // rows 5-6, host
	lp := testRequest(greedyP, true, 0) // rows 7-8, host
	uses := []logitUse[*testReq]{
		{r: g, sampleRow: -1, scoreRow: 0, scoreN: 3, tree: true},
		{r: k1, sampleRow: -1, scoreRow: 3, scoreN: 2, tree: true},
		{r: s, sampleRow: -1, scoreRow: 5, scoreN: 2, tree: true},
		{r: lp, sampleRow: -1, scoreRow: 7, scoreN: 2, tree: true},
	}
	f := fakedevice.New()
	sl, err := placeDeviceLogits(f, f.Put(host), uses)
	if err != nil {
		t.Fatal(err)
	}
	var want []device.SampleRow
	for row := range 5 {
		want = append(want, device.SampleRow{Row: row})
	}
	if len(f.Sampled) != 1 || !slices.Equal(f.Sampled[0], want) {
		t.Fatalf("sampled %+v, want greedy rows 0-4", f.Sampled)
	}
	if len(f.Gathers) != 1 || !slices.Equal(f.Gathers[0], []int32{5, 6, 7, 8}) || f.Copies != 1 {
		t.Fatalf("gathered %v with %d copies, want rows [5 6 7 8] in one copy", f.Gathers, f.Copies)
	}
	for row := range rows {
		id := sl.DeviceID(row)
		switch {
		case row < 5 && id != 1000+row:
			t.Errorf("row %d: device id %d, want %d", row, id, 1000+row)
		case row >= 5 && id != -1:
			t.Errorf("row %d: device id %d for a host-verified row", row, id)
		case row >= 5 && !slices.Equal(sl.Host.Row(sl.HostIndex(row)), host.Row(row)):
			t.Errorf("host row for logits row %d is %v, want %v", row, sl.Host.Row(sl.HostIndex(row)), host.Row(row))
		}
	}
	if (&StepLogits{Host: tensor.Host{Shape: host.Shape, Data: host.HostData()}}).DeviceID(0) != -1 {
		t.Error("host logits reported a device draw")
	}
}
