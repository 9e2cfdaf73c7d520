/* kern.h compiled for AVX2 with FMA: 8 float32 lanes; and the AVX2 quantized kernels
 * (qweight.h), which the AVX-512 table uses too. */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#pragma GCC target("avx2,fma,bmi2,f16c")

#include "ops/cpu/cpu_kern.h"
#include "ops/cpu/qkern_x86.h"

static inline float hsum8(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));

	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}


void rg_q8_quant_row_avx2(const float *x, int K, rg_q8a *out)
{
	const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));

	for (int b = 0; b < K / RG_QK; b++, x += RG_QK) {
		__m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8);
		__m256 v2 = _mm256_loadu_ps(x + 16), v3 = _mm256_loadu_ps(x + 24);
		__m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(v0, absmask),
						       _mm256_and_ps(v1, absmask)),
					 _mm256_max_ps(_mm256_and_ps(v2, absmask),
						       _mm256_and_ps(v3, absmask)));
		__m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
		float amax, d, id;
		__m256 vid;
		__m256i i0, i1, i2, i3, p, s16;

		h = _mm_max_ps(h, _mm_movehl_ps(h, h));
		h = _mm_max_ss(h, _mm_movehdup_ps(h));
		amax = _mm_cvtss_f32(h);
		d = amax / 127.f;
		id = d > 0.f ? 1.f / d : 0.f;
		vid = _mm256_set1_ps(id);
		/* round half to even (MXCSR default), as the generic twin's nearbyintf */
		i0 = _mm256_cvtps_epi32(_mm256_mul_ps(v0, vid));
		i1 = _mm256_cvtps_epi32(_mm256_mul_ps(v1, vid));
		i2 = _mm256_cvtps_epi32(_mm256_mul_ps(v2, vid));
		i3 = _mm256_cvtps_epi32(_mm256_mul_ps(v3, vid));
		/* sum of the 32 values, then pack to bytes in order (packs interleave lanes) */
		s16 = _mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3));
		p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
		p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
		_mm256_storeu_si256((__m256i *)out[b].q, p);
		{
			__m128i t = _mm_add_epi32(_mm256_castsi256_si128(s16),
						  _mm256_extracti128_si256(s16, 1));

			t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4e));
			t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xb1));
			out[b].d = d;
			out[b].s = d * (float)_mm_cvtsi128_si32(t);
		}
	}
}

/* Every dot is written once, for R activation rows (a + r * lda, r < R) as an always-inlined
 * body with R a constant: the single-row entry point is its R = 1 instance and the multi-row one
 * (rg_qdotr_*) dispatches R = 1..4, so each row goes through the same instructions in the same
 * order either way (bit-identical outputs), while each weight block is loaded and decoded once
 * for the R rows. Per row two fp32 accumulators (even and odd blocks; the K-quants: even and odd
 * sub-blocks), so the FMA chain is not the critical path of a single-row dot. */
#define QAI static inline __attribute__((always_inline))

/* The body of a dot over 32-value blocks of `bytes` bytes: blk(p, a, lda, b, R, acc, off) adds
 * block b's products of every row r < R to acc[r] (and the offset term, if any, to off[r]: one
 * scalar chain per row, not two, so that 4 rows' 8 vector accumulators and 4 offsets leave
 * registers for the weights). */
