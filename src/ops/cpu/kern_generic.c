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

#define RG_VW 4
#define RG_ISA generic
#define RG_QISA generic
#define RG_ISA_NAME "generic"
#include "ops/cpu/kern.h"
