/* kern.h compiled for the build's baseline (SSE2 on x86-64; any GCC target): 4 float32 lanes,
 * and the plain C quantized kernels (qweight.h) that the AVX2 ones are tested against. */
#include <math.h>
#include <stdint.h>

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

float rg_qdot_q8_0_generic(const void *w, const rg_q8a *a, int nb)
{
	const uint8_t *p = w;
	float acc = 0.f;

	for (int b = 0; b < nb; b++, p += 34) {
		const int8_t *q = (const int8_t *)(p + 2);
		int32_t s = 0;

		for (int j = 0; j < RG_QK; j++)
			s += (int32_t)q[j] * a[b].q[j];
		acc += rg_q_f16_to_f32((uint16_t)(p[0] | p[1] << 8)) * a[b].d * (float)s;
	}
	return acc;
}

float rg_qdot_q4_0_generic(const void *w, const rg_q8a *a, int nb)
{
	const uint8_t *p = w;
	float acc = 0.f;

	for (int b = 0; b < nb; b++, p += 18) {
		const uint8_t *qs = p + 2;
		int32_t s = 0;

		for (int j = 0; j < RG_QK / 2; j++)
			s += ((qs[j] & 15) - 8) * a[b].q[j] + ((qs[j] >> 4) - 8) * a[b].q[j + 16];
		acc += rg_q_f16_to_f32((uint16_t)(p[0] | p[1] << 8)) * a[b].d * (float)s;
	}
	return acc;
}

float rg_qdot_q4_1_generic(const void *w, const rg_q8a *a, int nb)
{
	const uint8_t *p = w;
	float acc = 0.f;

	for (int b = 0; b < nb; b++, p += 20) {
		const uint8_t *qs = p + 4;
		int32_t s = 0;

		for (int j = 0; j < RG_QK / 2; j++)
			s += (qs[j] & 15) * a[b].q[j] + (qs[j] >> 4) * a[b].q[j + 16];
		acc += rg_q_f16_to_f32((uint16_t)(p[0] | p[1] << 8)) * a[b].d * (float)s +
		       rg_q_f16_to_f32((uint16_t)(p[2] | p[3] << 8)) * a[b].s;
	}
	return acc;
}

