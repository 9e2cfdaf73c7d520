/* Vectorised CPU kernel bodies, written once with GCC vector extensions and compiled once per
 * instruction set: kern_avx512.c, kern_avx2.c and kern_generic.c each set RG_VW (floats per
 * vector) and RG_ISA, switch the target with `#pragma GCC target`, and include this file, which
 * defines the table `rg_cpu_kern_<RG_ISA>`. ops_cpu.c picks a table at run time from cpuid
 * (cpu_kern.h). Every body has the float32 semantics of its rg_cpu_* caller in ops_cpu.c;
 * reductions run in lanes and are summed in a fixed order, so results are deterministic for a
 * given instruction set. No function here allocates or checks shapes: ops_cpu.c does both. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ops/cpu/cpu_kern.h"

#define VW RG_VW
#define RG_CAT2(a, b) a##b
#define RG_CAT(a, b) RG_CAT2(a, b)
#define KNAME(n) RG_CAT(n##_, RG_ISA)

typedef float vf __attribute__((vector_size(VW * 4)));
typedef int32_t vi __attribute__((vector_size(VW * 4)));
typedef float vf_u __attribute__((vector_size(VW * 4), aligned(4), may_alias));

static inline vf vld(const float *p)
{
	return *(const vf_u *)p;
}

static inline void vst(float *p, vf v)
{
	*(vf_u *)p = v;
}

/* every lane x (not (vf){0} + x, which turns -0.f into +0.f) */
static inline vf vbc(float x)
{
	vf v;

	for (int i = 0; i < VW; i++)
		v[i] = x;
	return v;
}

/* m ? a : b, m a lane mask of all ones or zeros */
static inline vf vsel(vi m, vf a, vf b)
{
	return (vf)(((vi)a & m) | ((vi)b & ~m));
}

static inline vf vmax(vf a, vf b)
{
	return vsel(a > b, a, b);
}

static inline float hsum(vf v)
{
	float s = 0.f;

	for (int i = 0; i < VW; i++)
		s += v[i];
	return s;
}

static inline float hmax(vf v)
{
	float m = v[0];

	for (int i = 1; i < VW; i++)
		m = v[i] > m ? v[i] : m;
	return m;
}

/* e^x, Cephes expf: x = n ln2 + r with |r| <= ln2/2, a degree-6 polynomial for e^r, 2^n put in
 * the exponent bits. Relative error about 2 ulp on [-87.3, 88.7]; below -87.3 (and -inf) gives
 * exactly 0, above 88.7 the value at 88.7. */
static inline vf vexp(vf x)
{
	const vi keep = x >= vbc(-87.3f);
	vf xc = vmax(vsel(x < vbc(88.7f), x, vbc(88.7f)), vbc(-87.3f));
	const vf magic = vbc(12582912.f); /* 1.5 * 2^23: adding rounds to an integer */
	vf n = (xc * vbc(1.44269504088896341f) + magic) - magic;
	vf r = xc - n * vbc(0.693359375f) - n * vbc(-2.12194440e-4f);
	vf r2 = r * r;
	vf p = vbc(1.9875691500E-4f);
	vi e;

	p = p * r + vbc(1.3981999507E-3f);
	p = p * r + vbc(8.3334519073E-3f);
	p = p * r + vbc(4.1665795894E-2f);
	p = p * r + vbc(1.6666665459E-1f);
	p = p * r + vbc(5.0000001201E-1f);
	p = p * r2 + r + vbc(1.f);
	e = (__builtin_convertvector(n, vi) + 127) << 23;
	return (vf)((vi)(p * (vf)e) & keep);
}

/* erf(x), Abramowitz & Stegun 7.1.26 (max absolute error 1.5e-7) on |x|, sign restored. */
static inline vf verf(vf x)
{
	const vi sign = (vi)x & (vi)vbc(-0.f);
	vf a = (vf)((vi)x & ~(vi)vbc(-0.f));
	vf t = vbc(1.f) / (vbc(1.f) + vbc(0.3275911f) * a);
	vf y = vbc(1.061405429f);

	y = y * t + vbc(-1.453152027f);
	y = y * t + vbc(1.421413741f);
	y = y * t + vbc(-0.284496736f);
	y = y * t + vbc(0.254829592f);
	y = vbc(1.f) - y * t * vexp(-a * a);
	return (vf)((vi)y | sign);
}

