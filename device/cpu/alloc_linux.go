package cpu

import "golang.org/x/sys/unix"

// adviseHugePages asks for transparent huge pages (the kernel default on
// most distributions is "madvise": only advised ranges get them). Advice is
// a hint: failure changes nothing but speed.
func adviseHugePages(buf []byte) { _ = unix.Madvise(buf, unix.MADV_HUGEPAGE) }
