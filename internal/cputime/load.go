package cputime

import (
	"os"
	"strconv"
	"strings"
)

// LoadAverage is the machine's one-minute load average (Linux's
// /proc/loadavg), which benchmarks print beside their timings on a shared
// machine; ok is false where it cannot be read.
func LoadAverage() (load float64, ok bool) {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return 0, false
	}
	load, err = strconv.ParseFloat(f[0], 64)
	return load, err == nil
}