static inline vf vact(vf v, rg_act act)
{
	switch (act) {
	case RG_ACT_NONE:
		return v;
	case RG_ACT_GELU:
		return vbc(0.5f) * v * (vbc(1.f) + verf(v * vbc(0.70710678118654752f)));
	case RG_ACT_GELU_NEW: {
		/* tanh(u) = 1 - 2 / (e^{2u} + 1) */
		vf u = vbc(0.79788456080286536f) * (v + vbc(0.044715f) * v * v * v);
		vf th = vbc(1.f) - vbc(2.f) / (vexp(vbc(2.f) * u) + vbc(1.f));

		return vbc(0.5f) * v * (vbc(1.f) + th);
	}
	case RG_ACT_RELU:
		return vmax(v, vbc(0.f));
	case RG_ACT_SILU:
		return v / (vbc(1.f) + vexp(vbc(0.f) - v));
	}
	return v;
}

/* x (rows, cols) with row stride ldx, in place: act(x + bias); bias (cols) or NULL. */
static void KNAME(bias_act_rows)(float *x, size_t ldx, const float *bias, int rows, int cols,
				 rg_act act)
{
	for (int r = 0; r < rows; r++) {
		float *row = x + (size_t)r * ldx;
		int i = 0;

		for (; i + VW <= cols; i += VW) {
			vf v = vld(row + i);

			if (bias)
				v += vld(bias + i);
			vst(row + i, vact(v, act));
		}
		for (; i < cols; i++)
			row[i] = rg_act_apply(row[i] + (bias ? bias[i] : 0.f), act);
	}
}

/* LayerNorm of the row v = a + b + c (b, c may be NULL) into out (may alias a or c):
 * two-pass mean and biased variance in float32, then (v - mean) * rstd * gamma + beta. */
static void KNAME(add_ln_row)(const float *a, const float *b, const float *c, const float *gamma,
			      const float *beta, float eps, int n, float *out)
{
	vf acc = vbc(0.f);
	float mean, var, rstd, s = 0.f;
	int i = 0;

	for (; i + VW <= n; i += VW) {
		vf v = vld(a + i);

		if (b)
			v += vld(b + i);
		if (c)
			v += vld(c + i);
		vst(out + i, v);
		acc += v;
	}
	for (; i < n; i++) {
		out[i] = a[i] + (b ? b[i] : 0.f) + (c ? c[i] : 0.f);
		s += out[i];
	}
	mean = (hsum(acc) + s) / (float)n;
	acc = vbc(0.f);
	s = 0.f;
	for (i = 0; i + VW <= n; i += VW) {
		vf d = vld(out + i) - vbc(mean);
		acc += d * d;
	}
	for (; i < n; i++)
		s += (out[i] - mean) * (out[i] - mean);
	var = (hsum(acc) + s) / (float)n;
	rstd = 1.f / sqrtf(var + eps);
	for (i = 0; i + VW <= n; i += VW)
		vst(out + i, (vld(out + i) - vbc(mean)) * vbc(rstd) * vld(gamma + i) + vld(beta + i));
	for (; i < n; i++)
		out[i] = (out[i] - mean) * rstd * gamma[i] + beta[i];
}

/* Pool L >= 1 rows of x (row stride H) into o (H): mean, first row or max; then L2-normalise
 * when asked (x / max(||x||, 1e-12), torch.nn.functional.normalize). */
static void KNAME(pool_seq)(const float *x, int L, int H, rg_pooling mode, bool normalize,
			    float *o)
{
	int i;

	for (i = 0; i < H; i++)
		o[i] = x[i];
	if (mode == RG_POOL_MEAN || mode == RG_POOL_MAX) {
		for (int t = 1; t < L; t++) {
			const float *xr = x + (size_t)t * H;

			for (i = 0; i + VW <= H; i += VW)
				vst(o + i, mode == RG_POOL_MEAN ? vld(o + i) + vld(xr + i)
								: vmax(vld(o + i), vld(xr + i)));
			for (; i < H; i++)
				o[i] = mode == RG_POOL_MEAN ? o[i] + xr[i] : fmaxf(o[i], xr[i]);
		}
		if (mode == RG_POOL_MEAN)
			for (i = 0; i < H; i++)
				o[i] /= (float)L;
	}
	if (normalize) {
		vf acc = vbc(0.f);
		float ss = 0.f, inv;

		for (i = 0; i + VW <= H; i += VW)
			acc += vld(o + i) * vld(o + i);
		for (; i < H; i++)
			ss += o[i] * o[i];
		inv = 1.f / fmaxf(sqrtf(hsum(acc) + ss), 1e-12f);
		for (i = 0; i < H; i++)
			o[i] *= inv;
	}
}