#define QROWS_32(t, bytes)                                                                    \
	QAI void t##_rows(const uint8_t *p, const rg_q8a *a, size_t lda, int nb, const int R,  \
			  float *out)                                                         \
	{                                                                                     \
		__m256 acc0[RG_QDOT_ROWS], acc1[RG_QDOT_ROWS];                                 \
		float off[RG_QDOT_ROWS];                                                      \
		int b = 0;                                                                    \
                                                                                              \
		_Pragma("GCC unroll 4")                                                       \
		for (int r = 0; r < R; r++) {                                                 \
			acc0[r] = acc1[r] = _mm256_setzero_ps();                              \
			off[r] = 0.f;                                                         \
		}                                                                             \
		for (; b + 2 <= nb; b += 2) {                                                 \
			t##_blk(p + (size_t)b * (bytes), a, lda, b, R, acc0, off);             \
			t##_blk(p + (size_t)(b + 1) * (bytes), a, lda, b + 1, R, acc1, off);   \
		}                                                                             \
		if (b < nb)                                                                   \
			t##_blk(p + (size_t)b * (bytes), a, lda, b, R, acc0, off);             \
		_Pragma("GCC unroll 4")                                                       \
		for (int r = 0; r < R; r++)                                                   \
			out[r] = hsum8(_mm256_add_ps(acc0[r], acc1[r])) + off[r];              \
	}

#define QDOT_ENTRIES(t)                                                                       \
	float rg_qdot_##t##_avx2(const void *w, const rg_q8a *a, int nb)                      \
	{                                                                                     \
		float o;                                                                      \
                                                                                              \
		t##_rows(w, a, 0, nb, 1, &o);                                                 \
		return o;                                                                     \
	}                                                                                     \
	void rg_qdotr_##t##_avx2(const void *w, const rg_q8a *a, size_t lda, int nb, int R,   \
				 float *out)                                                  \
	{                                                                                     \
		switch (R) {                                                                  \
		case 1: t##_rows(w, a, lda, nb, 1, out); break;                               \
		case 2: t##_rows(w, a, lda, nb, 2, out); break;                               \
		case 3: t##_rows(w, a, lda, nb, 3, out); break;                               \
		default: t##_rows(w, a, lda, nb, 4, out); break;                              \
		}                                                                             \
	}

static inline __m256i act_q(const rg_q8a *x)
{
	return _mm256_loadu_si256((const __m256i *)x->q);
}

/* signed weights q (|q| <= 128) against every row: |q| (unsigned, computed once) times the
 * activations with q's sign through vpmaddubsw (pairs fit int16: |q| <= 128, |a| <= 127), then
 * vpmaddwd by ones into 8 int32 lanes */
QAI void signed_rows(__m256i q, float d, const rg_q8a *a, size_t lda, int b, const int R,
		     __m256 *acc)
{
	const __m256i qa = _mm256_sign_epi8(q, q);

#pragma GCC unroll 4
	for (int r = 0; r < R; r++) {
		const rg_q8a *x = a + (size_t)r * lda + b;
		const __m256i p16 = _mm256_maddubs_epi16(qa, _mm256_sign_epi8(act_q(x), q));
		const __m256i s = _mm256_madd_epi16(p16, _mm256_set1_epi16(1));

		acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * x->d), _mm256_cvtepi32_ps(s), acc[r]);
	}
}

/* unsigned weights u (< 32) against every row, plus m s_a: straight into vpmaddubsw's
 * unsigned operand (pairs <= 2 * 31 * 127 fit int16) */
QAI void unsigned_rows(__m256i u, float d, float m, const rg_q8a *a, size_t lda, int b,
		       const int R, __m256 *acc, float *off)
{
#pragma GCC unroll 4
	for (int r = 0; r < R; r++) {
		const rg_q8a *x = a + (size_t)r * lda + b;
		const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(u, act_q(x)),
						    _mm256_set1_epi16(1));

		acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * x->d), _mm256_cvtepi32_ps(s), acc[r]);
		off[r] += m * x->s;
	}
}

QAI void q8_0_blk(const uint8_t *p, const rg_q8a *a, size_t lda, int b, const int R,
		  __m256 *acc, float *off)
{
	(void)off;
	signed_rows(_mm256_loadu_si256((const __m256i *)(p + 2)), f16(p), a, lda, b, R, acc);
}

QAI void q4_0_blk(const uint8_t *p, const rg_q8a *a, size_t lda, int b, const int R,
		  __m256 *acc, float *off)
{
	(void)off;
	signed_rows(_mm256_sub_epi8(nibbles(p + 2), _mm256_set1_epi8(8)), f16(p), a, lda, b, R,
		    acc);
}

