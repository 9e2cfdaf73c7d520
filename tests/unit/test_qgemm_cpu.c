/* The CPU's quantized GEMM (src/ops/cpu/qweight.h, qgemm.c): the activation quantizer, the
 * per-type block dot products (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K; and F16 weights
 * against f32 rows, test_qgemm_f16) of the generic,
 * AVX2 and AVX-512 tables (the latter with and without AVX512-VNNI where the CPU has it), and
 * rg_cpu_qgemm over them, against a reference computed here in double
 * from the weights as dequantized (Q8_0 / Q4_* / Q5_*: by the test itself; K-quants: random bytes
 * with sane fp16 scales, dequantized by src/core/gguf.c's rg_gguf_to_f32, which test_gguf checks
 * bit-for-bit against the gguf package; tests/py/test_gguf_quant.py checks the K-quant GEMM
 * against gguf.quants.dequantize itself) and the *unquantized* activations.
 *
 * Tolerance: rounding a block of activations to int8 with d = max|x| / 127 moves each value by
 * at most d / 2, so |got - ref| <= sum over blocks b of (d_b / 2) * sum_{j in b} |w_j| (the
 * Q8 bound), plus fp32 accumulation, bounded here by 1e-5 * sum_j |w_j x_j| + 1e-30; the test
 * allows the Q8 bound times 1.001 (d itself is rounded to fp32) plus that. Generic and AVX2
 * must quantize activations to identical blocks, and every table's dot products agree with the
 * generic ones to the fp32 term alone. Each table's multi-row dots (qdotr_*, which the GEMM runs
 * for M > 1) give every row the bits of its single-row dot. Outputs carry guard values that
 * must survive. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/gguf.h"
#include "ops/cpu/cpu_kern.h"
#include "ops/cpu/qweight.h"

#define GUARD 16
#define SENTINEL (-12345.25f)

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;

static uint32_t urand(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (uint32_t)(rng_state >> 32);
}

static float frand(void) /* uniform in [-1, 1) */
{
	return (float)((double)urand() / 4294967296.0 * 2.0 - 1.0);
}

/* fp16 bits of a value k / 4096 with 1 <= |k| < 1024: exact in binary16 (normal for these k). */
static uint16_t f16_of_k(int k, double *val)
{
	const double v = k / 4096.0;
	int e;
	double m = frexp(fabs(v), &e); /* v = m 2^e, m in [0.5, 1) */
	const uint16_t mant = (uint16_t)((m * 2.0 - 1.0) * 1024.0);
	const uint16_t exp = (uint16_t)(e - 1 + 15);

	*val = v;
	return (uint16_t)((v < 0 ? 0x8000 : 0) | exp << 10 | mant);
}

static size_t block_bytes(int type)
{
	return rg_cpu_qtype_block_bytes(type);
}

static bool is_kquant(int type)
{
	return type == RG_GGUF_Q4_K || type == RG_GGUF_Q5_K || type == RG_GGUF_Q6_K;
}

/* K-quant blocks: every byte random (any bytes are a valid block), then the fp16 super-block
 * scales set to values k / 4096 (Q4_K / Q5_K's dmin too) so that the weights stay finite; the
 * values from rg_gguf_to_f32. */
static void make_kweight(int type, int N, int K, uint8_t *w, double *wd)
{
	const size_t bb = block_bytes(type), n = (size_t)N * (K / 256) * bb;
	rg_gguf_tensor t = {.name = "w", .n_dims = 2, .ne = {K, N, 1, 1}, .type = (uint32_t)type,
			    .data = w, .nbytes = n, .numel = (int64_t)N * K};
	float *f = malloc((size_t)N * K * sizeof(float));
	double v;

	assert_non_null(f);
	for (size_t i = 0; i < n; i++)
		w[i] = (uint8_t)urand();
	for (size_t b = 0; b < n / bb; b++) {
		uint8_t *p = w + b * bb;
		const uint16_t d = f16_of_k((int)(urand() % 60) + 1, &v);
		const uint16_t dm = f16_of_k((int)(urand() % 60) + 1, &v);

		if (type == RG_GGUF_Q6_K) {
			p[208] = (uint8_t)d;
			p[209] = (uint8_t)(d >> 8);
		} else {
			p[0] = (uint8_t)d;
			p[1] = (uint8_t)(d >> 8);
			p[2] = (uint8_t)dm;
			p[3] = (uint8_t)(dm >> 8);
		}
	}
	assert_int_equal(rg_gguf_to_f32(&t, f), RG_OK);
	for (size_t i = 0; i < (size_t)N * K; i++)
		wd[i] = f[i];
	free(f);
}

