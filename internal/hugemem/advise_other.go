//go:build !linux

package hugemem

func adviseHugePages([]byte) {}
