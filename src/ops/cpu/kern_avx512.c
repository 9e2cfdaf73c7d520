/* kern.h compiled for AVX-512 (F, VL, DQ, BW) with FMA: 16 float32 lanes; and the AVX-512
 * quantized kernels (qweight.h), two activation blocks per 512-bit vector, for every type: the
 * 32-value blocks (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1) and the K-quants (Q4_K, Q5_K, Q6_K), each
 * weight block decoded once for the R rows of a multi-row dot. The activation quantizer is the
 * AVX2 one. The table is chosen on F, VL, DQ, BW; where the CPU also has AVX512-VNNI (Ice Lake,
 * Zen 4 and later), the products go through vpdpbusd (one instruction for vpmaddubsw +
 * vpmaddwd), chosen once per process (rg_cpu_avx512_vnni). */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#pragma GCC target("avx512f,avx512vl,avx512dq,avx512bw,fma,avx2,bmi2,f16c")

#include "ops/cpu/cpu_kern.h"
#include "ops/cpu/qkern_x86.h"

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

/* ---- the dots: one always-inlined body per type for R rows (R a constant), with DOT the
 * unsigned-by-signed byte product (vpdpbusd, or vpmaddubsw + vpmaddwd by ones: pairs fit int16
 * for every weight range below, |u| <= 128, |a| <= 127), instantiated twice (VNNI or not); the
 * single-row entry points are the R = 1 instances, so a row's bits do not depend on R. Per row
 * two fp32 accumulators (even and odd block pairs). Each pair of 32-value blocks: 16 int32
 * lanes (8 per block), converted, times [d_w0 d_a0 x 8 | d_w1 d_a1 x 8]. The activations are
 * read as packed pairs (rg_q8p: the pair's 64 int8 and its scale vector, one load each); the
 * rg_q8a rows beside them give the offsets' s terms. */
#define QAI static inline __attribute__((always_inline))

static bool g_vnni;

__attribute__((constructor)) static void vnni_probe(void)
{
	__builtin_cpu_init();
	g_vnni = __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw");
}

bool rg_cpu_avx512_vnni(int on)
{
	static bool probed, have;

	if (!probed) {
		__builtin_cpu_init();
		have = __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw");
		probed = true;
	}
	if (on >= 0)
		g_vnni = on && have;
	return g_vnni;
}

/* The body fn for R rows: instances of 1, 2, 4 and 8 rows (RC, a constant); R < RC computes
 * the extra rows on row 0 again and stores R (RR below), so that a row's operations, and its
 * bits, are those of every instance. Four instances a type and flavour instead of eight keep
 * the file's compile time (ASan's -O1 + -O3 build) in bounds. */
#define RR(r) ((r) < Rn ? (r) : 0)
#define QROWS_SWITCH(fn, ap, ldp)                                                             \
	if (R <= 1)                                                                           \
		fn(w, a, ap, lda, ldp, nb, 1, R, out);                                        \
	else if (R <= 2)                                                                      \
		fn(w, a, ap, lda, ldp, nb, 2, R, out);                                        \
	else if (R <= 4)                                                                      \
		fn(w, a, ap, lda, ldp, nb, 4, R, out);                                        \
	else                                                                                  \
		fn(w, a, ap, lda, ldp, nb, 8, R, out);

#define DOT_BW(u, a) _mm512_madd_epi16(_mm512_maddubs_epi16((u), (a)), _mm512_set1_epi16(1))
#define DOT_VNNI(u, a) _mm512_dpbusd_epi32(_mm512_setzero_si512(), (u), (a))

/* [x0 x 8 | x1 x 8] */
static inline __m512 pairf(float x0, float x1)
{
	return _mm512_mask_broadcastss_ps(_mm512_set1_ps(x0), 0xff00, _mm_set_ss(x1));
}

/* one pair of 32-value weight blocks, decoded: unsigned bytes u (or |q| with neg the lanes
 * whose q < 0: the activation is negated there; Q8_0, and Q4_0 / Q5_0 as q - 8 / q - 16),
 * dw = [d0 x 8 | d1 x 8], and the per-block offsets m0, m1 times the activation block sums
 * s_a (Q4_1 / Q5_1: the stored minimum) */
typedef struct {
	__m512i u;
	__mmask64 neg;
	__m512 dw;
	float m0, m1;
} wpair;

