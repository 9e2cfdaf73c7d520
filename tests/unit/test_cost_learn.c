/* Online refit of the batch latency model (src/core/cost_model.c rg_cost_learner), issue 18
 * item 11: the start-up fit on a busy machine gave 66 ms a batch and 0 per token (a time budget
 * of 663 ms for a 100 ms option); the batches the server runs must correct it.
 *  - the weighted fit equals the unweighted fit of the points repeated by their integer weight;
 *  - from that absurd prior, batches of only two shapes (short probes, 3 x 512 pieces) bring the
 *    fixed cost under 5 ms and both shapes' estimates within 2% of the true times;
 *  - batches of many shapes recover the true coefficients within 5%;
 *  - a machine that becomes twice as slow is followed within 10% after 30 batches;
 *  - one shape alone: its own time is estimated within 2%, and the prior splits it;
 *  - bad measurements are ignored.
 * The generation step's model (rg_step_learner, issue 28): from synthetic step timings of an
 * H200-like device (a fixed cost per step, decode KV reads dearer per context token than prefill
 * pairs) it converges on every step shape from a few hundred mixed steps; warm-up steps that
 * ran 3x slow, settled into the prior, do not hold it back; a device that becomes twice as slow
 * is followed; one step with a one-time cost moves it by little. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/cost_model.h"

static const rg_cost_model TRUE_M = {1.0, 0.02, 2e-5}; /* a CPU encoder */
static const rg_cost_model ABSURD = {66, 0, 0};        /* the report's start-up fit */

/* Packed batch of n sequences of len tokens. */
static void shape(int n, int len, double *tok, double *pairs)
{
	*tok = (double)n * len;
	*pairs = (double)n * len * len;
}

static void feed(rg_cost_learner *l, const rg_cost_model *m, int n, int len, double factor)
{
	double t, p;

	shape(n, len, &t, &p);
	rg_cost_learner_add(l, t, p, factor * rg_cost_model_ms(m, t, p));
}

static double rel_err(const rg_cost_model *a, const rg_cost_model *b, int n, int len)
{
	double t, p, x, y;

	shape(n, len, &t, &p);
	x = rg_cost_model_ms(a, t, p);
	y = rg_cost_model_ms(b, t, p);
	return fabs(x - y) / y;
}

static void test_weighted_equals_repeated(void **state)
{
	double tok[] = {16, 256, 256, 1024}, pairs[] = {256, 65536, 4096, 262144};
	double ms[] = {1.5, 7, 6.2, 30}, w[] = {1, 3, 0, 2};
	double rt[6], rp[6], rm[6];
	int n = 0;
	rg_cost_model a, b;

	(void)state;
	for (int i = 0; i < 4; i++)
		for (int k = 0; k < (int)w[i]; k++) {
			rt[n] = tok[i];
			rp[n] = pairs[i];
			rm[n++] = ms[i];
		}
	assert_int_equal(rg_cost_model_fit_weighted(tok, pairs, ms, w, 4, &a), RG_OK);
	assert_int_equal(rg_cost_model_fit(rt, rp, rm, n, &b), RG_OK);
	assert_true(fabs(a.batch_ms - b.batch_ms) <= 1e-9 * (1 + b.batch_ms));
	assert_true(fabs(a.token_ms - b.token_ms) <= 1e-9 * (1 + b.token_ms));
	assert_true(fabs(a.pair_ms - b.pair_ms) <= 1e-12 + 1e-9 * b.pair_ms);
	w[0] = w[1] = w[3] = 0;
	assert_int_equal(rg_cost_model_fit_weighted(tok, pairs, ms, w, 4, &a),
			 RG_ERR_INVALID_INPUT);
	w[0] = -1;
	assert_int_equal(rg_cost_model_fit_weighted(tok, pairs, ms, w, 4, &a),
			 RG_ERR_INVALID_INPUT);
}

static void test_absurd_prior_corrected_by_two_shapes(void **state)
{
	rg_cost_learner l;
	rg_cost_model m;

	(void)state;
	rg_cost_learner_init(&l, &ABSURD, 512);
	assert_int_equal(rg_cost_learner_fit(&l, &m), RG_OK);
	assert_true(fabs(m.batch_ms - 66) < 1e-6); /* the prior alone: itself */
	for (int i = 0; i < 20; i++) {
		feed(&l, &TRUE_M, 3, 512, 1);
		feed(&l, &TRUE_M, 1, 16, 1);
	}
	assert_int_equal(rg_cost_learner_fit(&l, &m), RG_OK);
	printf("  refit: %.3f ms + %.5f ms/token + %.2e ms/pair\n", m.batch_ms, m.token_ms,
	       m.pair_ms);
	assert_true(m.batch_ms < 5);
	assert_true(rel_err(&m, &TRUE_M, 3, 512) < 0.02);
	assert_true(rel_err(&m, &TRUE_M, 1, 16) < 0.02);
}

