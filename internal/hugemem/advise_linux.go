package hugemem

import "golang.org/x/sys/unix"

func adviseHugePages(buf []byte) { _ = unix.Madvise(buf, unix.MADV_HUGEPAGE) }