/* one = true: block 0 alone (the last of an odd count), the high half zero */
QAI wpair q8_0_pair(const uint8_t *p, const bool one)
{
	const __m256i q0 = _mm256_loadu_si256((const __m256i *)(p + 2));
	const __m512i q = one ? _mm512_inserti64x4(_mm512_setzero_si512(), q0, 0)
			      : cat(q0, _mm256_loadu_si256((const __m256i *)(p + 36)));
	return (wpair){_mm512_abs_epi8(q), _mm512_movepi8_mask(q),
		       pairf(f16(p), one ? 0.f : f16(p + 34)), 0.f, 0.f};
}

/* the 32 nibbles of the 16 bytes at p0 and at p1 as 64 bytes (block 0's values 0..31, then
 * block 1's; p1 NULL: the high half zero) */
QAI __m512i nibbles_pair(const uint8_t *p0, const uint8_t *p1)
{
	const __m128i b0 = _mm_loadu_si128((const __m128i *)p0);
	const __m256i t = p1 ? _mm256_inserti128_si256(_mm256_castsi128_si256(b0),
						       _mm_loadu_si128((const __m128i *)p1), 1)
			     : _mm256_zextsi128_si256(b0);
	/* [b0, b1, b0 >> 4, b1 >> 4] in 128-bit lanes, then lanes 0, 2, 1, 3 */
	const __m512i u = _mm512_inserti64x4(_mm512_castsi256_si512(t), _mm256_srli_epi16(t, 4), 1);

	return _mm512_and_si512(_mm512_shuffle_i64x2(u, u, _MM_SHUFFLE(3, 1, 2, 0)),
				_mm512_set1_epi8(15));
}

/* Q5_0 / Q5_1's fifth bits of two blocks (the little-endian u32s at h0 and h1, h1 NULL for
 * none): byte j = 0x10 where bit j is set, one masked broadcast */
QAI __m512i q5_high_pair(const uint8_t *h0, const uint8_t *h1)
{
	uint32_t x0, x1 = 0;

	memcpy(&x0, h0, 4);
	if (h1)
		memcpy(&x1, h1, 4);
	return _mm512_maskz_set1_epi8((__mmask64)x0 | (__mmask64)x1 << 32, 0x10);
}

/* a signed pair (q - bias): |q| and the lanes whose q < 0 */
QAI wpair signed_pair(__m512i u, int8_t bias, __m512 dw)
{
	const __m512i q = _mm512_sub_epi8(u, _mm512_set1_epi8(bias));

	return (wpair){_mm512_abs_epi8(q), _mm512_movepi8_mask(q), dw, 0.f, 0.f};
}

QAI wpair q4_0_pair(const uint8_t *p, const bool one)
{
	return signed_pair(nibbles_pair(p + 2, one ? NULL : p + 20), 8,
			   pairf(f16(p), one ? 0.f : f16(p + 18)));
}

QAI wpair q4_1_pair(const uint8_t *p, const bool one)
{
	return (wpair){nibbles_pair(p + 4, one ? NULL : p + 24), 0,
		       pairf(f16(p), one ? 0.f : f16(p + 20)), f16(p + 2),
		       one ? 0.f : f16(p + 22)};
}

QAI wpair q5_0_pair(const uint8_t *p, const bool one)
{
	return signed_pair(_mm512_or_si512(nibbles_pair(p + 6, one ? NULL : p + 28),
					   q5_high_pair(p + 2, one ? NULL : p + 24)),
			   16, pairf(f16(p), one ? 0.f : f16(p + 22)));
}

QAI wpair q5_1_pair(const uint8_t *p, const bool one)
{
	return (wpair){_mm512_or_si512(nibbles_pair(p + 8, one ? NULL : p + 32),
				       q5_high_pair(p + 4, one ? NULL : p + 28)),
		       0, pairf(f16(p), one ? 0.f : f16(p + 24)), f16(p + 2),
		       one ? 0.f : f16(p + 26)};
}

/* acc[r] += dw x da x DOT(u, a_r) over one weight pair (blocks b, b + 1 of each row), and the
 * offset terms; SIGNED: the activation negated where the weight is */
