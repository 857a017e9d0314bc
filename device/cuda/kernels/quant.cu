// Block formats kept compact on the device (quant.go): GGUF's Q8_0, Q4_K,
// Q5_K and Q6_K, MXFP4 and AWQ4 weights [out, in], dequantised exactly as
// the CPU reference defines them (tensor/quant.go, tensor/quant4.go), in a
// layout whose every load is 16 bytes and aligned. Per row, for in a
// multiple of the block:
//
//	q8_0: body qs[in] (int8, 32 a block)               scales: f16 d[in/32]
//	q4_k: body the GGUF blocks as stored (144 bytes per 256 values)
//	q5_k: body the GGUF blocks as stored (176 bytes per 256 values)
//	q6_k: body ql[128] | qh[64] | int8 sc[16] per 256   scales: f16 d[in/256]
//	mxfp4: body qs[16] per 32 (E2M1 codes)             scales: u8 e[in/32], padded to even
//	awq4_g<G>: body qs[G/2] per G (4-bit quants)       scales: {f16 s, u16 z}[in/G]
//
// body rows are QB·in/32 bytes (QB = 32, 18, 22, 26, 16, 16), one after
// another; the scale plane (all but q4_k and q5_k) is a separate array of
// rows. Both layouts hold exactly the stored bytes.
//
// Work is cut in units of 32 values, in/32 a row: a lane's unit is two
// runs of 16 consecutive values (q_pos), run r being a[r]·q − b[r] for
// small integers q (q_run) and the run's scale a and minimum b (0 for the
// formats without one). The products a·q are rounded one at a time
// (__fmul_rn: never contracted into an FMA), as the CPU reference
// computes them, so qwiden and qembed give its values exactly.
//
// qgemv_<q>: decode, y = x·Wᵀ (+ bias) for 1..GEMV_MAX_ROWS rows of
// float32 x, up to three matrices of one format sharing x (as gemv.cu:
// rows numbered through the three; ks warps share a row). Each warp takes
// two weight rows at once, so that its lanes have four to six 16-byte
// loads in flight and every x value it reads serves both. Per run it
// sums q·x and x (for the minimum) and adds a·Σqx − b·Σx, in float32.
// Staged (staged = 1): x is first written to shared memory as float32
// (4·m·in bytes of dynamic shared memory), transformed by mode as
// gemv_stage does (the RMSNorm before q/k/v, gate/up); else x is read
// from global memory and mode must be GEMV_STAGE_ROUND.
//
// The qgemv kernels ask for two resident blocks an SM (at most 128
// registers a thread): a warp holds two rows' units and up to eight rows
// of x, and one block of eight warps alone would keep too few loads in
// flight.
//
// qgemv_int_<q>, qgemv_swiglu_int_<q>: the same launches on integer dot
// products (dp4a), x staged as int8 limbs (below, "The integer path"),
// up to QGEMV_INT_MAX_ROWS rows of x in groups of QGEMV_INT_GROUP.
// qquant_x_<q>: x as those limbs, once, for the launches sharing it.
//
// qgemv_swiglu_<q>: an MLP's gate (matrix 0) and up (matrix 1, as many
// rows) with the gated activation in the epilogue: y0 [m, out0] =
// silu(x·gateᵀ + b0)·(x·upᵀ + b1), a warp taking row j of both (as
// gemv.cu's _swiglu); y1, matrix 2 and accumulate are unused.
//
// qwiden_bf16_<q>: W as bf16 [out, in], for a cuBLASLt GEMM (prefill).
// qembed_<q>: rows ids of W as float32 (an id outside [0, vocab): zeros).
#include "gemv.cuh"

typedef unsigned char u8;
typedef unsigned int u32;

// qword is 32-bit word i of a 16-byte load (selects, not local memory,
// for a run-time i).
__device__ __forceinline__ u32 qword(const uint4& w, int i) { return i == 0 ? w.x : i == 1 ? w.y : i == 2 ? w.z : w.w; }

// qbyte is byte k (0..15) of a 16-byte load.
__device__ __forceinline__ u32 qbyte(const uint4& w, int k) { return (qword(w, k >> 2) >> (8 * (k & 3))) & 255u; }

// qf is v (0 <= v < 2^23) less off as float, exactly: v sits in the
// mantissa of 2^23, and 2^23 + off is subtracted.
__device__ __forceinline__ float qf(u32 v, float off) { return __uint_as_float(0x4b000000u | v) - (8388608.f + off); }

// qf4 is qf of the four bytes of t, one byte permute each (byte j of t
// under 2^23's exponent byte) instead of a shift and a mask.
__device__ __forceinline__ void qf4(u32 t, float off, float q[4]) {
#pragma unroll
	for (int j = 0; j < 4; j++) q[j] = __uint_as_float(__byte_perm(t, 0x4b000000u, 0x7540u | j)) - (8388608.f + off);
}

// qhalf widens f16 bits.
__device__ __forceinline__ float qhalf(u32 bits) {
	f16_t h;
	h.bits = (u16)bits;
	return to_f32(h);
}

__device__ __forceinline__ const uint4* q16(const u8* p) { return reinterpret_cast<const uint4*>(p); }

// qprmt is PTX prmt in its default mode: __byte_perm's byte select, and
// a selector nibble with bit 3 set replicates the chosen byte's sign bit
// (prmt(w, 0, t | (t|8)<<4 | (t|8)<<8 | (t|8)<<12) is byte t of w as a
// signed int).
__device__ __forceinline__ u32 qprmt(u32 a, u32 b, u32 sel) {
	u32 d;
	asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
	return d;
}

// qrotl rotates w left by n (mod 32): one funnel shift.
__device__ __forceinline__ u32 qrotl(u32 w, int n) { return __funnelshift_l(w, w, n); }

// QUnit is one unit as loaded: its quant words, a shift for the high
// bits, and each run's scale and minimum.
struct QUnit {
	uint4 q, h;
	int sh;
	float a[2], b[2];
};

// The formats: body bytes per 32 values (QB), scale-plane entries per
// row (scales), whether runs have a minimum, load, the integers of run s
// (0 or 1, a compile-time constant once unrolled) and its first value;
// for the integer path, the integers of run s as four words of int8×4
// (irun, signed or unsigned as wsigned says: what QIView takes
// where a unit's two runs share their scale and minimum).
struct Q8_0 {
	static constexpr int QB = 32;
	static constexpr bool mins = false;
	static __device__ __forceinline__ int scales(int in) { return in >> 5; }
	static __device__ __forceinline__ void load(const u8* body, const u16* sc, int u, QUnit& v) {
		v.q = __ldg(q16(body + 32 * (i64)u));
		v.h = __ldg(q16(body + 32 * (i64)u + 16));
		v.a[0] = v.a[1] = qhalf(__ldg(sc + u));
		v.b[0] = v.b[1] = 0.f;
		v.sh = 0;
	}
	// int8 q: q + 128 (the sign bit flipped) less 128.
	static __device__ __forceinline__ void run(const QUnit& v, int s, float q[16]) {
#pragma unroll
		for (int i = 0; i < 4; i++) qf4(qword(s ? v.h : v.q, i) ^ 0x80808080u, 128.f, q + 4 * i);
	}
	static constexpr bool wsigned = true;
	static __device__ __forceinline__ void irun(const QUnit& v, int s, u32 w[4]) {
#pragma unroll
		for (int i = 0; i < 4; i++) w[i] = qword(s ? v.h : v.q, i);
	}
	static __device__ __forceinline__ int pos(int u, int s) { return 32 * u + 16 * s; }
};

