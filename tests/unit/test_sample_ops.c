/* rg_op_sample_rows and rg_op_topk_rows on the CPU backend against independent references: the
 * host sampler chain of src/gen/sampler.c (rg_sampler_from_params + rg_sampler_sample, fed the
 * same uniform draw through a copy of the same rg_rng) and a full sort (rg_topk_sort). Many
 * random rows and parameter sets in one batch (per-row parameters, penalty and bias lists),
 * tie-heavy rows, NaN / +-inf rows, top-k over N, top-p 1 and tiny, min-p. Ids must be
 * identical; log-probs within 1e-5; comparisons fail on NaN. */
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

#include "core/rng.h"
#include "gen/sampler.h"
#include "gen/topk.h"
#include "ops/ops.h"

static uint64_t rs = 0x9E3779B97F4A7C15ull;

static uint32_t urand(void)
{
	rs ^= rs << 13;
	rs ^= rs >> 7;
	rs ^= rs << 17;
	return (uint32_t)(rs >> 32);
}

static double drand(void) { return (double)urand() / 4294967296.0; }

static float gauss(void)
{
	double u = drand() + 1e-12, v = drand();

	return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

/* One row's case: logits, parameters, its penalty / bias lists, and the host chain's answer. */
typedef struct row_case {
	int N;
	float *x;           /* (N) what the op sees */
	float *x_host;      /* (N) what the host chain sees (NaN -> -inf, +inf -> FLT_MAX) */
	rg_sampling_params sp;
	rg_sample_row row;
	int n_pen, n_bias;
	rg_sample_pen pen[16];
	rg_sample_bias bias[8];
	int32_t bias_ids[8];
	float bias_vals[8];
	int32_t prompt[16];
	int n_prompt;
	int32_t gen[32];    /* generated tokens (accepted by the host chain) */
	int n_gen;
	uint64_t seed;
} row_case;

static const int TOPN = 7;

/* The host chain's id, log-prob and top TOPN for c; the op's u comes from a copy of the RNG. */
static void host_ref(row_case *c, int32_t *id, float *lp, int32_t *tid, float *tlp)
{
	rg_sampler *s = NULL;
	rg_token_array work = {0};
	rg_rng rng;

	assert_int_equal(rg_sampler_from_params(&c->sp, c->N, c->prompt, c->n_prompt, &s), RG_OK);
	for (int i = 0; i < c->n_gen; i++)
		rg_sampler_accept(s, c->gen[i]);
	work.data = malloc((size_t)c->N * sizeof(rg_token_data));
	assert_non_null(work.data);
	rg_rng_seed(&rng, c->seed);
	{
		rg_rng copy = rng;

		c->row.u = rg_rng_uniform(&copy);
	}
	assert_int_equal(rg_sampler_sample(s, c->x_host, c->N, &rng, &work, TOPN, id, lp, tid, tlp),
			 RG_OK);
	free(work.data);
	rg_sampler_free(s);
}

/* Parameters: greedy or sampling with a random mix of the steps; penalties and bias lists. */
static void random_params(row_case *c, int kind)
{
	const int N = c->N;
	rg_sampling_params *p = &c->sp;

	rg_sampling_params_default(p);
	c->seed = ((uint64_t)urand() << 32) | urand();
	if (kind % 5 != 0) {
		static const float temps[] = {1.f, 0.7f, 1.5f, 0.25f, 3.f};
		static const float tps[] = {1.f, 0.9f, 0.5f, 1e-6f, 0.999f};
		static const float mps[] = {0.f, 0.05f, 0.5f, 1.f};
		const int ks[] = {0, 1, 5, 50, N, N + 3, 600};

		p->do_sample = true;
		p->temperature = temps[urand() % 5];
		p->top_k = ks[urand() % 7];
		p->top_p = tps[urand() % 5];
		p->min_p = mps[urand() % 4];
	}
	if (urand() % 2) {
		p->repetition_penalty = urand() % 2 ? 1.3f : 0.8f;
		p->presence_penalty = urand() % 2 ? 0.5f : -0.25f;
		p->frequency_penalty = urand() % 2 ? 0.3f : 0.f;
		c->n_prompt = 1 + (int)(urand() % 8);
		for (int i = 0; i < c->n_prompt; i++)
			c->prompt[i] = (int32_t)(urand() % (uint32_t)N);
		c->n_gen = (int)(urand() % 20);
		for (int i = 0; i < c->n_gen; i++)
			c->gen[i] = (int32_t)(urand() % (uint32_t)(N < 6 ? N : 6)); /* repeats */
	}
	if (urand() % 2) {
		c->n_bias = 1 + (int)(urand() % 6);
		for (int i = 0; i < c->n_bias; i++) {
			c->bias_ids[i] = (int32_t)(urand() % (uint32_t)N);
			c->bias_vals[i] = (float)(drand() * 8.0 - 4.0);
		}
		p->n_logit_bias = c->n_bias;
		p->logit_bias_ids = c->bias_ids;
		p->logit_bias_values = c->bias_vals;
	}
	/* the op's form of the same parameters */
	memset(&c->row, 0, sizeof(c->row));
	c->row.temperature = p->do_sample ? p->temperature : 0.f;
	c->row.top_k = p->top_k;
	c->row.top_p = p->top_p;
	c->row.min_p = p->min_p;
	c->row.repetition_penalty = p->repetition_penalty;
	c->row.presence_penalty = p->presence_penalty;
	c->row.frequency_penalty = p->frequency_penalty;
	for (int i = 0; i < c->n_bias; i++) {
		c->bias[i].token = c->bias_ids[i];
		c->bias[i].bias = c->bias_vals[i];
	}
	c->n_pen = 0;
	if (p->repetition_penalty != 1.f || p->presence_penalty != 0.f ||
	    p->frequency_penalty != 0.f)
		for (int t = 0; t < N; t++) {
			int cnt = 0, inp = 0;

			for (int i = 0; i < c->n_gen; i++)
				cnt += c->gen[i] == t;
			for (int i = 0; i < c->n_prompt; i++)
				inp |= c->prompt[i] == t;
			if (cnt || inp) {
				assert_true(c->n_pen < 16);
				c->pen[c->n_pen++] = (rg_sample_pen){t, cnt, inp};
			}
		}
}

static bool close_lp(float got, float ref)
{
	if (isinf(ref) || isinf(got))
		return got == ref;
	return fabsf(got - ref) <= 1e-5f + 1e-6f * fabsf(ref);
}

/* Runs the op on all cases as one batch of M rows of width N and checks each row. */
static void run_batch(row_case *cs, int M, int N)
{
	rg_backend *be = NULL;
	float *x = malloc((size_t)M * N * sizeof(float));
	rg_sample_row *rows = malloc((size_t)M * sizeof(*rows));
	int32_t *pen_off = calloc((size_t)M + 1, 4), *bias_off = calloc((size_t)M + 1, 4);
	rg_sample_pen *pen = malloc((size_t)M * 16 * sizeof(*pen) + 1);
	rg_sample_bias *bias = malloc((size_t)M * 8 * sizeof(*bias) + 1);
	int32_t *ids = malloc((size_t)(M + 1) * 4), *tid = malloc((size_t)M * TOPN * 4);
	float *lps = malloc((size_t)M * 4), *tlp = malloc((size_t)M * TOPN * 4);
	void *work = malloc(rg_sample_work_bytes(M, N));
	rg_sample_args a;

	assert_non_null(x);
	assert_non_null(work);
	for (int r = 0; r < M; r++) {
		row_case *c = &cs[r];

		memcpy(x + (size_t)r * N, c->x, (size_t)N * sizeof(float));
		rows[r] = c->row;
		pen_off[r + 1] = pen_off[r] + c->n_pen;
		memcpy(pen + pen_off[r], c->pen, (size_t)c->n_pen * sizeof(*pen));
		bias_off[r + 1] = bias_off[r] + c->n_bias;
		memcpy(bias + bias_off[r], c->bias, (size_t)c->n_bias * sizeof(*bias));
	}
	ids[M] = 0x5A5A5A5A; /* guard */
	a = (rg_sample_args){rows, pen_off, pen, bias_off, bias, TOPN, work, ids, lps, tid, tlp, NULL};
	assert_int_equal(rg_backend_init(RG_DEVICE_CPU, 0, RG_DTYPE_F32, &be), RG_OK);
	assert_int_equal(rg_op_sample_rows(be, x, M, N, &a), RG_OK);
	assert_int_equal(ids[M], 0x5A5A5A5A);
	for (int r = 0; r < M; r++) {
		int32_t id, rt[7];
		float lp, rl[7];

		host_ref(&cs[r], &id, &lp, rt, rl);
		if (ids[r] != id || !close_lp(lps[r], lp))
			fail_msg("row %d (N=%d T=%g k=%d p=%g minp=%g pen=%d bias=%d): id %d lp %.8g, "
				 "host %d %.8g", r, N, cs[r].sp.temperature, cs[r].sp.top_k,
				 cs[r].sp.top_p, cs[r].sp.min_p, cs[r].n_pen, cs[r].n_bias, ids[r],
				 lps[r], id, lp);
		for (int j = 0; j < TOPN; j++)
			if (tid[r * TOPN + j] != rt[j] || !close_lp(tlp[r * TOPN + j], rl[j]))
				fail_msg("row %d top %d: %d %.8g, host %d %.8g", r, j,
					 tid[r * TOPN + j], tlp[r * TOPN + j], rt[j], rl[j]);
	}
	rg_backend_free(be);
	free(x), free(rows), free(pen_off), free(bias_off), free(pen), free(bias);
	free(ids), free(tid), free(lps), free(tlp), free(work);
}

/* Note: rows must be re-derived (host_ref sets row.u), so the batch call follows host_ref for
 * u: fill u first from a copy of the same RNG. */
static void set_u(row_case *c)
{
	rg_rng rng;

	rg_rng_seed(&rng, c->seed);
	c->row.u = rg_rng_uniform(&rng);
}

static void free_cases(row_case *cs, int M)
{
	for (int r = 0; r < M; r++) {
		free(cs[r].x);
		free(cs[r].x_host);
	}
	free(cs);
}

/* gen: 0 gaussian * scale, 1 few distinct values (ties), 2 all equal, 3 NaN / inf mix */
static row_case *make_cases(int M, int N, int gen)
{
	row_case *cs = calloc((size_t)M, sizeof(*cs));

	assert_non_null(cs);
	for (int r = 0; r < M; r++) {
		row_case *c = &cs[r];
		const float scale = (float)(0.5 + 6.0 * drand());

		c->N = N;
		c->x = malloc((size_t)N * sizeof(float));
		c->x_host = malloc((size_t)N * sizeof(float));
		for (int j = 0; j < N; j++) {
			float v = gauss() * scale;

			if (gen == 1)
				v = (float)(urand() % 4) - 2.f;
			else if (gen == 2)
				v = 0.75f;
			else if (gen == 3) {
				const uint32_t k = urand() % 10;

				v = k == 0 ? NAN : k == 1 ? -INFINITY : k == 2 && r % 3 == 0 ? INFINITY : v;
			}
			c->x[j] = v;
			c->x_host[j] = isnan(v) ? -INFINITY : (v > FLT_MAX ? FLT_MAX : v);
		}
		random_params(c, r);
		if (gen == 3 && r % 3 == 0) { /* +inf rows: only where the host chain is defined */
			c->sp.temperature = c->row.temperature = c->sp.do_sample ? 1.f : 0.f;
			c->sp.repetition_penalty = c->row.repetition_penalty = 1.f;
			c->sp.presence_penalty = c->row.presence_penalty = 0.f;
			c->sp.frequency_penalty = c->row.frequency_penalty = 0.f;
			c->sp.n_logit_bias = c->n_bias = c->n_pen = 0;
		}
		set_u(c);
	}
	return cs;
}

static void check_gen(int M, int N, int gen)
{
	row_case *cs = make_cases(M, N, gen);

	run_batch(cs, M, N);
	free_cases(cs, M);
}

static void test_sample_random_rows(void **state)
{
	static const int Ns[] = {1, 2, 7, 33, 100, 513, 1000, 4099};
	(void)state;

	for (int i = 0; i < 8; i++)
		check_gen(i < 5 ? 60 : 25, Ns[i], 0);
}

static void test_sample_tie_heavy(void **state)
{
	(void)state;
	check_gen(40, 7, 1);
	check_gen(40, 600, 1);
	check_gen(30, 3000, 1);
	check_gen(20, 50, 2);
	check_gen(10, 2000, 2);
}

static void test_sample_nan_inf(void **state)
{
	(void)state;
	check_gen(40, 9, 3);
	check_gen(40, 700, 3);
}

/* Explicit corners: top-k over N, top-p 1 / tiny, min-p 1, a one-hot row. */
static void test_sample_corners(void **state)
{
	const int N = 300, M = 6;
	row_case *cs = make_cases(M, N, 0);
	(void)state;

	for (int r = 0; r < M; r++) {
		rg_sampling_params *p = &cs[r].sp;

		p->do_sample = true;
		p->temperature = 1.f;
		p->top_k = r == 0 ? N + 10 : r == 1 ? N : 0;
		p->top_p = r == 2 ? 1e-9f : r == 3 ? 1.f : 1.f;
		p->min_p = r == 4 ? 1.f : 0.f;
		cs[r].row.temperature = 1.f;
		cs[r].row.top_k = p->top_k;
		cs[r].row.top_p = p->top_p;
		cs[r].row.min_p = p->min_p;
	}
	for (int j = 0; j < N; j++) /* row 5: one finite value among -inf */
		cs[5].x[j] = cs[5].x_host[j] = j == 123 ? 2.5f : -INFINITY;
	run_batch(cs, M, N);
	free_cases(cs, M);
}

/* A row of only -inf / NaN: id 0, log-prob NaN, no alternatives (the op's own rule). */
static void test_sample_empty_row(void **state)
{
	rg_backend *be = NULL;
	float x[5] = {-INFINITY, NAN, -INFINITY, NAN, -INFINITY}, lp = 0.f, tlp[3];
	int32_t id = 7, tid[3];
	rg_sample_row row = {.u = 0.5, .temperature = 1.f, .top_p = 1.f, .repetition_penalty = 1.f};
	void *work = malloc(rg_sample_work_bytes(1, 5));
	rg_sample_args a = {&row, NULL, NULL, NULL, NULL, 3, work, &id, &lp, tid, tlp, NULL};
	(void)state;

	assert_int_equal(rg_backend_init(RG_DEVICE_CPU, 0, RG_DTYPE_F32, &be), RG_OK);
	assert_int_equal(rg_op_sample_rows(be, x, 1, 5, &a), RG_OK);
	assert_int_equal(id, 0);
	assert_true(isnan(lp));
	for (int j = 0; j < 3; j++)
		assert_true(tid[j] == -1 && tlp[j] == -INFINITY);
	a.top_n = RG_SAMPLE_MAX_TOP + 1;
	assert_int_equal(rg_op_sample_rows(be, x, 1, 5, &a), RG_ERR_INVALID_INPUT);
	rg_backend_free(be);
	free(work);
}

/* Hierarchical top-k rows (the op) against a full sort, ties included, k up to N. */
/* A structured-output mask (args.mask) is the row with its masked columns -inf: the op with the
 * mask and the op on that row without one agree bit for bit (id, log-prob, top list), on greedy,
 * temperature, top-k, top-p and min-p rows, with bias and penalties, ragged widths, masks of
 * 1..all columns and garbage bits past N. */
static void test_sample_mask(void **state)
{
	static const int Ns[] = {1, 7, 64, 65, 1000, 50257};
	(void)state;

	for (size_t in = 0; in < sizeof(Ns) / sizeof(Ns[0]); in++) {
		const int N = Ns[in], M = 12, W = (N + 63) / 64;
		float *x = malloc((size_t)M * N * sizeof(float)), *xm = malloc((size_t)M * N * 4);
		uint64_t *mask = calloc((size_t)M * W, sizeof(uint64_t));
		rg_sample_row rows[12];
		rg_sample_bias bias[12 * 2];
		int32_t bias_off[13] = {0}, ids[2][12], tid[2][12 * 7];
		float lps[2][12], tlp[2][12 * 7];
		void *work = malloc(rg_sample_work_bytes(M, N));
		rg_backend *be = NULL;

		assert_non_null(x);
		assert_non_null(xm);
		assert_non_null(mask);
		assert_non_null(work);
		for (int r = 0; r < M; r++) {
			const double dens = r % 4 == 0 ? 0.002 : r % 4 == 1 ? 0.2 : r % 4 == 2 ? 0.7 : 1.0;
			uint64_t *m = mask + (size_t)r * W;

			for (int j = 0; j < N; j++) {
				x[(size_t)r * N + j] = r % 5 == 4 ? (float)(urand() % 4) : gauss() * 3.f;
				if (drand() < dens)
					m[j >> 6] |= 1ull << (j & 63);
			}
			m[0] |= 1ull;
			if (N & 63)
				m[W - 1] |= ~0ull << (N & 63); /* past N: ignored */
			for (int j = 0; j < N; j++)
				xm[(size_t)r * N + j] = m[j >> 6] >> (j & 63) & 1 ? x[(size_t)r * N + j]
										 : -INFINITY;
			rows[r] = (rg_sample_row){drand(), r % 6 == 0 ? 0.f : 0.8f, 1.f, 0.f, 1.f, 0.f,
						  0.f, 0, 0};
			if (r % 6 == 1)
				rows[r].top_k = 5;
			if (r % 6 == 2)
				rows[r].top_p = 0.9f;
			if (r % 6 == 3)
				rows[r].min_p = 0.1f;
			bias[2 * r] = (rg_sample_bias){(int32_t)(urand() % (unsigned)N), 2.f};
			bias[2 * r + 1] = (rg_sample_bias){0, -1.f};
			bias_off[r + 1] = bias_off[r] + (r % 2 ? 2 : 0);
		}
		assert_int_equal(rg_backend_init(RG_DEVICE_CPU, 0, RG_DTYPE_F32, &be), RG_OK);
		for (int pass = 0; pass < 2; pass++) {
			rg_sample_args a = {rows, NULL, NULL, bias_off, bias, 7, work, ids[pass],
					    lps[pass], tid[pass], tlp[pass], pass ? NULL : mask};

			assert_int_equal(rg_op_sample_rows(be, pass ? xm : x, M, N, &a), RG_OK);
		}
		for (int r = 0; r < M; r++) {
			const uint64_t *m = mask + (size_t)r * W;

			assert_int_equal(ids[0][r], ids[1][r]);
			assert_true(m[ids[0][r] >> 6] >> (ids[0][r] & 63) & 1);
			assert_memory_equal(&lps[0][r], &lps[1][r], sizeof(float));
		}
		assert_memory_equal(tid[0], tid[1], sizeof(tid[0]));
		assert_memory_equal(tlp[0], tlp[1], sizeof(tlp[0]));
		rg_backend_free(be);
		free(x), free(xm), free(mask), free(work);
	}
}

static void test_topk_rows_vs_sort(void **state)
{
	static const int Ns[] = {1, 5, 512, 513, 2000, 50257};
	rg_backend *be = NULL;
	(void)state;

	assert_int_equal(rg_backend_init(RG_DEVICE_CPU, 0, RG_DTYPE_F32, &be), RG_OK);
	for (int ni = 0; ni < 6; ni++) {
		const int N = Ns[ni], M = 3;
		const int ks[] = {1, 8, 50, 511, 513, N};

		for (int gen = 0; gen < 2; gen++) {
			float *x = malloc((size_t)M * N * sizeof(float));
			void *work = malloc(rg_topk_work_bytes(M, N));

			for (size_t i = 0; i < (size_t)M * N; i++)
				x[i] = gen ? (float)(urand() % 5) : gauss();
			for (int ki = 0; ki < 6; ki++) {
				const int k = ks[ki];
				int32_t *idx, *ref = malloc((size_t)k * 4);
				float *val, *rv = malloc((size_t)k * 4);

				if (k > N) {
					free(ref), free(rv);
					continue;
				}
				idx = malloc((size_t)M * k * 4);
				val = malloc((size_t)M * k * 4);
				assert_int_equal(rg_op_topk_rows(be, x, M, N, k, RG_TOPK_HIER, work, idx,
								 val), RG_OK);
				for (int r = 0; r < M; r++) {
					assert_int_equal(rg_topk_sort(x + (size_t)r * N, N, k, ref, rv),
							 RG_OK);
					for (int j = 0; j < k; j++)
						if (idx[r * k + j] != ref[j] || val[r * k + j] != rv[j])
							fail_msg("N=%d k=%d gen=%d row %d: [%d] = %d, "
								 "sort %d", N, k, gen, r, j,
								 idx[r * k + j], ref[j]);
				}
				free(idx), free(val), free(ref), free(rv);
			}
			free(x);
			free(work);
		}
	}
	rg_backend_free(be);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sample_random_rows),
		cmocka_unit_test(test_sample_tie_heavy),
		cmocka_unit_test(test_sample_nan_inf),
		cmocka_unit_test(test_sample_corners),
		cmocka_unit_test(test_sample_empty_row),
		cmocka_unit_test(test_sample_mask),
		cmocka_unit_test(test_topk_rows_vs_sort),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
