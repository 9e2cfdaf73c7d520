/* CPU reference kernels (src/ops/cpu/ops_cpu.c) against naive double-precision loops written
 * here, on ragged shapes ({1}, {7,3}, {128,1,64,33}, ...). Outputs carry guard rows filled with a
 * sentinel that must survive; comparisons are written so that NaN fails. */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ops/cpu/cpu_kern.h"
#include "ops/cpu/gemm_dnnl.h"
#include "ops/cpu/ops_cpu.h"
#include "ops/ops.h"
#include "test_act_ref.h"
#include "test_attn.h"

#define GUARD 64              /* guard floats after every output */
#define SENTINEL (-12345.25f) /* must be left untouched by every op */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static float frand(void) /* uniform in [-1, 1) */
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static float *rand_buf(size_t n, float scale)
{
	float *p = malloc(n * sizeof(float));
	assert_non_null(p);
	for (size_t i = 0; i < n; i++)
		p[i] = frand() * scale;
	return p;
}

/* Output buffer of n floats, prefilled with NaN, followed by GUARD sentinels. */
static float *out_buf(size_t n)
{
	float *p = malloc((n + GUARD) * sizeof(float));
	assert_non_null(p);
	for (size_t i = 0; i < n; i++)
		p[i] = NAN;
	for (size_t i = 0; i < GUARD; i++)
		p[n + i] = SENTINEL;
	return p;
}

static bool close_to(double got, double ref, double atol, double rtol)
{
	return fabs(got - ref) <= atol + rtol * fabs(ref); /* false for NaN */
}

/* Compares n values and the guard region; reports the first mismatch. */
static void check(const char *what, const float *got, const double *ref, size_t n, double atol,
		  double rtol)
{
	for (size_t i = 0; i < n; i++) {
		if (!close_to(got[i], ref[i], atol, rtol)) {
			fail_msg("%s: element %zu got %.9g want %.9g", what, i, got[i], ref[i]);
		}
	}
	for (size_t i = 0; i < GUARD; i++)
		if (got[n + i] != SENTINEL)
			fail_msg("%s: guard %zu overwritten (%g)", what, i, got[n + i]);
}

static void ref_ln(double *v, const float *g, const float *b, double eps, int n)
{
	double mean = 0, var = 0;
	for (int i = 0; i < n; i++)
		mean += v[i];
	mean /= n;
	for (int i = 0; i < n; i++)
		var += (v[i] - mean) * (v[i] - mean);
	var /= n;
	for (int i = 0; i < n; i++)
		v[i] = (v[i] - mean) / sqrt(var + eps) * g[i] + b[i];
}

static void test_compare_rejects_nan(void **state)
{
	(void)state;
	assert_false(close_to(NAN, 1.0, 1e-3, 1e-3));
	assert_false(close_to(1.0, NAN, 1e-3, 1e-3));
	assert_false(close_to(INFINITY, 1.0, 1e-3, 1e-3));
	assert_true(close_to(1.0 + 1e-7, 1.0, 0, 1e-6));
}

static void test_embed_layernorm(void **state)
{
	const int vocab = 53, max_pos = 41, H = 37, ns[] = {1, 7, 230};
	float *word = rand_buf((size_t)vocab * H, 1), *pos = rand_buf((size_t)max_pos * H, 1);
	float *type0 = rand_buf(H, 1), *g = rand_buf(H, 1), *b = rand_buf(H, 1);
	(void)state;

	for (size_t c = 0; c < sizeof(ns) / sizeof(ns[0]); c++) {
		int n = ns[c];
		int32_t *tok = malloc(n * sizeof(int32_t)), *ps = malloc(n * sizeof(int32_t));
		float *out = out_buf((size_t)n * H);
		double *ref = malloc((size_t)n * H * sizeof(double));

		for (int t = 0; t < n; t++) {
			tok[t] = (t * 31 + 7) % vocab;
			ps[t] = t % max_pos;
			if (t == n - 1)
				tok[t] = vocab - 1, ps[t] = max_pos - 1; /* last rows of the tables */
		}
		assert_int_equal(rg_cpu_embed_layernorm(tok, ps, n, word, pos, type0, g, b, 1e-12f, H,
							out),
				 RG_OK);
		for (int t = 0; t < n; t++) {
			double *r = ref + (size_t)t * H;
			for (int i = 0; i < H; i++)
				r[i] = (double)word[(size_t)tok[t] * H + i] +
				       pos[(size_t)ps[t] * H + i] + type0[i];
			ref_ln(r, g, b, 1e-12, H);
		}
		check("embed_layernorm", out, ref, (size_t)n * H, 1e-5, 1e-4);
		free(tok), free(ps), free(out), free(ref);
	}
	free(word), free(pos), free(type0), free(g), free(b);
}

static void test_gemm(void **state)
{
	const int Ms[] = {1, 7, 128, 229}, Ns[] = {1, 33, 96}, Ks[] = {1, 17, 64};
	(void)state;

	for (size_t a = 0; a < 4; a++)
		for (size_t bn = 0; bn < 3; bn++)
			for (size_t c = 0; c < 3; c++) {
				int M = Ms[a], N = Ns[bn], K = Ks[c];
				float *A = rand_buf((size_t)M * K, 1), *W = rand_buf((size_t)N * K, 1);
				float *out = out_buf((size_t)M * N);
				double *ref = malloc((size_t)M * N * sizeof(double));

				for (int i = 0; i < M; i++)
					for (int j = 0; j < N; j++) {
						double s = 0;
						for (int k = 0; k < K; k++)
							s += (double)A[(size_t)i * K + k] *
							     W[(size_t)j * K + k];
						ref[(size_t)i * N + j] = s;
					}
				assert_int_equal(rg_cpu_gemm(A, W, out, M, N, K), RG_OK);
				check("gemm", out, ref, (size_t)M * N, 1e-5, 1e-5);
				free(A), free(W), free(out), free(ref);
			}
}

static void test_bias_act(void **state)
{
	const rg_act acts[] = {RG_ACT_NONE, RG_ACT_GELU, RG_ACT_GELU_NEW, RG_ACT_RELU,
			       RG_ACT_SILU};
	const char *names[] = {"bias", "bias+gelu", "bias+gelu_new", "bias+relu", "bias+silu"};
	const int M = 131, N = 45;
	(void)state;

	for (size_t a = 0; a < 5; a++) {
		float *x = rand_buf((size_t)M * N, 4), *bias = rand_buf(N, 1);
		float *buf = out_buf((size_t)M * N);
		double *ref = malloc((size_t)M * N * sizeof(double));

		memcpy(buf, x, (size_t)M * N * sizeof(float));
		for (int i = 0; i < M; i++)
			for (int j = 0; j < N; j++)
				ref[(size_t)i * N + j] =
					ref_act((double)x[(size_t)i * N + j] + bias[j], acts[a]);
		assert_int_equal(rg_cpu_bias_act(buf, bias, M, N, acts[a]), RG_OK);
		check(names[a], buf, ref, (size_t)M * N, 1e-6, 1e-5);
		free(x), free(bias), free(buf), free(ref);
	}
}

/* out = act(A W^T + bias) against a double loop, for every act, with a bias and with bias NULL
 * (act NONE without bias is the plain GEMM). */