/* Q5_0 / Q5_1: the fifth bit of value j is bit j of the little-endian u32 qh. */
static inline uint32_t q5_qh(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

float rg_qdot_q5_0_generic(const void *w, const rg_q8a *a, int nb)
{
	const uint8_t *p = w;
	float acc = 0.f;

	for (int b = 0; b < nb; b++, p += 22) {
		const uint32_t qh = q5_qh(p + 2);
		const uint8_t *qs = p + 6;
		int32_t s = 0;

		for (int j = 0; j < RG_QK / 2; j++) {
			const int h0 = (int)((qh >> j) & 1) << 4;
			const int h1 = (int)((qh >> (j + 16)) & 1) << 4;

			s += (((qs[j] & 15) | h0) - 16) * a[b].q[j] +
			     (((qs[j] >> 4) | h1) - 16) * a[b].q[j + 16];
		}
		acc += rg_q_f16_to_f32((uint16_t)(p[0] | p[1] << 8)) * a[b].d * (float)s;
	}
	return acc;
}

float rg_qdot_q5_1_generic(const void *w, const rg_q8a *a, int nb)
{
	const uint8_t *p = w;
	float acc = 0.f;

	for (int b = 0; b < nb; b++, p += 24) {
		const uint32_t qh = q5_qh(p + 4);
		const uint8_t *qs = p + 8;
		int32_t s = 0;

		for (int j = 0; j < RG_QK / 2; j++) {
			const int h0 = (int)((qh >> j) & 1) << 4;
			const int h1 = (int)((qh >> (j + 16)) & 1) << 4;

			s += ((qs[j] & 15) | h0) * a[b].q[j] + ((qs[j] >> 4) | h1) * a[b].q[j + 16];
		}
		acc += rg_q_f16_to_f32((uint16_t)(p[0] | p[1] << 8)) * a[b].d * (float)s +
		       rg_q_f16_to_f32((uint16_t)(p[2] | p[3] << 8)) * a[b].s;
	}
	return acc;
}

/* K-quants (qweight.h): per sub-block s of 32 values (activation block a[s]) the integer sum
 * t = q_w . q_a, then d * sum_s d_a sc[s] t - dmin * sum_s mn[s] s_a. sc[s] * t stays below
 * 2^24 (63 * 32 * 31 * 127), so its float is exact. */
float rg_qdot_q4_k_generic(const void *w, const rg_q8a *a, int nb)
{
	const uint8_t *p = w;
	float acc = 0.f;

	for (int i = 0; i < nb / 8; i++, p += 144, a += 8) {
		const uint8_t *qs = p + 16;
		uint8_t sc[8], mn[8];
		float sd = 0.f, sm = 0.f;

		rg_q_k4_scales(p + 4, sc, mn);
		for (int s = 0; s < 8; s++) {
			const uint8_t *q = qs + 32 * (s / 2);
			const int sh = 4 * (s & 1);
			int32_t t = 0;

			for (int l = 0; l < 32; l++)
				t += ((q[l] >> sh) & 15) * a[s].q[l];
			sd += a[s].d * (float)(sc[s] * t);
			sm += (float)mn[s] * a[s].s;
		}
		acc += rg_q_f16_to_f32((uint16_t)(p[0] | p[1] << 8)) * sd -
		       rg_q_f16_to_f32((uint16_t)(p[2] | p[3] << 8)) * sm;
	}
	return acc;
}

float rg_qdot_q5_k_generic(const void *w, const rg_q8a *a, int nb)
{
	const uint8_t *p = w;
	float acc = 0.f;

	for (int i = 0; i < nb / 8; i++, p += 176, a += 8) {
		const uint8_t *qh = p + 16, *qs = p + 48;
		uint8_t sc[8], mn[8];
		float sd = 0.f, sm = 0.f;

		rg_q_k4_scales(p + 4, sc, mn);
		for (int s = 0; s < 8; s++) {
			const uint8_t *q = qs + 32 * (s / 2);
			const int sh = 4 * (s & 1);
			int32_t t = 0;

			for (int l = 0; l < 32; l++)
				t += (((q[l] >> sh) & 15) | ((qh[l] >> s) & 1) << 4) * a[s].q[l];
			sd += a[s].d * (float)(sc[s] * t);
			sm += (float)mn[s] * a[s].s;
		}
		acc += rg_q_f16_to_f32((uint16_t)(p[0] | p[1] << 8)) * sd -
		       rg_q_f16_to_f32((uint16_t)(p[2] | p[3] << 8)) * sm;
	}
	return acc;
}

/* Q6_K: activation block b (values 32 b .. 32 b + 31 of the super-block) meets scales 2 b and
 * 2 b + 1; per half an integer sum of (q - 32) q_a. */
float rg_qdot_q6_k_generic(const void *w, const rg_q8a *a, int nb)
{
	const uint8_t *p = w;
	float acc = 0.f;

	for (int i = 0; i < nb / 8; i++, p += 210, a += 8) {
		const int8_t *sc = (const int8_t *)(p + 192);
		float sd = 0.f;

		for (int b = 0; b < 8; b++) {
			const int h = b / 4, j = b % 4, sl = 4 * (j / 2), sh = 2 * j;
			const uint8_t *ql = p + 64 * h + 32 * (j & 1), *qh = p + 128 + 32 * h;
			int32_t t = 0;

			/* one loop per 16-value half: the compiler vectorizes each */
			for (int hf = 0; hf < 2; hf++) {
				int32_t u = 0;

				for (int l = 16 * hf; l < 16 * hf + 16; l++)
					u += ((((ql[l] >> sl) & 15) | ((qh[l] >> sh) & 3) << 4) - 32) *
					     a[b].q[l];
				t += sc[2 * b + hf] * u;
			}
			sd += a[b].d * (float)t;
		}
		acc += rg_q_f16_to_f32((uint16_t)(p[208] | p[209] << 8)) * sd;
	}
	return acc;
}

#define RG_VW 4
#define RG_ISA generic
#define RG_QISA generic
#define RG_KQISA generic
#define RG_ISA_NAME "generic"
#include "ops/cpu/kern.h"
