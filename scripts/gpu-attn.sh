#!/usr/bin/env bash
# gpu-attn.sh — the attention kernels on a GPU machine (issue 18).
#
#   scripts/gpu-attn.sh build        build the test binaries into out/ (here)
#   scripts/gpu-attn.sh test         (GPU machine) long-context decode checks
#                                    and the CUDA conformance battery
#   scripts/gpu-attn.sh bench [pat]  (GPU machine) read bandwidth, decode and
#                                    prefill benchmarks (-test.bench pattern,
#                                    default all), then PyTorch's SDPA anchor
#                                    in the same command (NO_TORCH=1: not)
#
# Logs go to $OUT (or out/logs). With the device tool: build here, then run
# with carry ["out"].
set -uo pipefail
cd "$(dirname "$0")/.."
logs=${OUT:-out/logs}
export XDG_CACHE_HOME=/tmp/gosling-cache # one NVRTC cache for every binary
case "${1:-test}" in
build)
	set -e
	mkdir -p out
	export CGO_ENABLED=0 GOOS=linux GOARCH=amd64
	go test -c -ldflags=-s -o out/attn_bench.test ./attention/gpu/gputest
	cp ../shared/bench/torch_attention_anchor.py out/
	;;
test)
	mkdir -p "$logs"
	nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$logs/gpu.txt"
	(cd attention/gpu/gputest && ../../../out/attn_bench.test -test.run 'CUDADecodeLong|CUDAExtendLong|CUDAKernelResources' -test.v) >"$logs/decode_long.log" 2>&1
	echo "decode/extend long: $(grep -c -- '--- PASS' "$logs/decode_long.log") pass, $(grep -c -- '--- FAIL' "$logs/decode_long.log") fail"
	grep -E -- '--- FAIL|registers|_test.go:[0-9]+: [^m]' "$logs/decode_long.log" | head -40
	grep -m3 -A25 "nvrtc: compile" "$logs/decode_long.log"
	for b in native flash splitkv cudnn; do
		(cd attention/gpu/gputest && ../../../out/attn_bench.test -test.run "CUDAConformance/^$b\$" -test.v) >"$logs/attn_$b.log" 2>&1
		echo "attention/$b CUDA conformance: $(grep -c -- '--- PASS' "$logs/attn_$b.log") pass, $(grep -c -- '--- FAIL' "$logs/attn_$b.log") fail, $(grep -c -- '--- SKIP' "$logs/attn_$b.log") skip"
		grep -E -- '--- FAIL|not offered here' "$logs/attn_$b.log" | head -5
		grep -m3 -E 'cuDNN: ' "$logs/attn_$b.log"
	done
	true
	;;
bench)
	mkdir -p "$logs"
	nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$logs/gpu.txt"
	(cd attention/gpu/gputest && ../../../out/attn_bench.test -test.run '^$' -test.bench "${2:-CUDARead|CUDADecode|CUDAPrefill}" -test.benchtime 20x) 2>&1 |
		grep -E '^Benchmark|FAIL|panic|error' | tee "$logs/attention.txt"
	[ -n "${NO_TORCH:-}" ] || python3 out/torch_attention_anchor.py 2>&1 | grep -E '^(prefill|decode) ' | tee "$logs/sdpa.txt"
	;;
esac