static void test_gemm_bias_act(void **state)
{
	const rg_act acts[] = {RG_ACT_NONE, RG_ACT_GELU, RG_ACT_GELU_NEW, RG_ACT_RELU,
			       RG_ACT_SILU};
	const int shapes[][3] = {{1, 33, 17}, {7, 96, 64}, {130, 45, 29}, {229, 1, 1}};
	char what[96];
	(void)state;

	for (size_t a = 0; a < 5; a++)
		for (int with_bias = 0; with_bias < 2; with_bias++)
			for (size_t c = 0; c < 4; c++) {
				const int M = shapes[c][0], N = shapes[c][1], K = shapes[c][2];
				float *A = rand_buf((size_t)M * K, 1), *W = rand_buf((size_t)N * K, 1);
				float *bias = with_bias ? rand_buf(N, 1) : NULL;
				float *out = out_buf((size_t)M * N);
				double *ref = malloc((size_t)M * N * sizeof(double));

				for (int i = 0; i < M; i++)
					for (int j = 0; j < N; j++) {
						double s = bias ? bias[j] : 0;
						for (int k = 0; k < K; k++)
							s += (double)A[(size_t)i * K + k] *
							     W[(size_t)j * K + k];
						ref[(size_t)i * N + j] = ref_act(s, acts[a]);
					}
				assert_int_equal(
					rg_cpu_gemm_bias_act(A, W, bias, out, M, N, K, acts[a]), RG_OK);
				snprintf(what, sizeof(what), "gemm_bias_act %s%s M=%d N=%d K=%d",
					 rg_act_name(acts[a]), bias ? "+bias" : " (bias NULL)", M, N,
					 K);
				check(what, out, ref, (size_t)M * N, 1e-5, 1e-5);
				free(A), free(W), free(bias), free(out), free(ref);
			}
}

/* The bf16 value nearest x (ties to even), computed from its binary expansion; the reference for
 * the bf16 GEMMs, independent of the library's conversion. */
static double bf16_round(float x)
{
	int e;
	double m = frexp((double)x, &e); /* x = m 2^e, 0.5 <= |m| < 1 */

	return ldexp(nearbyint(ldexp(m, 8)), e - 8); /* 8 significant bits, FE_TONEAREST */
}

/* A backend copy of the (N, K) weights W0, prepared (rg_op_prepare_weight); free it with
 * rg_backend_dealloc. */
static float *prepared_copy(rg_backend *be, const float *W0, int N, int K)
{
	float *W;

	assert_int_equal(rg_backend_alloc(be, (size_t)N * K * sizeof(float), (void **)&W), RG_OK);
	memcpy(W, W0, (size_t)N * K * sizeof(float));
	assert_int_equal(rg_op_prepare_weight(be, W, N, K), RG_OK);
	return W;
}

/* act(A W^T + bias) through the prepared W (W0: its row-major f32 values) for every M of Ms and
 * every act, a bias on every other case, against a double loop over the operands as `round`
 * gives them (NULL: as they are; bf16_round for a bf16 backend), within 1e-5 relative and
 * 4e-6 sqrt(K) absolute: a float32 sum of K products of values in [-1, 1] drifts by about
 * sqrt(K) * 6e-8 * its magnitude (~sqrt(K / 9)), so 1e-5 alone failed a correct GEMV at K = 576
 * on a result near 0 (an indexing error is off by O(0.1)). */
static void check_prepared(rg_backend *be, const float *W0, const float *W, const float *bias,
			   int N, int K, const int *Ms, size_t nM, const rg_act *acts, size_t nA,
			   double (*round)(float))
{
	char what[128];

	for (size_t m = 0; m < nM; m++)
		for (size_t a = 0; a < nA; a++) {
			const int M = Ms[m];
			const float *b = (a + m) % 2 ? bias : NULL;
			float *A = rand_buf((size_t)M * K, 1), *out = out_buf((size_t)M * N);
			double *ref = malloc((size_t)M * N * sizeof(double));

			for (int i = 0; i < M; i++)
				for (int j = 0; j < N; j++) {
					double acc = b ? b[j] : 0;
					for (int k = 0; k < K; k++) {
						const float x = A[(size_t)i * K + k], w = W0[(size_t)j * K + k];

						acc += round ? round(x) * round(w) : (double)x * w;
					}
					ref[(size_t)i * N + j] = ref_act(acc, acts[a]);
				}
			assert_int_equal(rg_op_gemm_bias_act(be, A, W, b, out, M, N, K, acts[a]), RG_OK);
			snprintf(what, sizeof(what), "prepared%s (%s) %s%s M=%d N=%d K=%d",
				 round ? " bf16" : "", rg_cpu_gemm_lib(), rg_act_name(acts[a]),
				 b ? "+bias" : "", M, N, K);
			check(what, out, ref, (size_t)M * N, 4e-6 * sqrt((double)K), 1e-5);
			free(A), free(out), free(ref);
		}
}

/* Prepared weights (rg_op_prepare_weight: oneDNN's blocked layout when this build has oneDNN):
 * every tile kind (M below, at and past 16 and 256 rows, and past the default gemm_blk limit of
 * 192; N a multiple of the 64-column block and not; K a multiple of 16 and not; run by
 * run-tests.sh at 2 threads and at 16, where gemm_blk also cuts rows) against a double loop, for every activation, with and without
 * a bias; then the registry's contract (prepared once, shape checked, forgotten at dealloc). */
static void test_gemm_prepared(void **state)
{
	const rg_act acts[] = {RG_ACT_NONE, RG_ACT_GELU, RG_ACT_GELU_NEW, RG_ACT_RELU,
			       RG_ACT_SILU};
	const int Ms[] = {1, 12, 15, 16, 17, 30, 63, 64, 65, 100, 130, 192, 193, 256, 257, 600};
	const int NK[][2] = {{192, 64}, {100, 48}, {64, 40}};
	rg_backend *be;
	(void)state;

	assert_int_equal(rg_backend_init(RG_DEVICE_CPU, 0, RG_DTYPE_F32, &be), RG_OK);
	for (size_t s = 0; s < sizeof(NK) / sizeof(NK[0]); s++) {
		const int N = NK[s][0], K = NK[s][1];
		float *W0 = rand_buf((size_t)N * K, 1), *bias = rand_buf(N, 1);
		float *W = prepared_copy(be, W0, N, K);

		if (rg_dnnl_enabled()) {
			assert_non_null(rg_dnnl_find(W));
			/* once only; and the wrong shape is refused, never run on blocked bytes */
			assert_int_equal(rg_op_prepare_weight(be, W, N, K), RG_ERR_INVALID_INPUT);
			float *A = rand_buf((size_t)4 * K, 1), *o = out_buf((size_t)4 * N);
			assert_int_equal(rg_op_gemm(be, A, W, o, 4, N, K - 1), RG_ERR_INVALID_INPUT);
			free(A), free(o);
		}
		check_prepared(be, W0, W, bias, N, K, Ms, sizeof(Ms) / sizeof(Ms[0]), acts, 5, NULL);
		rg_backend_dealloc(be, W);
		assert_null(rg_dnnl_find(W)); /* forgotten with its memory */
		free(W0), free(bias);
	}
	rg_backend_free(be);
}

/* The decode steps' GEMV kernels (M = 1..4, RG_CPU_GEMV_MAX): over row-major weights (the tied
 * LM head; N not a multiple of the 4-row pass, K not of the vector width, one row of W) and over
 * prepared weights (oneDNN's 64-column blocks: N a multiple of 64 and not, K a multiple of 16 and
 * not, SmolLM2's QKV shape), every activation, with and without a bias, against a double loop
 * (check() also asserts the guard values past each output). */
