// The integer decode kernels of device/cuda/kernels/quant.cu on the CPU
// (run.sh): for one format (FMT), qquant_x's bytes against the Go
// statement's (quant_int_test.go's qiBytes), qgemv_int_l<LIMBS>_<q>'s products
// for 1 to 32 rows of x with and without the RMSNorm, ks 1 and 2, by
// each block's own quantisation, qquant_x's rows in shared memory and in
// place (bit for bit alike), against a float64 reference, and
// qgemv_swiglu_int_l<LIMBS>_<q> likewise. Inputs: TestQuantEmuDump's file.
// EMU_MS=m runs one row count; EMU_QGRID=n gives qquant_x n blocks a
// row (any count writes the same bytes).
#include "emu.h"
#include "common.cuh"
#include "quant.cu"
#include <cstdio>
#include <fstream>
#include <string>
#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#define STR2(a) #a
#define STR(a) STR2(a)
// a kernel of LIMBS limbs for FMT: KNAME(qgemv_int_l) is qgemv_int_l3_q4_k
#define KNAME(pre) CAT(CAT(CAT(pre, LIMBS), _), FMT)

struct Mat {
	int out;
	std::vector<unsigned char> body, scales;
	std::vector<float> w, bias;
};
static std::vector<unsigned char> file;
static size_t off;
template <typename T> T rd() { T v; memcpy(&v, &file[off], sizeof v); off += sizeof v; return v; }
static void rdbytes(void* p, size_t n) { memcpy(p, &file[off], n); off += n; }
static int fails;
#define CHECK(c, ...) do { if (!(c)) { fails++; if (fails < 20) { printf(__VA_ARGS__); printf("\n"); } } } while (0)