/* Row softmax in place for attention probabilities: s (Lp floats, Lp a multiple of VW) holds
 * the scores of keys [0, L); keys past L and, with seg, keys whose segment differs from `me` or
 * is negative get probability 0. A row with no visible key becomes zeros. */
static void KNAME(softmax_row)(float *s, int L, int Lp, const int32_t *seg, int32_t me)
{
	vf m = vbc(-INFINITY), sum = vbc(0.f);
	float mx, inv;
	int j;

	for (j = L; j < Lp; j++)
		s[j] = -INFINITY;
	if (seg)
		for (j = 0; j < L; j++)
			if (seg[j] < 0 || seg[j] != me)
				s[j] = -INFINITY;
	for (j = 0; j < Lp; j += VW)
		m = vmax(m, vld(s + j));
	mx = hmax(m);
	if (mx == -INFINITY) {
		for (j = 0; j < Lp; j++)
			s[j] = 0.f;
		return;
	}
	for (j = 0; j < Lp; j += VW) {
		vf e = vexp(vld(s + j) - vbc(mx));

		vst(s + j, e);
		sum += e;
	}
	inv = 1.f / hsum(sum);
	for (j = 0; j < Lp; j += VW)
		vst(s + j, vld(s + j) * vbc(inv));
}

/* ---- attention's two small GEMMs per (query block, head) ---------------------------------
 * Register tiles of AR query rows x up to 4 vectors, kept in registers over the whole reduction
 * (head_dim for the scores, the keys for the output): AR x 4 accumulators (16 of AVX-512's 32
 * registers; 8 of AVX2's 16). Replaces two OpenBLAS calls whose packing cost more than the
 * arithmetic at these shapes (e.g. 126 x 126 x 32). */
#define AR (VW == 16 ? 4 : 2)
#define AI static inline __attribute__((always_inline))

/* every lane x, as one broadcast (x - +0 is x for every x, -0 and NaN included; vbc's lane loop
 * becomes masked inserts in these unrolled tiles) */
AI vf vsplat(float x)
{
	return x - (vf){0};
}

/* o (R rows of stride ldo, C vectors) = scale * a (R rows of stride lda, columns [0, K)) .
 * b (K rows of stride ldb, C vectors): the register tile of both attention products (QK^T
 * against the transposed keys, PV against the values) */
AI void mm_tile(const float *a, size_t lda, const float *b, size_t ldb, int K, vf sv, float *o,
		size_t ldo, const int R, const int C)
{
	vf acc[4][4];

#pragma GCC unroll 4
	for (int r = 0; r < R; r++)
#pragma GCC unroll 4
		for (int c = 0; c < C; c++)
			acc[r][c] = (vf){0};
	for (int k = 0; k < K; k++) {
		vf bv[4];

#pragma GCC unroll 4
		for (int c = 0; c < C; c++)
			bv[c] = vld(b + (size_t)k * ldb + c * VW);
#pragma GCC unroll 4
		for (int r = 0; r < R; r++) {
			const vf av = vsplat(a[(size_t)r * lda + k]);

#pragma GCC unroll 4
			for (int c = 0; c < C; c++)
				acc[r][c] += av * bv[c];
		}
	}
#pragma GCC unroll 4
	for (int r = 0; r < R; r++)
#pragma GCC unroll 4
		for (int c = 0; c < C; c++)
			vst(o + (size_t)r * ldo + c * VW, acc[r][c] * sv);
}

AI void qk_rows(const float *q, size_t ldq, const float *kt, int Lp, int hd, vf sv, float *s,
		const int R)
{
	int j = 0;

	for (; j + 4 * VW <= Lp; j += 4 * VW)
		mm_tile(q, ldq, kt + j, (size_t)Lp, hd, sv, s + j, (size_t)Lp, R, 4);
	for (; j < Lp; j += VW)
		mm_tile(q, ldq, kt + j, (size_t)Lp, hd, sv, s + j, (size_t)Lp, R, 1);
}

static void KNAME(attn_qk)(const float *Q, size_t ldq, const float *K, size_t ldk, int nq, int L,
			   int Lp, int hd, float scale, float *kt, float *S)
{
	const vf sv = vbc(scale);
	int i = 0;

	for (int j = 0; j < L; j++) /* kt (hd, Lp) = K^T; zero keys past L */
		for (int d = 0; d < hd; d++)
			kt[(size_t)d * Lp + j] = K[(size_t)j * ldk + d];
	for (int d = 0; d < hd; d++)
		for (int j = L; j < Lp; j++)
			kt[(size_t)d * Lp + j] = 0.f;
	for (; i + AR <= nq; i += AR)
		qk_rows(Q + (size_t)i * ldq, ldq, kt, Lp, hd, sv, S + (size_t)i * Lp, AR);
	for (; i < nq; i++)
		qk_rows(Q + (size_t)i * ldq, ldq, kt, Lp, hd, sv, S + (size_t)i * Lp, 1);
}

