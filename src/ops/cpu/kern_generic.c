/* kern.h compiled for the build's baseline (SSE2 on x86-64; any GCC target): 4 float32 lanes,
 * and the plain C quantized kernels (qweight.h) that the AVX2 ones are tested against. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/safetensors.h"
#include "ops/cpu/cpu_kern.h"

/* Round half to even, as _mm256_cvtps_epi32 does under the default MXCSR. */
void rg_q8_quant_row_generic(const float *x, int K, rg_q8a *out)
{
	for (int b = 0; b < K / RG_QK; b++, x += RG_QK) {
		float amax = 0.f, d, id;
		int sum = 0;

		for (int j = 0; j < RG_QK; j++)
			amax = fmaxf(amax, fabsf(x[j]));
		d = amax / 127.f;
		id = d > 0.f ? 1.f / d : 0.f;
		for (int j = 0; j < RG_QK; j++) {
			int q = (int)nearbyintf(x[j] * id);

			out[b].q[j] = (int8_t)q;
			sum += q;
		}
		out[b].d = d;
		out[b].s = d * (float)sum;
	}
}

/* Every dot is written once, for R activation rows (a + r * lda, r < R) as an always-inlined
 * body with R a constant; the single-row entry point is its R = 1 instance and the multi-row
 * one (rg_qdotr_*) dispatches R = 1..4, so each row goes through the same operations in the
 * same order either way (bit-identical outputs). The weight block is decoded once per block
 * for all R rows. */
#define QAI static inline __attribute__((always_inline))
#define QDOT_ENTRIES(t)                                                                       \
	float rg_qdot_##t##_generic(const void *w, const rg_q8a *a, int nb)                   \
	{                                                                                     \
		float o;                                                                      \
                                                                                              \
		t##_rows(w, a, 0, nb, 1, &o);                                                 \
		return o;                                                                     \
	}                                                                                     \
	void rg_qdotr_##t##_generic(const void *w, const rg_q8a *a, size_t lda, int nb, int R, \
				    float *out)                                               \
	{                                                                                     \
		switch (R) {                                                                  \
		case 1: t##_rows(w, a, lda, nb, 1, out); break;                               \
		case 2: t##_rows(w, a, lda, nb, 2, out); break;                               \
		case 3: t##_rows(w, a, lda, nb, 3, out); break;                               \
		default: t##_rows(w, a, lda, nb, 4, out); break;                              \
		}                                                                             \
	}

static inline float f16_at(const uint8_t *p)
{
	return rg_q_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
}

QAI void q8_0_rows(const uint8_t *p, const rg_q8a *a, size_t lda, int nb, const int R,
		   float *out)
{
	float acc[RG_QDOT_ROWS] = {0};

	for (int b = 0; b < nb; b++, p += 34) {
		const int8_t *q = (const int8_t *)(p + 2);
		const float d = f16_at(p);

#pragma GCC unroll 4
		for (int r = 0; r < R; r++) {
			const rg_q8a *x = a + (size_t)r * lda + b;
			int32_t s = 0;

			for (int j = 0; j < RG_QK; j++)
				s += (int32_t)q[j] * x->q[j];
			acc[r] += d * x->d * (float)s;
		}
	}
#pragma GCC unroll 4
	for (int r = 0; r < R; r++)
		out[r] = acc[r];
}

QAI void q4_0_rows(const uint8_t *p, const rg_q8a *a, size_t lda, int nb, const int R,
		   float *out)
{
	float acc[RG_QDOT_ROWS] = {0};

	for (int b = 0; b < nb; b++, p += 18) {
		int8_t q[RG_QK];
		const float d = f16_at(p);

		for (int j = 0; j < RG_QK / 2; j++) {
			q[j] = (int8_t)((p[2 + j] & 15) - 8);
			q[j + 16] = (int8_t)((p[2 + j] >> 4) - 8);
		}
#pragma GCC unroll 4
		for (int r = 0; r < R; r++) {
			const rg_q8a *x = a + (size_t)r * lda + b;
			int32_t s = 0;

			for (int j = 0; j < RG_QK; j++)
				s += q[j] * x->q[j];
			acc[r] += d * x->d * (float)s;
		}
	}
#pragma GCC unroll 4
	for (int r = 0; r < R; r++)
		out[r] = acc[r];
}