QAI void q4_1_blk(const uint8_t *p, const rg_q8a *a, size_t lda, int b, const int R,
		  __m256 *acc, float *off)
{
	unsigned_rows(nibbles(p + 4), f16(p), f16(p + 2), a, lda, b, R, acc, off);
}

QAI void q5_0_blk(const uint8_t *p, const rg_q8a *a, size_t lda, int b, const int R,
		  __m256 *acc, float *off)
{
	(void)off;
	signed_rows(_mm256_sub_epi8(_mm256_or_si256(nibbles(p + 6), q5_high(p + 2)),
				    _mm256_set1_epi8(16)),
		    f16(p), a, lda, b, R, acc);
}

QAI void q5_1_blk(const uint8_t *p, const rg_q8a *a, size_t lda, int b, const int R,
		  __m256 *acc, float *off)
{
	unsigned_rows(_mm256_or_si256(nibbles(p + 8), q5_high(p + 4)), f16(p), f16(p + 2), a,
		      lda, b, R, acc, off);
}

QROWS_32(q8_0, 34)
QROWS_32(q4_0, 18)
QROWS_32(q4_1, 20)
QROWS_32(q5_0, 22)
QROWS_32(q5_1, 24)

/* The 32 activation bytes of a block times 32 unsigned weight bytes (< 64), summed in pairs
 * (16 int16: pair i holds bytes 2i, 2i + 1; |sum| <= 2 * 63 * 127), then in quadruples weighted
 * by sc (madd: 8 int32; lanes 0-3 from bytes 0-15, 4-7 from bytes 16-31). */
static inline __m256i dot_u8_sc(__m256i w, const int8_t *a, __m256i sc)
{
	return _mm256_madd_epi16(_mm256_maddubs_epi16(w, _mm256_loadu_si256((const __m256i *)a)),
				 sc);
}

/* K-quants (qweight.h): per super-block, 8 sub-blocks of one integer vector each, converted
 * and multiplied by d d_a in two fp32 accumulators per row (even and odd sub-blocks); the
 * minimum term sum_s mn[s] s_a in scalar (8 products per 256 values). Q5_K (five): the fifth
 * bit of sub-block s is bit s of qh[l]: (qh >> s) << 4 & 0x10 in 16-bit lanes (bit 4 of each
 * byte then comes from the same byte, s < 8). */
QAI void k45_rows(const uint8_t *p, const rg_q8a *a, size_t lda, int nb, const int R,
		  float *out, const bool five)
{
	const size_t bytes = five ? 176 : 144;
	const __m256i m4 = _mm256_set1_epi8(15), b4 = _mm256_set1_epi8(0x10);
	__m256 acc0[RG_QDOT_ROWS], acc1[RG_QDOT_ROWS];
	float off[RG_QDOT_ROWS];

#pragma GCC unroll 4
	for (int r = 0; r < R; r++) {
		acc0[r] = acc1[r] = _mm256_setzero_ps();
		off[r] = 0.f;
	}
	for (int i = 0; i < nb / 8; i++, p += bytes) {
		const float d = f16(p), dmin = f16(p + 2);
		const __m256i qh = five ? _mm256_loadu_si256((const __m256i *)(p + 16))
					: _mm256_setzero_si256();
		const uint8_t *qs = p + (five ? 48 : 16);
		uint8_t sc[8], mn[8];

		rg_q_k4_scales(p + 4, sc, mn);
		for (int k = 0; k < 4; k++) {
			const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * k));
			__m256i lo = _mm256_and_si256(q, m4);
			__m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
			const __m256i sc0 = _mm256_set1_epi16(sc[2 * k]);
			const __m256i sc1 = _mm256_set1_epi16(sc[2 * k + 1]);

			if (five) {
				lo = _mm256_or_si256(
					lo, _mm256_and_si256(
						    _mm256_slli_epi16(_mm256_srli_epi16(qh, 2 * k), 4),
						    b4));
				hi = _mm256_or_si256(
					hi, _mm256_and_si256(_mm256_slli_epi16(
								     _mm256_srli_epi16(qh, 2 * k + 1), 4),
							     b4));
			}
#pragma GCC unroll 4
			for (int r = 0; r < R; r++) {
				const rg_q8a *x = a + (size_t)r * lda + 8 * i + 2 * k;
				const __m256i s0 = dot_u8_sc(lo, x[0].q, sc0);
				const __m256i s1 = dot_u8_sc(hi, x[1].q, sc1);

				acc0[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * x[0].d),
							  _mm256_cvtepi32_ps(s0), acc0[r]);
				acc1[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * x[1].d),
							  _mm256_cvtepi32_ps(s1), acc1[r]);
			}
		}
