package cuda

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/gosling-ai/gosling/device"
)

// Kernel profiling: every stream operation of a profiled forward (kernel
// launch, cuBLAS/cuBLASLt call, copy, memset) is followed by a timing
// event, the previous operation's event marking its start, and the
// elapsed GPU time is summed per operation name.
//
// Events measure from when the GPU reaches the first to when it reaches
// the second, so an operation launched while the GPU is idle would also
// count the launch latency. A profiled forward therefore starts with a
// spin kernel that holds the stream while the host enqueues the whole
// forward behind it; the operations then run back to back as they would
// from a CUDA graph. A forward whose host enqueue outlasts the spin is
// counted as starved, and its figures include launch gaps.
//
// The profiler is touched only on the device thread.
type profiler struct {
	// prev is the last operation's end event on prevStream: the next
	// operation on that stream starts there, so that a forward queues
	// one event per operation, not two (the launch queue is finite, and
	// the whole forward must fit in it behind the spin).
	prev       Event
	prevStream Stream
	last       time.Time     // host time of the last operation's enqueue
	wait       time.Duration // this forward's longest host time between two enqueues
	waitOp     string        // the operation enqueued after it
	free       []Event
	ops        []profOp // the current forward's operations, in stream order
	stats      map[[2]string]*device.ProfiledOp
	forwards   map[string]*device.ProfiledForward
	order      []string // labels in first-seen order
}

type profOp struct {
	name       string
	start, end Event
}

// profileSpin is how long the spin kernel holds the stream: longer than a
// large eager forward takes to enqueue with two events per operation.
const profileSpin = 50 * time.Millisecond

// StartProfile starts a profiling session: later ProfileForward calls
// are timed until StopProfile.
func (o *ModelOps) StartProfile() error {
	return o.dev.Do(func() error {
		if o.dev.prof != nil {
			return fmt.Errorf("cuda: a kernel profile is already running")
		}
		o.dev.prof = &profiler{stats: map[[2]string]*device.ProfiledOp{}, forwards: map[string]*device.ProfiledForward{}}
		return nil
	})
}

// Profiling reports whether a profiling session is running.
func (o *ModelOps) Profiling() bool {
	on := false
	_ = o.dev.Do(func() error { on = o.dev.prof != nil; return nil })
	return on
}

// ProfileForward runs forward (eagerly, on the device thread) with each of
// its stream operations timed, and adds the times under label. It waits
// for the forward to finish.
func (o *ModelOps) ProfileForward(label string, forward func() error) error {
	return o.dev.Do(func() error {
		p := o.dev.prof
		if p == nil {
			return forward()
		}
		if o.dev.rec.mode != recordOff {
			return fmt.Errorf("cuda: a profiled forward cannot be recorded into a graph")
		}
		p.ops, p.wait, p.waitOp, p.prev = p.ops[:0], 0, "", 0
		o.dev.prof = nil // the spin itself is not an operation of the forward
		err := o.k.launchSpinNS(o.stream, LaunchConfig{Grid: D1(1), Block: D1(1)}, spinNSArgs{Ns: uint64(profileSpin)})
		o.dev.prof = p
		if err != nil {
			return err
		}
		t0 := time.Now()
		p.last = t0
		ferr := forward()
		host := time.Since(t0)
		if err := check("cuStreamSynchronize", o.dev.d.cuStreamSynchronize(o.stream)); err != nil {
			return err
		}
		if ferr != nil {
			p.release()
			return ferr
		}
		return p.collect(o.dev, label, host)
	})
}