/* Q4_1 / Q5_1: plus m_w s_a per block */
QAI void q4_1_rows(const uint8_t *p, const rg_q8a *a, size_t lda, int nb, const int R,
		   float *out)
{
	float acc[RG_QDOT_ROWS] = {0};

	for (int b = 0; b < nb; b++, p += 20) {
		uint8_t q[RG_QK];
		const float d = f16_at(p), m = f16_at(p + 2);

		for (int j = 0; j < RG_QK / 2; j++) {
			q[j] = p[4 + j] & 15;
			q[j + 16] = p[4 + j] >> 4;
		}
#pragma GCC unroll 4
		for (int r = 0; r < R; r++) {
			const rg_q8a *x = a + (size_t)r * lda + b;
			int32_t s = 0;

			for (int j = 0; j < RG_QK; j++)
				s += q[j] * x->q[j];
			acc[r] += d * x->d * (float)s + m * x->s;
		}
	}
#pragma GCC unroll 4
	for (int r = 0; r < R; r++)
		out[r] = acc[r];
}

/* Q5_0 / Q5_1: the fifth bit of value j is bit j of the little-endian u32 qh. */
static inline uint32_t q5_qh(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* the 32 values of a Q5_0 / Q5_1 block, minus off (16 for Q5_0, 0 for Q5_1) */
static inline void q5_values(const uint8_t *qhp, const uint8_t *qs, int off, int8_t q[RG_QK])
{
	const uint32_t qh = q5_qh(qhp);

	for (int j = 0; j < RG_QK / 2; j++) {
		const int h0 = (int)((qh >> j) & 1) << 4;
		const int h1 = (int)((qh >> (j + 16)) & 1) << 4;

		q[j] = (int8_t)(((qs[j] & 15) | h0) - off);
		q[j + 16] = (int8_t)(((qs[j] >> 4) | h1) - off);
	}
}

QAI void q5_0_rows(const uint8_t *p, const rg_q8a *a, size_t lda, int nb, const int R,
		   float *out)
{
	float acc[RG_QDOT_ROWS] = {0};

	for (int b = 0; b < nb; b++, p += 22) {
		int8_t q[RG_QK];
		const float d = f16_at(p);

		q5_values(p + 2, p + 6, 16, q);
#pragma GCC unroll 4
		for (int r = 0; r < R; r++) {
			const rg_q8a *x = a + (size_t)r * lda + b;
			int32_t s = 0;

			for (int j = 0; j < RG_QK; j++)
				s += q[j] * x->q[j];
			acc[r] += d * x->d * (float)s;
		}
	}
#pragma GCC unroll 4
	for (int r = 0; r < R; r++)
		out[r] = acc[r];
}

QAI void q5_1_rows(const uint8_t *p, const rg_q8a *a, size_t lda, int nb, const int R,
		   float *out)
{
	float acc[RG_QDOT_ROWS] = {0};

	for (int b = 0; b < nb; b++, p += 24) {
		int8_t q[RG_QK];
		const float d = f16_at(p), m = f16_at(p + 2);

		q5_values(p + 4, p + 8, 0, q);
#pragma GCC unroll 4
		for (int r = 0; r < R; r++) {
			const rg_q8a *x = a + (size_t)r * lda + b;
			int32_t s = 0;

			for (int j = 0; j < RG_QK; j++)
				s += q[j] * x->q[j];
			acc[r] += d * x->d * (float)s + m * x->s;
		}
	}
#pragma GCC unroll 4
	for (int r = 0; r < R; r++)
		out[r] = acc[r];
}

/* K-quants (qweight.h): per sub-block s of 32 values (activation block a[s]) the integer sum
 * t = q_w . q_a, then d * sum_s d_a sc[s] t - dmin * sum_s mn[s] s_a. sc[s] * t stays below
 * 2^24 (63 * 32 * 31 * 127), so its float is exact. Q5_K (five): the fifth bit of sub-block
 * s is bit s of qh[l]. */
QAI void k45_rows(const uint8_t *p, const rg_q8a *a, size_t lda, int nb, const int R,
		  float *out, const bool five)
{
	const size_t bytes = five ? 176 : 144;
	float acc[RG_QDOT_ROWS] = {0};

	for (int i = 0; i < nb / 8; i++, p += bytes) {
		const uint8_t *qh = p + 16, *qs = p + (five ? 48 : 16);
		const float d = f16_at(p), dmin = f16_at(p + 2);
		uint8_t sc[8], mn[8];
		float sd[RG_QDOT_ROWS] = {0}, sm[RG_QDOT_ROWS] = {0};

		rg_q_k4_scales(p + 4, sc, mn);
		for (int s = 0; s < 8; s++) {
			const uint8_t *q = qs + 32 * (s / 2);
			const int sh = 4 * (s & 1);
			uint8_t v[32];

			for (int l = 0; l < 32; l++)
				v[l] = (uint8_t)(((q[l] >> sh) & 15) |
						 (five ? ((qh[l] >> s) & 1) << 4 : 0));
#pragma GCC unroll 4
			for (int r = 0; r < R; r++) {
				const rg_q8a *x = a + (size_t)r * lda + 8 * i + s;
				int32_t t = 0;

				for (int l = 0; l < 32; l++)
					t += v[l] * x->q[l];
				sd[r] += x->d * (float)(sc[s] * t);
				sm[r] += (float)mn[s] * x->s;
			}
		}
#pragma GCC unroll 4
		for (int r = 0; r < R; r++)
			acc[r] += d * sd[r] - dmin * sm[r];
	}
#pragma GCC unroll 4
	for (int r = 0; r < R; r++)
		out[r] = acc[r];
}

QAI void q4_k_rows(const uint8_t *p, const rg_q8a *a, size_t lda, int nb, const int R,
		   float *out)
{
	k45_rows(p, a, lda, nb, R, out, false);
}

QAI void q5_k_rows(const uint8_t *p, const rg_q8a *a, size_t lda, int nb, const int R,
		   float *out)
{
	k45_rows(p, a, lda, nb, R, out, true);
}

/* Q6_K: activation block b (values 32 b .. 32 b + 31 of the super-block) meets scales 2 b and
 * 2 b + 1; per half an integer sum of (q - 32) q_a. */
QAI void q6_k_rows(const uint8_t *p, const rg_q8a *a, size_t lda, int nb, const int R,
		   float *out)
{
	float acc[RG_QDOT_ROWS] = {0};

	for (int i = 0; i < nb / 8; i++, p += 210) {
		const int8_t *sc = (const int8_t *)(p + 192);
		const float d = f16_at(p + 208);
		float sd[RG_QDOT_ROWS] = {0};

		for (int b = 0; b < 8; b++) {
			const int h = b / 4, j = b % 4, sl = 4 * (j / 2), sh = 2 * j;
			const uint8_t *ql = p + 64 * h + 32 * (j & 1), *qh = p + 128 + 32 * h;
			int8_t v[32];

			for (int l = 0; l < 32; l++)
				v[l] = (int8_t)((((ql[l] >> sl) & 15) | ((qh[l] >> sh) & 3) << 4) - 32);
#pragma GCC unroll 4
			for (int r = 0; r < R; r++) {
				const rg_q8a *x = a + (size_t)r * lda + 8 * i + b;
				int32_t t = 0;

				/* one loop per 16-value half: the compiler vectorizes each */
				for (int hf = 0; hf < 2; hf++) {
					int32_t u = 0;

					for (int l = 16 * hf; l < 16 * hf + 16; l++)
						u += v[l] * x->q[l];
					t += sc[2 * b + hf] * u;
				}
				sd[r] += x->d * (float)t;
			}
		}
#pragma GCC unroll 4
		for (int r = 0; r < R; r++)
			acc[r] += d * sd[r];
	}
#pragma GCC unroll 4
	for (int r = 0; r < R; r++)
		out[r] = acc[r];
}

QDOT_ENTRIES(q8_0)
QDOT_ENTRIES(q4_0)
QDOT_ENTRIES(q4_1)
QDOT_ENTRIES(q5_0)
QDOT_ENTRIES(q5_1)
QDOT_ENTRIES(q4_k)
QDOT_ENTRIES(q5_k)
QDOT_ENTRIES(q6_k)
#undef QDOT_ENTRIES
#undef QAI

/* The plain C twin of the F16 tile: per (weight row, activation row) one f32 sum over k in
 * order. */
void rg_hdot_tile_f16_generic(const uint16_t *w, size_t ldw, int NW, const float *a, size_t lda,
			      int K, int R, float *out, size_t ldo)
{
	for (int i = 0; i < NW; i++)
		for (int r = 0; r < R; r++) {
			const uint16_t *wi = w + (size_t)i * ldw;
			const float *ar = a + (size_t)r * lda;
			float acc = 0.f;

			for (int k = 0; k < K; k++)
				acc += rg_half_to_float(wi[k]) * ar[k];
			out[(size_t)r * ldo + i] = acc;
		}
}

void rg_f16_to_f32_generic(const uint16_t *h, float *out, size_t n)
{
	for (size_t i = 0; i < n; i++)
		out[i] = rg_half_to_float(h[i]);
}

#define RG_VW 4
#define RG_ISA generic
#define RG_QISA generic
#define RG_KQISA generic
#define RG_ISA_NAME "generic"
#include "ops/cpu/kern.h"