#pragma GCC unroll 4
		for (int r = 0; r < R; r++) {
			const rg_q8a *x = a + (size_t)r * lda + 8 * i;
			float sm = 0.f;

			for (int s = 0; s < 8; s++)
				sm += (float)mn[s] * x[s].s;
			off[r] += dmin * sm;
		}
	}
#pragma GCC unroll 4
	for (int r = 0; r < R; r++)
		out[r] = hsum8(_mm256_add_ps(acc0[r], acc1[r])) - off[r];
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

/* Q6_K: the unsigned 6-bit q (0..63) through vpmaddubsw, minus 32 q_a the same way
 * (pair sums of q q_a and of 32 q_a fit int16 and so does their difference, <= 24130);
 * the two 16-value scales of an activation block weight its halves in vpmaddwd. Activation
 * block b = 4 h + j reads ql[64 h + 32 (j & 1) ..] (nibble j / 2) and bits 2j of qh[32 h ..]. */
QAI void q6_k_rows(const uint8_t *p, const rg_q8a *a, size_t lda, int nb, const int R,
		   float *out)
{
	const __m256i m4 = _mm256_set1_epi8(15), m2 = _mm256_set1_epi8(0x30);
	const __m256i k32 = _mm256_set1_epi8(32);
	__m256 acc0[RG_QDOT_ROWS], acc1[RG_QDOT_ROWS];

#pragma GCC unroll 4
	for (int r = 0; r < R; r++)
		acc0[r] = acc1[r] = _mm256_setzero_ps();
	for (int i = 0; i < nb / 8; i++, p += 210) {
		const int8_t *sc = (const int8_t *)(p + 192);
		const float d = f16(p + 208);

		for (int h = 0; h < 2; h++) {
			const __m256i l0 = _mm256_loadu_si256((const __m256i *)(p + 64 * h));
			const __m256i l1 = _mm256_loadu_si256((const __m256i *)(p + 64 * h + 32));
			const __m256i qh = _mm256_loadu_si256((const __m256i *)(p + 128 + 32 * h));
			__m256i q[4];

			q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4),
					       _mm256_and_si256(_mm256_slli_epi16(qh, 4), m2));
			q[1] = _mm256_or_si256(_mm256_and_si256(l1, m4),
					       _mm256_and_si256(_mm256_slli_epi16(qh, 2), m2));
			q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
					       _mm256_and_si256(qh, m2));
			q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
					       _mm256_and_si256(_mm256_srli_epi16(qh, 2), m2));
#pragma GCC unroll 4
			for (int j = 0; j < 4; j++) {
				const int b = 4 * h + j;
				const __m256i scv = _mm256_set_m128i(_mm_set1_epi16(sc[2 * b + 1]),
								     _mm_set1_epi16(sc[2 * b]));

#pragma GCC unroll 4
				for (int r = 0; r < R; r++) {
					const rg_q8a *x = a + (size_t)r * lda + 8 * i + b;
					const __m256i av = act_q(x);
					const __m256i p16 =
						_mm256_sub_epi16(_mm256_maddubs_epi16(q[j], av),
								 _mm256_maddubs_epi16(k32, av));
					const __m256 f =
						_mm256_cvtepi32_ps(_mm256_madd_epi16(p16, scv));
					const __m256 dv = _mm256_set1_ps(d * x->d);

					if (j & 1)
						acc1[r] = _mm256_fmadd_ps(dv, f, acc1[r]);
					else
						acc0[r] = _mm256_fmadd_ps(dv, f, acc0[r]);
				}
			}
		}
	}