static void test_many_shapes_recover_the_model(void **state)
{
	static const int ns[] = {1, 2, 4, 8, 16, 32}, lens[] = {8, 32, 128, 512};
	rg_cost_learner l;
	rg_cost_model m;

	(void)state;
	rg_cost_learner_init(&l, &ABSURD, 512);
	for (int r = 0; r < 3; r++)
		for (int i = 0; i < 6; i++)
			for (int j = 0; j < 4; j++)
				feed(&l, &TRUE_M, ns[i], lens[j], 1);
	assert_int_equal(rg_cost_learner_fit(&l, &m), RG_OK);
	assert_true(fabs(m.batch_ms - TRUE_M.batch_ms) < 0.05 * TRUE_M.batch_ms);
	assert_true(fabs(m.token_ms - TRUE_M.token_ms) < 0.05 * TRUE_M.token_ms);
	assert_true(fabs(m.pair_ms - TRUE_M.pair_ms) < 0.05 * TRUE_M.pair_ms);
}

static void test_follows_a_slower_machine(void **state)
{
	rg_cost_learner l;
	rg_cost_model m;

	(void)state;
	rg_cost_learner_init(&l, &TRUE_M, 512);
	for (int i = 0; i < 30; i++) {
		feed(&l, &TRUE_M, 3, 512, 1);
		feed(&l, &TRUE_M, 8, 64, 1);
	}
	for (int i = 0; i < 30; i++) {
		feed(&l, &TRUE_M, 3, 512, 2);
		feed(&l, &TRUE_M, 8, 64, 2);
	}
	assert_int_equal(rg_cost_learner_fit(&l, &m), RG_OK);
	assert_true(fabs(rg_cost_model_ms(&m, 1536, 3 * 512.0 * 512) /
			 rg_cost_model_ms(&TRUE_M, 1536, 3 * 512.0 * 512) - 2) < 0.2);
	assert_true(fabs(rg_cost_model_ms(&m, 512, 8 * 64.0 * 64) /
			 rg_cost_model_ms(&TRUE_M, 512, 8 * 64.0 * 64) - 2) < 0.2);
}

static void test_one_shape_and_bad_values(void **state)
{
	rg_cost_learner l;
	rg_cost_model m, before;

	(void)state;
	rg_cost_learner_init(&l, &TRUE_M, 512);
	for (int i = 0; i < 10; i++)
		feed(&l, &TRUE_M, 4, 256, 1.5);
	assert_int_equal(rg_cost_learner_fit(&l, &m), RG_OK);
	printf("  one shape at 1.5x: estimated %.4fx\n", rg_cost_model_ms(&m, 1024, 4 * 256.0 * 256) /
	       rg_cost_model_ms(&TRUE_M, 1024, 4 * 256.0 * 256));
	assert_true(fabs(rg_cost_model_ms(&m, 1024, 4 * 256.0 * 256) /
			 rg_cost_model_ms(&TRUE_M, 1024, 4 * 256.0 * 256) - 1.5) < 0.02);
	/* ignored: not finite, negative, no tokens */
	before = m;
	rg_cost_learner_add(&l, NAN, 1, 1);
	rg_cost_learner_add(&l, 16, 256, -1);
	rg_cost_learner_add(&l, 16, 256, INFINITY);
	rg_cost_learner_add(&l, 0, 0, 1);
	assert_int_equal(rg_cost_learner_fit(&l, &m), RG_OK);
	assert_memory_equal(&m, &before, sizeof(m));
	/* no prior and nothing run: the zero model */
	rg_cost_learner_init(&l, NULL, 512);
	assert_int_equal(rg_cost_learner_fit(&l, &m), RG_OK);
	assert_true(m.batch_ms == 0 && m.token_ms == 0 && m.pair_ms == 0);
}

/* ---- the generation step's model ---- */

/* an H200-like device: 4 ms a step, GEMM rows, prefill pairs, decode context reads, rows */
static const rg_step_cost GPU = {4.0, 0.006, 2e-7, 2e-5, 0.01};

/* a step of d decodes at mean context c beside a prefill chunk of n tokens after p cached */
static rg_step_shape step_of(int d, double c, int n, double p)
{
	return (rg_step_shape){.tokens = d + n, .n_decode = d, .ctx = d * (c + 1),
			       .pairs = n * (p + (n + 1) / 2.0), .rows = d + (n > 0)};
}

static void feed_steps(rg_step_learner *l, const rg_step_cost *m, int n_steps, double factor,
		       unsigned seed)
{
	for (int i = 0; i < n_steps; i++) {
		unsigned h = (seed + (unsigned)i) * 2654435761u;
		int d = (int)(h % 65), n = (h >> 8) % 3 == 0 ? (int)((h >> 12) % 512) + 1 : 0;
		rg_step_shape x;

		if (d == 0 && n == 0)
			d = 1;
		x = step_of(d, (double)((h >> 4) % 2000), n, (double)((h >> 16) % 1024));
		rg_step_learner_add(l, &x, factor * rg_step_cost_ms(m, &x));
	}
}

static double step_err(const rg_step_cost *got, const rg_step_cost *want, rg_step_shape x)
{
	return fabs(rg_step_cost_ms(got, &x) / rg_step_cost_ms(want, &x) - 1);
}

