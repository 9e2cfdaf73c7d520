/* kern.h compiled for AVX-512 (F, VL, DQ, BW) with FMA: 16 float32 lanes; and the AVX-512
 * K-quant kernels (qweight.h), two activation blocks per 512-bit vector. The activation
 * quantizer and the Q8_0 / Q4_0 / Q4_1 kernels are the AVX2 ones. AVX512-VNNI is not assumed
 * (the table is chosen on F, VL, DQ, BW): products go through vpmaddubsw / vpmaddwd. */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#pragma GCC target("avx512f,avx512vl,avx512dq,avx512bw,fma,avx2,bmi2,f16c")

#include "ops/cpu/cpu_kern.h"

static inline float f16(const uint8_t *p)
{
	return _cvtsh_ss((unsigned short)(p[0] | p[1] << 8));
}

/* [lo | hi] as one 512-bit vector */
static inline __m512i cat(__m256i lo, __m256i hi)
{
	return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

static inline __m512 catf(float lo, float hi)
{
	return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(lo)), _mm256_set1_ps(hi),
				  1);
}

/* the int8 quantities of activation blocks a[0] and a[1] */
static inline __m512i act2(const rg_q8a *a)
{
	return cat(_mm256_loadu_si256((const __m256i *)a[0].q),
		   _mm256_loadu_si256((const __m256i *)a[1].q));
}

/* int16 lanes 0-15 sc0, 16-31 sc1: the 32 pair sums of two activation blocks */
static inline __m512i sc2(int sc0, int sc1)
{
	return cat(_mm256_set1_epi16((short)sc0), _mm256_set1_epi16((short)sc1));
}

/* Q4_K / Q5_K: sub-blocks 2k and 2k + 1 (the low and the high nibbles of qs[32k ..]) in one
 * vector. */
float rg_qdot_q4_k_avx512(const void *w, const rg_q8a *a, int nb)
{
	const uint8_t *p = w;
	const __m256i m4 = _mm256_set1_epi8(15);
	__m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
	float off = 0.f;

	for (int i = 0; i < nb / 8; i++, p += 144, a += 8) {
		const float d = f16(p);
		uint8_t sc[8], mn[8];
		float sm = 0.f;

		rg_q_k4_scales(p + 4, sc, mn);
		for (int k = 0; k < 4; k++) {
			const __m256i q = _mm256_loadu_si256((const __m256i *)(p + 16 + 32 * k));
			const __m512i qv = cat(_mm256_and_si256(q, m4),
					       _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
			const __m512i s = _mm512_madd_epi16(_mm512_maddubs_epi16(qv, act2(a + 2 * k)),
							    sc2(sc[2 * k], sc[2 * k + 1]));
			const __m512 f = catf(d * a[2 * k].d, d * a[2 * k + 1].d);

			if (k & 1)
				acc1 = _mm512_fmadd_ps(f, _mm512_cvtepi32_ps(s), acc1);
			else
				acc0 = _mm512_fmadd_ps(f, _mm512_cvtepi32_ps(s), acc0);
		}
		for (int s = 0; s < 8; s++)
			sm += (float)mn[s] * a[s].s;
		off += f16(p + 2) * sm;
	}
	return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) - off;
}

