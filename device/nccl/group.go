package nccl

import (
	"errors"
	"fmt"

	"github.com/gosling-ai/gosling/device/cuda"
	"github.com/gosling-ai/gosling/parallel"
)

// Group is n ranks in one process, rank r on GPU r: one communicator per
// GPU, made together (NewComm blocks until every rank joins).
type Group struct {
	Devices []*cuda.Device
	Comms   []*Comm
}

// OpenGroup opens GPUs 0..n-1 and joins them in one communicator.
func OpenGroup(l *Lib, n int) (*Group, error) {
	count, err := cuda.DeviceCount()
	if err != nil {
		return nil, err
	}
	if n < 1 || n > count {
		return nil, fmt.Errorf("nccl: a group of %d GPUs, %d visible (check CUDA_VISIBLE_DEVICES)", n, count)
	}
	g := &Group{Devices: make([]*cuda.Device, n), Comms: make([]*Comm, n)}
	for r := range n {
		if g.Devices[r], err = cuda.Open(r); err != nil {
			g.Close()
			return nil, err
		}
	}
	id, err := l.GetUniqueID()
	if err != nil {
		g.Close()
		return nil, err
	}
	err = parallel.Each(n, func(r int) error {
		var err error
		g.Comms[r], err = l.NewComm(g.Devices[r], id, n, r)
		return err
	})
	if err != nil {
		g.Close()
		return nil, err
	}
	return g, nil
}

// Each runs fn for every rank on its own goroutine, as collectives need.
func (g *Group) Each(fn func(rank int, c *Comm) error) error {
	return parallel.Each(len(g.Comms), func(r int) error { return fn(r, g.Comms[r]) })
}

// Close destroys the communicators and closes the devices.
func (g *Group) Close() error {
	var errs []error
	for _, c := range g.Comms {
		if c != nil {
			errs = append(errs, c.Close())
		}
	}
	for _, d := range g.Devices {
		if d != nil {
			errs = append(errs, d.Close())
		}
	}
	return errors.Join(errs...)
}