static double worst_err(const rg_step_cost *got, const rg_step_cost *want, double factor)
{
	const rg_step_shape xs[] = {step_of(1, 16, 0, 0), step_of(64, 1500, 0, 0),
				    step_of(8, 300, 0, 0), step_of(0, 0, 512, 0),
				    step_of(0, 0, 16, 800), step_of(32, 700, 480, 200)};
	rg_step_cost w = {want->step_ms * factor, want->token_ms * factor,
			  want->pair_ms * factor, want->ctx_ms * factor, want->row_ms * factor};
	double e = 0;

	for (size_t i = 0; i < sizeof(xs) / sizeof(xs[0]); i++)
		e = fmax(e, step_err(got, &w, xs[i]));
	return e;
}

static void test_step_model_converges(void **state)
{
	rg_step_learner *l = malloc(sizeof(*l));
	rg_step_cost m;

	(void)state;
	rg_step_learner_init(l, NULL, 512, 64, 2048);
	assert_int_equal(rg_step_learner_fit(l, &m), RG_OK);
	assert_true(rg_step_cost_zero(&m));
	feed_steps(l, &GPU, 300, 1, 1);
	assert_int_equal(rg_step_learner_fit(l, &m), RG_OK);
	printf("  fitted: %.3f ms + %.5f/token + %.2e/pair + %.2e/ctx + %.4f/row; worst %.2f%%\n",
	       m.step_ms, m.token_ms, m.pair_ms, m.ctx_ms, m.row_ms, 100 * worst_err(&m, &GPU, 1));
	assert_true(worst_err(&m, &GPU, 1) < 0.02);
	free(l);
}

static void test_step_model_warm_up_settled(void **state)
{
	rg_step_learner *l = malloc(sizeof(*l));
	rg_step_cost m;

	(void)state;
	rg_step_learner_init(l, NULL, 512, 64, 2048);
	feed_steps(l, &GPU, 40, 3, 7); /* a cold start: 3x slow */
	rg_step_learner_settle(l);
	assert_int_equal(rg_step_learner_fit(l, &m), RG_OK);
	assert_true(worst_err(&m, &GPU, 3) < 0.05); /* the prior is the warm-up's fit */
	feed_steps(l, &GPU, 200, 1, 11);
	assert_int_equal(rg_step_learner_fit(l, &m), RG_OK);
	printf("  after a 3x slow warm-up and 200 steps: worst %.2f%%\n",
	       100 * worst_err(&m, &GPU, 1));
	assert_true(worst_err(&m, &GPU, 1) < 0.03);
	free(l);
}

static void test_step_model_follows_and_clips(void **state)
{
	rg_step_learner *l = malloc(sizeof(*l));
	rg_step_cost m;
	rg_step_shape x = step_of(16, 500, 0, 0);
	double before;

	(void)state;
	rg_step_learner_init(l, &GPU, 512, 64, 2048);
	feed_steps(l, &GPU, 300, 1, 3);
	feed_steps(l, &GPU, 300, 2, 5); /* the device is shared now: twice as slow */
	assert_int_equal(rg_step_learner_fit(l, &m), RG_OK);
	printf("  a device twice as slow: worst %.2f%%\n", 100 * worst_err(&m, &GPU, 2));
	assert_true(worst_err(&m, &GPU, 2) < 0.1);
	/* one step paying a one-time cost (100x) moves its class's estimate by at most 3/4 */
	rg_step_learner_init(l, NULL, 512, 64, 2048);
	feed_steps(l, &GPU, 300, 1, 9);
	for (int i = 0; i < 10; i++)
		rg_step_learner_add(l, &x, rg_step_cost_ms(&GPU, &x));
	assert_int_equal(rg_step_learner_fit(l, &m), RG_OK);
	before = rg_step_cost_ms(&m, &x);
	rg_step_learner_add(l, &x, 100 * rg_step_cost_ms(&GPU, &x));
	assert_int_equal(rg_step_learner_fit(l, &m), RG_OK);
	assert_true(rg_step_cost_ms(&m, &x) < 1.8 * before);
	/* bad values are ignored */
	before = rg_step_cost_ms(&m, &x);
	rg_step_learner_add(l, &x, NAN);
	rg_step_learner_add(l, &x, -1);
	x.tokens = 0;
	rg_step_learner_add(l, &x, 5);
	x.tokens = 16;
	x.ctx = INFINITY;
	rg_step_learner_add(l, &x, 5);
	assert_int_equal(rg_step_learner_fit(l, &m), RG_OK);
	x.ctx = 16 * 501;
	assert_true(rg_step_cost_ms(&m, &x) == before);
	free(l);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_weighted_equals_repeated),
		cmocka_unit_test(test_absurd_prior_corrected_by_two_shapes),
		cmocka_unit_test(test_many_shapes_recover_the_model),
		cmocka_unit_test(test_follows_a_slower_machine),
		cmocka_unit_test(test_one_shape_and_bad_values),
		cmocka_unit_test(test_step_model_converges),
		cmocka_unit_test(test_step_model_warm_up_settled),
		cmocka_unit_test(test_step_model_follows_and_clips),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
