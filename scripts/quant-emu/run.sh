#!/bin/sh
# run.sh [FORMAT...]: device/cuda/kernels/quant.cu's integer decode kernels
# (qquant_x, qgemv_int, qgemv_swiglu_int) compiled as C++ by g++
# (-std=c++20) against emu.h, a CPU emulation of the CUDA pieces they use
# (a thread per CUDA thread, a block at a time; barriers for
# __syncthreads, bar.sync and every warp shuffle), on inputs
# device/cuda's TestQuantEmuDump writes; main.cpp says what is checked.
# For a machine without a GPU: it runs the kernels' index arithmetic, not
# their speed, and takes minutes a format (a barrier per shuffle).
# 2026-11-26, issue 24's qquant_x and row groups (a 2-core machine):
# 0 failures for q8_0 and q4_k at every m of main.cpp, for q5_k, q6_k,
# mxfp4 and awq4_g128 at m = 1, 5 and 32, for awq4_g32 and awq4_g64 at
# m = 5; a wrong output row in the group loop failed 1250 checks.
# 2026-11-27, the per-lane K-quant decode and limbs 1-3: 0 failures for
# q4_k, q5_k, q6_k, q8_0, mxfp4 and awq4_g128 at m = 1 and 5 with
# EMU_LIMBS = 1, 2 and 3; Q4_K's dmin left unscaled (16x) failed 613
# checks, Q6_K's chain start off by one Σlimb 599 (m = 1, three limbs).
# Below three limbs main.cpp adds the staging's bound over the row's
# largest |x| (looser than the Go tests' per unit).
# EMU_LIMBS=L (1, 2 or 3, default 3) runs the kernels of L limbs
# (qgemv_int_l<L>_<q>), on x staged by the Go statement with as many.
set -e
cd "$(dirname "$0")/../.."
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
LIMBS=${EMU_LIMBS:-3}
EMU_DUMP=$W GOSLING_QGEMV_LIMBS=$LIMBS go test ./device/cuda -run '^TestQuantEmuDump$' -count=1 >/dev/null
mkdir -p "$W/k"
cp device/cuda/kernels/*.cuh device/cuda/kernels/quant.cu "$W/k/"
# The PTX the emulation replaces: f16 widening, named barriers, L2
# prefetches, dp4a; and dynamic and static shared memory (one block at
# a time: a static array is the block's).
sed -i 's|asm("{ cvt.f32.f16 %0, %1; }" : "=f"(f) : "h"(v.bits));|f = emu_h2f(v.bits);|' "$W/k/common.cuh"
sed -i 's|asm volatile("bar.sync %0, %1;" ::"r"(1 + warp / ks), "r"(ks \* 32) : "memory");|emu_bar_sync(1 + warp / ks, ks * 32);|' "$W/k/gemv.cuh"
sed -i 's|asm volatile("prefetch.global.L2 \[%0\];" ::"l"(w + at));|(void)(w + at);|' "$W/k/gemv.cuh"
sed -i 's|asm("dp4a\.[su]32\.[su]32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));|d = emu_dp4a<SA, SB>(a, b, c);|' "$W/k/quant.cu"
sed -i 's|asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));|d = emu_prmt(a, b, sel);|' "$W/k/quant.cu"
sed -i 's|extern __shared__ __attribute__((aligned(16))) unsigned char qgemv_smem\[\];|unsigned char* qgemv_smem = emu_dyn_smem;|' "$W/k/quant.cu"
sed -i 's|__shared__|static|g' "$W/k/common.cuh" "$W/k/gemv.cuh" "$W/k/quant.cu"
if grep -q 'asm\|extern static' "$W/k/quant.cu" "$W/k/gemv.cuh"; then
	echo "quant.cu or gemv.cuh has PTX or shared memory this script does not replace:" >&2
	grep -n 'asm\|extern static' "$W/k/quant.cu" "$W/k/gemv.cuh" >&2
	exit 1
fi
status=0
for f in ${*:-q8_0 q4_k q5_k q6_k mxfp4 awq4_g32 awq4_g64 awq4_g128}; do
	g++ -std=c++20 -O1 -ffp-contract=off -pthread -I"$W/k" -Iscripts/quant-emu -DFMT="$f" -DLIMBS="$LIMBS" scripts/quant-emu/main.cpp -o "$W/emu_$f"
	"$W/emu_$f" "$W" || status=1
done
exit $status