#define PAIR_ROWS(DOT, w, a, lda, b, R, acc, off, one, SIGNED, OFF, ap, ldp)                  \
	_Pragma("GCC unroll 8") for (int r = 0; r < (R); r++)                                 \
	{                                                                                     \
		const rg_q8a *x = (a) + (size_t)RR(r) * (lda) + (b);                          \
		const rg_q8p *xp = (ap) + (size_t)RR(r) * (ldp) + (b) / 2;                    \
		__m512i av = _mm512_loadu_si512((const void *)xp->q);                         \
		if (SIGNED)                                                                   \
			av = _mm512_mask_sub_epi8(av, (w).neg, _mm512_setzero_si512(), av);  \
		const __m512i s = DOT((w).u, av);                                             \
		const __m512 f = _mm512_mul_ps((w).dw, _mm512_loadu_ps(xp->d));               \
		acc[r] = _mm512_fmadd_ps(f, _mm512_cvtepi32_ps(s), acc[r]);                   \
		if (OFF)                                                                      \
			off[r] += (w).m0 * x[0].s + ((one) ? 0.f : (w).m1 * x[1].s);           \
	}

#define ROWS32(t, bytes, SIGNED, OFF, DOT, sfx)                                              \
	QAI void t##_rows_##sfx(const uint8_t *p, const rg_q8a *a, const rg_q8p *ap,         \
				size_t lda, size_t ldp, int nb, const int R, const int Rn,    \
				float *out)                                                   \
	{                                                                                     \
		__m512 acc0[RG_QDOT_ROWS], acc1[RG_QDOT_ROWS];                                 \
		float off[RG_QDOT_ROWS];                                                      \
		int b = 0;                                                                    \
                                                                                              \
		_Pragma("GCC unroll 8") for (int r = 0; r < R; r++)                           \
		{                                                                             \
			acc0[r] = acc1[r] = _mm512_setzero_ps();                              \
			off[r] = 0.f;                                                         \
		}                                                                             \
		for (; b + 4 <= nb; b += 4) {                                                 \
			const wpair w0 = t##_pair(p + (size_t)b * (bytes), false);            \
			const wpair w1 = t##_pair(p + (size_t)(b + 2) * (bytes), false);      \
			PAIR_ROWS(DOT, w0, a, lda, b, R, acc0, off, false, SIGNED, OFF, ap, ldp) \
			PAIR_ROWS(DOT, w1, a, lda, b + 2, R, acc1, off, false, SIGNED, OFF, ap, ldp) \
		}                                                                             \
		if (b + 2 <= nb) {                                                            \
			const wpair w0 = t##_pair(p + (size_t)b * (bytes), false);            \
			PAIR_ROWS(DOT, w0, a, lda, b, R, acc0, off, false, SIGNED, OFF, ap, ldp) \
			b += 2;                                                               \
		}                                                                             \
		if (b < nb) {                                                                 \
			const wpair w0 = t##_pair(p + (size_t)b * (bytes), true);             \
			PAIR_ROWS(DOT, w0, a, lda, b, R, acc1, off, true, SIGNED, OFF, ap, ldp) \
		}                                                                             \
		_Pragma("GCC unroll 8") for (int r = 0; r < R; r++)                           \
			if (r < Rn)                                                           \
				out[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[r], acc1[r])) + off[r]; \
	}

/* Q4_K / Q5_K: sub-blocks 2k and 2k + 1 (the low and the high nibbles of qs[32k ..]) in one
 * vector; each sub-block's 6-bit scale folded into the float scale [d sc0 d_a0 | d sc1 d_a1]
 * (the integer sums are exact either way), the minimum term dmin sum_s mn[s] s_a in scalar.
 * Q5_K (five): the fifth bits [qh | qh >> 1] shifted by 2k, bit 0 of each byte moved to bit 4. */