// StopProfile ends the session and returns what it measured.
func (o *ModelOps) StopProfile() (device.Profile, error) {
	var prof device.Profile
	err := o.dev.Do(func() error {
		p := o.dev.prof
		if p == nil {
			return fmt.Errorf("cuda: no kernel profile is running")
		}
		o.dev.prof = nil
		for _, e := range p.free {
			o.dev.d.cuEventDestroy(e)
		}
		for _, l := range p.order {
			prof.Forwards = append(prof.Forwards, *p.forwards[l])
			var ops []device.ProfiledOp
			for k, s := range p.stats {
				if k[0] == l {
					ops = append(ops, *s)
				}
			}
			slices.SortFunc(ops, func(a, b device.ProfiledOp) int {
				return cmp.Or(cmp.Compare(b.Time, a.Time), cmp.Compare(a.Name, b.Name))
			})
			prof.Ops = append(prof.Ops, ops...)
		}
		return nil
	})
	return prof, err
}

// event is a timing event from the pool.
func (p *profiler) event(dev *Device) (Event, error) {
	if n := len(p.free); n > 0 {
		e := p.free[n-1]
		p.free = p.free[:n-1]
		return e, nil
	}
	var e Event
	return e, check("cuEventCreate", dev.d.cuEventCreate(&e, eventDefault))
}

func (p *profiler) release() {
	for i, op := range p.ops {
		if i == 0 || op.start != p.ops[i-1].end {
			p.free = append(p.free, op.start)
		}
		p.free = append(p.free, op.end)
	}
	p.ops, p.prev = p.ops[:0], 0
}

// collect reads the finished forward's event times into the sums.
func (p *profiler) collect(dev *Device, label string, host time.Duration) error {
	defer p.release()
	f := p.forwards[label]
	if f == nil {
		f = &device.ProfiledForward{Label: label}
		p.forwards[label] = f
		p.order = append(p.order, label)
	}
	f.Count++
	f.Host += host
	if p.wait > f.LongestWait {
		f.LongestWait, f.LongestWaitBefore = p.wait, p.waitOp
	}
	if host >= profileSpin {
		f.Starved++
	}
	if len(p.ops) == 0 {
		return nil
	}
	elapsed := func(a, b Event) (time.Duration, error) {
		var ms float32
		err := check("cuEventElapsedTime", dev.d.cuEventElapsedTime(&ms, a, b))
		return time.Duration(float64(ms) * float64(time.Millisecond)), err
	}
	gpu, err := elapsed(p.ops[0].start, p.ops[len(p.ops)-1].end)
	if err != nil {
		return err
	}
	f.GPU += gpu
	for _, op := range p.ops {
		d, err := elapsed(op.start, op.end)
		if err != nil {
			return err
		}
		f.Ops += d
		s := p.stats[[2]string{label, op.name}]
		if s == nil {
			s = &device.ProfiledOp{Label: label, Name: op.name}
			p.stats[[2]string{label, op.name}] = s
		}
		s.Calls++
		s.Time += d
	}
	return nil
}

// profBegin records an operation's start event on s when a profile is
// running (device thread); the zero Event otherwise.
func (dev *Device) profBegin(s Stream) Event {
	p := dev.prof
	if p == nil || dev.rec.mode != recordOff {
		return 0
	}
	if p.prev != 0 && p.prevStream == s {
		return p.prev
	}
	e, err := p.event(dev)
	if err != nil || dev.d.cuEventRecord(e, s) != resultSuccess {
		return 0
	}
	return e
}

// profEnd records the end of the operation begun with start.
func (dev *Device) profEnd(s Stream, start Event, name func() string) {
	p := dev.prof
	if p == nil || start == 0 {
		return
	}
	e, err := p.event(dev)
	if err != nil || dev.d.cuEventRecord(e, s) != resultSuccess {
		if start != p.prev {
			p.free = append(p.free, start)
		}
		p.prev = 0
		return
	}
	p.prev, p.prevStream = e, s
	op := profOp{name: name(), start: start, end: e}
	p.ops = append(p.ops, op)
	if now := time.Now(); now.Sub(p.last) > p.wait {
		p.wait, p.waitOp = now.Sub(p.last), op.name
		p.last = now
	} else {
		p.last = now
	}
}
