package hugemem

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"unsafe"
)

// Huge memory is huge-page backed even where the Go heap hands out memory
// that an earlier, unadvised buffer already faulted in with 4 KiB pages.
func TestHugeBacksReusedMemory(t *testing.T) {
	mode, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil || strings.Contains(string(mode), "[never]") {
		t.Skip("transparent huge pages are off on this machine")
	}
	const n = 64 << 20
	for round := range 3 {
		// An ordinary buffer, written (so faulted in 4 KiB pages: the
		// heap is not advised) and dropped, for Huge to reuse.
		tmp := make([]byte, n+2*PageSize)
		for i := 0; i < len(tmp); i += 4096 {
			tmp[i] = 1
		}
		tmp = nil
		runtime.GC()
		buf := Huge(n)
		for i := 0; i < len(buf); i += 4096 {
			buf[i] = 1
		}
		huge, err := anonHugeBytes(buf)
		if err != nil {
			t.Skip("cannot read /proc/self/smaps:", err)
		}
		if huge < n {
			t.Fatalf("round %d: %d MiB of %d MiB huge-page backed", round, huge>>20, n>>20)
		}
		runtime.KeepAlive(buf)
	}
}

// anonHugeBytes sums AnonHugePages over the mappings that overlap buf.
func anonHugeBytes(buf []byte) (int, error) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	hi := lo + uintptr(len(buf))
	sc := bufio.NewScanner(f)
	in, total := false, 0
	for sc.Scan() {
		line := sc.Text()
		var a, b uintptr
		if _, err := fmt.Sscanf(line, "%x-%x ", &a, &b); err == nil {
			in = a < hi && lo < b
			continue
		}
		var kb int
		if in && strings.HasPrefix(line, "AnonHugePages:") {
			if _, err := fmt.Sscanf(line, "AnonHugePages: %d kB", &kb); err == nil {
				total += kb << 10
			}
		}
	}
	return total, sc.Err()
}