#define ROWS_K45(t, five, DOT, sfx)                                                          \
	QAI void t##_rows_##sfx(const uint8_t *p, const rg_q8a *a, const rg_q8p *ap,         \
				size_t lda, size_t ldp, int nb, const int R, const int Rn,    \
				float *out)                                                   \
	{                                                                                     \
		const size_t bytes = (five) ? 176 : 144;                                      \
		const __m256i m4 = _mm256_set1_epi8(15);                                      \
		const __m512i b4 = _mm512_set1_epi8(0x10);                                    \
		__m512 acc0[RG_QDOT_ROWS], acc1[RG_QDOT_ROWS];                                 \
		float off[RG_QDOT_ROWS];                                                      \
                                                                                              \
		_Pragma("GCC unroll 8") for (int r = 0; r < R; r++)                           \
		{                                                                             \
			acc0[r] = acc1[r] = _mm512_setzero_ps();                              \
			off[r] = 0.f;                                                         \
		}                                                                             \
		for (int i = 0; i < nb / 8; i++, p += bytes) {                                \
			const float d = f16(p), dmin = f16(p + 2);                            \
			const __m256i qh = (five) ? _mm256_loadu_si256((const __m256i *)(p + 16)) \
						  : _mm256_setzero_si256();                   \
			const __m512i qh2 = cat(qh, _mm256_srli_epi16(qh, 1));                \
			const uint8_t *qs = p + ((five) ? 48 : 16);                           \
			uint8_t sc[8], mn[8];                                                 \
                                                                                              \
			rg_q_k4_scales(p + 4, sc, mn);                                        \
			_Pragma("GCC unroll 8") for (int k = 0; k < 4; k++)                   \
			{                                                                     \
				const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * k)); \
				__m512i qv = cat(_mm256_and_si256(q, m4),                     \
						 _mm256_and_si256(_mm256_srli_epi16(q, 4), m4)); \
				const __m512 dsc = pairf(d * (float)sc[2 * k], d * (float)sc[2 * k + 1]); \
                                                                                              \
				if (five)                                                     \
					qv = _mm512_or_si512(                                 \
						qv, _mm512_and_si512(                         \
							    _mm512_slli_epi16(                \
								    _mm512_srli_epi16(qh2, 2 * k), 4), \
							    b4));                             \
				_Pragma("GCC unroll 8") for (int r = 0; r < R; r++)           \
				{                                                             \
					const rg_q8p *xp = ap + (size_t)RR(r) * ldp + 4 * i + k; \
					const __m512i s = DOT(qv, _mm512_loadu_si512((const void *)xp->q)); \
					const __m512 f = _mm512_mul_ps(dsc, _mm512_loadu_ps(xp->d)); \
                                                                                              \
					if (k & 1)                                            \
						acc1[r] = _mm512_fmadd_ps(f, _mm512_cvtepi32_ps(s), acc1[r]); \
					else                                                  \
						acc0[r] = _mm512_fmadd_ps(f, _mm512_cvtepi32_ps(s), acc0[r]); \
				}                                                             \
			}                                                                     \
			_Pragma("GCC unroll 8") for (int r = 0; r < R; r++)                   \
			{                                                                     \
				const rg_q8a *x = a + (size_t)RR(r) * lda + 8 * i;            \
				float sm = 0.f;                                               \
                                                                                              \
				for (int s = 0; s < 8; s++)                                   \
					sm += (float)mn[s] * x[s].s;                          \
				off[r] += dmin * sm;                                          \
			}                                                                     \
		}                                                                             \
		_Pragma("GCC unroll 8") for (int r = 0; r < R; r++)                           \
			if (r < Rn)                                                           \
				out[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[r], acc1[r])) - off[r]; \
	}

/* Q6_K: activation blocks 4h, 4h + 1 take the low nibbles of ql[64h .. 64h + 64) and bits
 * 0-1 / 2-3 of qh[32h ..]; blocks 4h + 2, 4h + 3 the high nibbles and bits 4-5 / 6-7. The
 * unsigned 6-bit q (0..63) times a, minus 32 a (q - 32), per 4-value lane; each lane's 16-value
 * scale in the float factor [d sc d_a]: 4 lanes a scale. */