/* Random blocks of type for a (N, K) weight into w, and their values as the block formats
 * define them (ggml's, written out again here) into wd (N, K) double. */
static void make_weight(int type, int N, int K, uint8_t *w, double *wd)
{
	const int nb = K / 32;

	if (is_kquant(type)) {
		make_kweight(type, N, K, w, wd);
		return;
	}

	for (int n = 0; n < N; n++)
		for (int b = 0; b < nb; b++) {
			uint8_t *p = w + ((size_t)n * nb + b) * block_bytes(type);
			double *o = wd + (size_t)n * K + (size_t)b * 32;
			double d, m = 0;
			uint16_t h = f16_of_k((int)(urand() % 200) + 1, &d);

			p[0] = (uint8_t)h;
			p[1] = (uint8_t)(h >> 8);
			if (type == RG_GGUF_Q8_0) {
				for (int j = 0; j < 32; j++) {
					/* the full int8 range, -128 included */
					int8_t q = (int8_t)(urand() & 0xff);

					p[2 + j] = (uint8_t)q;
					o[j] = d * q;
				}
				continue;
			}
			if (type == RG_GGUF_Q4_1 || type == RG_GGUF_Q5_1) {
				uint16_t hm = f16_of_k(-(int)(urand() % 500) - 1, &m);

				p[2] = (uint8_t)hm;
				p[3] = (uint8_t)(hm >> 8);
			}
			if (type == RG_GGUF_Q5_0 || type == RG_GGUF_Q5_1) {
				/* the fifth bits: u32 qh, little-endian, bit j for value j */
				uint8_t *qh = p + (type == RG_GGUF_Q5_0 ? 2 : 4), *qs = qh + 4;
				const uint32_t bits = urand();
				const int off = type == RG_GGUF_Q5_0 ? -16 : 0;

				for (int i = 0; i < 4; i++)
					qh[i] = (uint8_t)(bits >> (8 * i));
				for (int j = 0; j < 16; j++) {
					const int lo = (int)(urand() & 15), hi = (int)(urand() & 15);
					const int v0 = lo + 16 * (int)((bits >> j) & 1) + off;
					const int v1 = hi + 16 * (int)((bits >> (j + 16)) & 1) + off;

					qs[j] = (uint8_t)(lo | hi << 4);
					o[j] = d * v0 + m;
					o[j + 16] = d * v1 + m;
				}
				continue;
			}
			for (int j = 0; j < 16; j++) {
				uint8_t *qs = p + (type == RG_GGUF_Q4_0 ? 2 : 4);
				const int lo = (int)(urand() & 15), hi = (int)(urand() & 15);

				qs[j] = (uint8_t)(lo | hi << 4);
				if (type == RG_GGUF_Q4_0) {
					o[j] = d * (lo - 8);
					o[j + 16] = d * (hi - 8);
				} else {
					o[j] = d * lo + m;
					o[j + 16] = d * hi + m;
				}
			}
		}
}

/* Activations: uniform, with an all-zero block and a block of one large outlier per row. */
static void make_act(int M, int K, float *a)
{
	for (size_t i = 0; i < (size_t)M * K; i++)
		a[i] = frand();
	for (int m = 0; m < M; m++) {
		if (K >= 64)
			memset(a + (size_t)m * K + 32, 0, 32 * sizeof(float));
		a[(size_t)m * K] = 40.f * (m + 1);
	}
}

/* The reference and the tolerance of one output (the header's bound). */
static void ref_one(const double *wrow, const float *arow, int K, double *ref, double *tol)
{
	double r = 0, q8 = 0, mag = 0;

	for (int b = 0; b < K / 32; b++) {
		double amax = 0, wsum = 0;

		for (int j = 0; j < 32; j++) {
			const int k = b * 32 + j;

			r += wrow[k] * arow[k];
			mag += fabs(wrow[k] * arow[k]);
			wsum += fabs(wrow[k]);
			amax = fmax(amax, fabs(arow[k]));
		}
		q8 += amax / 127.0 / 2.0 * wsum;
	}
	*ref = r;
	*tol = 1.001 * q8 + 1e-5 * mag + 1e-30;
}