static void test_gemv_small_m(void **state)
{
	const rg_act acts[] = {RG_ACT_NONE, RG_ACT_GELU_NEW, RG_ACT_RELU};
	const int rm[][2] = {{1, 1}, {5, 17}, {33, 64}, {203, 576}, {1000, 31}};
	const int Ms[] = {1, 2, 3, 4};
	const int NK[][2] = {{192, 64}, {100, 48}, {64, 40}, {960, 576}};
	rg_backend *be;
	char what[128];
	(void)state;

	for (size_t s = 0; s < sizeof(rm) / sizeof(rm[0]); s++)
		for (int M = 1; M <= RG_CPU_GEMV_MAX; M++)
			for (size_t a = 0; a < 3; a++) {
				const int N = rm[s][0], K = rm[s][1];
				float *A = rand_buf((size_t)M * K, 1), *W = rand_buf((size_t)N * K, 1);
				float *bias = (a + M) % 2 ? rand_buf(N, 1) : NULL;
				float *out = out_buf((size_t)M * N);
				double *ref = malloc((size_t)M * N * sizeof(double));

				for (int i = 0; i < M; i++)
					for (int j = 0; j < N; j++) {
						double acc = bias ? bias[j] : 0;
						for (int k = 0; k < K; k++)
							acc += (double)A[(size_t)i * K + k] *
							       W[(size_t)j * K + k];
						ref[(size_t)i * N + j] = ref_act(acc, acts[a]);
					}
				assert_int_equal(rg_cpu_gemm_bias_act(A, W, bias, out, M, N, K, acts[a]),
						 RG_OK);
				snprintf(what, sizeof(what), "gemv row-major %s%s M=%d N=%d K=%d",
					 rg_act_name(acts[a]), bias ? "+bias" : "", M, N, K);
				check(what, out, ref, (size_t)M * N, 1e-5, 1e-5);
				free(A), free(W), free(bias), free(out), free(ref);
			}
	assert_int_equal(rg_backend_init(RG_DEVICE_CPU, 0, RG_DTYPE_F32, &be), RG_OK);
	for (size_t s = 0; s < sizeof(NK) / sizeof(NK[0]); s++) {
		const int N = NK[s][0], K = NK[s][1];
		float *W0 = rand_buf((size_t)N * K, 1), *bias = rand_buf(N, 1);
		float *W = prepared_copy(be, W0, N, K);

		check_prepared(be, W0, W, bias, N, K, Ms, 4, acts, 3, NULL);
		rg_backend_dealloc(be, W);
		free(W0), free(bias);
	}
	rg_backend_free(be);
}

/* The short-sentence GEMM kernel of this table (gemm_blk, which runs prepared weights for
 * rg_cpu_smallm_max() >= M > RG_CPU_GEMV_MAX), called directly on one 64-column block laid out
 * by hand as oneDNN lays it out (element (k, c) at (k / kb) * kstride + (k % kb) * 64 + c),
 * against a double loop: every row-group split (M = 1..14, 24, 31, 32, 63, 64, 130), K one row,
 * below, at and past one chunk and one K block, a last block cut short (K % kb != 0), kb below,
 * at and above the chunk, the contiguous layout (its prefetch path) and one with a gap between
 * K blocks (no prefetch); A with a row stride past K, out with a row stride past 64 whose gaps
 * and tail keep their sentinel. out starts as NaN, so a first chunk that read out instead of
 * zero fails. */
static void test_gemm_blk_kernel(void **state)
{
	const rg_cpu_kern *kt = rg_cpu_kern_select();
	const int Ms[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 24, 31, 32, 63, 64, 130};
	/* K, kb, gap (floats between K blocks past kb * 64) */
	const int cases[][3] = {{1, 16, 0},   {15, 16, 0},  {16, 16, 0},  {40, 16, 0},
				{64, 16, 0},  {65, 16, 0},  {200, 16, 0}, {768, 16, 0},
				{200, 16, 48}, {100, 8, 0}, {300, 128, 0}, {70, 48, 16}};
	char what[160];
	(void)state;

	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		const int K = cases[c][0], kb = cases[c][1];
		const size_t kstride = (size_t)kb * 64 + (size_t)cases[c][2];
		const int nkb = (K + kb - 1) / kb;
		const size_t wn = (size_t)nkb * kstride;
		float *W0 = rand_buf((size_t)K * 64, 1); /* (K, 64) row-major */
		float *Wb = malloc(wn * sizeof(float));

		assert_non_null(Wb);
		for (size_t i = 0; i < wn; i++)
			Wb[i] = NAN; /* padding rows and gaps: never read */
		for (int k = 0; k < K; k++)
			memcpy(Wb + (size_t)(k / kb) * kstride + (size_t)(k % kb) * 64,
			       W0 + (size_t)k * 64, 64 * sizeof(float));
		for (size_t m = 0; m < sizeof(Ms) / sizeof(Ms[0]); m++) {
			const int M = Ms[m], lda = K + 3, ldo = 64 + 16;
			float *A = rand_buf((size_t)M * lda, 1);
			float *out = malloc(((size_t)M * ldo + GUARD) * sizeof(float));
			double *ref = malloc((size_t)M * 64 * sizeof(double));

			assert_non_null(out);
			assert_non_null(ref);
			for (size_t i = 0; i < (size_t)M * ldo + GUARD; i++)
				out[i] = i % (size_t)ldo < 64 && i < (size_t)M * ldo ? NAN : SENTINEL;
			for (int i = 0; i < M; i++)
				for (int j = 0; j < 64; j++) {
					double acc = 0;

					for (int k = 0; k < K; k++)
						acc += (double)A[(size_t)i * lda + k] * W0[(size_t)k * 64 + j];
					ref[(size_t)i * 64 + j] = acc;
				}
			kt->gemm_blk(A, (size_t)lda, M, Wb, K, kb, kstride, out, (size_t)ldo);
			snprintf(what, sizeof(what), "gemm_blk %s M=%d K=%d kb=%d kstride=%zu",
				 kt->isa, M, K, kb, kstride);
			for (int i = 0; i < M; i++)
				for (int j = 0; j < 64; j++) {
					const double got = out[(size_t)i * ldo + j];
					const double want = ref[(size_t)i * 64 + j];

					if (!close_to(got, want, 4e-6 * sqrt((double)K), 1e-5))
						fail_msg("%s: (%d, %d) got %.9g want %.9g", what, i, j, got,
							 want);
				}
			for (size_t i = 0; i < (size_t)M * ldo + GUARD; i++)
				if ((i % (size_t)ldo >= 64 || i >= (size_t)M * ldo) && out[i] != SENTINEL)
					fail_msg("%s: guard float %zu overwritten (%g)", what, i, out[i]);
			free(A), free(out), free(ref);
		}
		free(W0), free(Wb);
	}
}

/* The bf16 GEMMs' input conversion of this kernel table: nearest even on normal numbers of every
 * magnitude (against bf16_round), exact ties to even, overflow to infinity, infinities and signed
 * zeros kept, a NaN kept a NaN (never rounded into an infinity). Lengths not a multiple of the
 * vector width run the scalar tail too. */
