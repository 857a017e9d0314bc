package cuda

import (
	"sync"
	"testing"
)

// TestCurrentG: the same goroutine always sees one value, and goroutines
// alive at the same time see different ones (what Device.Do relies on).
func TestCurrentG(t *testing.T) {
	if !haveCurrentG {
		t.Skip("no goroutine identity on this architecture; Device.Do uses thread ids")
	}
	me := currentG()
	if me == 0 || currentG() != me {
		t.Fatalf("currentG unstable: %#x then %#x", me, currentG())
	}
	const n = 16
	seen := make([]uintptr, n)
	var ready, done sync.WaitGroup
	ready.Add(n)
	done.Add(n)
	release := make(chan struct{})
	for i := range n {
		go func() {
			defer done.Done()
			seen[i] = currentG()
			ready.Done()
			<-release // stay alive until every value is taken
			if currentG() != seen[i] {
				t.Errorf("goroutine %d: currentG changed", i)
			}
		}()
	}
	ready.Wait()
	close(release)
	done.Wait()
	uniq := map[uintptr]bool{me: true}
	for i, g := range seen {
		if uniq[g] {
			t.Fatalf("goroutine %d shares currentG %#x with another live goroutine", i, g)
		}
		uniq[g] = true
	}
}