/* the fifth bits: [qh | qh >> 1] shifted by 2k, bit 0 of each byte moved to bit 4 */
float rg_qdot_q5_k_avx512(const void *w, const rg_q8a *a, int nb)
{
	const uint8_t *p = w;
	const __m256i m4 = _mm256_set1_epi8(15);
	const __m512i b4 = _mm512_set1_epi8(0x10);
	__m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
	float off = 0.f;

	for (int i = 0; i < nb / 8; i++, p += 176, a += 8) {
		const float d = f16(p);
		const __m256i qh = _mm256_loadu_si256((const __m256i *)(p + 16));
		const __m512i qh2 = cat(qh, _mm256_srli_epi16(qh, 1));
		uint8_t sc[8], mn[8];
		float sm = 0.f;

		rg_q_k4_scales(p + 4, sc, mn);
		for (int k = 0; k < 4; k++) {
			const __m256i q = _mm256_loadu_si256((const __m256i *)(p + 48 + 32 * k));
			const __m512i hb = _mm512_and_si512(
				_mm512_slli_epi16(_mm512_srli_epi16(qh2, 2 * k), 4), b4);
			const __m512i qv = _mm512_or_si512(
				cat(_mm256_and_si256(q, m4),
				    _mm256_and_si256(_mm256_srli_epi16(q, 4), m4)),
				hb);
			const __m512i s = _mm512_madd_epi16(_mm512_maddubs_epi16(qv, act2(a + 2 * k)),
							    sc2(sc[2 * k], sc[2 * k + 1]));
			const __m512 f = catf(d * a[2 * k].d, d * a[2 * k + 1].d);

			if (k & 1)
				acc1 = _mm512_fmadd_ps(f, _mm512_cvtepi32_ps(s), acc1);
			else
				acc0 = _mm512_fmadd_ps(f, _mm512_cvtepi32_ps(s), acc0);
		}
		for (int s = 0; s < 8; s++)
			sm += (float)mn[s] * a[s].s;
		off += f16(p + 2) * sm;
	}
	return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) - off;
}

/* Q6_K: activation blocks 4h, 4h + 1 take the low nibbles of ql[64h .. 64h + 64) and bits
 * 0-1 / 2-3 of qh[32h ..]; blocks 4h + 2, 4h + 3 the high nibbles and bits 4-5 / 6-7. q - 32
 * as in the AVX2 twin (two vpmaddubsw, one subtraction); the 16-bit pair sums of one vector
 * meet four 16-value scales (lanes of 8). */
float rg_qdot_q6_k_avx512(const void *w, const rg_q8a *a, int nb)
{
	const uint8_t *p = w;
	const __m512i m4 = _mm512_set1_epi8(15), m2 = _mm512_set1_epi8(0x30);
	const __m512i k32 = _mm512_set1_epi8(32);
	__m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();

	for (int i = 0; i < nb / 8; i++, p += 210, a += 8) {
		const int8_t *sc = (const int8_t *)(p + 192);
		const float d = f16(p + 208);

		for (int h = 0; h < 2; h++) {
			const __m512i ql = _mm512_loadu_si512((const void *)(p + 64 * h));
			const __m256i qh = _mm256_loadu_si256((const __m256i *)(p + 128 + 32 * h));
			const __m512i hA = cat(_mm256_slli_epi16(qh, 4), _mm256_slli_epi16(qh, 2));
			const __m512i hB = cat(qh, _mm256_srli_epi16(qh, 2));
			__m512i q[2];

			q[0] = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_and_si512(hA, m2));
			q[1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
					       _mm512_and_si512(hB, m2));
			for (int j = 0; j < 2; j++) {
				const int b = 4 * h + 2 * j;
				const __m512i av = act2(a + b);
				const __m512i p16 = _mm512_sub_epi16(_mm512_maddubs_epi16(q[j], av),
								     _mm512_maddubs_epi16(k32, av));
				const __m512i scv =
					cat(_mm256_set_m128i(_mm_set1_epi16(sc[2 * b + 1]),
							     _mm_set1_epi16(sc[2 * b])),
					    _mm256_set_m128i(_mm_set1_epi16(sc[2 * b + 3]),
							     _mm_set1_epi16(sc[2 * b + 2])));
				const __m512 f = _mm512_cvtepi32_ps(_mm512_madd_epi16(p16, scv));

				if (j)
					acc1 = _mm512_fmadd_ps(catf(d * a[b].d, d * a[b + 1].d), f,
							       acc1);
				else
					acc0 = _mm512_fmadd_ps(catf(d * a[b].d, d * a[b + 1].d), f,
							       acc0);
			}
		}
	}
	return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

/* The multi-row twins of the three K-quant dots: one single-row dot per row for now (the
 * weight block decoded R times, as before), bit-identical to it by construction. A fused
 * version as the AVX2 one is left for a machine that runs AVX-512 and can test it. */