static void test_f32_to_bf16(void **state)
{
	const rg_cpu_kern *k = rg_cpu_kern_select();
	enum { N = 1000 };
	float x[N];
	uint16_t got[N];
	uint32_t u;
	(void)state;

	for (int i = 0; i < N; i++)
		x[i] = ldexpf((float)rand() / RAND_MAX + 0.5f, rand() % 200 - 100) *
		       (i % 2 ? -1.f : 1.f);
	x[0] = 1.f + ldexpf(1.f, -8);      /* tie: down to 1 (even) */
	x[1] = 1.f + 3.f * ldexpf(1.f, -8); /* tie: up to 1 + 2^-6 (even) */
	x[2] = -0.f;
	x[3] = INFINITY;
	x[4] = -INFINITY;
	u = 0x7f800001u; /* a signalling NaN whose payload would round into the exponent */
	memcpy(&x[5], &u, 4);
	u = 0xffffffffu;
	memcpy(&x[6], &u, 4);
	x[7] = FLT_MAX; /* rounds past the largest bf16: infinity */
	for (int n = N; n >= N - 17; n -= 17) {
		memset(got, 0, sizeof(got));
		k->f32_to_bf16(x, got, (size_t)n);
		for (int i = 0; i < n; i++) {
			float back, want;
			uint32_t b = (uint32_t)got[i] << 16;

			memcpy(&back, &b, 4);
			if (isnan(x[i])) {
				assert_true(isnan(back));
				continue;
			}
			want = (float)bf16_round(x[i]);
			if (memcmp(&back, &want, 4) != 0)
				fail_msg("%s: f32_to_bf16(%a) = %a, want %a (i=%d n=%d)", k->isa,
					 (double)x[i], (double)back, (double)want, i, n);
		}
		assert_int_equal(got[n < N ? n : N - 1] == 0, n < N); /* nothing past n written */
	}
	assert_int_equal(got[0], 0x3f80);
	assert_int_equal(got[1], 0x3f81 + 1);
}

/* bf16 GEMMs on the CPU (backend created for bf16, PyTorch autocast's precision): A and W rounded
 * to bf16, f32 accumulation, bias and activation in f32. Checked against a double loop over the
 * rounded operands, so a GEMM that ran in f32 (or rounded otherwise) fails; W stays row-major
 * f32. Where the CPU has no native bf16 (no AVX512-BF16/AMX, or no oneDNN), the backend must
 * refuse bf16 by name instead. fp16 is refused on every CPU. */
static void test_gemm_prepared_bf16(void **state)
{
	const rg_act acts[] = {RG_ACT_NONE, RG_ACT_GELU, RG_ACT_RELU};
	const int Ms[] = {1, 15, 16, 17, 30, 63, 100, 257};
	const int NK[][2] = {{192, 64}, {100, 48}, {64, 40}};
	rg_backend *be;
	(void)state;

	assert_int_equal(rg_backend_init(RG_DEVICE_CPU, 0, RG_DTYPE_F16, &be), RG_ERR_UNSUPPORTED);
	if (!rg_dnnl_bf16_supported()) {
		assert_int_equal(rg_backend_init(RG_DEVICE_CPU, 0, RG_DTYPE_BF16, &be),
				 RG_ERR_UNSUPPORTED);
		assert_non_null(strstr(rg_last_error(), "AVX512-BF16"));
		return;
	}
	assert_int_equal(rg_backend_init(RG_DEVICE_CPU, 0, RG_DTYPE_BF16, &be), RG_OK);
	assert_int_equal(rg_backend_dtype(be), RG_DTYPE_F32); /* activations stay f32 */
	for (size_t s = 0; s < sizeof(NK) / sizeof(NK[0]); s++) {
		const int N = NK[s][0], K = NK[s][1];
		float *W0 = rand_buf((size_t)N * K, 1), *bias = rand_buf(N, 1);
		float *W = prepared_copy(be, W0, N, K);

		assert_non_null(rg_dnnl_find(W));
		assert_memory_equal(W, W0, (size_t)N * K * sizeof(float)); /* a copy was made */
		check_prepared(be, W0, W, bias, N, K, Ms, sizeof(Ms) / sizeof(Ms[0]), acts,
			       sizeof(acts) / sizeof(acts[0]), bf16_round);
		rg_backend_dealloc(be, W);
		assert_null(rg_dnnl_find(W));
		free(W0), free(bias);
	}
	rg_backend_free(be);
}

/* Shapes are checked once, in ops.c (rg_op_*), for every backend. */
static void test_gemm_bias_act_edges(void **state)
{
	float A[4 * 3] = {0}, W[2 * 3] = {0}, bias[2] = {1, 2};
	float *out = out_buf(4 * 2);
	rg_backend *be;
	(void)state;

	assert_int_equal(rg_backend_init(RG_DEVICE_CPU, 0, RG_DTYPE_F32, &be), RG_OK);
	/* M = 0: nothing written */
	assert_int_equal(rg_op_gemm_bias_act(be, A, W, bias, out, 0, 2, 3, RG_ACT_GELU), RG_OK);
	for (int i = 0; i < 4 * 2; i++)
		assert_true(isnan(out[i]));
	assert_int_equal(rg_op_gemm_bias_act(be, A, W, bias, out, -1, 2, 3, RG_ACT_NONE),
			 RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_op_gemm_bias_act(be, A, W, bias, out, 4, 0, 3, RG_ACT_NONE),
			 RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_op_gemm_bias_act(be, A, W, bias, out, 4, 2, 0, RG_ACT_NONE),
			 RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_op_gemm_bias_act(be, A, W, bias, out, 4, 2, 3, (rg_act)99),
			 RG_ERR_UNSUPPORTED);
	assert_int_equal(rg_op_bias_act(be, out, bias, 4, 2, (rg_act)99), RG_ERR_UNSUPPORTED);
	assert_int_equal(rg_op_bias_act(be, out, bias, -1, 2, RG_ACT_NONE), RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_op_bias_residual_layernorm(be, out, NULL, out, bias, bias, 1e-5f, 4, 0,
						       out),
			 RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_op_embed_layernorm(be, NULL, NULL, -1, A, A, A, bias, bias, 1e-5f, 2, out),
			 RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_op_gather_rows(be, A, NULL, 2, 0, out), RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_op_pool(be, A, NULL, 1, 2, (rg_pooling)7, false, out),
			 RG_ERR_UNSUPPORTED);
	assert_int_equal(rg_op_pool(be, A, NULL, -1, 2, RG_POOL_MEAN, false, out),
			 RG_ERR_INVALID_INPUT);
	rg_backend_free(be);
	free(out);
}

/* alias: 0 = separate out, 1 = out aliases residual, 2 = out aliases x. with_bias 0: bias NULL
 * (the model's case: the GEMM epilogue added it). */
static void run_brln(int M, int N, int alias, int with_bias)
{
	float *x = rand_buf((size_t)M * N, 2), *res = rand_buf((size_t)M * N, 2);
	float *bias = with_bias ? rand_buf(N, 1) : NULL, *g = rand_buf(N, 1), *b = rand_buf(N, 1);
	float *xb = out_buf((size_t)M * N), *rb = out_buf((size_t)M * N), *ob = out_buf((size_t)M * N);
	double *ref = malloc((size_t)M * N * sizeof(double));
	float *out = alias == 1 ? rb : alias == 2 ? xb : ob;

	memcpy(xb, x, (size_t)M * N * sizeof(float));
	memcpy(rb, res, (size_t)M * N * sizeof(float));
	for (int i = 0; i < M; i++) {
		double *r = ref + (size_t)i * N;
		for (int j = 0; j < N; j++)
			r[j] = (double)x[(size_t)i * N + j] + (bias ? bias[j] : 0) +
			       res[(size_t)i * N + j];
		ref_ln(r, g, b, 1e-5, N);
	}
	assert_int_equal(rg_cpu_bias_residual_layernorm(xb, bias, rb, g, b, 1e-5f, M, N, out), RG_OK);
	check("bias_residual_layernorm", out, ref, (size_t)M * N, 1e-5, 1e-4);
	free(x), free(res), free(bias), free(g), free(b), free(xb), free(rb), free(ob), free(ref);
}

static void test_bias_residual_layernorm(void **state)
{
	(void)state;
	for (int alias = 0; alias < 3; alias++)
		for (int with_bias = 0; with_bias < 2; with_bias++) {
			run_brln(1, 1, alias, with_bias); /* N = 1: output is beta */
			run_brln(7, 33, alias, with_bias);
			run_brln(130, 384, alias, with_bias);
			run_brln(3, 768, alias, with_bias);
		}
}

