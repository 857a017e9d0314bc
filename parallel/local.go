package parallel

import (
	"errors"
	"fmt"
	"sync"

	"github.com/gosling-ai/gosling/tensor"
)

// NewLocal makes a group of n in-process ranks (one goroutine each drives
// one), whose collectives run through shared memory: tensor parallelism's
// numerics on the CPU. Sums add the ranks' values in rank order in float32
// (rounded once to the buffer's dtype), so every rank gets the same bits.
func NewLocal(n int) ([]Communicator, error) {
	if n < 1 {
		return nil, fmt.Errorf("a group needs at least one rank, not %d", n)
	}
	g := &localGroup{n: n, slots: make([]localSlot, n)}
	g.cond = sync.NewCond(&g.mu)
	out := make([]Communicator, n)
	for r := range n {
		out[r] = &localComm{g: g, rank: r}
	}
	return out, nil
}

type localOp uint8

const (
	opAllReduce localOp = iota
	opAllGather
	opBroadcast
)

func (o localOp) String() string {
	return [...]string{"all-reduce", "all-gather", "broadcast"}[o]
}

// localSlot is what one rank brought to the current collective.
type localSlot struct {
	op       localOp
	src, dst Buffer
	root     int
}

type localGroup struct {
	n     int
	mu    sync.Mutex
	cond  *sync.Cond
	gen   uint64 // completed barriers
	count int    // ranks waiting at the current barrier
	err   error  // set when a rank leaves: every later wait fails
	slots []localSlot
	// scratch holds an all-reduce's sums, each rank writing its chunk.
	scratch []float32
}

// wait blocks until all n ranks have arrived, or fails once a rank has left.
func (g *localGroup) wait() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err != nil {
		return g.err
	}
	gen := g.gen
	g.count++
	if g.count == g.n {
		g.count = 0
		g.gen++
		g.cond.Broadcast()
		return nil
	}
	for gen == g.gen && g.err == nil {
		g.cond.Wait()
	}
	if gen == g.gen {
		return g.err
	}
	return nil
}

func (g *localGroup) leave(rank int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err == nil {
		g.err = fmt.Errorf("rank %d left the group", rank)
	}
	g.cond.Broadcast()
}

type localComm struct {
	g    *localGroup
	rank int
}

func (c *localComm) Rank() int { return c.rank }
func (c *localComm) Size() int { return c.g.n }

func (c *localComm) Close() error {
	c.g.leave(c.rank)
	return nil
}

// run is one collective: publish this rank's slot, wait for all, check
// that the ranks agree, let body read the others' slots, and wait again
// so no rank reuses a buffer another may still be reading.
func (c *localComm) run(s localSlot, body func() error) error {
	for _, b := range []Buffer{s.src, s.dst} {
		if b.Len == 0 && b.f32 == nil && b.bf16 == nil {
			continue
		}
		if err := b.check(); err != nil {
			return err
		}
		if !b.OnHost() {
			return errors.New("the in-process communicator takes host buffers")
		}
	}
	g := c.g
	g.slots[c.rank] = s
	if err := g.wait(); err != nil {
		return err
	}
	first := g.slots[0]
	for r, o := range g.slots {
		if o.op != first.op || o.src.DType != first.src.DType || o.src.Len != first.src.Len || o.root != first.root {
			err := fmt.Errorf("collective mismatch: rank 0 called %v of %d %v (root %d), rank %d %v of %d %v (root %d)",
				first.op, first.src.Len, first.src.DType, first.root, r, o.op, o.src.Len, o.src.DType, o.root)
			g.wait() // keep the ranks in step even when failing
			return err
		}
	}
	err := body()
	if werr := g.wait(); err == nil {
		err = werr
	}
	return err
}

func (c *localComm) AllReduceSum(buf Buffer) error {
	g := c.g
	if c.rank == 0 && len(g.scratch) < buf.Len {
		// Nobody reads scratch until the first wait of this collective.
		g.scratch = make([]float32, buf.Len)
	}
	return c.run(localSlot{op: opAllReduce, src: buf}, func() error {
		// Reduce-scatter: rank r sums its chunk of every rank's buffer, in
		// rank order, into the shared scratch; then every rank copies the
		// whole sum out.
		lo, hi := c.rank*buf.Len/g.n, (c.rank+1)*buf.Len/g.n
		sum := g.scratch[lo:hi]
		for q, o := range g.slots {
			if o.src.DType == tensor.F32 {
				src := o.src.f32[lo:hi]
				if q == 0 {
					copy(sum, src)
					continue
				}
				for i, v := range src {
					sum[i] += v
				}
				continue
			}
			for i := range sum {
				if q == 0 {
					sum[i] = o.src.at(lo + i)
				} else {
					sum[i] += o.src.at(lo + i)
				}
			}
		}
		// Every chunk is summed, and every buffer read, only after this wait.
		if err := g.wait(); err != nil {
			return err
		}
		buf.store(g.scratch[:buf.Len])
		return nil
	})
}

func (c *localComm) AllGather(dst, src Buffer) error {
	if dst.Len != c.g.n*src.Len || dst.DType != src.DType {
		return fmt.Errorf("all-gather of %d %v into %d %v: the destination must hold %d ranks × %d", src.Len, src.DType, dst.Len, dst.DType, c.g.n, src.Len)
	}
	return c.run(localSlot{op: opAllGather, src: src, dst: dst}, func() error {
		for r, o := range c.g.slots {
			dst.copyFrom(r*src.Len, o.src)
		}
		return nil
	})
}

func (c *localComm) Broadcast(buf Buffer, root int) error {
	if root < 0 || root >= c.g.n {
		return fmt.Errorf("broadcast root %d outside the group's %d ranks", root, c.g.n)
	}
	return c.run(localSlot{op: opBroadcast, src: buf, root: root}, func() error {
		if c.rank != root {
			buf.copyFrom(0, c.g.slots[root].src)
		}
		return nil
	})
}