// kscale sets run s's a and b from sub-block j's 6-bit scale and min
// (tensor.KScaleMin over the 12 bytes after d and dmin in hd).
__device__ __forceinline__ void kscale(const uint4& hd, int j, int s, QUnit& v) {
	const float d = qhalf(hd.x & 0xffffu), dmin = qhalf(hd.x >> 16);
	u32 sc, m;
	if (j < 4) {
		sc = qbyte(hd, 4 + j) & 63u, m = qbyte(hd, 8 + j) & 63u;
	} else {
		sc = (qbyte(hd, 8 + j) & 15u) | (qbyte(hd, j) >> 6 << 4);
		m = (qbyte(hd, 8 + j) >> 4) | (qbyte(hd, 4 + j) >> 6 << 4);
	}
	v.a[s] = __fmul_rn(d, qf(sc, 0.f));
	v.b[s] = __fmul_rn(dmin, qf(m, 0.f));
}

// Q4_K: unit u is block u/8's qs bytes 32c+16h… (c, h = u%8/2, u%2): run 0
// their low nibbles (sub-block 2c, values 64c+16h…), run 1 their high
// (sub-block 2c+1, 32 values on).
struct Q4_K {
	static constexpr int QB = 18;
	static constexpr bool mins = true;
	static __device__ __forceinline__ int scales(int) { return 0; }
	static __device__ __forceinline__ void load(const u8* body, const u16*, int u, QUnit& v) {
		const u8* blk = body + 144 * (i64)(u >> 3);
		const int c = (u & 7) >> 1, h = u & 1;
		const uint4 hd = __ldg(q16(blk));
		v.q = __ldg(q16(blk + 16 + 32 * c + 16 * h));
		v.sh = 0;
		kscale(hd, 2 * c, 0, v);
		kscale(hd, 2 * c + 1, 1, v);
	}
	static __device__ __forceinline__ void run(const QUnit& v, int s, float q[16]) {
#pragma unroll
		for (int i = 0; i < 4; i++) qf4((qword(v.q, i) >> (4 * s)) & 0x0f0f0f0fu, 0.f, q + 4 * i);
	}
	static constexpr bool wsigned = false;
	static __device__ __forceinline__ void irun(const QUnit& v, int s, u32 w[4]) {
#pragma unroll
		for (int i = 0; i < 4; i++) w[i] = (qword(v.q, i) >> (4 * s)) & 0x0f0f0f0fu;
	}
	static __device__ __forceinline__ int pos(int u, int s) {
		return 256 * (u >> 3) + 64 * ((u & 7) >> 1) + 16 * (u & 1) + 32 * s;
	}
};

// Q5_K: Q4_K's units, with bit 2c+s of qh[16h+k] as value k's fifth bit.
struct Q5_K {
	static constexpr int QB = 22;
	static constexpr bool mins = true;
	static __device__ __forceinline__ int scales(int) { return 0; }
	static __device__ __forceinline__ void load(const u8* body, const u16*, int u, QUnit& v) {
		const u8* blk = body + 176 * (i64)(u >> 3);
		const int c = (u & 7) >> 1, h = u & 1;
		const uint4 hd = __ldg(q16(blk));
		v.h = __ldg(q16(blk + 16 + 16 * h));
		v.q = __ldg(q16(blk + 48 + 32 * c + 16 * h));
		v.sh = 2 * c;
		kscale(hd, 2 * c, 0, v);
		kscale(hd, 2 * c + 1, 1, v);
	}
	static __device__ __forceinline__ void run(const QUnit& v, int s, float q[16]) {
#pragma unroll
		for (int i = 0; i < 4; i++) {
			const u32 hi = (qword(v.h, i) >> (v.sh + s)) & 0x01010101u;
			qf4(((qword(v.q, i) >> (4 * s)) & 0x0f0f0f0fu) | hi << 4, 0.f, q + 4 * i);
		}
	}
	static constexpr bool wsigned = false;
	static __device__ __forceinline__ int pos(int u, int s) { return Q4_K::pos(u, s); }
};

// Q6_K: unit u is block u/8's ql bytes 64c+16t… (c, t = u%8/4, u%4): run
// s their nibble s (values 128c+16t… and 64 on), the high two bits from
// qh[32c+16(t%2)+k] at bit 2(t/2)+4s, scale sc[8c+4s+t]; q − 32.
struct Q6_K {
	static constexpr int QB = 26;
	static constexpr bool mins = false;
	static __device__ __forceinline__ int scales(int in) { return in >> 8; }
	static __device__ __forceinline__ void load(const u8* body, const u16* sc, int u, QUnit& v) {
		const u8* blk = body + 208 * (i64)(u >> 3);
		const int c = (u & 7) >> 2, t = u & 3;
		v.q = __ldg(q16(blk + 64 * c + 16 * t));
		v.h = __ldg(q16(blk + 128 + 32 * c + 16 * (t & 1)));
		const uint4 scs = __ldg(q16(blk + 192));
		const float d = qhalf(__ldg(sc + (u >> 3)));
		v.sh = 2 * (t >> 1);
		v.a[0] = __fmul_rn(d, (float)(signed char)qbyte(scs, 8 * c + t));
		v.a[1] = __fmul_rn(d, (float)(signed char)qbyte(scs, 8 * c + 4 + t));
		v.b[0] = v.b[1] = 0.f;
	}
	static __device__ __forceinline__ void run(const QUnit& v, int s, float q[16]) {
#pragma unroll
		for (int i = 0; i < 4; i++) {
			const u32 hi = (qword(v.h, i) >> (v.sh + 4 * s)) & 0x03030303u;
			qf4(((qword(v.q, i) >> (4 * s)) & 0x0f0f0f0fu) | hi << 4, 32.f, q + 4 * i);
		}
	}
	static constexpr bool wsigned = true;
	static __device__ __forceinline__ int pos(int u, int s) {
		return 256 * (u >> 3) + 128 * ((u & 7) >> 2) + 16 * (u & 3) + 64 * s;
	}
};

// MXFP4: unit u is block u: run 0 its low nibbles (values 32u…), run 1
// its high ones (32u+16…). A code is the doubled E2M1 magnitude (0, 1,
// 2, 3, 4, 6, 8, 12: a byte permute of two words) with bit 3 its sign,
// and the run's scale 2^(e−128) halves it back: value E2M1·2^(e−127).
struct MXFP4 {
	static constexpr int QB = 16;
	static constexpr bool mins = false;
	static __device__ __forceinline__ int scales(int in) { return ((in >> 5) + 1) >> 1; }
	static __device__ __forceinline__ void load(const u8* body, const u16* sc, int u, QUnit& v) {
		v.q = __ldg(q16(body + 16 * (i64)u));
		const u32 e = __ldg(reinterpret_cast<const u8*>(sc) + u);
		// 2^(e−128): exponent field e−1, or a subnormal for e < 2.
		v.a[0] = v.a[1] = e >= 2u ? __uint_as_float((e - 1u) << 23) : __uint_as_float(0x00200000u << e);
		v.b[0] = v.b[1] = 0.f;
		v.sh = 0;
	}
	static __device__ __forceinline__ void run(const QUnit& v, int s, float q[16]) {
#pragma unroll
		for (int i = 0; i < 4; i++) {
			const u32 c = (qword(v.q, i) >> (4 * s)) & 0x0f0f0f0fu;
			// The four codes' magnitude indices as the selector's nibbles.
			const u32 sel = (c & 7u) | ((c >> 4) & 0x70u) | ((c >> 8) & 0x700u) | ((c >> 12) & 0x7000u);
			qf4(__byte_perm(0x03020100u, 0x0c080604u, sel), 0.f, q + 4 * i);
#pragma unroll
			for (int j = 0; j < 4; j++) q[4 * i + j] = __uint_as_float(__float_as_uint(q[4 * i + j]) | ((c >> (8 * j + 3)) & 1u) << 31);
		}
	}
	// The doubled E2M1 values as int8: the magnitude's byte from a table
	// of the positive and one of the negative values, chosen by bit 3.
	static constexpr bool wsigned = true;
	static __device__ __forceinline__ void irun(const QUnit& v, int s, u32 w[4]) {
#pragma unroll
		for (int i = 0; i < 4; i++) {
			const u32 c = (qword(v.q, i) >> (4 * s)) & 0x0f0f0f0fu;
			const u32 sel = (c & 7u) | ((c >> 4) & 0x70u) | ((c >> 8) & 0x700u) | ((c >> 12) & 0x7000u);
			const u32 neg = ((c >> 3) & 0x01010101u) * 0xffu;
			w[i] = (__byte_perm(0x03020100u, 0x0c080604u, sel) & ~neg) | (__byte_perm(0xfdfeff00u, 0xf4f8fafcu, sel) & neg);
		}
	}
	static __device__ __forceinline__ int pos(int u, int s) { return 32 * u + 16 * s; }
};