/* Naive attention in double over a packed batch with an optional seg mask and an optional
 * relative position bias rb (nh, 2R+1): + rb[h][R + clamp(j - i, -R, R)] on the scaled score. */
static void ref_attention(const float *qkv, const int32_t *cu, int n_seq, int nh, int hd,
			  double scale, const int32_t *seg, const float *rb, int R, double *out)
{
	const int H = nh * hd;
	for (int s = 0; s < n_seq; s++) {
		int t0 = cu[s], L = cu[s + 1] - t0;
		double *sc = malloc((size_t)(L ? L : 1) * sizeof(double));
		for (int h = 0; h < nh; h++)
			for (int i = 0; i < L; i++) {
				const float *q = qkv + (size_t)(t0 + i) * 3 * H + h * hd;
				double mx = -INFINITY, sum = 0;
				double *o = out + (size_t)(t0 + i) * H + h * hd;
				for (int d = 0; d < hd; d++)
					o[d] = 0;
				for (int j = 0; j < L; j++) {
					const float *k = qkv + (size_t)(t0 + j) * 3 * H + H + h * hd;
					bool vis = !seg || (seg[t0 + j] >= 0 &&
							    seg[t0 + j] == seg[t0 + i]);
					double v = 0;
					for (int d = 0; d < hd; d++)
						v += (double)q[d] * k[d];
					if (rb) {
						int dist = j - i;
						dist = dist < -R ? -R : dist > R ? R : dist;
						v = v * scale + rb[h * (2 * R + 1) + R + dist];
					} else {
						v *= scale;
					}
					sc[j] = vis ? v : -INFINITY;
					if (sc[j] > mx)
						mx = sc[j];
				}
				if (mx == -INFINITY)
					continue;
				for (int j = 0; j < L; j++) {
					sc[j] = sc[j] == -INFINITY ? 0 : exp(sc[j] - mx);
					sum += sc[j];
				}
				for (int j = 0; j < L; j++) {
					const float *v = qkv + (size_t)(t0 + j) * 3 * H + 2 * H + h * hd;
					for (int d = 0; d < hd; d++)
						o[d] += sc[j] / sum * v[d];
				}
			}
		free(sc);
	}
}

/* rel_max < 0: no relative position bias; else a random table (nh, 2 rel_max + 1). */
static void run_attention_bias(const int *lens, int n_seq, int nh, int hd, const int32_t *seg,
			       int rel_max)
{
	const int H = nh * hd;
	float *rb = rel_max >= 0 ? rand_buf((size_t)nh * (2 * rel_max + 1), 3) : NULL;
	int32_t *cu = malloc((n_seq + 1) * sizeof(int32_t));
	int max_len = 0, n;
	float *qkv, *out;
	double *ref;
	float scale = 1.f / sqrtf((float)hd);

	cu[0] = 0;
	for (int s = 0; s < n_seq; s++) {
		cu[s + 1] = cu[s] + lens[s];
		if (lens[s] > max_len)
			max_len = lens[s];
	}
	n = cu[n_seq];
	qkv = rand_buf((size_t)n * 3 * H, 2);
	out = out_buf((size_t)n * H);
	ref = malloc((size_t)n * H * sizeof(double));
	ref_attention(qkv, cu, n_seq, nh, hd, scale, seg, rb, rel_max, ref);
	assert_int_equal(rg_cpu_attention(qkv, cu, n_seq, max_len, nh, hd, scale, seg, rb, rel_max,
					  NULL, out),
			 RG_OK);
	check(rb ? "attention + rel bias" : "attention", out, ref, (size_t)n * H, 1e-5, 1e-4);
	free(cu), free(qkv), free(out), free(ref), free(rb);
}

static void run_attention(const int *lens, int n_seq, int nh, int hd, const int32_t *seg)
{
	run_attention_bias(lens, n_seq, nh, hd, seg, -1);
}

static void test_attention_packed(void **state)
{
	const int l1[] = {1}, l2[] = {7, 3}, l3[] = {128, 1, 64, 33}, l4[] = {2, 1, 200, 5};
	(void)state;
	run_attention(l1, 1, 2, 8, NULL);
	run_attention(l2, 2, 3, 16, NULL);
	run_attention(l3, 4, 4, 8, NULL);
	run_attention(l3, 4, 12, 32, NULL);
	run_attention(l4, 4, 1, 5, NULL);
	/* vector paths: head_dim 32/64 (AVX-512 and AVX2 tables), 40 (generic table only), query
	 * blocks of long sequences (> 160 tokens split into 128-row tasks), a 500-token row */
	{
		const int l5[] = {161, 3, 500, 17, 64, 1};

		run_attention(l5, 6, 2, 64, NULL);
		run_attention(l5, 6, 3, 32, NULL);
		run_attention(l5, 6, 1, 40, NULL);
	}
}

static void test_attention_seg_mask(void **state)
{
	/* Two rows of 16: row 0 holds requests 0 (5 tokens) and 1 (9 tokens) then 2 padding;
	 * row 1 holds request 2 (3 tokens) then 13 padding (queries there must give zeros). */
	const int lens[] = {16, 16};
	int32_t seg[32];
	(void)state;
	for (int i = 0; i < 32; i++)
		seg[i] = i < 5 ? 0 : i < 14 ? 1 : i < 16 ? -1 : i < 19 ? 2 : -1;
	run_attention(lens, 2, 2, 8, seg);
	run_attention(lens, 2, 4, 4, seg);
	run_attention(lens, 2, 2, 32, seg);
	run_attention(lens, 2, 1, 64, seg);
}

/* MPNet's relative position bias: distances inside the table (rel_max past the longest sequence),
 * clamped ones (rel_max 0 and 5: every far key shares the end values), single-token sequences,
 * query blocks of long sequences (> 160 tokens: q0 > 0 in a task), and with a seg mask. */
static void test_attention_rel_bias(void **state)
{
	const int l1[] = {1}, l2[] = {7, 3}, l3[] = {128, 1, 64, 33}, l5[] = {161, 3, 500, 17, 1};
	const int lens[] = {16, 16};
	int32_t seg[32];
	(void)state;
	run_attention_bias(l1, 1, 2, 8, NULL, 0);
	run_attention_bias(l2, 2, 3, 16, NULL, 8);
	run_attention_bias(l3, 4, 4, 8, NULL, 200);
	run_attention_bias(l3, 4, 12, 32, NULL, 5);
	run_attention_bias(l3, 4, 2, 16, NULL, 0);
	run_attention_bias(l5, 5, 2, 64, NULL, 128);
	run_attention_bias(l5, 5, 1, 40, NULL, 7);
	for (int i = 0; i < 32; i++)
		seg[i] = i < 5 ? 0 : i < 14 ? 1 : i < 16 ? -1 : i < 19 ? 2 : -1;
	run_attention_bias(lens, 2, 2, 8, seg, 3);
	run_attention_bias(lens, 2, 4, 32, seg, 40);
}

/* A zero table changes nothing (bit for bit: s + 0.f == s), so NULL and a table of zeros are
 * the same attention, and the families without a bias are untouched. */