static bool have_avx2(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
	       __builtin_cpu_supports("f16c");
#else
	return false;
#endif
}

static bool have_avx512(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_cpu_init();
	return have_avx2() && __builtin_cpu_supports("avx512f") &&
	       __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
	       __builtin_cpu_supports("avx512dq");
#else
	return false;
#endif
}

#define N_TYPES 8
static const int TYPES[N_TYPES] = {RG_GGUF_Q8_0, RG_GGUF_Q4_0, RG_GGUF_Q4_1, RG_GGUF_Q5_0,
				   RG_GGUF_Q5_1, RG_GGUF_Q4_K, RG_GGUF_Q5_K, RG_GGUF_Q6_K};
static const int KS[] = {32, 64, 4096 + 32};
static const int KS_K[] = {256, 512, 4096 + 256}; /* K-quants: whole super-blocks */

/* The tables this CPU runs, widest last; their count. */
static int tables(const rg_cpu_kern *t[3])
{
	int n = 0;

	t[n++] = &rg_cpu_kern_generic;
	if (have_avx2())
		t[n++] = &rg_cpu_kern_avx2;
	if (have_avx512())
		t[n++] = &rg_cpu_kern_avx512;
	return n;
}

static rg_qdotp_fn qdotp_of(const rg_cpu_kern *k, int type)
{
	switch (type) {
	case RG_GGUF_Q8_0: return k->qdotp_q8_0;
	case RG_GGUF_Q4_0: return k->qdotp_q4_0;
	case RG_GGUF_Q4_1: return k->qdotp_q4_1;
	case RG_GGUF_Q5_0: return k->qdotp_q5_0;
	case RG_GGUF_Q5_1: return k->qdotp_q5_1;
	case RG_GGUF_Q4_K: return k->qdotp_q4_k;
	case RG_GGUF_Q5_K: return k->qdotp_q5_k;
	default: return k->qdotp_q6_k;
	}
}

static rg_qdotr_fn qdotr_of(const rg_cpu_kern *k, int type)
{
	switch (type) {
	case RG_GGUF_Q8_0:
		return k->qdotr_q8_0;
	case RG_GGUF_Q4_0:
		return k->qdotr_q4_0;
	case RG_GGUF_Q4_1:
		return k->qdotr_q4_1;
	case RG_GGUF_Q5_0:
		return k->qdotr_q5_0;
	case RG_GGUF_Q5_1:
		return k->qdotr_q5_1;
	case RG_GGUF_Q4_K:
		return k->qdotr_q4_k;
	case RG_GGUF_Q5_K:
		return k->qdotr_q5_k;
	case RG_GGUF_Q6_K:
		return k->qdotr_q6_k;
	}
	fail_msg("type %d", type);
	return NULL;
}

static float (*qdot_of(const rg_cpu_kern *k, int type))(const void *, const rg_q8a *, int)
{
	switch (type) {
	case RG_GGUF_Q8_0:
		return k->qdot_q8_0;
	case RG_GGUF_Q4_0:
		return k->qdot_q4_0;
	case RG_GGUF_Q4_1:
		return k->qdot_q4_1;
	case RG_GGUF_Q5_0:
		return k->qdot_q5_0;
	case RG_GGUF_Q5_1:
		return k->qdot_q5_1;
	case RG_GGUF_Q4_K:
		return k->qdot_q4_k;
	case RG_GGUF_Q5_K:
		return k->qdot_q5_k;
	case RG_GGUF_Q6_K:
		return k->qdot_q6_k;
	}
	fail_msg("type %d", type);
	return NULL;
}

/* The activation quantizer: d = max|x| / 127, |x - d q| <= d / 2, s = d sum q; the AVX2 blocks
 * are the generic ones, byte for byte. */
