package cuda

import (
	"errors"
	"sync"
	"testing"
)

// fakeMemory hands out increasing addresses and can be told to run out.
type fakeMemory struct {
	next     DevicePtr
	live     map[DevicePtr]int
	limit    int // bytes; 0 is unlimited
	used     int
	mallocs  int
	frees    int
	freedBad int
}

var errFakeOOM = errors.New("fake: out of memory")

func newFakeMemory(limit int) *fakeMemory {
	return &fakeMemory{next: 0x10000, live: map[DevicePtr]int{}, limit: limit}
}

func (m *fakeMemory) Malloc(n int) (DevicePtr, error) {
	if m.limit > 0 && m.used+n > m.limit {
		return 0, errFakeOOM
	}
	p := m.next
	m.next += DevicePtr(n)
	m.live[p] = n
	m.used += n
	m.mallocs++
	return p, nil
}

func (m *fakeMemory) Free(p DevicePtr) error {
	n, ok := m.live[p]
	if !ok {
		m.freedBad++
		return errors.New("fake: bad free")
	}
	delete(m.live, p)
	m.used -= n
	m.frees++
	return nil
}

func (m *fakeMemory) IsOutOfMemory(err error) bool { return errors.Is(err, errFakeOOM) }

func TestSizeClass(t *testing.T) {
	tests := []struct{ n, want int }{
		{0, 512}, {1, 512}, {512, 512}, {513, 640}, {640, 640}, {641, 768},
		{1000, 1024}, {1024, 1024}, {1025, 1280}, {3 << 20, 3 << 20}, {(3 << 20) + 1, 7 << 19},
		{32 << 20, 32 << 20}, {(32 << 20) + 1, 34 << 20}, {100 << 20, 100 << 20},
	}
	for _, tc := range tests {
		if got := SizeClass(tc.n); got != tc.want {
			t.Errorf("SizeClass(%d) = %d, want %d", tc.n, got, tc.want)
		}
	}
	for n := 1; n < 1<<22; n = n*5/4 + 1 {
		c := SizeClass(n)
		if c < n || (n > 512 && float64(c) > 1.25*float64(n)+1) {
			t.Errorf("SizeClass(%d) = %d: more than 25%% slack", n, c)
		}
	}
}

func TestAllocatorReuse(t *testing.T) {
	mem := newFakeMemory(0)
	a := NewAllocator(mem)
	sizes := []int{100, 4096, 5000, 1 << 20, 3 << 20, 40 << 20}
	step := func() {
		var bufs []Buffer
		for _, n := range sizes {
			b, err := a.Alloc(n)
			if err != nil {
				t.Fatal(err)
			}
			if b.Bytes != n || b.Ptr == 0 {
				t.Fatalf("Alloc(%d) = %+v", n, b)
			}
			bufs = append(bufs, b)
		}
		for _, b := range bufs {
			if err := a.Free(b); err != nil {
				t.Fatal(err)
			}
		}
	}
	step()
	after1 := mem.mallocs
	for range 10 {
		step()
	}
	if mem.mallocs != after1 {
		t.Errorf("steady state called Malloc %d more times", mem.mallocs-after1)
	}
	st := a.Stats()
	if st.Allocs != 11*len(sizes) || st.Hits != 10*len(sizes) || st.DeviceAllocs != len(sizes) {
		t.Errorf("stats %+v", st)
	}
	if st.InUse != 0 || st.Cached != st.Reserved || st.Reserved != int64(mem.used) {
		t.Errorf("byte counts %+v, backend holds %d", st, mem.used)
	}
	var classSum int64
	for _, n := range sizes {
		classSum += int64(SizeClass(n))
	}
	if st.PeakInUse != classSum {
		t.Errorf("peak %d, want %d", st.PeakInUse, classSum)
	}
	if err := a.ReleaseCached(); err != nil {
		t.Fatal(err)
	}
	if st := a.Stats(); st.Reserved != 0 || st.Cached != 0 || mem.used != 0 || st.DeviceFrees != len(sizes) {
		t.Errorf("after release: %+v, backend holds %d", st, mem.used)
	}
}

func TestAllocatorSameClassShares(t *testing.T) {
	mem := newFakeMemory(0)
	a := NewAllocator(mem)
	b1, _ := a.Alloc(1000)
	a.Free(b1)
	b2, _ := a.Alloc(1024) // same class as 1000
	if b2.Ptr != b1.Ptr {
		t.Error("a freed block was not reused for the same class")
	}
	b3, _ := a.Alloc(1000) // b2 still live: a new block
	if b3.Ptr == b2.Ptr {
		t.Error("a live block was handed out twice")
	}
}

func TestAllocatorBadFree(t *testing.T) {
	a := NewAllocator(newFakeMemory(0))
	b, _ := a.Alloc(10)
	if err := a.Free(b); err != nil {
		t.Fatal(err)
	}
	if err := a.Free(b); err == nil {
		t.Error("double free not reported")
	}
	if err := a.Free(Buffer{Ptr: 0x1234}); err == nil {
		t.Error("free of a foreign pointer not reported")
	}
	if err := a.Free(Buffer{}); err != nil {
		t.Error("freeing the zero Buffer should be a no-op")
	}
}

func TestAllocatorOOMReleasesCache(t *testing.T) {
	mem := newFakeMemory(4 << 20)
	a := NewAllocator(mem)
	b, err := a.Alloc(3 << 20)
	if err != nil {
		t.Fatal(err)
	}
	a.Free(b) // 3 MiB cached
	// 2 MiB is another class; it fits only once the cache is given back.
	b2, err := a.Alloc(2 << 20)
	if err != nil {
		t.Fatalf("Alloc after releasing the cache: %v", err)
	}
	if st := a.Stats(); st.Cached != 0 || st.DeviceFrees != 1 {
		t.Errorf("stats %+v", st)
	}
	if _, err := a.Alloc(3 << 20); !errors.Is(err, errFakeOOM) {
		t.Errorf("real exhaustion: %v", err)
	}
	a.Free(b2)
}

func TestAllocatorConcurrent(t *testing.T) {
	a := NewAllocator(&lockedMemory{m: newFakeMemory(0)})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				b, err := a.Alloc(512 * (1 + (g+i)%7))
				if err != nil {
					t.Error(err)
					return
				}
				if err := a.Free(b); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if st := a.Stats(); st.InUse != 0 || st.Allocs != 1600 || st.Frees != 1600 {
		t.Errorf("stats %+v", st)
	}
}

type lockedMemory struct {
	mu sync.Mutex
	m  *fakeMemory
}

func (l *lockedMemory) Malloc(n int) (DevicePtr, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.m.Malloc(n)
}

func (l *lockedMemory) Free(p DevicePtr) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.m.Free(p)
}