#define ROWS_Q6K(DOT, sfx)                                                                    \
	QAI void q6_k_rows_##sfx(const uint8_t *p, const rg_q8a *a, const rg_q8p *ap,        \
				 size_t lda, size_t ldp, int nb, const int R, const int Rn,   \
				 float *out)                                                  \
	{                                                                                     \
		const __m512i m4 = _mm512_set1_epi8(15), m2 = _mm512_set1_epi8(0x30);        \
		const __m512i k32 = _mm512_set1_epi8(32);                                     \
		__m512 acc0[RG_QDOT_ROWS], acc1[RG_QDOT_ROWS];                                 \
                                                                                              \
		_Pragma("GCC unroll 8") for (int r = 0; r < R; r++)                           \
			acc0[r] = acc1[r] = _mm512_setzero_ps();                              \
		for (int i = 0; i < nb / 8; i++, p += 210) {                                  \
			const int8_t *sc = (const int8_t *)(p + 192);                         \
			const float d = f16(p + 208);                                         \
                                                                                              \
			for (int h = 0; h < 2; h++) {                                         \
				const __m512i ql = _mm512_loadu_si512((const void *)(p + 64 * h)); \
				const __m256i qh = _mm256_loadu_si256((const __m256i *)(p + 128 + 32 * h)); \
				const __m512i hA = cat(_mm256_slli_epi16(qh, 4), _mm256_slli_epi16(qh, 2)); \
				const __m512i hB = cat(qh, _mm256_srli_epi16(qh, 2));         \
				__m512i q[2];                                                 \
                                                                                              \
				q[0] = _mm512_or_si512(_mm512_and_si512(ql, m4),              \
						       _mm512_and_si512(hA, m2));             \
				q[1] = _mm512_or_si512(                                       \
					_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),       \
					_mm512_and_si512(hB, m2));                            \
				_Pragma("GCC unroll 2") for (int j = 0; j < 2; j++)           \
				{                                                             \
					const int b = 4 * h + 2 * j;                          \
					const __m512 dsc = _mm512_mul_ps(                     \
						_mm512_set1_ps(d),                            \
						_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_setr_epi8( \
							sc[2 * b], sc[2 * b], sc[2 * b], sc[2 * b], \
							sc[2 * b + 1], sc[2 * b + 1], sc[2 * b + 1], \
							sc[2 * b + 1], sc[2 * b + 2], sc[2 * b + 2], \
							sc[2 * b + 2], sc[2 * b + 2], sc[2 * b + 3], \
							sc[2 * b + 3], sc[2 * b + 3], sc[2 * b + 3])))); \
					_Pragma("GCC unroll 8") for (int r = 0; r < R; r++)   \
					{                                                     \
						const rg_q8p *xp = ap + (size_t)RR(r) * ldp + 4 * i + b / 2; \
						const __m512i av = _mm512_loadu_si512((const void *)xp->q); \
						const __m512i s = _mm512_sub_epi32(DOT(q[j], av), \
										   DOT(k32, av)); \
						const __m512 f = _mm512_mul_ps(dsc, _mm512_loadu_ps(xp->d)); \
                                                                                              \
						if (j)                                        \
							acc1[r] = _mm512_fmadd_ps(f, _mm512_cvtepi32_ps(s), acc1[r]); \
						else                                          \
							acc0[r] = _mm512_fmadd_ps(f, _mm512_cvtepi32_ps(s), acc0[r]); \
					}                                                     \
				}                                                             \
			}                                                                     \
		}                                                                             \
		_Pragma("GCC unroll 8") for (int r = 0; r < R; r++)                           \
			if (r < Rn)                                                           \
				out[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[r], acc1[r])); \
	}

ROWS32(q8_0, 34, true, false, DOT_BW, bwp)
ROWS32(q4_0, 18, true, false, DOT_BW, bwp)
ROWS32(q4_1, 20, false, true, DOT_BW, bwp)
ROWS32(q5_0, 22, true, false, DOT_BW, bwp)
ROWS32(q5_1, 24, false, true, DOT_BW, bwp)
ROWS_K45(q4_k, false, DOT_BW, bwp)
ROWS_K45(q5_k, true, DOT_BW, bwp)
ROWS_Q6K(DOT_BW, bwp)

#pragma GCC push_options
#pragma GCC target("avx512vnni")
ROWS32(q8_0, 34, true, false, DOT_VNNI, vnnip)
ROWS32(q4_0, 18, true, false, DOT_VNNI, vnnip)
ROWS32(q4_1, 20, false, true, DOT_VNNI, vnnip)
ROWS32(q5_0, 22, true, false, DOT_VNNI, vnnip)
ROWS32(q5_1, 24, false, true, DOT_VNNI, vnnip)
ROWS_K45(q4_k, false, DOT_VNNI, vnnip)
ROWS_K45(q5_k, true, DOT_VNNI, vnnip)
ROWS_Q6K(DOT_VNNI, vnnip)