static void test_q8_quant_row(void **state)
{
	const int K = 4096 + 32, nb = K / 32;
	float *x = malloc(K * sizeof(float));
	rg_q8a *g = malloc((nb + 1) * sizeof(rg_q8a)), *v = malloc((nb + 1) * sizeof(rg_q8a));

	(void)state;
	assert_non_null(x);
	assert_non_null(g);
	assert_non_null(v);
	make_act(1, K, x);
	x[100] = 1.5f / 127.f * 3.f; /* ties of the rounding come from values like this one */
	memset(&g[nb], 0x5a, sizeof(rg_q8a));
	rg_cpu_kern_generic.q8_quant_row(x, K, g);
	for (int i = 0; i < (int)sizeof(rg_q8a); i++)
		assert_int_equal(((uint8_t *)&g[nb])[i], 0x5a); /* guard block untouched */
	for (int b = 0; b < nb; b++) {
		double amax = 0;
		int sum = 0;

		for (int j = 0; j < 32; j++)
			amax = fmax(amax, fabs(x[b * 32 + j]));
		assert_true(fabs(g[b].d - amax / 127.0) <= 1e-6 * amax / 127.0);
		for (int j = 0; j < 32; j++) {
			const double e = fabs((double)x[b * 32 + j] - (double)g[b].d * g[b].q[j]);

			assert_true(g[b].q[j] >= -127 && g[b].q[j] <= 127);
			assert_true(e <= 0.5001 * g[b].d + 1e-30);
			sum += g[b].q[j];
		}
		assert_true(fabs(g[b].s - (double)g[b].d * sum) <= 1e-6 * fabs(g[b].d * sum) + 1e-30);
	}
	assert_true(g[1].d == 0.f && g[1].s == 0.f); /* the zero block */
	if (have_avx2()) {
		rg_cpu_kern_avx2.q8_quant_row(x, K, v);
		for (int b = 0; b < nb; b++) {
			assert_true(v[b].d == g[b].d);
			assert_true(v[b].s == g[b].s);
			assert_memory_equal(v[b].q, g[b].q, 32);
		}
	}
	free(x);
	free(g);
	free(v);
}

/* One table's rg_cpu_qgemm for every type, K and M, N odd, with a bias; every output against
 * the double reference, guards after the output; returns the outputs for the agreement check. */
static float *run_qgemm(const rg_cpu_kern *k, int type, const uint8_t *w, int M, int N, int K,
			const float *a, const float *bias)
{
	float *out = malloc(((size_t)M * N + GUARD) * sizeof(float));
	rg_cpu_qweight qw;

	assert_non_null(out);
	for (size_t i = 0; i < (size_t)M * N + GUARD; i++)
		out[i] = SENTINEL;
	assert_int_equal(rg_cpu_qweight_register(w, type, N, K), RG_OK);
	assert_true(rg_cpu_qweight_find(w, &qw));
	assert_int_equal(qw.type, type);
	assert_int_equal(rg_cpu_qgemm(k, &qw, a, bias, out, M, N, K, RG_ACT_NONE), RG_OK);
	rg_cpu_qweight_release(w);
	assert_false(rg_cpu_qweight_find(w, &qw));
	for (int i = 0; i < GUARD; i++)
		assert_true(out[(size_t)M * N + i] == SENTINEL);
	return out;
}

static void test_qgemm_types(void **state)
{
	/* 1 (the single-row dot), 3-5 and 16-17 (the multi-row dot's groups of 4 and their
	 * remainders) */
	static const int MS[] = {1, 3, 4, 5, 16, 17};
	static const int NS[] = {1, 37};
	const rg_cpu_kern *tab[3];
	const int nt = tables(tab);

	(void)state;
	for (size_t ti = 0; ti < N_TYPES; ti++)
		for (size_t ki = 0; ki < 3; ki++)
			for (size_t mi = 0; mi < sizeof(MS) / sizeof(MS[0]); mi++)
				for (size_t ni = 0; ni < 2; ni++) {
					const int type = TYPES[ti], M = MS[mi], N = NS[ni];
					const int K = is_kquant(type) ? KS_K[ki] : KS[ki];
					uint8_t *w = malloc((size_t)N * (K / 32) * 34);
					double *wd = malloc((size_t)N * K * sizeof(double));
					float *a = malloc((size_t)M * K * sizeof(float));
					float *bias = malloc(N * sizeof(float));

					assert_non_null(w);
					assert_non_null(wd);
					assert_non_null(a);
					assert_non_null(bias);
					make_weight(type, N, K, w, wd);
					make_act(M, K, a);
					for (int n = 0; n < N; n++)
						bias[n] = frand();
					for (int t = 0; t < nt; t++) {
						float *g = run_qgemm(tab[t], type, w, M, N, K, a, bias);

						for (int m = 0; m < M; m++)
							for (int n = 0; n < N; n++) {
								const size_t i = (size_t)m * N + n;
								double ref, tol;

								ref_one(wd + (size_t)n * K,
									a + (size_t)m * K, K, &ref,
									&tol);
								ref += bias[n];
								if (!(fabs(g[i] - ref) <= tol))
									fail_msg("%s type %d K %d M %d "
										 "N %d [%d,%d]: %g vs "
										 "%g (tol %g)",
										 tab[t]->isa, type, K, M,
										 N, m, n, g[i], ref, tol);
							}
						free(g);
					}
					free(w);
					free(wd);
					free(a);
					free(bias);
				}
}