// AWQ4<G>: unit u is bytes 16u… of the row's quants, in group u/(G/32):
// run 0 their low nibbles (values 32u…), run 1 their high ones
// (32u+16…); a = s, b = s·z (exact: at most 15 significant bits), so
// a·q − b = s·(q − z).
template <int G> struct AWQ4 {
	static constexpr int QB = 16;
	static constexpr bool mins = true;
	static __device__ __forceinline__ int scales(int in) { return 2 * (in / G); }
	static __device__ __forceinline__ void load(const u8* body, const u16* sc, int u, QUnit& v) {
		v.q = __ldg(q16(body + 16 * (i64)u));
		const u32 sz = __ldg(reinterpret_cast<const u32*>(sc) + u / (G / 32));
		v.a[0] = v.a[1] = qhalf(sz & 0xffffu);
		v.b[0] = v.b[1] = __fmul_rn(v.a[0], qf(sz >> 16, 0.f));
		v.sh = 0;
	}
	static __device__ __forceinline__ void run(const QUnit& v, int s, float q[16]) { Q4_K::run(v, s, q); }
	static constexpr bool wsigned = false;
	static __device__ __forceinline__ void irun(const QUnit& v, int s, u32 w[4]) { Q4_K::irun(v, s, w); }
	static __device__ __forceinline__ int pos(int u, int s) { return 32 * u + 16 * s; }
};

// QIView<Q> is format Q as the integer path (qi_unit) takes a unit of a
// weight row: its runs' integers as int8×4 words (q[s]), and what turns
// their dot products with x into the unit's part. A lane's units u all
// have u % 8 = lane % 8 (u = share·32 + lane + k·ks·32), so where a unit
// lies in its 256-value block, and every byte selector and shift that
// depends on it, is the lane's: Lane, worked out once before the unit
// loop.
//
// iscale false (QIView's default, the formats whose units' two runs
// share a scale a and a minimum b): both runs' dot products summed into
// one integer S, part = a·S − b·Σx (Q::load and Q::irun).
// qoff: the runs' integers are q − qoff, and qi_unit starts each run's
// dot products at qoff·Σlimb (Q6_K: −32, its q − 32 as q' = 0..63 then,
// with no per-byte subtraction). scale: part comes scale times too large
// (a power of two, exact), and QIntRows divides the lane's sums once
// after the unit loop (Q4_K: 16).
// iscale true (the K-quants): run s has an integer scale sc[s] (6-bit,
// or Q6_K's int8) under the block's float d, and for Q4_K and Q5_K an
// integer minimum m[s] under dmin: the scales multiply the integer sums,
// S = sc[0]·S_0 + sc[1]·S_1 (exact in int32), and part = d·S −
// dmin·(m[0]·Σx_0 + m[1]·Σx_1), one float product per term instead of a
// rounded a = d·sc per run.
template <typename Q> struct QIView {
	struct Lane {};
	static __device__ __forceinline__ Lane lane(int) { return Lane{}; }
	struct W {
		u32 q[2][4];
		float a, b;
	};
	static constexpr bool iscale = false;
	static constexpr int qoff = 0, scale = 1;
	static __device__ __forceinline__ void load(const u8* body, const u16* sc, int u, const Lane&, W& w) {
		QUnit v;
		Q::load(body, sc, u, v);
		Q::irun(v, 0, w.q[0]);
		Q::irun(v, 1, w.q[1]);
		w.a = v.a[0], w.b = v.b[0];
	}
	static __device__ __forceinline__ float part(const W& w, float s, float2 sx) {
		return Q::mins ? fmaf(-w.b, sx.x + sx.y, w.a * s) : w.a * s;
	}
};

// QIKLane is where a lane's Q4_K or Q5_K units lie in their block (c, h =
// u%8/2, u%2: the qs bytes 32c+16h… at off, sub-blocks 2c and 2c+1) and
// how its two sub-blocks' scales and minimums come out of the 12 packed
// bytes (tensor.KScaleMin): the byte pairs j = 2c, 2c+1 of the scale
// words hd.y and hd.z gathered beside those of hd.w (one prmt, sel), then
// for c < 2 the low six bits of the first pair (mask_hi 0), for c >= 2
// four bits of the second pair (shifted down by sh_s or sh_m: the low or
// high nibbles) under the top two bits of the first (mask_hi 0x3030).
// All lane constants; five registers (Q5_K: seven) across the unit loop.
struct QIKLane {
	u32 sel, mask_hi;
	int off, sh_s, sh_m;
};

__device__ __forceinline__ QIKLane qik_lane(int lane) {
	QIKLane l;
	const int c = (lane & 7) >> 1, h = lane & 1;
	const u32 k = (2 * c) & 3;
	l.sel = k | (k + 1) << 4 | (k + 4) << 8 | (k + 5) << 12;
	const bool lo = c < 2;
	l.sh_s = lo ? 0 : 16, l.sh_m = lo ? 0 : 20;
	l.mask_hi = lo ? 0u : 0x3030u;
	l.off = 32 * c + 16 * h;
	return l;
}

// QIKW is a K-quant unit for the integer path.
struct QIKW {
	u32 q[2][4];
	int sc[2];
	float d, dmin, m[2];
};

// qik_scales sets w's d, dmin, integer scales and minimums from the block
// header hd for lane l's sub-blocks (the low mask 0x3f3f ^ mask_hi: 0x3f3f
// or 0x0f0f).
__device__ __forceinline__ void qik_scales(const uint4& hd, const QIKLane& l, QIKW& w) {
	const u32 ps = qprmt(hd.y, hd.w, l.sel), pm = qprmt(hd.z, hd.w, l.sel);
	const u32 s = ((ps >> l.sh_s) & (0x3f3fu ^ l.mask_hi)) | ((ps >> 2) & l.mask_hi);
	const u32 m = ((pm >> l.sh_m) & (0x3f3fu ^ l.mask_hi)) | ((pm >> 2) & l.mask_hi);
	w.sc[0] = (int)(s & 255u), w.sc[1] = (int)(s >> 8);
	w.m[0] = (float)(m & 255u), w.m[1] = (float)(m >> 8);
	w.d = qhalf(hd.x & 0xffffu), w.dmin = qhalf(hd.x >> 16);
}

// Q4_K: run 1's high nibbles are taken in place, 16·q (one mask, no
// shift), so run 0's scale is taken 16 times and dmin too: part is 16
// times d·S − dmin·Σ m·Σx (scale).
template <> struct QIView<Q4_K> {
	typedef QIKLane Lane;
	static __device__ __forceinline__ Lane lane(int lane) { return qik_lane(lane); }
	typedef QIKW W;
	static constexpr bool iscale = true;
	static constexpr int qoff = 0, scale = 16;
	static __device__ __forceinline__ void load(const u8* body, const u16*, int u, const Lane& l, W& w) {
		const u8* blk = body + 144 * (i64)(u >> 3);
		const uint4 hd = __ldg(q16(blk));
		const uint4 q = __ldg(q16(blk + 16 + l.off));
#pragma unroll
		for (int i = 0; i < 4; i++) {
			w.q[0][i] = qword(q, i) & 0x0f0f0f0fu;
			w.q[1][i] = qword(q, i) & 0xf0f0f0f0u;
		}
		qik_scales(hd, l, w);
		w.sc[0] *= 16, w.dmin *= 16.f;
	}
	static __device__ __forceinline__ float part(const W& w, float s, float2 sx) {
		return fmaf(w.d, s, -w.dmin * fmaf(w.m[1], sx.y, w.m[0] * sx.x));
	}
};

