#!/usr/bin/env bash
# gpu-test.sh — build the CUDA tests here, run them on a GPU machine.
#
# The CUDA code is plain Go (purego opens libcuda, NVRTC and cuBLAS at run
# time), so the test binary is built with CGO_ENABLED=0 on any Linux or
# macOS machine without CUDA, then copied to a machine with an NVIDIA GPU and
# a CUDA 13 driver, which needs no Go toolchain.
#
#   scripts/gpu-test.sh build           build out/cuda.test (linux/amd64; GOARCH=arm64 for Grace)
#   scripts/gpu-test.sh run [flags]     run out/cuda.test: the GPU tests, then the benchmarks
#   scripts/gpu-test.sh tests [flags]   run the tests only
#
# Extra flags go to the test binary (-test.run=GPURope, -test.benchtime=50x).
# Output is also written to $OUT/gpu-test.log when $OUT is set (the device
# tool's result folder). Kernels compile with NVRTC on first use and are
# cached in $XDG_CACHE_HOME/gosling/cuda (~/.cache/gosling/cuda); the tests
# themselves use a fresh temporary cache so every kernel compiles once.
#
# On a machine without a driver every GPU test skips with one line
# ("libcuda.so.1 not available: ..."), so `go test ./device/cuda` is safe in CI.
#
# With this workplace's device tool: build here, then run with carry ["out"]:
#   scripts/gpu-test.sh build
#   (device) bash scripts/gpu-test.sh run
set -euo pipefail
cd "$(dirname "$0")/.."

bin=out/cuda.test
cmd=${1:-run}
[ $# -gt 0 ] && shift

log() {
	if [ -n "${OUT:-}" ]; then
		tee -a "$OUT/gpu-test.log"
	else
		cat
	fi
}

case "$cmd" in
build)
	mkdir -p out
	CGO_ENABLED=0 GOOS=linux GOARCH="${GOARCH:-amd64}" go test -c -o "$bin" ./device/cuda
	echo "built $bin"
	;;
run | tests)
	[ -x "$bin" ] || { echo "no $bin: run 'scripts/gpu-test.sh build' first" >&2; exit 1; }
	command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | log || true
	set -o pipefail
	"$bin" -test.v -test.count=1 -test.run='.' "$@" 2>&1 | log
	if [ "$cmd" = run ]; then
		"$bin" -test.run='^$' -test.bench=GPU "$@" 2>&1 | log
	fi
	;;
*)
	sed -n '2,24p' "$0" >&2
	exit 2
	;;
esac