AI void pv_rows(const float *p, int Lp, const float *v, size_t ldv, int L, int hd, float *o,
		size_t ldo, const int R)
{
	const vf one = vsplat(1.f); /* acc * 1 is acc, bit for bit */
	int c = 0;

	for (; c + 4 * VW <= hd; c += 4 * VW)
		mm_tile(p, (size_t)Lp, v + c, ldv, L, one, o + c, ldo, R, 4);
	for (; c + 2 * VW <= hd; c += 2 * VW)
		mm_tile(p, (size_t)Lp, v + c, ldv, L, one, o + c, ldo, R, 2);
	for (; c < hd; c += VW)
		mm_tile(p, (size_t)Lp, v + c, ldv, L, one, o + c, ldo, R, 1);
}

static void KNAME(attn_pv)(const float *P, int Lp, const float *V, size_t ldv, int nq, int L,
			   int hd, float *O, size_t ldo)
{
	int i = 0;

	for (; i + AR <= nq; i += AR)
		pv_rows(P + (size_t)i * Lp, Lp, V, ldv, L, hd, O + (size_t)i * ldo, ldo, AR);
	for (; i < nq; i++)
		pv_rows(P + (size_t)i * Lp, Lp, V, ldv, L, hd, O + (size_t)i * ldo, ldo, 1);
}

/* f32 -> bf16 with round to nearest even; a NaN stays a NaN (quiet bit set). Vector body, then a
 * scalar tail with the same formula. */
