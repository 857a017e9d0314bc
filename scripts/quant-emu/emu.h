// A CPU emulation of the CUDA pieces quant.cu's integer decode kernels use
// (run.sh): a worker thread per CUDA thread of a 256-thread block, one
// block at a time; std::barrier for __syncthreads, bar.sync and every warp
// shuffle; dp4a, prmt, __byte_perm, the funnel shift and the f16
// widening in plain C++.
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>
#include <math.h>
#define __device__
#define __global__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__
struct dim3s { unsigned x, y, z; };
inline thread_local dim3s threadIdx;
inline dim3s blockIdx;
inline dim3s blockDim, gridDim;
struct uint4 { unsigned x, y, z, w; };
struct uint2 { unsigned x, y; };
struct float4 { float x, y, z, w; };
struct float2 { float x, y; };
inline float2 make_float2(float a, float b) { return {a, b}; }
template <typename T> T __ldg(const T* p) { return *p; }
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
	uint64_t v = (uint64_t)y << 32 | x;
	unsigned r = 0;
	for (int i = 0; i < 4; i++) {
		unsigned sel = (s >> (4 * i)) & 7;
		r |= (unsigned)((v >> (8 * sel)) & 255) << (8 * i);
	}
	return r;
}
inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
inline int __float2int_rn(float f) { return (int)nearbyintf(f); }
inline float __fmul_rn(float a, float b) { volatile float r = a * b; return r; }
inline void __trap() { abort(); }
using std::min; using std::max;
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline float emu_h2f(unsigned short h) {
	unsigned s = (h >> 15) & 1, e = (h >> 10) & 31, m = h & 1023;
	float f;
	if (e == 0) f = ldexpf((float)m, -24);
	else if (e == 31) f = m ? NAN : INFINITY;
	else f = ldexpf((float)(m | 1024), (int)e - 25);
	return s ? -f : f;
}
// PTX prmt.b32 in its default mode: selector nibble bits 0-2 pick a byte
// of {b, a}, bit 3 replicates that byte's sign bit.
inline unsigned emu_prmt(unsigned a, unsigned b, unsigned s) {
	uint64_t v = (uint64_t)b << 32 | a;
	unsigned r = 0;
	for (int i = 0; i < 4; i++) {
		unsigned sel = (s >> (4 * i)) & 15, byte = (v >> (8 * (sel & 7))) & 255;
		if (sel & 8) byte = byte & 128 ? 255 : 0;
		r |= byte << (8 * i);
	}
	return r;
}
inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned n) {
	n &= 31;
	return n ? hi << n | lo >> (32 - n) : hi;
}
template <bool SA, bool SB> inline int emu_dp4a(unsigned a, unsigned b, int c) {
	int d = c;
	for (int i = 0; i < 4; i++) {
		int x = (a >> (8 * i)) & 255, y = (b >> (8 * i)) & 255;
		if (SA) x = (signed char)x;
		if (SB) y = (signed char)y;
		d += x * y;
	}
	return d;
}
struct EmuBlock {
	std::unique_ptr<std::barrier<>> all;
	std::vector<std::unique_ptr<std::barrier<>>> warp;
	std::vector<std::vector<uint32_t>> slot;
	std::map<int, std::unique_ptr<std::barrier<>>> named;
	std::mutex mu;
};
inline EmuBlock* emu_blk;
inline unsigned char* emu_dyn_smem;
inline void __syncthreads() { emu_blk->all->arrive_and_wait(); }
inline void emu_bar_sync(int id, int count) {
	std::barrier<>* b;
	{
		std::lock_guard<std::mutex> l(emu_blk->mu);
		auto& p = emu_blk->named[id];
		if (!p) p = std::make_unique<std::barrier<>>(count);
		b = p.get();
	}
	b->arrive_and_wait();
}
template <typename T> T emu_shfl(T v, int src_of_lane_fn_xor, int mode) {
	int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
	auto& s = emu_blk->slot[warp];
	uint32_t u; memcpy(&u, &v, 4);
	s[lane] = u;
	emu_blk->warp[warp]->arrive_and_wait();
	int src = mode == 0 ? (lane ^ src_of_lane_fn_xor) : (lane + src_of_lane_fn_xor < 32 ? lane + src_of_lane_fn_xor : lane);
	uint32_t r = s[src];
	emu_blk->warp[warp]->arrive_and_wait();
	T o; memcpy(&o, &r, 4);
	return o;
}
template <typename T> T __shfl_xor_sync(unsigned, T v, int d, int = 32) { return emu_shfl(v, d, 0); }
template <typename T> T __shfl_down_sync(unsigned, T v, int d, int = 32) { return emu_shfl(v, d, 1); }
// emu_launch runs body on every thread of every block of the grid, one
// block at a time, on a pool of 256 workers; dynamic shared memory is
// filled with garbage first.
struct EmuPool {
	static constexpr int N = 256;
	std::barrier<> start{N + 1}, end{N + 1};
	const std::function<void()>* body = nullptr;
	bool quit = false;
	std::vector<std::thread> ts;
	EmuPool() {
		for (int t = 0; t < N; t++)
			ts.emplace_back([this, t] {
				threadIdx = {(unsigned)t, 0, 0};
				for (;;) {
					start.arrive_and_wait();
					if (quit) return;
					(*body)();
					end.arrive_and_wait();
				}
			});
	}
	~EmuPool() {
		quit = true;
		start.arrive_and_wait();
		for (auto& t : ts) t.join();
	}
};
inline EmuPool* emu_pool;
inline void emu_launch(dim3s grid, int threads, int smem, const std::function<void()>& body) {
	if (threads != EmuPool::N) abort();
	if (!emu_pool) emu_pool = new EmuPool;
	gridDim = grid;
	blockDim = {(unsigned)threads, 1, 1};
	std::vector<unsigned char> dyn(std::max(smem, 16) + 16);
	for (unsigned by = 0; by < grid.y; by++)
		for (unsigned bx = 0; bx < grid.x; bx++) {
			EmuBlock b;
			b.all = std::make_unique<std::barrier<>>(threads);
			for (int w = 0; w < threads / 32; w++) {
				b.warp.push_back(std::make_unique<std::barrier<>>(32));
				b.slot.emplace_back(32);
			}
			emu_blk = &b;
			for (auto& c : dyn) c = 0xa5;
			emu_dyn_smem = dyn.data();
			blockIdx = {bx, by, 0};
			emu_pool->body = &body;
			emu_pool->start.arrive_and_wait();
			emu_pool->end.arrive_and_wait();
		}
}