/* Every table's block dot products on the same activation blocks: equal to the generic ones up
 * to fp32 accumulation order (1e-5 of sum |w| |d q|). */
static void test_qdot_agree(void **state)
{
	const int K = 4096 + 256, nb = K / 32;
	uint8_t *w = malloc((size_t)nb * 34);
	double *wd = malloc(K * sizeof(double));
	float *x = malloc(K * sizeof(float));
	rg_q8a *aq = malloc(nb * sizeof(rg_q8a));
	const rg_cpu_kern *tab[3];
	const int nt = tables(tab);

	(void)state;
	if (nt < 2) {
		free(w), free(wd), free(x), free(aq);
		skip();
	}
	assert_non_null(w);
	assert_non_null(wd);
	assert_non_null(x);
	assert_non_null(aq);
	for (size_t ti = 0; ti < N_TYPES; ti++)
		for (int rep = 0; rep < 8; rep++) {
			const int type = TYPES[ti], one = is_kquant(type) ? 8 : 1;
			double mag = 0;

			make_weight(type, 1, K, w, wd);
			make_act(1, K, x);
			rg_cpu_kern_generic.q8_quant_row(x, K, aq);
			for (int k = 0; k < K; k++)
				mag += fabs(wd[k]) * fabs((double)aq[k / 32].d * aq[k / 32].q[k % 32]);
			for (int len = one; len <= nb; len += nb - one) { /* one block, and all */
				const float g = qdot_of(&rg_cpu_kern_generic, type)(w, aq, len);

				for (int t = 1; t < nt; t++) {
					const float v = qdot_of(tab[t], type)(w, aq, len);

					if (!(fabs(g - v) <= 1e-5 * mag + 1e-30))
						fail_msg("%s type %d len %d: %g vs generic %g",
							 tab[t]->isa, type, len, v, g);
				}
			}
		}
	free(w);
	free(wd);
	free(x);
	free(aq);
}

static bool same_bits(float x, float y)
{
	return memcmp(&x, &y, sizeof(x)) == 0;
}

/* The multi-row dots (qdotr_*) of every table: for R = 1..4 rows of activation blocks lda apart
 * (lda > nb: rows not back to back), out[r] has the bits of the table's single-row dot on row r
 * and the R + guard floats past it are untouched; and rg_cpu_qgemm at M = 1, 3, 4, 5, 16 (groups
 * of 4 and a remainder through the multi-row dot, M = 1 through the single-row one) gives every
 * row the bits of that row alone (batch invariance). */
