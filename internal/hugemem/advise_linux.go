package hugemem

import "golang.org/x/sys/unix"

// adviseHugePages advises buf (whole, aligned huge pages) as huge-page
// backed, then collapses it into huge pages now (MADV_COLLAPSE, Linux 6.1
// on; older kernels refuse it, and only the advice stays). The advice
// alone reaches only pages not yet touched: the Go heap hands out freed
// memory again, already faulted in 4 KiB pages (a loader's temporary
// buffers, say), and a stories110M-shaped model's packed layers measured
// 81% huge-page backed with the advice alone.
func adviseHugePages(buf []byte) {
	_ = unix.Madvise(buf, unix.MADV_HUGEPAGE)
	_ = unix.Madvise(buf, unix.MADV_COLLAPSE)
}