#pragma GCC unroll 4
	for (int r = 0; r < R; r++)
		out[r] = hsum8(_mm256_add_ps(acc0[r], acc1[r]));
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
#undef QROWS_32
#undef QAI

/* F16 weights (cpu_kern.h hdot_tile_f16): 8 halves of each of NW weight rows widened by F16C a
 * step, one 8-lane FMA accumulator per (weight row, activation row), summed over its lanes at
 * the end; NW and R constants of each instance, so the 12 accumulators stay in registers. The
 * next tile's rows (the caller's next NW rows) are prefetched a cache line per 32 halves: the
 * three interleaved row streams alone ran at 7 GB/s on one EPYC core where one sequential
 * stream ran at 11, and 10 with the prefetch (a streaming micro-benchmark of 56 MB). */
static inline __attribute__((always_inline)) void hdot_tile_r(const uint16_t *w, size_t ldw,
								const int NW, const float *a,
								size_t lda, int K, const int R,
								float *out, size_t ldo)
{
	__m256 acc[RG_HDOT_W][RG_HDOT_R];

	for (int i = 0; i < NW; i++)
		for (int r = 0; r < R; r++)
			acc[i][r] = _mm256_setzero_ps();
	for (int k = 0; k < K; k += 8) {
		__m256 wv[RG_HDOT_W];

		if (!(k & 31))
			for (int i = 0; i < NW; i++)
				_mm_prefetch((const char *)(w + (size_t)(NW + i) * ldw + k),
					     _MM_HINT_T0);
		for (int i = 0; i < NW; i++)
			wv[i] = _mm256_cvtph_ps(
				_mm_loadu_si128((const __m128i *)(w + (size_t)i * ldw + k)));
		for (int r = 0; r < R; r++) {
			const __m256 av = _mm256_loadu_ps(a + (size_t)r * lda + k);

			for (int i = 0; i < NW; i++)
				acc[i][r] = _mm256_fmadd_ps(wv[i], av, acc[i][r]);
		}
	}
	for (int i = 0; i < NW; i++)
		for (int r = 0; r < R; r++)
			out[(size_t)r * ldo + i] = hsum8(acc[i][r]);
}

#define HDOT_R(nw)                                                                            \
	switch (R) {                                                                          \
	case 1: hdot_tile_r(w, ldw, nw, a, lda, K, 1, out, ldo); break;                       \
	case 2: hdot_tile_r(w, ldw, nw, a, lda, K, 2, out, ldo); break;                       \
	case 3: hdot_tile_r(w, ldw, nw, a, lda, K, 3, out, ldo); break;                       \
	default: hdot_tile_r(w, ldw, nw, a, lda, K, 4, out, ldo); break;                      \
	}

void rg_hdot_tile_f16_avx2(const uint16_t *w, size_t ldw, int NW, const float *a, size_t lda,
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

void rg_f16_to_f32_avx2(const uint16_t *h, float *out, size_t n)
{
	size_t i = 0;

	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i))));
	for (; i < n; i++)
		out[i] = _cvtsh_ss(h[i]);
}

#define RG_VW 8
#define RG_ISA avx2
#define RG_QISA avx2
#define RG_KQISA avx2
#define RG_ISA_NAME "avx2"
#include "ops/cpu/kern.h"
#else
#include "ops/cpu/cpu_kern.h"
/* not an x86 build: an empty table that rg_cpu_kern_select never picks */
const rg_cpu_kern rg_cpu_kern_avx2 = {.isa = NULL};
#endif