static void test_qdotr_rows(void **state)
{
	static const int MS[] = {1, 3, 4, 5, 16};
	const int K = 1024 + 256, nb = K / 32, lda = nb + 3, MMAX = 16, N = 21;
	uint8_t *w = malloc((size_t)N * nb * 34);
	double *wd = malloc((size_t)N * K * sizeof(double));
	float *x = malloc((size_t)MMAX * K * sizeof(float));
	rg_q8a *aq = malloc((size_t)RG_QDOT_ROWS * lda * sizeof(rg_q8a));
	const rg_cpu_kern *tab[3];
	const int nt = tables(tab);

	(void)state;
	assert_non_null(w);
	assert_non_null(wd);
	assert_non_null(x);
	assert_non_null(aq);
	for (size_t ti = 0; ti < N_TYPES; ti++) {
		const int type = TYPES[ti];

		make_weight(type, N, K, w, wd);
		make_act(MMAX, K, x);
		for (int r = 0; r < RG_QDOT_ROWS; r++)
			rg_cpu_kern_generic.q8_quant_row(x + (size_t)r * K, K, aq + (size_t)r * lda);
		for (int t = 0; t < nt; t++) {
			const size_t row_bytes =
				(size_t)(is_kquant(type) ? nb / 8 : nb) * block_bytes(type);

			for (int R = 1; R <= tab[t]->qrows; R++)
				for (int n = 0; n < N; n++) {
					const uint8_t *wr = w + (size_t)n * row_bytes;
					float o[RG_QDOT_ROWS + GUARD];

					for (int i = 0; i < RG_QDOT_ROWS + GUARD; i++)
						o[i] = SENTINEL;
					qdotr_of(tab[t], type)(wr, aq, (size_t)lda, nb, R, o);
					for (int r = 0; r < R; r++) {
						const float v = qdot_of(tab[t], type)(
							wr, aq + (size_t)r * lda, nb);

						if (!same_bits(o[r], v))
							fail_msg("%s type %d R %d row %d n %d: %a vs "
								 "single-row %a",
								 tab[t]->isa, type, R, r, n, o[r], v);
					}
					for (int i = R; i < RG_QDOT_ROWS + GUARD; i++)
						assert_true(o[i] == SENTINEL);
					if (tab[t]->q8_pack_row) { /* packed pairs: the same bits */
						const int np = (nb + 1) / 2;
						rg_q8p *ap = malloc((size_t)R * np * sizeof(rg_q8p));
						float op[RG_QDOT_ROWS];

						assert_non_null(ap);
						for (int r = 0; r < R; r++)
							tab[t]->q8_pack_row(aq + (size_t)r * lda, nb,
									    ap + (size_t)r * np);
						qdotp_of(tab[t], type)(wr, aq, ap, (size_t)lda,
								       (size_t)np, nb, R, op);
						for (int r = 0; r < R; r++)
							if (!same_bits(op[r], o[r]))
								fail_msg("%s type %d R %d row %d n %d: "
									 "packed %a vs %a",
									 tab[t]->isa, type, R, r, n,
									 op[r], o[r]);
						free(ap);
					}
				}
			for (size_t mi = 0; mi < sizeof(MS) / sizeof(MS[0]); mi++) {
				const int M = MS[mi];
				float *g = run_qgemm(tab[t], type, w, M, N, K, x, NULL);

				for (int m = 0; m < M; m++) {
					float *one = run_qgemm(tab[t], type, w, 1, N, K,
							       x + (size_t)m * K, NULL);

					for (int n = 0; n < N; n++)
						if (!same_bits(g[(size_t)m * N + n], one[n]))
							fail_msg("%s type %d M %d [%d,%d]: %a in the "
								 "batch, %a alone",
								 tab[t]->isa, type, M, m, n,
								 g[(size_t)m * N + n], one[n]);
					free(one);
				}
				free(g);
			}
		}
	}
	free(w);
	free(wd);
	free(x);
	free(aq);
}

/* F16 weights kept as stored (rg_cpu_qgemm: hdot_tile_f16 up to 16 rows of A, the widened rows'
 * SGEMM above): every table against the float64 product of the same halves (exact in binary16)
 * and the f32 activations, within the fp32 accumulation term alone (no activation rounding on
 * this path); up to 16 rows, every row of a batch equal to the same row run alone (M = 1), bit
 * for bit, whatever its place in a group of 4. */