// Q5_K: the fifth bit of value k of run s is bit 2c+s of qh[16h+k]; a
// rotation (by r0 = 4 − 2c for run 0, r0 − 1 for run 1, mod 32) brings it
// to bit 4 of its own byte.
struct QI5Lane : QIKLane {
	int off_h, r0;
};

template <> struct QIView<Q5_K> {
	typedef QI5Lane Lane;
	static __device__ __forceinline__ Lane lane(int lane) {
		Lane l;
		static_cast<QIKLane&>(l) = qik_lane(lane);
		l.off_h = 16 + 16 * (lane & 1), l.r0 = (4 - 2 * ((lane & 7) >> 1)) & 31;
		return l;
	}
	typedef QIKW W;
	static constexpr bool iscale = true;
	static constexpr int qoff = 0, scale = 1;
	static __device__ __forceinline__ void load(const u8* body, const u16*, int u, const Lane& l, W& w) {
		const u8* blk = body + 176 * (i64)(u >> 3);
		const uint4 hd = __ldg(q16(blk));
		const uint4 h = __ldg(q16(blk + l.off_h));
		const uint4 q = __ldg(q16(blk + 48 + l.off));
		const int r1 = (l.r0 - 1) & 31;
#pragma unroll
		for (int i = 0; i < 4; i++) {
			w.q[0][i] = (qword(q, i) & 0x0f0f0f0fu) | (qrotl(qword(h, i), l.r0) & 0x10101010u);
			w.q[1][i] = ((qword(q, i) >> 4) & 0x0f0f0f0fu) | (qrotl(qword(h, i), r1) & 0x10101010u);
		}
		qik_scales(hd, l, w);
	}
	static __device__ __forceinline__ float part(const W& w, float s, float2 sx) { return QIView<Q4_K>::part(w, s, sx); }
};

// Q6_K: a lane's units are ql bytes 64c+16t… (c, t = u%8/4, u%4), the
// high bits at bit sh = 2(t/2) (run 0) and sh+4 (run 1) of qh[32c+16(t%2)
// +k], the scales the int8 sc[8c+t] and sc[8c+4+t]: byte t of the two
// words of the 8 bytes sc[8c…] (sign-extended by prmt, selector ssel).
struct QI6Lane {
	int q, h, s, sh;
	u32 ssel;
};

template <> struct QIView<Q6_K> {
	typedef QI6Lane Lane;
	static __device__ __forceinline__ Lane lane(int lane) {
		const int c = (lane & 7) >> 2, t = lane & 3;
		const u32 x = (u32)t | 8u;
		return Lane{64 * c + 16 * t, 128 + 32 * c + 16 * (t & 1), 192 + 8 * c, 2 * (t >> 1), (u32)t | x << 4 | x << 8 | x << 12};
	}
	struct W {
		u32 q[2][4];
		int sc[2];
		float d;
	};
	static constexpr bool iscale = true;
	// q' = q + 32 (0..63, the stored six bits), the 32 taken off through
	// qoff.
	static constexpr int qoff = -32, scale = 1;
	static __device__ __forceinline__ void load(const u8* body, const u16* sc, int u, const Lane& l, W& w) {
		const u8* blk = body + 208 * (i64)(u >> 3);
		const uint4 q = __ldg(q16(blk + l.q));
		const uint4 h = __ldg(q16(blk + l.h));
		const uint2 s = __ldg(reinterpret_cast<const uint2*>(blk + l.s));
#pragma unroll
		for (int i = 0; i < 4; i++) {
			const u32 hs = qword(h, i) >> l.sh;
			w.q[0][i] = (qword(q, i) & 0x0f0f0f0fu) | ((hs << 4) & 0x30303030u);
			w.q[1][i] = ((qword(q, i) >> 4) & 0x0f0f0f0fu) | (hs & 0x30303030u);
		}
		w.sc[0] = (int)qprmt(s.x, 0u, l.ssel), w.sc[1] = (int)qprmt(s.y, 0u, l.ssel);
		w.d = qhalf(__ldg(sc + (u >> 3)));
	}
	static __device__ __forceinline__ float part(const W& w, float s, float2) { return w.d * s; }
};

// q_value is the dequantised value of run s's integer q.
__device__ __forceinline__ float q_value(const QUnit& v, int s, float q) { return __fmul_rn(v.a[s], q) - v.b[s]; }

// QMat is one matrix of a qgemv launch.
struct QMat {
	float* y;
	const u8* w;
	const u16* s;
	const float* bias;
	int out;
};

// qgemv_x16 loads 16 floats of x (generic loads: shared or global memory).
__device__ __forceinline__ void qgemv_x16(const float* x, float v[16]) {
#pragma unroll
	for (int i = 0; i < 4; i++) {
		const float4 f = *reinterpret_cast<const float4*>(x + 4 * i);
		v[4 * i] = f.x, v[4 * i + 1] = f.y, v[4 * i + 2] = f.z, v[4 * i + 3] = f.w;
	}
}

#define QGEMV_PARAMS                                                                                               \
	const float *x, const float *norm, float eps, int mode, int staged, int accumulate, int m, int in, int ks,    \
	    float *y0, const u8 *w0, const u16 *s0, const float *b0, int out0, float *y1, const u8 *w1, const u16 *s1, \
	    const float *b1, int out1, float *y2, const u8 *w2, const u16 *s2, const float *b2, int out2

// The integer launches' parameters: qgemv's and xq, x as qquant_x wrote
// it (or null).
#define QGEMV_INT_PARAMS QGEMV_PARAMS, const unsigned char *xq