#define KQ_ROWS(t)                                                                            \
	void rg_qdotr_##t##_avx512(const void *w, const rg_q8a *a, size_t lda, int nb, int R, \
				   float *out)                                                \
	{                                                                                     \
		for (int r = 0; r < R; r++)                                                   \
			out[r] = rg_qdot_##t##_avx512(w, a + (size_t)r * lda, nb);            \
	}
KQ_ROWS(q4_k)
KQ_ROWS(q5_k)
KQ_ROWS(q6_k)
#undef KQ_ROWS

/* F16 weights (cpu_kern.h hdot_tile_f16): as the AVX2 tile, 16 halves a step (not run on a
 * CPU with AVX-512 in the session that wrote it: test_qgemm_cpu checks it where the CPU has
 * it). */
static inline __attribute__((always_inline)) void hdot_tile_r(const uint16_t *w, size_t ldw,
								const int NW, const float *a,
								size_t lda, int K, const int R,
								float *out, size_t ldo)
{
	__m512 acc[RG_HDOT_W][RG_QDOT_ROWS];

	for (int i = 0; i < NW; i++)
		for (int r = 0; r < R; r++)
			acc[i][r] = _mm512_setzero_ps();
	for (int k = 0; k < K; k += 16) {
		__m512 wv[RG_HDOT_W];

		if (!(k & 31)) /* the next tile's rows, a cache line per 32 halves */
			for (int i = 0; i < NW; i++)
				_mm_prefetch((const char *)(w + (size_t)(NW + i) * ldw + k),
					     _MM_HINT_T0);
		for (int i = 0; i < NW; i++)
			wv[i] = _mm512_cvtph_ps(
				_mm256_loadu_si256((const __m256i *)(w + (size_t)i * ldw + k)));
		for (int r = 0; r < R; r++) {
			const __m512 av = _mm512_loadu_ps(a + (size_t)r * lda + k);

			for (int i = 0; i < NW; i++)
				acc[i][r] = _mm512_fmadd_ps(wv[i], av, acc[i][r]);
		}
	}
	for (int i = 0; i < NW; i++)
		for (int r = 0; r < R; r++)
			out[(size_t)r * ldo + i] = _mm512_reduce_add_ps(acc[i][r]);
}

#define HDOT_R(nw)                                                                            \
	switch (R) {                                                                          \
	case 1: hdot_tile_r(w, ldw, nw, a, lda, K, 1, out, ldo); break;                       \
	case 2: hdot_tile_r(w, ldw, nw, a, lda, K, 2, out, ldo); break;                       \
	case 3: hdot_tile_r(w, ldw, nw, a, lda, K, 3, out, ldo); break;                       \
	default: hdot_tile_r(w, ldw, nw, a, lda, K, 4, out, ldo); break;                      \
	}

void rg_hdot_tile_f16_avx512(const uint16_t *w, size_t ldw, int NW, const float *a, size_t lda,
			     int K, int R, float *out, size_t ldo)
{
	if (NW == 1)
		HDOT_R(1)
	else if (NW == 2)
		HDOT_R(2)
	else
		HDOT_R(3)
}
#undef HDOT_R

void rg_f16_to_f32_avx512(const uint16_t *h, float *out, size_t n)
{
	size_t i = 0;

	for (; i + 16 <= n; i += 16)
		_mm512_storeu_ps(out + i,
				 _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(h + i))));
	for (; i < n; i++)
		out[i] = _cvtsh_ss(h[i]);
}

#define RG_VW 16
#define RG_ISA avx512
#define RG_QISA avx2	/* the activation quantizer and Q8_0 / Q4_0 / Q4_1: the AVX2 kernels */
#define RG_KQISA avx512
#define RG_ISA_NAME "avx512"
#include "ops/cpu/kern.h"
#else
#include "ops/cpu/cpu_kern.h"
/* not an x86 build: an empty table that rg_cpu_kern_select never picks */
const rg_cpu_kern rg_cpu_kern_avx512 = {.isa = NULL};
#endif