static void test_qgemm_f16(void **state)
{
	static const int MS[] = {1, 3, 4, 5, 16, 17, 70};
	static const int KS_H[] = {32, 96, 576};
	const rg_cpu_kern *tab[3];
	const int nt = tables(tab), N = 37;

	(void)state;
	for (size_t ki = 0; ki < 3; ki++)
		for (size_t mi = 0; mi < sizeof(MS) / sizeof(MS[0]); mi++) {
			const int M = MS[mi], K = KS_H[ki];
			uint16_t *w = malloc((size_t)N * K * sizeof(uint16_t));
			double *wd = malloc((size_t)N * K * sizeof(double));
			float *a = malloc((size_t)M * K * sizeof(float));
			float *bias = malloc(N * sizeof(float));

			assert_non_null(w);
			assert_non_null(wd);
			assert_non_null(a);
			assert_non_null(bias);
			for (int i = 0; i < N * K; i++) {
				int k = (int)(urand() % 2047) - 1023;

				w[i] = f16_of_k(k ? k : 1, &wd[i]);
			}
			make_act(M, K, a);
			for (int n = 0; n < N; n++)
				bias[n] = frand();
			for (int t = 0; t < nt; t++) {
				float *g = run_qgemm(tab[t], RG_GGUF_F16, (const uint8_t *)w, M, N, K,
						     a, bias);

				for (int m = 0; m < M; m++) {
					float *one = run_qgemm(tab[t], RG_GGUF_F16, (const uint8_t *)w,
							       1, N, K, a + (size_t)m * K, bias);

					for (int n = 0; n < N; n++) {
						const size_t i = (size_t)m * N + n;
						double ref = bias[n], mag = 0;

						for (int k = 0; k < K; k++) {
							const double p = wd[(size_t)n * K + k] *
									 a[(size_t)m * K + k];

							ref += p;
							mag += fabs(p);
						}
						if (!(fabs(g[i] - ref) <= 1e-5 * (mag + fabs(bias[n])) +
									  1e-30))
							fail_msg("%s f16 K %d M %d [%d,%d]: %g vs %g",
								 tab[t]->isa, K, M, m, n, g[i], ref);
						if (M <= 16 && memcmp(&g[i], &one[n], sizeof(float)))
							fail_msg("%s f16 K %d M %d row %d col %d: %a in "
								 "the batch, %a alone", tab[t]->isa, K,
								 M, m, n, g[i], one[n]);
					}
					free(one);
				}
				free(g);
			}
			free(w);
			free(wd);
			free(a);
			free(bias);
		}
}

/* Registry contract: bad shapes and types refused, no double registration. */
static void test_qweight_registry(void **state)
{
	static uint8_t w[4 * 34];
	rg_cpu_qweight qw;

	(void)state;
	assert_int_equal(rg_cpu_qweight_register(w, RG_GGUF_Q8_0, 2, 33), RG_ERR_INVALID_INPUT);
	/* a K-quant row of a part of a super-block; a type without a kernel (IQ2_XXS) */
	assert_int_equal(rg_cpu_qweight_register(w, RG_GGUF_Q6_K, 2, 32), RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_cpu_qweight_register(w, RG_GGUF_Q4_K, 2, 256 + 32),
			 RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_cpu_qweight_register(w, 16, 2, 256), RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_cpu_qweight_register(w, RG_GGUF_Q8_0, 0, 32), RG_ERR_INVALID_INPUT);
	assert_false(rg_cpu_qweight_find(w, &qw));
	assert_int_equal(rg_cpu_qweight_register(w, RG_GGUF_Q8_0, 2, 64), RG_OK);
	assert_int_equal(rg_cpu_qweight_register(w, RG_GGUF_Q4_0, 2, 64), RG_ERR_INVALID_INPUT);
	assert_true(rg_cpu_qweight_find(w, &qw));
	assert_int_equal(qw.N, 2);
	assert_int_equal(qw.K, 64);
	{
		float a[64] = {0}, out[3] = {0};

		/* a shape that is not the registered one */
		assert_int_equal(rg_cpu_qgemm(NULL, &qw, a, NULL, out, 1, 3, 64, RG_ACT_NONE),
				 RG_ERR_INVALID_INPUT);
	}
	rg_cpu_qweight_release(w);
	assert_false(rg_cpu_qweight_find(w, &qw));
	rg_cpu_qweight_release(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_q8_quant_row),
		cmocka_unit_test(test_qgemm_types),
		cmocka_unit_test(test_qdot_agree),
		cmocka_unit_test(test_qdotr_rows),
		cmocka_unit_test(test_qgemm_f16),
		cmocka_unit_test(test_qweight_registry),
	};

	int fails = cmocka_run_group_tests(tests, NULL, NULL);

#if defined(__x86_64__) || defined(__i386__)
	/* a CPU with AVX512-VNNI ran the AVX-512 table's vpdpbusd dots above: once more with
	 * them off, so that the vpmaddubsw + vpmaddwd flavour (AVX-512 CPUs without VNNI) is
	 * checked here too */
	if (have_avx512() && rg_cpu_avx512_vnni(-1)) {
		const struct CMUnitTest again[] = {
			cmocka_unit_test(test_qgemm_types),
			cmocka_unit_test(test_qdot_agree),
			cmocka_unit_test(test_qdotr_rows),
		};

		rg_cpu_avx512_vnni(0);
		fails += cmocka_run_group_tests_name("avx512 without VNNI", again, NULL, NULL);
		rg_cpu_avx512_vnni(1);
	}
#endif
	return fails;
}