static inline uint32_t bf16_bits(uint32_t u)
{
	const uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;

	return (u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : r;
}

static void KNAME(f32_to_bf16)(const float *x, uint16_t *out, size_t n)
{
	typedef uint32_t vu __attribute__((vector_size(VW * 4)));
	typedef uint32_t vu_u __attribute__((vector_size(VW * 4), aligned(4), may_alias));
	size_t i = 0;

	for (; i + VW <= n; i += VW) {
		const vu u = *(const vu_u *)(x + i);
		const vu r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
		const vu nan = (vu)((u & 0x7fffffffu) > 0x7f800000u);
		const vu v = (((u >> 16) | 0x40u) & nan) | (r & ~nan);

		for (int k = 0; k < VW; k++)
			out[i + (size_t)k] = (uint16_t)v[k];
	}
	for (; i < n; i++) {
		uint32_t u;

		memcpy(&u, x + i, sizeof(u));
		out[i] = (uint16_t)bf16_bits(u);
	}
}

/* Small-M GEMV over row-major W (N, K) (nn.Linear's layout): out[m][n] = A[m] . W[n] for M <= 4
 * rows of A, rows [n0, n1) of W. Four rows of W per pass, so each A vector loaded serves four
 * weight rows; W is read once, in order (the decode step's LM head: memory-bound). */
AI void gemv_rm_m(const int M, const float *A, size_t lda, const float *W, size_t ldw, int K,
		  int n0, int n1, float *out, size_t ldo)
{
	const int kv = K / VW * VW;
	int n = n0;

	for (; n + 4 <= n1; n += 4) {
		const float *w0 = W + (size_t)n * ldw, *w1 = w0 + ldw, *w2 = w1 + ldw, *w3 = w2 + ldw;
		vf acc[4][4];

		for (int m = 0; m < M; m++)
			for (int r = 0; r < 4; r++)
				acc[m][r] = (vf){0};
		for (int k = 0; k < kv; k += VW) {
			const vf x0 = vld(w0 + k), x1 = vld(w1 + k), x2 = vld(w2 + k), x3 = vld(w3 + k);

			if ((k & 15) == 0 && n + 8 <= n1) { /* the next four rows, a line at a time */
				__builtin_prefetch(w0 + 4 * ldw + k, 0, 0);
				__builtin_prefetch(w1 + 4 * ldw + k, 0, 0);
				__builtin_prefetch(w2 + 4 * ldw + k, 0, 0);
				__builtin_prefetch(w3 + 4 * ldw + k, 0, 0);
			}

#pragma GCC unroll 4
			for (int m = 0; m < M; m++) {
				const vf a = vld(A + (size_t)m * lda + k);

				acc[m][0] += x0 * a;
				acc[m][1] += x1 * a;
				acc[m][2] += x2 * a;
				acc[m][3] += x3 * a;
			}
		}
		for (int m = 0; m < M; m++) {
			const float *a = A + (size_t)m * lda;
			float s[4];

			for (int r = 0; r < 4; r++)
				s[r] = hsum(acc[m][r]);
			for (int k = kv; k < K; k++) {
				s[0] += w0[k] * a[k];
				s[1] += w1[k] * a[k];
				s[2] += w2[k] * a[k];
				s[3] += w3[k] * a[k];
			}
			for (int r = 0; r < 4; r++)
				out[(size_t)m * ldo + n + r] = s[r];
		}
	}
	for (; n < n1; n++) {
		const float *w = W + (size_t)n * ldw;

		for (int m = 0; m < M; m++) {
			const float *a = A + (size_t)m * lda;
			vf acc = (vf){0};
			float s;

			for (int k = 0; k < kv; k += VW)
				acc += vld(w + k) * vld(a + k);
			s = hsum(acc);
			for (int k = kv; k < K; k++)
				s += w[k] * a[k];
			out[(size_t)m * ldo + n] = s;
		}
	}
}

static void KNAME(gemv_rm)(const float *A, size_t lda, int M, const float *W, size_t ldw, int K,
			   int n0, int n1, float *out, size_t ldo)
{
	switch (M) {
	case 1: gemv_rm_m(1, A, lda, W, ldw, K, n0, n1, out, ldo); break;
	case 2: gemv_rm_m(2, A, lda, W, ldw, K, n0, n1, out, ldo); break;
	case 3: gemv_rm_m(3, A, lda, W, ldw, K, n0, n1, out, ldo); break;
	default: gemv_rm_m(4, A, lda, W, ldw, K, n0, n1, out, ldo); break;
	}
}

/* Small-M GEMV over one 64-column block of a K-blocked weight (oneDNN's BA<kb>a64b: element
 * (k, c) of the block at (k / kb) * kstride + (k % kb) * 64 + c): out[m][c] = sum_k A[m][k] W(k, c)
 * for M <= 4 rows, c < 64. The block's weights stream once, in order; each weight vector is
 * broadcast-multiplied into M accumulators (no horizontal sums). */
#define GB_V 4 /* vectors per pass: 64, 32 or 16 columns (AVX-512, AVX2, SSE) */
AI void gemv_blk_m(const int M, const float *A, size_t lda, const float *Wb, int K, int kb,
		   size_t kstride, float *out, size_t ldo)
{
	for (int c0 = 0; c0 < 64; c0 += GB_V * VW) {
		vf acc[4][GB_V];

		for (int m = 0; m < M; m++)
			for (int v = 0; v < GB_V; v++)
				acc[m][v] = (vf){0};
		for (int k0 = 0; k0 < K; k0 += kb) {
			const float *wk = Wb + (size_t)(k0 / kb) * kstride + c0;
			const int k1 = k0 + kb < K ? k0 + kb : K;

			for (int k = k0; k < k1; k++, wk += 64) {
				vf w[GB_V];

				if (c0 == 0) /* 16 rows (4 KiB) ahead */
					for (int l = 0; l < 64; l += 16)
						__builtin_prefetch(wk + 16 * 64 + l, 0, 0);

#pragma GCC unroll 4
				for (int v = 0; v < GB_V; v++)
					w[v] = vld(wk + v * VW);
#pragma GCC unroll 4
				for (int m = 0; m < M; m++) {
					const vf a = vsplat(A[(size_t)m * lda + k]);

#pragma GCC unroll 4
					for (int v = 0; v < GB_V; v++)
						acc[m][v] += w[v] * a;
				}
			}
		}
		for (int m = 0; m < M; m++)
			for (int v = 0; v < GB_V; v++)
				vst(out + (size_t)m * ldo + c0 + v * VW, acc[m][v]);
	}
}

static void KNAME(gemv_blk)(const float *A, size_t lda, int M, const float *Wb, int K, int kb,
			    size_t kstride, float *out, size_t ldo)
{
	switch (M) {
	case 1: gemv_blk_m(1, A, lda, Wb, K, kb, kstride, out, ldo); break;
	case 2: gemv_blk_m(2, A, lda, Wb, K, kb, kstride, out, ldo); break;
	case 3: gemv_blk_m(3, A, lda, Wb, K, kb, kstride, out, ldo); break;
	default: gemv_blk_m(4, A, lda, Wb, K, kb, kstride, out, ldo); break;
	}
}

/* Small-M GEMM over one 64-column block of a K-blocked weight (gemv_blk's layout), any M >= 1:
 * out[m][c] = sum_k A[m][k] W(k, c) for m < M, c < 64. Built for one short sentence, whose
 * weights come from DRAM on every forward (BERT-base: 340 MB of fp32 weights against a 32 MiB
 * L3), so the block is read from memory exactly once:
 * - K goes in chunks of GM_KC rows (16 KiB of the block); every group of up to GM_MR rows runs
 *   over a chunk while it is in L1, with GM_MR x 64 columns of accumulators in registers,
 *   written back to out between chunks;
 * - meanwhile the next chunk is prefetched, a share of it at every step of every group, so
 *   the memory stream never waits for the arithmetic. On the 2-core EPYC (Zen 5) the hardware
 *   prefetchers alone left this loop at 12 GB/s; with the prefetches it streams at 32-35 GB/s
 *   (a plain read runs at 40), where oneDNN's brgemm at M = 12 streamed 18-24 GB/s.
 * The prefetches need the block contiguous (kstride == kb * 64: oneDNN's BA16a64b is); they may
 * run past the block's end into the next one of the layout (the next task's weights, or
 * nothing: a prefetch never faults). Rows are split into groups as evenly as possible (M = 32
 * runs 6, 6, 5, 5, 5, 5), because a group of 1-2 rows is bound by its loads, not its FMAs. */
#define GM_MR (VW == 16 ? 6 : 2) /* rows per register tile: 24 of AVX-512's 32 registers */
#define GM_KC 64                 /* K rows per chunk */

AI void gemm_blk_group(const int MR, const float *A, size_t lda, const float *Wb, int kb,
		       size_t kstride, int k0, int k1, bool first, const char *pf, int pstep,
		       float *out, size_t ldo)
{
	for (int c0 = 0; c0 < 64; c0 += GB_V * VW, pf = NULL) {
		vf acc[GM_MR][GB_V];

		for (int m = 0; m < MR; m++)
			for (int v = 0; v < GB_V; v++)
				acc[m][v] = first ? (vf){0} : vld(out + (size_t)m * ldo + c0 + v * VW);
		/* k0 and k1 (unless K) are whole K blocks: walk them block by block */
		for (int kk = k0; kk < k1; kk += kb) {
			const float *wk = Wb + (size_t)(kk / kb) * kstride + c0;
			const float *ak = A + kk;
			const int kn = k1 - kk < kb ? k1 - kk : kb;

			for (int j = 0; j < kn; j++, wk += 64, ak++) {
				vf w[GB_V];

				if (pf) {
					for (int l = 0; l < pstep; l += 64)
						__builtin_prefetch(pf + l, 0, 2);
					pf += pstep;
				}
#pragma GCC unroll 4
				for (int v = 0; v < GB_V; v++)
					w[v] = vld(wk + v * VW);
#pragma GCC unroll 6
				for (int m = 0; m < MR; m++) {
					const vf a = vsplat(ak[(size_t)m * lda]);

#pragma GCC unroll 4
					for (int v = 0; v < GB_V; v++)
						acc[m][v] += w[v] * a;
				}
			}
		}
		for (int m = 0; m < MR; m++)
			for (int v = 0; v < GB_V; v++)
				vst(out + (size_t)m * ldo + c0 + v * VW, acc[m][v]);
	}
}

static void KNAME(gemm_blk)(const float *A, size_t lda, int M, const float *Wb, int K, int kb,
			    size_t kstride, float *out, size_t ldo)
{
	const int G = (M + GM_MR - 1) / GM_MR;
	const int kc = GM_KC > kb ? GM_KC / kb * kb : kb; /* whole K blocks per chunk */
	const bool contig = kstride == (size_t)kb * 64;
	/* bytes of the next chunk each group prefetches per step (whole lines): the G groups
	 * together cover its kc rows of 256 bytes, a little more when G does not divide 4 */
	const int pstep = (256 / G + 63) / 64 * 64;
	const size_t share = (size_t)kc * 256 / G / 64 * 64;

	for (int k0 = 0; k0 < K; k0 += kc) {
		const int k1 = k0 + kc < K ? k0 + kc : K;
		const char *next = (const char *)(Wb + (size_t)k1 * 64);

		for (int g = 0, m0 = 0; g < G; g++) {
			const int mr = (M - m0) / (G - g); /* even split: the rest over the rest */
			const float *a = A + (size_t)m0 * lda;
			const char *pf = contig ? next + (size_t)g * share : NULL;
			float *o = out + (size_t)m0 * ldo;

			switch (mr) {
#if GM_MR > 2
			case 6: gemm_blk_group(6, a, lda, Wb, kb, kstride, k0, k1, k0 == 0, pf, pstep, o, ldo); break;
			case 5: gemm_blk_group(5, a, lda, Wb, kb, kstride, k0, k1, k0 == 0, pf, pstep, o, ldo); break;
			case 4: gemm_blk_group(4, a, lda, Wb, kb, kstride, k0, k1, k0 == 0, pf, pstep, o, ldo); break;
			case 3: gemm_blk_group(3, a, lda, Wb, kb, kstride, k0, k1, k0 == 0, pf, pstep, o, ldo); break;
#endif
			case 2: gemm_blk_group(2, a, lda, Wb, kb, kstride, k0, k1, k0 == 0, pf, pstep, o, ldo); break;
			default: gemm_blk_group(1, a, lda, Wb, kb, kstride, k0, k1, k0 == 0, pf, pstep, o, ldo); break;
			}
			m0 += mr;
		}
	}
}

/* Prefetch nk rows of hd floats (stride ld) into the cache: the block's rows are strided and
 * were evicted by the step's weight stream, and a dot product per row leaves the out-of-order
 * core too little room to run ahead on its own (measured on the 2-core EPYC: the key loads were
 * most of the attention's time at batch 4, context 32-160). */
AI void prefetch_rows(const float *x, size_t ld, int nk, int hd)
{
	for (int j = 0; j < nk; j++)
		for (int e = 0; e < hd; e += 16)
			__builtin_prefetch(x + (size_t)j * ld + e, 0, 3);
}

/* Paged attention's score rows for one KV head: s[g * lds + j] = scale * q_g . k_j for nq query
 * heads (rows of q, stride hd) against nk keys (rows of k, stride ldk) of one cache block. Each
 * key row is loaded once for every query head of the group (GQA); hd past the last full vector
 * runs a scalar tail. */
static void KNAME(attn_dec_qk)(const float *q, int nq, int hd, const float *k, size_t ldk, int nk,
			       float scale, float *s, size_t lds)
{
	const int hv = hd / VW * VW;

	prefetch_rows(k, ldk, nk, hd);

	for (int j = 0; j < nk; j++) {
		const float *kr = k + (size_t)j * ldk;

		for (int g = 0; g < nq; g++) {
			const float *qr = q + (size_t)g * hd;
			vf a0 = (vf){0}, a1 = (vf){0};
			float acc;
			int e = 0;

			for (; e + 2 * VW <= hv; e += 2 * VW) {
				a0 += vld(qr + e) * vld(kr + e);
				a1 += vld(qr + e + VW) * vld(kr + e + VW);
			}
			for (; e < hv; e += VW)
				a0 += vld(qr + e) * vld(kr + e);
			acc = hsum(a0 + a1);
			for (; e < hd; e++)
				acc += qr[e] * kr[e];
			s[(size_t)g * lds + j] = acc * scale;
		}
	}
}

/* o[g * hd + e] += sum_j p[g * ldp + j] v_j[e] for nq heads over nk value rows (stride ldv) of one
 * cache block: each value row is loaded once for every head of the group. */
static void KNAME(attn_dec_pv)(const float *p, size_t ldp, int nq, const float *v, size_t ldv,
			       int nk, int hd, float *o)
{
	const int hv = hd / VW * VW;

	prefetch_rows(v, ldv, nk, hd);

	for (int g = 0; g < nq; g++) {
		const float *pr = p + (size_t)g * ldp;
		float *orow = o + (size_t)g * hd;
		int e = 0;

		for (; e + 4 * VW <= hv; e += 4 * VW) {
			vf a0 = vld(orow + e), a1 = vld(orow + e + VW);
			vf a2 = vld(orow + e + 2 * VW), a3 = vld(orow + e + 3 * VW);

			for (int j = 0; j < nk; j++) {
				const float *vr = v + (size_t)j * ldv + e;
				const vf pj = vsplat(pr[j]);

				a0 += pj * vld(vr);
				a1 += pj * vld(vr + VW);
				a2 += pj * vld(vr + 2 * VW);
				a3 += pj * vld(vr + 3 * VW);
			}
			vst(orow + e, a0);
			vst(orow + e + VW, a1);
			vst(orow + e + 2 * VW, a2);
			vst(orow + e + 3 * VW, a3);
		}
		for (; e < hv; e += VW) {
			vf a0 = vld(orow + e);

			for (int j = 0; j < nk; j++)
				a0 += vsplat(pr[j]) * vld(v + (size_t)j * ldv + e);
			vst(orow + e, a0);
		}
		for (; e < hd; e++) {
			float a = orow[e];

			for (int j = 0; j < nk; j++)
				a += pr[j] * v[(size_t)j * ldv + e];
			orow[e] = a;
		}
	}
}

/* rows per multi-row quantized dot (cpu_kern.h qrows) */
#ifndef RG_QROWS
#define RG_QROWS 4
#endif
/* the 32-value-block dots' instruction set: the quantizer's unless the file names another */
#ifndef RG_Q32ISA
#define RG_Q32ISA RG_QISA
#endif
const rg_cpu_kern RG_CAT(rg_cpu_kern_, RG_ISA) = {
	.isa = RG_ISA_NAME,
	.vw = VW,
	.qrows = RG_QROWS,
	.bias_act_rows = KNAME(bias_act_rows),
	.add_ln_row = KNAME(add_ln_row),
	.pool_seq = KNAME(pool_seq),
	.softmax_row = KNAME(softmax_row),
	.f32_to_bf16 = KNAME(f32_to_bf16),
	.attn_qk = KNAME(attn_qk),
	.attn_pv = KNAME(attn_pv),
	.gemv_rm = KNAME(gemv_rm),
	.gemv_blk = KNAME(gemv_blk),
	.gemm_blk = KNAME(gemm_blk),
	.attn_dec_qk = KNAME(attn_dec_qk),
	.attn_dec_pv = KNAME(attn_dec_pv),
	.q8_quant_row = RG_CAT(rg_q8_quant_row_, RG_QISA),
	.qdot_q8_0 = RG_CAT(rg_qdot_q8_0_, RG_Q32ISA),
	.qdot_q4_0 = RG_CAT(rg_qdot_q4_0_, RG_Q32ISA),
	.qdot_q4_1 = RG_CAT(rg_qdot_q4_1_, RG_Q32ISA),
	.qdot_q5_0 = RG_CAT(rg_qdot_q5_0_, RG_Q32ISA),
	.qdot_q5_1 = RG_CAT(rg_qdot_q5_1_, RG_Q32ISA),
	.qdot_q4_k = RG_CAT(rg_qdot_q4_k_, RG_KQISA),
	.qdot_q5_k = RG_CAT(rg_qdot_q5_k_, RG_KQISA),
	.qdot_q6_k = RG_CAT(rg_qdot_q6_k_, RG_KQISA),
	.qdotr_q8_0 = RG_CAT(rg_qdotr_q8_0_, RG_Q32ISA),
	.qdotr_q4_0 = RG_CAT(rg_qdotr_q4_0_, RG_Q32ISA),
	.qdotr_q4_1 = RG_CAT(rg_qdotr_q4_1_, RG_Q32ISA),
	.qdotr_q5_0 = RG_CAT(rg_qdotr_q5_0_, RG_Q32ISA),
	.qdotr_q5_1 = RG_CAT(rg_qdotr_q5_1_, RG_Q32ISA),
	.qdotr_q4_k = RG_CAT(rg_qdotr_q4_k_, RG_KQISA),
	.qdotr_q5_k = RG_CAT(rg_qdotr_q5_k_, RG_KQISA),
	.qdotr_q6_k = RG_CAT(rg_qdotr_q6_k_, RG_KQISA),
#ifdef RG_QPACK /* the table reads packed activation pairs (cpu_kern.h rg_q8p) */
	.q8_pack_row = RG_CAT(rg_q8_pack_row_, RG_ISA),
	.qdotp_q8_0 = RG_CAT(rg_qdotp_q8_0_, RG_ISA),
	.qdotp_q4_0 = RG_CAT(rg_qdotp_q4_0_, RG_ISA),
	.qdotp_q4_1 = RG_CAT(rg_qdotp_q4_1_, RG_ISA),
	.qdotp_q5_0 = RG_CAT(rg_qdotp_q5_0_, RG_ISA),
	.qdotp_q5_1 = RG_CAT(rg_qdotp_q5_1_, RG_ISA),
	.qdotp_q4_k = RG_CAT(rg_qdotp_q4_k_, RG_ISA),
	.qdotp_q5_k = RG_CAT(rg_qdotp_q5_k_, RG_ISA),
	.qdotp_q6_k = RG_CAT(rg_qdotp_q6_k_, RG_ISA),
#endif
	.hdot_tile_f16 = RG_CAT(rg_hdot_tile_f16_, RG_ISA),
	.f16_to_f32 = RG_CAT(rg_f16_to_f32_, RG_ISA),
};
