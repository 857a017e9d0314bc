package parallel

import (
	"sync"
	"testing"
	"time"
)

// barrierComm closes the way NCCL's ncclCommDestroy does: a rank's Close
// returns only once every rank of the node has called Close.
type barrierComm struct {
	Communicator
	wg *sync.WaitGroup
}

func (c barrierComm) Close() error {
	c.wg.Done()
	c.wg.Wait()
	return nil
}

func TestCloseAllIsCollective(t *testing.T) {
	const n = 4
	var wg sync.WaitGroup
	wg.Add(n)
	comms := make([]Communicator, n)
	for i := range comms {
		comms[i] = barrierComm{wg: &wg}
	}
	done := make(chan error, 1)
	go func() { done <- CloseAll(comms) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("CloseAll closed the ranks one after another: the first waits forever for the others")
	}
}