// qgemv_pairs is the pair loop qgemv and qgemv_int share: for each pair
// of rows of the warp's (two neighbouring rows, or row j of gate and of
// up), and for each group of R rows of x (g0 on: a pass over the pair's
// weights each, R <= GEMV_MAX_ROWS), rows(w, sc, acc, g0, mg) adds the
// warp's share of w_p·x_{g0+r} to acc[p][r] for r < mg, then the sums and
// the epilogue write those mg rows of y. Only the first pass reads the
// weights from DRAM; the next ones find them in L1 or L2.
template <typename Q, bool SwiGLU, int R, typename Rows>
__device__ __forceinline__ void qgemv_pairs(int m, int in, int ks, int accumulate, const QMat& ma, const QMat& mb,
                                            const QMat& mc, Rows rows) {
	static_assert(R >= 1 && R <= GEMV_MAX_ROWS, "gemv_sum holds GEMV_MAX_ROWS rows");
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int rows_per_block = 2 * (GEMV_WARPS / ks);
	const int total = ma.out + mb.out + mc.out;
	const int share = warp % ks;
	const i64 body_row = (i64)Q::QB * (in >> 5);
	const int scale_row = Q::scales(in);
	for (int base = blockIdx.x * rows_per_block; base < total; base += gridDim.x * rows_per_block) {
		int row[2] = {base + 2 * (warp / ks), base + 2 * (warp / ks) + 1};
		if (SwiGLU) { // past the last j: past every matrix (not live)
			const int j = base / 2 + warp / ks;
			row[0] = j < ma.out ? j : total, row[1] = j < ma.out ? ma.out + j : total;
		}
		const QMat mat[2] = {gemv_mat(row[0], ma, mb, mc), gemv_mat(row[1], ma, mb, mc)};
		const bool live[2] = {row[0] < mat[0].out, row[1] < mat[1].out};
		// m and R are the launch's: every warp runs the same groups, so the
		// ks warps of a row meet in each group's gemv_sum.
		for (int g0 = 0; g0 < m; g0 += R) {
			const int mg = min(R, m - g0);
			float acc[2][GEMV_MAX_ROWS];
#pragma unroll
			for (int r = 0; r < GEMV_MAX_ROWS; r++) acc[0][r] = acc[1][r] = 0.f;
			if (live[0]) {
				// A second row past the last reads the first again (not stored).
				const u8* const w[2] = {mat[0].w + row[0] * body_row,
				                        live[1] ? mat[1].w + row[1] * body_row : mat[0].w + row[0] * body_row};
				const u16* const sc[2] = {mat[0].s + (i64)row[0] * scale_row,
				                          live[1] ? mat[1].s + (i64)row[1] * scale_row : mat[0].s + (i64)row[0] * scale_row};
				float part[2][R];
#pragma unroll
				for (int r = 0; r < R; r++) part[0][r] = part[1][r] = 0.f;
				rows(w, sc, part, g0, mg);
#pragma unroll
				for (int r = 0; r < R; r++) acc[0][r] = part[0][r], acc[1][r] = part[1][r];
			}
			float sum[2];
			gemv_sum<2>(acc, mg, ks, share, lane, warp, sum);
			const i64 yr = g0 + lane; // the row of y (and x) lane r < mg writes
			if (SwiGLU) {
				if (live[0] && share == 0 && lane < mg) {
					const float g = sum[0] + (ma.bias ? ma.bias[row[0]] : 0.f), u = sum[1] + (mb.bias ? mb.bias[row[1]] : 0.f);
					ma.y[yr * ma.out + row[0]] = silu(g) * u;
				}
			} else if (share == 0 && lane < mg) {
#pragma unroll
				for (int p = 0; p < 2; p++) {
					if (live[p]) {
						float* y = mat[p].y + yr * mat[p].out + row[p];
						const float v = sum[p] + (mat[p].bias ? mat[p].bias[row[p]] : 0.f);
						*y = accumulate ? *y + v : v;
					}
				}
			}
		}
	}
}

// QFloatRows is qgemv_pairs' rows for the float path: each weight
// widened to float32 and multiplied by x (float32, staged or in place).
// Its launches take at most GEMV_MAX_ROWS rows: one group, g0 = 0.
template <typename Q> struct QFloatRows {
	const float* xv;
	int in, ks;
	__device__ __forceinline__ void operator()(const u8* const (&w)[2], const u16* const (&sc)[2],
	                                           float (&acc)[2][GEMV_MAX_ROWS], int g0, int m) const {
		const int lane = threadIdx.x & 31, share = (threadIdx.x >> 5) % ks, units = in >> 5;
		const float* xg = xv + (i64)g0 * in;
#pragma unroll 2
		for (int u = share * 32 + lane; u < units; u += ks * 32) {
			QUnit v[2];
			Q::load(w[0], sc[0], u, v[0]);
			Q::load(w[1], sc[1], u, v[1]);
#pragma unroll
			for (int s = 0; s < 2; s++) {
				float q[2][16];
				Q::run(v[0], s, q[0]);
				Q::run(v[1], s, q[1]);
				const int at = Q::pos(u, s);
#pragma unroll
				for (int r = 0; r < GEMV_MAX_ROWS; r++) {
					if (r < m) {
						float xr[16];
						qgemv_x16(xg + (i64)r * in + at, xr);
						float d0 = 0.f, d1 = 0.f, sx = 0.f;
#pragma unroll
						for (int k = 0; k < 16; k++) {
							d0 += q[0][k] * xr[k];
							d1 += q[1][k] * xr[k];
							if (Q::mins) sx += xr[k];
						}
						acc[0][r] += v[0].a[s] * d0 - (Q::mins ? v[0].b[s] * sx : 0.f);
						acc[1][r] += v[1].a[s] * d1 - (Q::mins ? v[1].b[s] * sx : 0.f);
					}
				}
			}
		}
	}
};

template <typename Q, bool SwiGLU> __device__ void qgemv(QGEMV_PARAMS) {
	extern __shared__ __attribute__((aligned(16))) unsigned char qgemv_smem[];
	const QMat ma{y0, w0, s0, b0, out0}, mb{y1, w1, s1, b1, out1}, mc{y2, w2, s2, b2, out2};
	const float* xv = x;
	if (staged) {
		float* xs = reinterpret_cast<float*>(qgemv_smem);
		gemv_stage<float>(xs, x, norm, eps, mode, m, in, in);
		__syncthreads();
		xv = xs;
	}
	qgemv_pairs<Q, SwiGLU, GEMV_MAX_ROWS>(m, in, ks, accumulate, ma, mb, mc, QFloatRows<Q>{xv, in, ks});
}

// The integer path (qgemv_int_l<L>_<q>, qgemv_swiglu_int_l<L>_<q>): the
// same launches, with x staged once per block as integers and every dot
// product on dp4a (int8×4 → int32) instead of widening each weight to
// float. A unit's 32 values of x (its two runs, q_pos) share a scale, a
// power of two D = 2^−s: with amax their largest magnitude, s is the
// largest for which amax·2^s < 2^(8L−1), L the limbs (1, 2 or 3: a
// template parameter, the kernels compiled for each, the host choosing
// by GOSLING_QGEMV_LIMBS), and value i is the (8L)-bit integer t_i =
// rint(x_i·2^s) (x_i·2^s is exact; one that rounds up to 2^(8L−1) is
// kept below). So x_i = D·t_i to within D/2 <= amax·2^(1−8L): for L = 3
// within 1.2e-7 of the unit's largest value, as close as float32 x; for
// L = 1 within 2^−7 of it (llama.cpp's q8_1, with a power-of-two scale).
// t's bytes are the limbs: the top one signed (−128..127), the others
// unsigned digits, and
//
//	Σ w·x = D·Σ_l 256^(l−L+1)·Σ w·limb_l
//
// each inner sum exact in int32. Per unit the product is QIView's part
// (a·S − b·Σx, or the K-quants' d·S − dmin·Σ m·Σx), Σx = D·Σt from the
// staging.
//
// Staged x, per row of x (qi_row_bytes, 16-byte aligned rows, m rows
// one after another): limbs [L][2][units] of 16 bytes (limb l of run s of
// unit u, value k of the run in byte k: lanes reading consecutive units
// read consecutive words), then Σt per run as float2 [units], then D
// [units] float.
__host__ __device__ constexpr int qi_row_bytes(int units, int limbs) { return ((32 * limbs + 12) * units + 15) & ~15; }

// qi_tmax is the largest t, 2^(8L−1) − 1 (exact in float).
template <int L> __device__ __forceinline__ constexpr float qi_tmax() { return (float)((1 << (8 * L - 1)) - 1); }

