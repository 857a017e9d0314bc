package cuda

import (
	"errors"
	"os"
	"strconv"

	"github.com/gosling-ai/gosling/device"
)

// L2 prefetch (device.Prefetcher): a decode step's attention reads little
// and leaves HBM idle, so the model asks, before it, for the weights of
// the projections after it. l2_prefetch runs on a second stream, forked
// from the forward's where the hint is given, so that its reads go on
// beside the attention (in series it only moves the read: its blocks stay
// until the memory system took the requests); the projections then find
// their first bytes in L2. The branch joins the forward's stream at the
// forward's end (ModelOps.catch), as a graph capture requires.

// l2PrefetchRows is the most tokens a forward may have for the hint to be
// taken: past a decode batch the products reuse each weight tile over
// many rows and are not bound by reading it.
const l2PrefetchRows = 64

// l2PrefetchShare is the share of the L2 the hinted weights may fill: the
// attention's own reads and the step's activations need the rest.
const l2PrefetchShare = 0.75

// l2PrefetchEnv reads GOSLING_L2_PREFETCH: "off" (or "0") turns the hint
// off, a number of MiB sets the budget (for sweeps on a GPU).
func l2PrefetchEnv() (budgetMiB int, off bool) {
	switch v := os.Getenv("GOSLING_L2_PREFETCH"); v {
	case "":
	case "off", "0":
		return 0, true
	default:
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			return n, false
		}
	}
	return 0, false
}

var l2PrefetchMiB, l2PrefetchOff = l2PrefetchEnv()

// sideStream is the second stream l2_prefetch runs on, made on first use.
type sideStream struct {
	s          Stream
	fork, join Event
	made       bool
	pending    bool // work enqueued on s that the forward's stream has not joined
}

func (o *ModelOps) sideStream() (Stream, error) {
	sd := &o.side
	if !sd.made {
		s, err := o.dev.NewStream()
		if err != nil {
			return 0, err
		}
		fork, err := o.dev.NewEvent(false)
		if err != nil {
			return 0, errors.Join(err, o.dev.DestroyStream(s))
		}
		join, err := o.dev.NewEvent(false)
		if err != nil {
			return 0, errors.Join(err, o.dev.DestroyEvent(fork), o.dev.DestroyStream(s))
		}
		*sd = sideStream{s: s, fork: fork, join: join, made: true}
	}
	return sd.s, nil
}

// joinSide makes the forward's stream wait for the side stream's work.
func (o *ModelOps) joinSide() error {
	if !o.side.pending {
		return nil
	}
	o.side.pending = false
	return o.dev.Edge(o.side.s, o.stream, o.side.join)
}

func (sd *sideStream) close(dev *Device) error {
	if !sd.made {
		return nil
	}
	sd.made = false
	return errors.Join(dev.StreamSync(sd.s), dev.DestroyEvent(sd.fork), dev.DestroyEvent(sd.join), dev.DestroyStream(sd.s))
}

// streamBytes is how many bytes a product reads of m's weight (a compact
// matrix's block bodies; its scale plane is small).
func (m *Matrix) streamBytes() int {
	switch {
	case m.quant != nil:
		return m.quant.plan.bodyRow * m.out
	case m.fp8 != nil:
		return m.out * m.in
	}
	return m.out * m.in * ElemSize(m.dtype)
}

// l2PrefetchBudget is how many bytes one hint may ask for.
func (o *ModelOps) l2PrefetchBudget() int {
	if l2PrefetchMiB > 0 {
		return l2PrefetchMiB << 20
	}
	return int(float64(o.dev.Info.L2Bytes) * l2PrefetchShare)
}

// Prefetch asks L2 for ms's weights, in order, up to the budget (the last
// one cut short), for forwards of at most l2PrefetchRows tokens.
func (o *ModelOps) Prefetch(rows int, ms ...device.Matrix) {
	if l2PrefetchOff || rows < 1 || rows > l2PrefetchRows || len(ms) == 0 {
		return
	}
	budget := o.l2PrefetchBudget()
	var args l2PrefetchArgs
	ranges := []struct {
		p *DevicePtr
		n *int
	}{{&args.P0, &args.N0}, {&args.P1, &args.N1}, {&args.P2, &args.N2}}
	for i, dm := range ms {
		if i == len(ranges) || budget < 16 {
			break
		}
		m := asMatrix("Prefetch", dm)
		n := min(m.streamBytes(), budget) &^ 15
		*ranges[i].p, *ranges[i].n = m.ptr, n
		budget -= n
	}
	if args.N0 == 0 {
		return
	}
	if o.dev.Info.Major < 9 {
		args.Mode = 1
	}
	o.do("Prefetch", func() error {
		side, err := o.sideStream()
		if err != nil {
			return err
		}
		if err := o.dev.Edge(o.stream, side, o.side.fork); err != nil {
			return err
		}
		o.side.pending = true
		return o.k.launchL2Prefetch(side, LaunchConfig{Grid: D1(max(o.dev.Info.SMs, 1)), Block: D1(128)}, args)
	})
}