/* the VNNI instances of type t for R rows (a function of this target: the bodies inline) */
#define VNNI_ENTRY(t)                                                                         \
	static void t##_vnni(const void *w, const rg_q8a *a, const rg_q8p *ap, size_t lda,   \
			     size_t ldp, int nb, int R, float *out)                           \
	{                                                                                     \
		QROWS_SWITCH(t##_rows_vnnip, ap, ldp)                                         \
	}
VNNI_ENTRY(q8_0)
VNNI_ENTRY(q4_0)
VNNI_ENTRY(q4_1)
VNNI_ENTRY(q5_0)
VNNI_ENTRY(q5_1)
VNNI_ENTRY(q4_k)
VNNI_ENTRY(q5_k)
VNNI_ENTRY(q6_k)
#undef VNNI_ENTRY
#pragma GCC pop_options

void rg_q8_pack_row_avx512(const rg_q8a *a, int nb, rg_q8p *out)
{
	for (int i = 0; 2 * i < nb; i++, out++) {
		const bool two = 2 * i + 1 < nb;

		memcpy(out->q, a[2 * i].q, RG_QK);
		if (two)
			memcpy(out->q + RG_QK, a[2 * i + 1].q, RG_QK);
		else
			memset(out->q + RG_QK, 0, RG_QK);
		_mm512_storeu_ps(out->d, pairf(a[2 * i].d, two ? a[2 * i + 1].d : 0.f));
	}
}

/* The unpacked entry points (qdot / qdotr, which the tests call; the GEMM runs qdotp): R rows
 * packed into a heap buffer, then the packed dot, so their bits are qdotp's. NaN in every
 * output when the buffer cannot be had. */
static void packed_call(rg_qdotp_fn f, const void *w, const rg_q8a *a, size_t lda, int nb,
			int R, float *out)
{
	const int np = (nb + 1) / 2;
	rg_q8p *ap = malloc((size_t)R * (size_t)np * sizeof(rg_q8p));

	if (!ap) {
		for (int r = 0; r < R; r++)
			out[r] = NAN;
		return;
	}
	for (int r = 0; r < R; r++)
		rg_q8_pack_row_avx512(a + (size_t)r * lda, nb, ap + (size_t)r * np);
	f(w, a, ap, lda, (size_t)np, nb, R, out);
	free(ap);
}

#define ENTRIES(t)                                                                            \
	void rg_qdotp_##t##_avx512(const void *w, const rg_q8a *a, const rg_q8p *ap, size_t lda, \
				   size_t ldp, int nb, int R, float *out)                     \
	{                                                                                     \
		if (g_vnni) {                                                                 \
			t##_vnni(w, a, ap, lda, ldp, nb, R, out);                             \
			return;                                                               \
		}                                                                             \
		QROWS_SWITCH(t##_rows_bwp, ap, ldp)                                           \
	}                                                                                     \
	float rg_qdot_##t##_avx512(const void *w, const rg_q8a *a, int nb)                    \
	{                                                                                     \
		float o;                                                                      \
                                                                                              \
		packed_call(rg_qdotp_##t##_avx512, w, a, 0, nb, 1, &o);                       \
		return o;                                                                     \
	}                                                                                     \
	void rg_qdotr_##t##_avx512(const void *w, const rg_q8a *a, size_t lda, int nb, int R, \
				   float *out)                                                \
	{                                                                                     \
		packed_call(rg_qdotp_##t##_avx512, w, a, lda, nb, R, out);                    \
	}
ENTRIES(q8_0)
ENTRIES(q4_0)
ENTRIES(q4_1)
ENTRIES(q5_0)
ENTRIES(q5_1)
ENTRIES(q4_k)
ENTRIES(q5_k)
ENTRIES(q6_k)
#undef ENTRIES

/* F16 weights (cpu_kern.h hdot_tile_f16): as the AVX2 tile, 16 halves a step (not run on a
 * CPU with AVX-512 in the session that wrote it: test_qgemm_cpu checks it where the CPU has
 * it). */
static inline __attribute__((always_inline)) void hdot_tile_r(const uint16_t *w, size_t ldw,
								const int NW, const float *a,
								size_t lda, int K, const int R,
								float *out, size_t ldo)
{
	__m512 acc[RG_HDOT_W][RG_HDOT_R];

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
#define RG_QISA avx2	/* the activation quantizer: the AVX2 one */
#define RG_Q32ISA avx512
#define RG_QPACK 1
#define RG_QROWS 8 /* rows per multi-row dot: 8 x 2 accumulators of 32 registers */
#define RG_KQISA avx512
#define RG_ISA_NAME "avx512"
#include "ops/cpu/kern.h"
#else
#include "ops/cpu/cpu_kern.h"
/* not an x86 build: an empty table that rg_cpu_kern_select never picks */
const rg_cpu_kern rg_cpu_kern_avx512 = {.isa = NULL};
#endif