int main(int argc, char** argv) {
	std::string name = STR(FMT);
	if (argc < 2) {
		fprintf(stderr, "usage: %s DIR (TestQuantEmuDump's files)\n", argv[0]);
		return 2;
	}
	std::ifstream f(std::string(argv[1]) + "/" + name + ".bin", std::ios::binary);
	if (!f) {
		fprintf(stderr, "no %s/%s.bin\n", argv[1], name.c_str());
		return 2;
	}
	file.assign(std::istreambuf_iterator<char>(f), {});
	const int in = rd<int>(), xrows = rd<int>();
	Mat mats[5];
	for (auto& m : mats) {
		m.out = rd<int>();
		m.body.resize(rd<int>()); rdbytes(m.body.data(), m.body.size());
		m.scales.resize(rd<int>()); rdbytes(m.scales.data(), m.scales.size());
		m.scales.resize(m.scales.size() + 16);
		m.w.resize((size_t)m.out * in); rdbytes(m.w.data(), 4 * m.w.size());
		m.bias.resize(m.out); rdbytes(m.bias.data(), 4 * m.out);
	}
	std::vector<float> x((size_t)xrows * in), norm(in);
	rdbytes(x.data(), 4 * x.size());
	rdbytes(norm.data(), 4 * in);
	const int rb = qi_row_bytes(in / 32, LIMBS);
	std::vector<unsigned char> qref((size_t)xrows * rb);
	rdbytes(qref.data(), qref.size());
	const float eps = 1e-5f;
	std::vector<int> ms = {1, 2, 3, 4, 5, 8, 13, 16, 32};
	if (const char* e = getenv("EMU_MS")) ms = {atoi(e)};
	for (int m : ms) {
		for (int mode = 0; mode < 2; mode++) {
			// reference x (normalised in double)
			std::vector<double> xr((size_t)m * in);
			for (int r = 0; r < m; r++) {
				double ss = 0;
				for (int i = 0; i < in; i++) ss += (double)x[r * in + i] * x[r * in + i];
				double inv = 1 / sqrt(ss / in + eps);
				for (int i = 0; i < in; i++) xr[r * in + i] = mode ? x[r * in + i] * inv * norm[i] : x[r * in + i];
			}
			// Below three limbs, x_i is staged within D <= 2^(2−8L) of its
			// unit's largest magnitude (quant_int_test.go's qiBound), here
			// taken over the whole row: lim[r]·Σ|w| bounds the staging's
			// part of the error.
			std::vector<double> lim(m, 0.0);
			for (int r = 0; r < m && LIMBS < 3; r++) {
				for (int i = 0; i < in; i++) lim[r] = std::max(lim[r], fabs(xr[r * in + i]) * (1 + 0x1p-20));
				lim[r] = ldexp(lim[r], 2 - 8 * LIMBS);
			}
			auto ref = [&](const Mat& M, int r, int o, double& mag, double* bound = nullptr) {
				double s = M.bias[o], aw = 0;
				mag = fabs(M.bias[o]);
				for (int i = 0; i < in; i++) {
					s += (double)M.w[(size_t)o * in + i] * xr[r * in + i];
					mag += fabs((double)M.w[(size_t)o * in + i] * xr[r * in + i]);
					aw += fabs((double)M.w[(size_t)o * in + i]);
				}
				if (bound) *bound = lim[r] * aw;
				return s;
			};
			// qquant_x
			std::vector<unsigned char> xq((size_t)m * rb + 64, 0x5a);
			unsigned qgrid = (in / 32 + 31) / 32;
			if (const char* e = getenv("EMU_QGRID")) qgrid = atoi(e);
			emu_launch({qgrid, (unsigned)m, 1}, 256, 0, [&] {
				KNAME(qquant_x_l)(xq.data(), x.data(), norm.data(), eps, mode, m, in);
			});
			if (mode == 0) CHECK(memcmp(xq.data(), qref.data(), (size_t)m * rb) == 0, "%s m=%d: qquant_x bytes differ from the Go statement", name.c_str(), m);
			for (int ks : {1, 2}) {
				std::vector<float> ys[3][3];
				for (int path = 0; path < 3; path++) { // legacy, preq staged, preq in place
					for (int i = 0; i < 3; i++) ys[path][i].assign((size_t)m * mats[i].out, 1.f);
					const unsigned char* q = path == 0 ? nullptr : xq.data();
					int staged = path == 2 ? 0 : 1;
					int smem = staged ? m * rb : 0;
					emu_launch({3, 1, 1}, 256, smem, [&] {
						KNAME(qgemv_int_l)(x.data(), norm.data(), eps, mode, staged, 1, m, in, ks,
							ys[path][0].data(), mats[0].body.data(), (const u16*)mats[0].scales.data(), nullptr, mats[0].out,
							ys[path][1].data(), mats[1].body.data(), (const u16*)mats[1].scales.data(), mats[1].bias.data(), mats[1].out,
							ys[path][2].data(), mats[2].body.data(), (const u16*)mats[2].scales.data(), nullptr, mats[2].out, q);
					});
				}
				for (int i = 0; i < 3; i++) {
					CHECK(memcmp(ys[0][i].data(), ys[1][i].data(), 4 * ys[0][i].size()) == 0, "%s m=%d mode=%d ks=%d mat %d: legacy and preq differ", name.c_str(), m, mode, ks, i);
					CHECK(memcmp(ys[1][i].data(), ys[2][i].data(), 4 * ys[0][i].size()) == 0, "%s m=%d mode=%d ks=%d mat %d: preq staged and in place differ", name.c_str(), m, mode, ks, i);
					double worst = 0;
					for (int r = 0; r < m; r++)
						for (int o = 0; o < mats[i].out; o++) {
							double mag, bound;
							Mat tmp = mats[i];
							if (i != 1) std::fill(tmp.bias.begin(), tmp.bias.end(), 0.f);
							double want = 1 + ref(tmp, r, o, mag, &bound);
							double d = fabs(ys[1][i][(size_t)r * mats[i].out + o] - want);
							worst = std::max(worst, d / (mag + 1));
							CHECK(d <= 2e-5 * (mag + 1) + bound, "%s m=%d mode=%d ks=%d mat %d y[%d][%d] = %g want %g", name.c_str(), m, mode, ks, i, r, o, ys[1][i][(size_t)r * mats[i].out + o], want);
						}
				}
			}
			if (mode == 1) {
				int inter = mats[3].out;
				int ks = 1;
				std::vector<float> hs[3];
				for (int path = 0; path < 3; path++) {
					hs[path].assign((size_t)m * inter, -7.f);
					const unsigned char* q = path == 0 ? nullptr : xq.data();
					int staged = path == 2 ? 0 : 1;
					emu_launch({2, 1, 1}, 256, staged ? m * rb : 0, [&] {
						KNAME(qgemv_swiglu_int_l)(x.data(), norm.data(), eps, 1, staged, 0, m, in, ks,
							hs[path].data(), mats[3].body.data(), (const u16*)mats[3].scales.data(), mats[3].bias.data(), inter,
							nullptr, mats[4].body.data(), (const u16*)mats[4].scales.data(), nullptr, inter,
							nullptr, nullptr, nullptr, nullptr, 0, q);
					});
				}
				CHECK(memcmp(hs[0].data(), hs[1].data(), 4 * hs[0].size()) == 0, "%s m=%d swiglu: legacy and preq differ", name.c_str(), m);
				CHECK(memcmp(hs[1].data(), hs[2].data(), 4 * hs[0].size()) == 0, "%s m=%d swiglu: staged and in place differ", name.c_str(), m);
				for (int r = 0; r < m; r++)
					for (int o = 0; o < inter; o++) {
						double mg, mu, bg, bu;
						double g = ref(mats[3], r, o, mg, &bg), u = ref(mats[4], r, o, mu, &bu);
						double want = g / (1 + exp(-g)) * u;
						double got = hs[1][(size_t)r * inter + o];
						// silu is 1.1-Lipschitz: gate's and up's staging bounds carried
						double carried = 1.1 * bg * (fabs(u) + bu) + fabs(g / (1 + exp(-g))) * bu;
						CHECK(fabs(got - want) <= 1e-4 * (mg + 1) * (mu + 1) + carried, "%s m=%d swiglu h[%d][%d] = %g want %g", name.c_str(), m, r, o, got, want);
					}
			}
		}
	}
	printf("%s: %d failures\n", name.c_str(), fails);
	return fails != 0;
}
