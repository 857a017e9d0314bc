package parallel

import (
	"errors"
	"fmt"
	"sync"

	"github.com/gosling-ai/gosling/device"
)

// Joiner makes the communicators of one process's ranks, rank r on
// runtimes[r], all of one device kind: what a device package registers
// (device/cudadev: NCCL over the GPUs' streams).
type Joiner func(runtimes []device.Runtime) ([]Communicator, error)

var (
	joinersMu sync.Mutex
	joiners   = map[string]Joiner{}
)

// RegisterJoiner makes join the way ranks on device name meet. The host
// ("cpu") needs none: its ranks use the in-process communicator.
func RegisterJoiner(name string, join Joiner) {
	joinersMu.Lock()
	defer joinersMu.Unlock()
	if _, dup := joiners[name]; dup {
		panic("parallel: RegisterJoiner called twice for " + name)
	}
	joiners[name] = join
}

// Join makes one communicator per runtime, rank r on runtimes[r]: the
// in-process communicator on the host, the device's registered Joiner
// elsewhere.
func Join(runtimes []device.Runtime) ([]Communicator, error) {
	if len(runtimes) == 0 {
		return nil, errors.New("parallel: no ranks to join")
	}
	name := runtimes[0].Name()
	for _, rt := range runtimes {
		if rt.Name() != name {
			return nil, fmt.Errorf("parallel: ranks on %s and %s cannot form one group", name, rt.Name())
		}
	}
	if name == "cpu" {
		return NewLocal(len(runtimes))
	}
	joinersMu.Lock()
	join, ok := joiners[name]
	joinersMu.Unlock()
	if !ok {
		return nil, fmt.Errorf("tensor parallelism on %s: this binary has no collectives for it", name)
	}
	return join(runtimes)
}

// Aborter is a Communicator that can be torn down from any goroutine while
// its collectives are in flight (NCCL's ncclCommAbort): what stops ranks
// waiting on a peer that failed.
type Aborter interface {
	Abort() error
}

// Abort makes every collective in flight or to come fail on every rank of
// comms: Abort where a communicator has it, Close otherwise (the
// in-process communicator fails all ranks' collectives once one leaves).
func Abort(comms []Communicator) error {
	var errs []error
	for _, c := range comms {
		if a, ok := c.(Aborter); ok {
			errs = append(errs, a.Abort())
			continue
		}
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}