static void test_attention_zero_bias_is_none(void **state)
{
	const int nh = 3, hd = 16, H = nh * hd, R = 64;
	const int32_t cu[] = {0, 37, 38, 238}; /* lengths 37, 1, 200 */
	float *qkv = rand_buf((size_t)238 * 3 * H, 2), *a = out_buf((size_t)238 * H),
	      *b = out_buf((size_t)238 * H), *zero = calloc((size_t)nh * (2 * R + 1), sizeof(float));
	(void)state;
	assert_int_equal(rg_cpu_attention(qkv, cu, 3, 200, nh, hd, 0.25f, NULL, NULL, 0, NULL, a), RG_OK);
	assert_int_equal(rg_cpu_attention(qkv, cu, 3, 200, nh, hd, 0.25f, NULL, zero, R, NULL, b), RG_OK);
	assert_memory_equal(a, b, (size_t)238 * H * sizeof(float));
	free(qkv), free(a), free(b), free(zero);
}

static void test_attention_rejects_bad_lengths(void **state)
{
	const int32_t cu[] = {0, 5, 3}, cu1[] = {0, 5};
	float qkv[5 * 6] = {0}, out[5 * 2], rb[3] = {0};
	(void)state;
	rg_backend *be;

	/* data: a length that is negative or over max_seqlen (the backend reads cu_seqlens) */
	assert_int_equal(rg_cpu_attention(qkv, cu, 2, 5, 1, 2, 1.f, NULL, NULL, 0, NULL, out),
			 RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_cpu_attention(qkv, cu, 1, 4, 1, 2, 1.f, NULL, NULL, 0, NULL, out),
			 RG_ERR_INVALID_INPUT);
	/* arguments (checked by rg_op_attention): a bias table needs rel_max >= 0; without one
	 * rel_max is ignored */
	assert_int_equal(rg_backend_init(RG_DEVICE_CPU, 0, RG_DTYPE_F32, &be), RG_OK);
	assert_int_equal(attn_op(be, qkv, cu1, cu1, 1, 5, 1, 2, 1.f, NULL, rb, -1, NULL, out),
			 RG_ERR_INVALID_INPUT);
	assert_int_equal(attn_op(be, qkv, cu1, cu1, 1, 5, 1, 2, 1.f, NULL, NULL, -1, NULL, out),
			 RG_OK);
	assert_int_equal(attn_op(be, qkv, cu1, cu1, 1, 5, 0, 2, 1.f, NULL, NULL, 0, NULL, out),
			 RG_ERR_INVALID_INPUT);
	/* the descriptor: the packed op is bidirectional, equal KV heads, no block table */
	{
		const int32_t bt[1] = {0};
		rg_attn_desc d = {.num_heads = 1, .num_kv_heads = 1, .head_dim = 2, .scale = 1.f,
				  .n_seq = 1, .cu_seqlens_q = cu1, .cu_seqlens_q_h = cu1,
				  .max_seqlen_q = 5};

		assert_int_equal(rg_op_attention(be, &d, qkv, out), RG_OK);
		assert_int_equal(rg_op_attention(be, NULL, qkv, out), RG_ERR_INVALID_INPUT);
		d.causal = true;
		assert_int_equal(rg_op_attention(be, &d, qkv, out), RG_ERR_INVALID_INPUT);
		assert_non_null(strstr(rg_last_error(), "rg_op_paged_attention"));
		d.causal = false;
		d.num_kv_heads = 2;
		assert_int_equal(rg_op_attention(be, &d, qkv, out), RG_ERR_INVALID_INPUT);
		d.num_kv_heads = 0; /* 0: equal */
		d.block_tables = bt;
		assert_int_equal(rg_op_attention(be, &d, qkv, out), RG_ERR_INVALID_INPUT);
		d.block_tables = NULL;
		d.max_seqlen_q = -1;
		assert_int_equal(rg_op_attention(be, &d, qkv, out), RG_ERR_INVALID_INPUT);
	}
	rg_backend_free(be);
}

/* DeBERTa's disentangled attention in double straight from its definition: for query i and key j
 * of one sequence (rows t0 + i, t0 + j), e = idx[R + clamp(i - j)],
 *   score = scale (q_i.k_j + q_i.pos_key[e] + k_j.pos_query[e])   (a NULL pos_* adds nothing)
 * then softmax and P V. pos_key, pos_query: (W, H). */
static void ref_disent(const float *qkv, const int32_t *cu, int n_seq, int nh, int hd, float scale,
		       const float *pk, const float *pq, const int32_t *idx, int R, double *out)
{
	const int H = nh * hd;

	for (int s = 0; s < n_seq; s++) {
		const int t0 = cu[s], L = cu[s + 1] - cu[s];
		double *sc = malloc((size_t)(L ? L : 1) * sizeof(double));

		for (int h = 0; h < nh; h++)
			for (int i = 0; i < L; i++) {
				const float *q = qkv + (size_t)(t0 + i) * 3 * H + h * hd;
				double mx = -INFINITY, sum = 0;
				double *o = out + (size_t)(t0 + i) * H + h * hd;

				for (int j = 0; j < L; j++) {
					const float *k = qkv + (size_t)(t0 + j) * 3 * H + H + h * hd;
					int dist = i - j;
					dist = dist < -R ? -R : dist > R ? R : dist;
					const int e = idx[R + dist];
					double v = 0;
					for (int d = 0; d < hd; d++) {
						v += (double)q[d] * k[d];
						if (pk)
							v += (double)q[d] * pk[(size_t)e * H + h * hd + d];
						if (pq)
							v += (double)k[d] * pq[(size_t)e * H + h * hd + d];
					}
					sc[j] = v * scale;
					if (sc[j] > mx)
						mx = sc[j];
				}
				for (int d = 0; d < hd; d++)
					o[d] = 0;
				for (int j = 0; j < L; j++) {
					sc[j] = exp(sc[j] - mx);
					sum += sc[j];
				}
				for (int j = 0; j < L; j++) {
					const float *v = qkv + (size_t)(t0 + j) * 3 * H + 2 * H + h * hd;
					for (int d = 0; d < hd; d++)
						o[d] += sc[j] / sum * v[d];
				}
			}
		free(sc);
	}
}

/* rg_cpu_rel_tables + rg_cpu_attention with dis against ref_disent. which: 1 c2p, 2 p2c, 3 both.
 * idx: DeBERTa-like (a clamped window of W / 2 each side) of distances up to R. */
static void run_disent(const int *lens, int n_seq, int nh, int hd, int W, int R, int which)
{
	const int H = nh * hd;
	int32_t *cu = malloc((n_seq + 1) * sizeof(int32_t)), *idx = malloc((2 * R + 1) * 4);
	int max_len = 0, n;
	const float scale = 1.f / sqrtf((float)(hd * 3));
	float *pk = rand_buf((size_t)W * H, 2), *pq = rand_buf((size_t)W * H, 2);
	float *qkv, *out, *c2p, *p2c;
	double *ref;
	rg_attn_disent dis;

	cu[0] = 0;
	for (int s = 0; s < n_seq; s++) {
		cu[s + 1] = cu[s] + lens[s];
		if (lens[s] > max_len)
			max_len = lens[s];
	}
	for (int d = -R; d <= R; d++) {
		int e = d + W / 2;
		idx[R + d] = e < 0 ? 0 : e > W - 1 ? W - 1 : e;
	}
	n = cu[n_seq];
	qkv = rand_buf((size_t)n * 3 * H, 2);
	out = out_buf((size_t)n * H);
	c2p = out_buf((size_t)n * nh * W);
	p2c = out_buf((size_t)n * nh * W);
	ref = malloc((size_t)n * H * sizeof(double));
	ref_disent(qkv, cu, n_seq, nh, hd, scale, which & 1 ? pk : NULL, which & 2 ? pq : NULL, idx,
		   R, ref);
	assert_int_equal(rg_cpu_rel_tables(qkv, n, nh, hd, which & 1 ? pk : NULL,
					   which & 2 ? pq : NULL, W, scale, c2p, p2c),
			 RG_OK);
	dis = (rg_attn_disent){which & 1 ? c2p : NULL, which & 2 ? p2c : NULL, idx, W, R};
	assert_int_equal(rg_cpu_attention(qkv, cu, n_seq, max_len, nh, hd, scale, NULL, NULL, 0,
					  &dis, out),
			 RG_OK);
	check("attention + disentangled", out, ref, (size_t)n * H, 1e-5, 1e-4);
	free(cu), free(idx), free(pk), free(pq), free(qkv), free(out), free(c2p), free(p2c);
	free(ref);
}

