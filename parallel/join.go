package parallel

import (
	"errors"
	"fmt"
	"sync"

	"github.com/gosling-ai/gosling/device"
)

// Joiner is how ranks on one kind of device meet (device/cudadev
// registers NCCL's): NewID makes the bytes every rank of a new group must
// share, which the rendezvous hands to the other hosts; Join makes the
// communicators of this process's ranks, ranks first..first+len-1 of size,
// rank first+i on runtimes[i]. Join blocks until every rank of the group,
// on every host, has joined.
type Joiner struct {
	NewID func() ([]byte, error)
	Join  func(runtimes []device.Runtime, id []byte, first, size int) ([]Communicator, error)
	// CustomAllReduce, when the device has one, wraps the communicators
	// of a group whose ranks are all in this process (Join's) so that
	// their small all-reduces run as the device's own kernel over peer
	// memory, the rest as before.
	CustomAllReduce func(runtimes []device.Runtime, comms []Communicator) ([]Communicator, error)
}

var (
	joinersMu sync.Mutex
	joiners   = map[string]Joiner{}
)

// RegisterJoiner makes j the way ranks on device name meet. The host
// ("cpu") needs none: its ranks use the in-process communicator, or the
// star over the nodes' links across processes.
func RegisterJoiner(name string, j Joiner) {
	joinersMu.Lock()
	defer joinersMu.Unlock()
	if _, dup := joiners[name]; dup {
		panic("parallel: RegisterJoiner called twice for " + name)
	}
	joiners[name] = j
}

// JoinerFor is the registered Joiner of device name.
func JoinerFor(name string) (Joiner, error) {
	joinersMu.Lock()
	defer joinersMu.Unlock()
	j, ok := joiners[name]
	if !ok {
		return Joiner{}, fmt.Errorf("tensor parallelism on %s: this binary has no collectives for it", name)
	}
	return j, nil
}

// Join makes one communicator per runtime, rank r on runtimes[r], all in
// this process: the in-process communicator on the host, the device's
// registered Joiner elsewhere.
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
	j, err := JoinerFor(name)
	if err != nil {
		return nil, err
	}
	id, err := j.NewID()
	if err != nil {
		return nil, err
	}
	return j.Join(runtimes, id, 0, len(runtimes))
}

// CustomAllReduce is the device's CustomAllReduce over comms, the
// communicators Join made for runtimes; an error where it has none.
func CustomAllReduce(runtimes []device.Runtime, comms []Communicator) ([]Communicator, error) {
	name := runtimes[0].Name()
	j, err := JoinerFor(name)
	if err == nil && j.CustomAllReduce == nil {
		err = fmt.Errorf("tensor parallelism on %s has no custom all-reduce", name)
	}
	if err != nil {
		return nil, err
	}
	return j.CustomAllReduce(runtimes, comms)
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

// CloseAll closes every communicator of comms at once, one goroutine each:
// NCCL's ncclCommDestroy is a collective among the ranks of a node, so
// closing them one after another from one goroutine waits forever on the
// second rank.
func CloseAll(comms []Communicator) error {
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for i, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.Close()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