// qi_dp4a is c + the dot product of a's and b's four bytes, each signed
// or unsigned as SA and SB say.
template <bool SA, bool SB> __device__ __forceinline__ int qi_dp4a(u32 a, u32 b, int c) {
	int d;
	if (SA && SB) asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
	else if (SA) asm("dp4a.s32.u32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
	else if (SB) asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
	else asm("dp4a.u32.u32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
	return d;
}

// qi_dot4 is c + the dot product of a run's four words q with x's.
template <bool SA, bool SB> __device__ __forceinline__ int qi_dot4(const u32 (&q)[4], const uint4& x, int c) {
#pragma unroll
	for (int i = 0; i < 4; i++) c = qi_dp4a<SA, SB>(q[i], qword(x, i), c);
	return c;
}

// qi_limbs is S = Σ w·t over a unit from its limbs' sums S_l = Σ w·limb_l.
// With one scale a unit (Wide false) each S_l is below 2^20 in magnitude
// (32 values), and the top two combine exactly in int32, the third added
// in float. The K-quants' S_l carry the integer scales (up to 2^25: Q6_K's
// int8 scales on its 6-bit quants), so there every limb's sum goes
// through float.
template <int L, bool Wide> __device__ __forceinline__ float qi_limbs(const int (&ia)[L]) {
	if constexpr (L == 1) return (float)ia[0];
	else if constexpr (L == 2) return Wide ? fmaf((float)ia[0], 256.f, (float)ia[1]) : (float)(ia[0] * 256 + ia[1]);
	else if constexpr (Wide) return fmaf(fmaf((float)ia[0], 256.f, (float)ia[1]), 256.f, (float)ia[2]);
	else return fmaf((float)(ia[0] * 256 + ia[1]), 256.f, (float)ia[2]);
}

// qi_stage_units writes units first, first + step, … (each + 0..3: four
// units a warp; first and step warp-uniform) of one row of float32 x,
// xr, transformed by mode as gemv_stage does (the same arithmetic, inv
// the row's 1/rms), as the integer path's row of L limbs in format Q's
// units at row. Eight lanes take a unit, four a run, one four values. A
// unit's bytes depend on its 32 values alone, so any cut of the units
// over warps and blocks writes the same row.
template <typename Q, int L>
__device__ __forceinline__ void qi_stage_units(unsigned char* row, const float* xr, const float* norm, float inv, int mode,
                                               int units, int first, int step) {
	const int lane = threadIdx.x & 31;
	const int s = (lane >> 2) & 1, k = lane & 3;
	u32* limbs = reinterpret_cast<u32*>(row);
	float* sums = reinterpret_cast<float*>(row + 32 * L * units);
	float* ds = reinterpret_cast<float*>(row + (32 * L + 8) * units);
	// Warp-uniform bounds: every lane takes part in the shuffles.
	for (int u0 = first; u0 < units; u0 += step) {
		const int u = u0 + (lane >> 3);
		const bool ok = u < units;
		float o[4] = {0.f, 0.f, 0.f, 0.f};
		if (ok) {
			const int at = Q::pos(u, s) + 4 * k;
			const float4 v = *reinterpret_cast<const float4*>(xr + at);
			o[0] = v.x, o[1] = v.y, o[2] = v.z, o[3] = v.w;
			if (mode == GEMV_STAGE_NORM) {
				const float4 w = *reinterpret_cast<const float4*>(norm + at);
				o[0] = o[0] * inv * w.x, o[1] = o[1] * inv * w.y, o[2] = o[2] * inv * w.z, o[3] = o[3] * inv * w.w;
			}
		}
		float amax = fmaxf(fmaxf(fabsf(o[0]), fabsf(o[1])), fmaxf(fabsf(o[2]), fabsf(o[3])));
#pragma unroll
		for (int d = 1; d < 8; d <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, d));
		// s = 8L − 2 − floor(log2 amax), within ±126: 2^s and D normal.
		const int e = (int)((__float_as_uint(amax) >> 23) & 255u) - 127;
		const int sh = min(max(8 * L - 2 - e, -126), 126);
		const float sc = __uint_as_float((u32)(127 + sh) << 23);
		int t[4];
#pragma unroll
		for (int j = 0; j < 4; j++) t[j] = __float2int_rn(fminf(o[j] * sc, qi_tmax<L>()));
		int ts = (t[0] + t[1]) + (t[2] + t[3]);
		ts += __shfl_xor_sync(0xffffffffu, ts, 1);
		ts += __shfl_xor_sync(0xffffffffu, ts, 2);
		if (ok) {
#pragma unroll
			for (int l = 0; l < L; l++) {
				// byte L−1−l of each t, in value order
				const u32 b = L - 1 - l;
				const u32 lo = __byte_perm(t[0], t[1], b | (b + 4) << 4), hi = __byte_perm(t[2], t[3], b | (b + 4) << 4);
				limbs[4 * ((l * 2 + s) * units + u) + k] = __byte_perm(lo, hi, 0x5410);
			}
			if (k == 0) sums[2 * u + s] = (float)ts;
			if ((lane & 7) == 0) ds[u] = __uint_as_float((u32)(127 - sh) << 23);
		}
	}
}

// qi_stage writes m rows of float32 x, transformed by mode, as the
// integer path's staged x (L limbs) in format Q's units, the block's
// warps taking four units at a time.
template <typename Q, int L>
__device__ void qi_stage(unsigned char* xs, const float* x, const float* norm, float eps, int mode, int m, int in) {
	const int units = in >> 5, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
	for (int r = 0; r < m; r++) {
		const float* xr = x + (i64)r * in;
		const float inv = mode == GEMV_STAGE_NORM ? gemv_norm_inv(xr, eps, in) : 1.f;
		qi_stage_units<Q, L>(xs + (i64)r * qi_row_bytes(units, L), xr, norm, inv, mode, units, 4 * warp, 4 * warps);
	}
}

// qquant_x: qi_stage's rows written once to global memory xq (m rows of
// qi_row_bytes, 16-byte aligned), for the qgemv_int launches that share
// x (q, k and v; gate and up) to read instead of each block staging its
// own. Grid (blocks a row, m), block 32·GEMV_WARPS threads: with the
// norm every block of a row sums its squares as a qgemv_int block does
// (gemv_norm_inv over as many threads, in the same order), so the bytes
// are the ones qi_stage writes, bit for bit.
template <typename Q, int L>
__device__ void qquant_x(unsigned char* xq, const float* x, const float* norm, float eps, int mode, int m, int in) {
	const int r = blockIdx.y, units = in >> 5, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
	if (r >= m) return; // the whole block
	const float* xr = x + (i64)r * in;
	const float inv = mode == GEMV_STAGE_NORM ? gemv_norm_inv(xr, eps, in) : 1.f;
	qi_stage_units<Q, L>(xq + (i64)r * qi_row_bytes(units, L), xr, norm, inv, mode, units,
	                     4 * (blockIdx.x * warps + warp), 4 * warps * gridDim.x);
}

// qi_unit adds unit u's products of a pair of weight rows (body and scale
// rows w and sc, the lane's QIView constants ln) and rows r < mg of
// staged x (xg, L limbs, rows rb bytes apart) to acc[p][r]. Per row of x
// and weight row: 8L dp4a, then with integer scales (QIView::iscale)
// S_l = sc[0]·S_l,0 + sc[1]·S_l,1, else both runs in one chain.
template <typename Q, int R, int L>
__device__ __forceinline__ void qi_unit(const u8* const (&w)[2], const u16* const (&sc)[2], float (&acc)[2][R],
                                        const unsigned char* xg, int rb, int units, int u, int mg,
                                        const typename QIView<Q>::Lane& ln) {
	typedef QIView<Q> V;
	typename V::W v[2];
	V::load(w[0], sc[0], u, ln, v[0]);
	V::load(w[1], sc[1], u, ln, v[1]);
#pragma unroll
	for (int r = 0; r < R; r++) {
		if (R == 1 || r < mg) { // mg >= 1: a group has a row
			const unsigned char* row = xg + (i64)r * rb;
			const uint4* limbs = reinterpret_cast<const uint4*>(row);
			float2 sx = make_float2(0.f, 0.f);
			if (Q::mins) sx = reinterpret_cast<const float2*>(row + 32 * L * units)[u];
			int ia[2][L];
#pragma unroll
			for (int l = 0; l < L; l++) {
				const uint4 x0 = limbs[(l * 2) * units + u], x1 = limbs[(l * 2 + 1) * units + u];
				// Each run's sums start at qoff·Σlimb (both weight rows'): the
				// runs' integers are q − qoff.
				int o0 = 0, o1 = 0;
				if constexpr (V::qoff != 0) {
					constexpr u32 ones[4] = {0x01010101u, 0x01010101u, 0x01010101u, 0x01010101u};
					o0 = V::qoff * (l == 0 ? qi_dot4<false, true>(ones, x0, 0) : qi_dot4<false, false>(ones, x0, 0));
					o1 = V::qoff * (l == 0 ? qi_dot4<false, true>(ones, x1, 0) : qi_dot4<false, false>(ones, x1, 0));
				}
#pragma unroll
				for (int p = 0; p < 2; p++) {
					// the top limb signed, the lower ones unsigned digits
					const int s0 = l == 0 ? qi_dot4<Q::wsigned, true>(v[p].q[0], x0, o0) : qi_dot4<Q::wsigned, false>(v[p].q[0], x0, o0);
					if constexpr (V::iscale) {
						const int s1 = l == 0 ? qi_dot4<Q::wsigned, true>(v[p].q[1], x1, o1) : qi_dot4<Q::wsigned, false>(v[p].q[1], x1, o1);
						ia[p][l] = v[p].sc[0] * s0 + v[p].sc[1] * s1;
					} else {
						ia[p][l] = l == 0 ? qi_dot4<Q::wsigned, true>(v[p].q[1], x1, s0) : qi_dot4<Q::wsigned, false>(v[p].q[1], x1, s0);
					}
				}
			}
			const float d = reinterpret_cast<const float*>(row + (32 * L + 8) * units)[u];
#pragma unroll
			for (int p = 0; p < 2; p++) acc[p][r] = fmaf(d, V::part(v[p], qi_limbs<L, V::iscale>(ia[p]), sx), acc[p][r]);
		}
	}
}

// QIntRows is qgemv_pairs' rows for the integer path: acc[p][r] +=
// w_p·x_{g0+r} over the warp's share of the units of the pair's body and
// scale rows w and sc, for rows r < mg <= R of staged x xs (L limbs;
// shared memory, or qquant_x's rows in global memory: generic loads serve
// both). One row of x (R = 1, decode at batch 1) keeps two units' loads
// in flight; a group of rows has R times the arithmetic a unit and keeps
// one, which leaves its accumulators room in the 64 registers a thread
// that four resident blocks allow.
template <typename Q, int R, int L> struct QIntRows {
	const unsigned char* xs;
	int in, ks;
	__device__ __forceinline__ void operator()(const u8* const (&w)[2], const u16* const (&sc)[2], float (&acc)[2][R],
	                                           int g0, int mg) const {
		const int lane = threadIdx.x & 31, share = (threadIdx.x >> 5) % ks, units = in >> 5;
		const int rb = qi_row_bytes(units, L);
		const unsigned char* xg = xs + (i64)g0 * rb;
		const typename QIView<Q>::Lane ln = QIView<Q>::lane(lane); // u % 8 = lane % 8 for every u below
		if (R == 1) {
#pragma unroll 2
			for (int u = share * 32 + lane; u < units; u += ks * 32) qi_unit<Q, R, L>(w, sc, acc, xg, rb, units, u, mg, ln);
		} else {
#pragma unroll 1
			for (int u = share * 32 + lane; u < units; u += ks * 32) qi_unit<Q, R, L>(w, sc, acc, xg, rb, units, u, mg, ln);
		}
		if constexpr (QIView<Q>::scale != 1) {
#pragma unroll
			for (int r = 0; r < R; r++) acc[0][r] *= 1.f / QIView<Q>::scale, acc[1][r] *= 1.f / QIView<Q>::scale;
		}
	}
};

// qgemv_int: qgemv's launch on staged integer x (L limbs), from one of three
// sources. xq null: each block stages x itself (qi_stage; staged must be
// 1, dynamic shared memory m·qi_row_bytes(in/32, L)), each warp's first
// pair of rows prefetched into L2 meanwhile. xq set (qquant_x's rows):
// with staged, the block copies them into shared memory (as much
// dynamic shared memory), 16 bytes a thread at a time; without, the
// warps read them in place (global memory, through L1: any m and in).
// The pair loop is compiled for one row of x (One: a single accumulator a
// weight row, decode at batch 1) or for groups of QGEMV_INT_GROUP rows (m
// up to QGEMV_INT_MAX_ROWS; more accumulators would not fit the 64
// registers a thread that four resident blocks leave), each for shared
// and for global x. They are separate kernels: in one, ptxas allocates
// for the group loops, and the single row's loop spilled with them.
template <typename Q, bool SwiGLU, bool One, int L> __device__ void qgemv_int(QGEMV_INT_PARAMS) {
	extern __shared__ __attribute__((aligned(16))) unsigned char qgemv_smem[];
	const QMat ma{y0, w0, s0, b0, out0}, mb{y1, w1, s1, b1, out1}, mc{y2, w2, s2, b2, out2};
	const bool in_place = xq != 0 && !staged;
	if (!in_place) {
		const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, pair = warp / ks;
		const int j = blockIdx.x * (GEMV_WARPS / ks) + pair;
		int row[2] = {2 * j, 2 * j + 1};
		if (SwiGLU) row[0] = j, row[1] = out0 + j;
		const int body = Q::QB * (in >> 5);
#pragma unroll
		for (int p = 0; p < 2; p++) {
			const QMat mat = gemv_mat(row[p], ma, mb, mc);
			if (row[p] < mat.out) gemv_prefetch_row(mat.w + (i64)row[p] * body, body, ks, warp % ks, lane);
		}
	}
	if (xq == 0) {
		qi_stage<Q, L>(qgemv_smem, x, norm, eps, mode, m, in);
		__syncthreads();
	} else if (staged) {
		const int n = m * (qi_row_bytes(in >> 5, L) >> 4); // rows of whole 16-byte words
		const uint4* src = reinterpret_cast<const uint4*>(xq);
		uint4* dst = reinterpret_cast<uint4*>(qgemv_smem);
		for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = __ldg(src + i);
		__syncthreads();
	}
	constexpr int G = QGEMV_INT_GROUP;
	if constexpr (One) {
		if (in_place) qgemv_pairs<Q, SwiGLU, 1>(m, in, ks, accumulate, ma, mb, mc, QIntRows<Q, 1, L>{xq, in, ks});
		else qgemv_pairs<Q, SwiGLU, 1>(m, in, ks, accumulate, ma, mb, mc, QIntRows<Q, 1, L>{qgemv_smem, in, ks});
	} else {
		if (in_place) qgemv_pairs<Q, SwiGLU, G>(m, in, ks, accumulate, ma, mb, mc, QIntRows<Q, G, L>{xq, in, ks});
		else qgemv_pairs<Q, SwiGLU, G>(m, in, ks, accumulate, ma, mb, mc, QIntRows<Q, G, L>{qgemv_smem, in, ks});
	}
}

// qwiden: W [out, in] as bf16 into wb, one unit a thread.
template <typename Q> __device__ void qwiden(bf16_t* wb, const u8* w, const u16* s, int out, int in) {
	const int units = in >> 5;
	FOR_EACH(i, (i64)out * units) {
		const i64 row = i / units;
		const int u = (int)(i % units);
		QUnit v;
		Q::load(w + row * Q::QB * units, s + row * Q::scales(in), u, v);
#pragma unroll
		for (int s2 = 0; s2 < 2; s2++) {
			float q[16];
			Q::run(v, s2, q);
			u32 p[8];
#pragma unroll
			for (int k = 0; k < 8; k++)
				p[k] = (u32)from_f32<bf16_t>(q_value(v, s2, q[2 * k])).bits |
				       (u32)from_f32<bf16_t>(q_value(v, s2, q[2 * k + 1])).bits << 16;
			uint4* dst = reinterpret_cast<uint4*>(wb + row * in + Q::pos(u, s2));
			dst[0] = uint4{p[0], p[1], p[2], p[3]};
			dst[1] = uint4{p[4], p[5], p[6], p[7]};
		}
	}
}

// qembed: out[t] = W[ids[t]] as float32, block t; zeros for an id outside
// [0, vocab).
template <typename Q> __device__ void qembed(float* out, const u8* w, const u16* s, const int* ids, int in, int vocab) {
	const int units = in >> 5;
	const int id = ids[blockIdx.x];
	float* o = out + (i64)blockIdx.x * in;
	for (int u = threadIdx.x; u < units; u += blockDim.x) {
		QUnit v;
		if (id >= 0 && id < vocab) Q::load(w + (i64)id * Q::QB * units, s + (i64)id * Q::scales(in), u, v);
#pragma unroll
		for (int s2 = 0; s2 < 2; s2++) {
			float q[16];
			if (id >= 0 && id < vocab) Q::run(v, s2, q);
			float* d = o + Q::pos(u, s2);
#pragma unroll
			for (int k = 0; k < 16; k++) d[k] = id >= 0 && id < vocab ? q_value(v, s2, q[k]) : 0.f;
		}
	}
}

// moe_qgemv: moe_gemv (gemv.cu) over compact experts, a decode step's
// tiles of at most GEMV_MAX_ROWS rows: one warp per output of one tile's
// expert, each lane a unit at a time, the tile's rows of x read in place;
// a warp sum finishes each output.
//
//	x: [rows, in] float32   w, s: [n_experts] body and scale-plane addresses
//	bias: [n_experts] pointers to [out] float32 (bias null, or an entry null: none)
//	tiles: [n_tiles][3] int: expert, first row, rows (1..GEMV_MAX_ROWS)   y: [rows, out] float32
//
// Launch: grid (ceil(out/GEMV_WARPS), n_tiles), block 32·GEMV_WARPS.
template <typename Q>
__device__ __forceinline__ void moe_qgemv(float* y, const float* x, const u8* const* w, const u16* const* s,
                                          const float* const* bias, const int* tiles, int in, int out) {
	const int* tile = tiles + 3 * (i64)blockIdx.y;
	const int e = tile[0], r0 = tile[1], nr = tile[2];
	const int lane = threadIdx.x & 31;
	const int o = blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
	if (o >= out) return; // a whole warp: o is the warp's
	const int units = in >> 5;
	const u8* wr = w[e] + (i64)o * Q::QB * units;
	const u16* sr = s[e] + (i64)o * Q::scales(in);
	const float* xr = x + (i64)r0 * in;
	float acc[GEMV_MAX_ROWS];
#pragma unroll
	for (int r = 0; r < GEMV_MAX_ROWS; r++) acc[r] = 0.f;
#pragma unroll 2
	for (int u = lane; u < units; u += 32) {
		QUnit v;
		Q::load(wr, sr, u, v);
#pragma unroll
		for (int h = 0; h < 2; h++) {
			float q[16];
			Q::run(v, h, q);
			const int at = Q::pos(u, h);
#pragma unroll
			for (int r = 0; r < GEMV_MAX_ROWS; r++) {
				if (r < nr) {
					float xv[16];
					qgemv_x16(xr + (i64)r * in + at, xv);
					float d = 0.f, sx = 0.f;
#pragma unroll
					for (int k = 0; k < 16; k++) {
						d += q[k] * xv[k];
						if (Q::mins) sx += xv[k];
					}
					acc[r] += v.a[h] * d - (Q::mins ? v.b[h] * sx : 0.f);
				}
			}
		}
	}
	const float* be = bias != 0 ? bias[e] : 0;
	const float b = be != 0 ? be[o] : 0.f;
#pragma unroll
	for (int r = 0; r < GEMV_MAX_ROWS; r++) {
		if (r < nr) { // nr is the block's: every lane takes part in the sum
			const float sum = warp_sum(acc[r]);
			if (lane == 0) y[(i64)(r0 + r) * out + o] = sum + b;
		}
	}
}

// QGEMV_KERNEL defines one qgemv-shaped kernel: fn<Q, SwiGLU>, at least
// blocks blocks resident per SM.
#define QGEMV_KERNEL(kname, fn, Q, SwiGLU, blocks)                                                                 \
	extern "C" __global__ void __launch_bounds__(32 * GEMV_WARPS, blocks) kname(QGEMV_PARAMS) {                     \
		fn<Q, SwiGLU>(x, norm, eps, mode, staged, accumulate, m, in, ks, y0, w0, s0, b0, out0, y1, w1, s1, b1, out1, \
		              y2, w2, s2, b2, out2);                                                                        \
	}

// QGEMV_INT_KERNEL defines qgemv_int<Q, SwiGLU, One, L> as kname, four
// blocks resident per SM.
#define QGEMV_INT_KERNEL(kname, Q, SwiGLU, One, L)                                                                 \
	extern "C" __global__ void __launch_bounds__(32 * GEMV_WARPS, 4) kname(QGEMV_INT_PARAMS) {                      \
		qgemv_int<Q, SwiGLU, One, L>(x, norm, eps, mode, staged, accumulate, m, in, ks, y0, w0, s0, b0, out0, y1, w1, \
		                             s1, b1, out1, y2, w2, s2, b2, out2, xq);                                       \
	}

// QUANT_INT_KERNELS defines the integer path's kernels for L limbs:
// qgemv_int_l<L>_<name> and the others (kernels.decl).
#define QUANT_INT_KERNELS(name, Q, L)                                                                               \
	QGEMV_INT_KERNEL(qgemv_int_l##L##_##name, Q, false, false, L)                                                   \
	QGEMV_INT_KERNEL(qgemv_swiglu_int_l##L##_##name, Q, true, false, L)                                             \
	QGEMV_INT_KERNEL(qgemv_int_1_l##L##_##name, Q, false, true, L)                                                  \
	QGEMV_INT_KERNEL(qgemv_swiglu_int_1_l##L##_##name, Q, true, true, L)                                            \
	extern "C" __global__ void __launch_bounds__(32 * GEMV_WARPS)                                                   \
	    qquant_x_l##L##_##name(unsigned char* xq, const float* x, const float* norm, float eps, int mode, int m,     \
	                           int in) {                                                                            \
		qquant_x<Q, L>(xq, x, norm, eps, mode, m, in);                                                              \
	}

#define QUANT_KERNELS(name, Q)                                                                                      \
	QGEMV_KERNEL(qgemv_##name, qgemv, Q, false, 2)                                                                  \
	QGEMV_KERNEL(qgemv_swiglu_##name, qgemv, Q, true, 2)                                                            \
	QUANT_INT_KERNELS(name, Q, 1)                                                                                   \
	QUANT_INT_KERNELS(name, Q, 2)                                                                                   \
	QUANT_INT_KERNELS(name, Q, 3)                                                                                   \
	extern "C" __global__ void qwiden_bf16_##name(bf16_t* wb, const u8* w, const u16* s, int out, int in) {        \
		qwiden<Q>(wb, w, s, out, in);                                                                               \
	}                                                                                                               \
	extern "C" __global__ void qembed_##name(float* out, const u8* w, const u16* s, const int* ids, int in,         \
	                                         int vocab) {                                                           \
		qembed<Q>(out, w, s, ids, in, vocab);                                                                       \
	}                                                                                                               \
	extern "C" __global__ void __launch_bounds__(32 * GEMV_WARPS)                                                   \
	    moe_qgemv_##name(float* y, const float* x, const u8* const* w, const u16* const* s,                         \
	                     const float* const* bias, const int* tiles, int in, int out) {                             \
		moe_qgemv<Q>(y, x, w, s, bias, tiles, in, out);                                                             \
	}
QUANT_KERNELS(q8_0, Q8_0)
QUANT_KERNELS(q4_k, Q4_K)
QUANT_KERNELS(q5_k, Q5_K)
QUANT_KERNELS(q6_k, Q6_K)
QUANT_KERNELS(mxfp4, MXFP4)
QUANT_KERNELS(awq4_g32, AWQ4<32>)
QUANT_KERNELS(awq4_g64, AWQ4<64>)
QUANT_KERNELS(awq4_g128, AWQ4<128>)