static void test_attention_disentangled(void **state)
{
	(void)state;
	const int a[] = {1}, b[] = {7, 3}, c[] = {128, 1, 64, 33}, d[] = {300, 2, 170};

	for (int which = 1; which <= 3; which++) {
		run_disent(a, 1, 2, 8, 16, 64, which);
		run_disent(b, 2, 3, 5, 4, 16, which);       /* clamped past distance 2 */
		run_disent(c, 4, 4, 16, 512, 512, which);   /* v3-like width, nothing clamped */
		run_disent(d, 3, 2, 32, 16, 300, which);    /* query blocks of long sequences */
	}
}

/* rg_op_attention / rg_op_rel_tables arguments for the disentangled terms. */
static void test_attention_disentangled_args(void **state)
{
	const int32_t cu1[] = {0, 5}, idx[3] = {0, 1, 1};
	float qkv[5 * 6] = {0}, out[5 * 2], rb[3] = {0}, tab[5 * 2] = {0}, pk[2 * 2] = {0};
	rg_attn_disent dis = {tab, NULL, idx, 2, 1};
	rg_backend *be;
	(void)state;

	assert_int_equal(rg_backend_init(RG_DEVICE_CPU, 0, RG_DTYPE_F32, &be), RG_OK);
	assert_int_equal(attn_op(be, qkv, cu1, cu1, 1, 5, 1, 2, 1.f, NULL, NULL, 0, &dis,
					 out),
			 RG_OK);
	assert_int_equal(attn_op(be, qkv, cu1, cu1, 1, 5, 1, 2, 1.f, NULL, rb, 1, &dis,
					 out),
			 RG_ERR_INVALID_INPUT); /* not both */
	dis.width = 0;
	assert_int_equal(attn_op(be, qkv, cu1, cu1, 1, 5, 1, 2, 1.f, NULL, NULL, 0, &dis,
					 out),
			 RG_ERR_INVALID_INPUT);
	dis = (rg_attn_disent){NULL, NULL, idx, 2, 1};
	assert_int_equal(attn_op(be, qkv, cu1, cu1, 1, 5, 1, 2, 1.f, NULL, NULL, 0, &dis,
					 out),
			 RG_ERR_INVALID_INPUT); /* no table */
	dis = (rg_attn_disent){tab, NULL, idx, 2, -1};
	assert_int_equal(attn_op(be, qkv, cu1, cu1, 1, 5, 1, 2, 1.f, NULL, NULL, 0, &dis,
					 out),
			 RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_op_rel_tables(be, qkv, 5, 1, 2, pk, NULL, 2, 1.f, NULL, NULL),
			 RG_ERR_INVALID_INPUT); /* pos_key without c2p */
	assert_int_equal(rg_op_rel_tables(be, qkv, 5, 1, 2, pk, NULL, 0, 1.f, tab, NULL),
			 RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_op_rel_tables(be, qkv, 5, 1, 2, pk, NULL, 2, 1.f, tab, NULL), RG_OK);
	rg_backend_free(be);
}

/* Pooled rows in double: MEAN / CLS / MAX over each sequence, then L2 normalization; a sequence of
 * length 0 gives a zero row. */
static void ref_pool(const float *x, const int32_t *cu, int n_seq, int H, rg_pooling mode, int norm,
		     double *ref)
{
	for (int s = 0; s < n_seq; s++) {
		const int L = cu[s + 1] - cu[s];
		double *r = ref + (size_t)s * H, ss = 0;
		for (int i = 0; i < H; i++) {
			double acc = mode == RG_POOL_MAX ? -INFINITY : 0;
			int end = mode == RG_POOL_CLS ? cu[s] + 1 : cu[s + 1];
			if (L == 0) {
				r[i] = 0;
				continue;
			}
			for (int t = cu[s]; t < end; t++) {
				double v = x[(size_t)t * H + i];
				acc = mode == RG_POOL_MAX ? fmax(acc, v) : acc + v;
			}
			r[i] = mode == RG_POOL_MEAN ? acc / L : acc;
			ss += r[i] * r[i];
		}
		if (norm)
			for (int i = 0; i < H; i++)
				r[i] /= fmax(sqrt(ss), 1e-12);
	}
}

static void run_pool(const int32_t *cu, int n_seq, int H, const char *what)
{
	const rg_pooling modes[] = {RG_POOL_MEAN, RG_POOL_CLS, RG_POOL_MAX};
	float *x = rand_buf((size_t)(cu[n_seq] ? cu[n_seq] : 1) * H, 3);

	for (int s = 0; s < n_seq; s++)
		if (cu[s + 1] - cu[s] == 1) /* one token of zeros: normalize leaves it zero */
			memset(x + (size_t)cu[s] * H, 0, (size_t)H * sizeof(float));
	for (int m = 0; m < 3; m++)
		for (int norm = 0; norm < 2; norm++) {
			float *out = out_buf((size_t)n_seq * H);
			double *ref = malloc((size_t)n_seq * H * sizeof(double));
			ref_pool(x, cu, n_seq, H, modes[m], norm, ref);
			assert_int_equal(rg_cpu_pool(x, cu, n_seq, H, modes[m], norm, out), RG_OK);
			check(what, out, ref, (size_t)n_seq * H, 1e-6, 1e-5);
			/* zero-length sequences: exactly zero (not -0 from a sum, not NaN) */
			for (int s = 0; s < n_seq; s++)
				for (int i = 0; cu[s + 1] == cu[s] && i < H; i++)
					if (out[(size_t)s * H + i] != 0.f ||
					    signbit(out[(size_t)s * H + i]))
						fail_msg("%s: sequence %d has length 0, element %d "
							 "= %g", what, s, i, out[(size_t)s * H + i]);
			free(out), free(ref);
		}
	free(x);
}

static void test_pool(void **state)
{
	const int lens[] = {1, 7, 3, 128, 1, 64, 33}, n_seq = 7;
	int32_t cu[8];
	(void)state;

	cu[0] = 0;
	for (int s = 0; s < n_seq; s++)
		cu[s + 1] = cu[s] + lens[s];
	run_pool(cu, n_seq, 29, "pool");
}

/* Zero-length sequences (the padding sequences of a CUDA graph bucket) pool to zero rows; a
 * negative length is refused. */
static void test_pool_zero_length(void **state)
{
	const int32_t inside[] = {0, 5, 5, 9, 9};         /* lengths 5, 0, 4, 0 */
	const int32_t leading[] = {0, 0, 3, 3, 3};        /* lengths 0, 3, 0, 0 */
	const int32_t all_empty[] = {0, 0, 0};            /* no token at all */
	const int32_t negative[] = {0, 5, 3};             /* lengths 5, -2 */
	float x[5 * 16] = {0}, *out = out_buf(2 * 16);
	(void)state;

	run_pool(inside, 4, 29, "pool, zero-length inside and at the end");
	run_pool(leading, 4, 16, "pool, zero-length first and last");
	run_pool(all_empty, 2, 8, "pool, every sequence empty");
	for (int m = 0; m < 3; m++)
		assert_int_equal(rg_cpu_pool(x, negative, 2, 16, (rg_pooling)m, true, out),
				 RG_ERR_INVALID_INPUT);
	free(out);
}

static void test_gather_rows(void **state)
{
	const int n_src = 50, H = 19, n_dst = 23;
	float *src = rand_buf((size_t)n_src * H, 1), *dst = out_buf((size_t)n_dst * H);
	int32_t idx[23];
	double ref[23 * 19];
	(void)state;
	for (int i = 0; i < n_dst; i++)
		idx[i] = (i * 17 + 3) % n_src;
	idx[0] = n_src - 1;
	for (int i = 0; i < n_dst; i++)
		for (int j = 0; j < H; j++)
			ref[i * H + j] = src[(size_t)idx[i] * H + j];
	assert_int_equal(rg_cpu_gather_rows(src, idx, n_dst, H, dst), RG_OK);
	check("gather_rows", dst, ref, (size_t)n_dst * H, 0, 0);
	free(src), free(dst);
}

/* The rg_op_* dispatch on a CPU backend reaches the same kernels. */
static void test_dispatch_cpu_backend(void **state)
{
	rg_backend *be = NULL;
	const int M = 9, N = 5, K = 4;
	float *A = rand_buf((size_t)M * K, 1), *W = rand_buf((size_t)N * K, 1);
	float *o1 = out_buf((size_t)M * N), *o2 = out_buf((size_t)M * N);
	(void)state;
	assert_int_equal(rg_backend_init(RG_DEVICE_CPU, 0, RG_DTYPE_F32, &be), RG_OK);
	assert_int_equal(rg_op_gemm(be, A, W, o1, M, N, K), RG_OK);
	assert_int_equal(rg_cpu_gemm(A, W, o2, M, N, K), RG_OK);
	assert_memory_equal(o1, o2, (size_t)(M * N + GUARD) * sizeof(float));
	rg_backend_free(be);
	be = NULL;
	assert_int_equal(rg_backend_init(RG_DEVICE_CPU, 0, RG_DTYPE_F16, &be), RG_ERR_UNSUPPORTED);
	assert_null(be);
	free(A), free(W), free(o1), free(o2);
}

/* The CPU backend's side of the graph / pinned-memory API: no graphs; pinned memory and async
 * copies are plain host memory and memcpy; set_exact_gelu changes nothing. */
static void test_cpu_backend_graph_api(void **state)
{
	rg_backend *be = NULL;
	rg_graph *g = (rg_graph *)&g;
	void *h = NULL, *d = NULL;
	float src[8] = {1, 2, 3, 4, 5, 6, 7, 8}, back[8] = {0};
	const int M = 5, N = 7, K = 3;
	float *A = rand_buf((size_t)M * K, 1), *W = rand_buf((size_t)N * K, 1);
	float *bias = rand_buf(N, 1);
	float *o1 = out_buf((size_t)M * N), *o2 = out_buf((size_t)M * N);
	(void)state;

	assert_int_equal(rg_backend_init(RG_DEVICE_CPU, 0, RG_DTYPE_F32, &be), RG_OK);
	assert_false(rg_backend_has_graphs(be));
	assert_int_equal(rg_backend_capture_begin(be), RG_ERR_UNSUPPORTED);
	assert_int_equal(rg_backend_capture_end(be, &g), RG_ERR_UNSUPPORTED);
	assert_null(g);
	assert_int_equal(rg_backend_graph_launch(be, NULL), RG_ERR_UNSUPPORTED);
	rg_backend_graph_free(be, NULL);

	assert_int_equal(rg_backend_host_alloc(be, sizeof(src), &h), RG_OK);
	assert_int_equal(rg_backend_alloc(be, sizeof(src), &d), RG_OK);
	memcpy(h, src, sizeof(src));
	assert_int_equal(rg_backend_upload_async(be, d, h, sizeof(src)), RG_OK);
	memset(h, 0, sizeof(src));
	assert_int_equal(rg_backend_download_async(be, h, d, sizeof(src)), RG_OK);
	assert_int_equal(rg_backend_sync(be), RG_OK);
	assert_memory_equal(h, src, sizeof(src));
	assert_int_equal(rg_backend_zero(be, d, 4 * sizeof(float)), RG_OK);
	assert_int_equal(rg_backend_download(be, back, d, sizeof(back)), RG_OK);
	for (int i = 0; i < 8; i++)
		assert_true(back[i] == (i < 4 ? 0.f : src[i]));
	rg_backend_dealloc(be, d);
	rg_backend_host_free(be, h);
	rg_backend_host_free(be, NULL);

	/* the dispatch reaches rg_cpu_gemm_bias_act; the exact-GELU switch is a no-op on the CPU */
	rg_backend_set_exact_gelu(be, true);
	assert_int_equal(rg_op_gemm_bias_act(be, A, W, bias, o1, M, N, K, RG_ACT_GELU), RG_OK);
	rg_backend_set_exact_gelu(be, false);
	assert_int_equal(rg_cpu_gemm_bias_act(A, W, bias, o2, M, N, K, RG_ACT_GELU), RG_OK);
	assert_memory_equal(o1, o2, (size_t)(M * N + GUARD) * sizeof(float));
	rg_backend_free(be);
	free(A), free(W), free(bias), free(o1), free(o2);
}

int main(void)
{
	/* the prepared-weight GEMM tests run gemm_blk for 4 < M <= 192 and the remainder rows above
	 * (the library's default); run-tests.sh also runs them with RAGGED_CPU_SMALLM=0, every row
	 * through oneDNN primitives */
	setenv("RAGGED_CPU_SMALLM", "192", 0);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_compare_rejects_nan),
		cmocka_unit_test(test_embed_layernorm),
		cmocka_unit_test(test_gemm),
		cmocka_unit_test(test_bias_act),
		cmocka_unit_test(test_gemm_bias_act),
		cmocka_unit_test(test_gemm_bias_act_edges),
		cmocka_unit_test(test_gemm_prepared),
		cmocka_unit_test(test_gemv_small_m),
		cmocka_unit_test(test_gemm_blk_kernel),
		cmocka_unit_test(test_gemm_prepared_bf16),
		cmocka_unit_test(test_f32_to_bf16),
		cmocka_unit_test(test_bias_residual_layernorm),
		cmocka_unit_test(test_attention_packed),
		cmocka_unit_test(test_attention_seg_mask),
		cmocka_unit_test(test_attention_rel_bias),
		cmocka_unit_test(test_attention_zero_bias_is_none),
		cmocka_unit_test(test_attention_rejects_bad_lengths),
		cmocka_unit_test(test_attention_disentangled),
		cmocka_unit_test(test_attention_disentangled_args),
		cmocka_unit_test(test_pool),
		cmocka_unit_test(test_pool_zero_length),
		cmocka_unit_test(test_gather_rows),
		cmocka_unit_test(test_dispatch_cpu_backend),
		cmocka_unit_test(test_cpu_backend_graph_api),
	};
	static const char *const isas[] = {"avx512", "avx2", "generic"};
	int failed = 0;

	/* every kernel table this CPU runs, against the same float64 references */
	for (size_t i = 0; i < sizeof(isas) / sizeof(isas[0]); i++) {
		if (rg_cpu_force_isa(isas[i]) != RG_OK) {
			printf("[ ISA      ] %s: not run by this CPU, not tested here\n", isas[i]);
			continue;
		}
		printf("[ ISA      ] %s\n", rg_cpu_isa());
		failed += cmocka_run_group_tests(tests, NULL, NULL);
	}
	return failed;
}
