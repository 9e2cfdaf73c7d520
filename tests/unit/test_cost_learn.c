/* Online refit of the batch latency model (src/core/cost_model.c rg_cost_learner), issue 18
 * item 11: the start-up fit on a busy machine gave 66 ms a batch and 0 per token (a time budget
 * of 663 ms for a 100 ms option); the batches the server runs must correct it.
 *  - the weighted fit equals the unweighted fit of the points repeated by their integer weight;
 *  - from that absurd prior, batches of only two shapes (short probes, 3 x 512 pieces) bring the
 *    fixed cost under 5 ms and both shapes' estimates within 2% of the true times;
 *  - batches of many shapes recover the true coefficients within 5%;
 *  - a machine that becomes twice as slow is followed within 10% after 30 batches;
 *  - one shape alone: its own time is estimated within 2%, and the prior splits it;
 *  - bad measurements are ignored. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_weighted_equals_repeated),
		cmocka_unit_test(test_absurd_prior_corrected_by_two_shapes),
		cmocka_unit_test(test_many_shapes_recover_the_model),
		cmocka_unit_test(test_follows_a_slower_machine),
		cmocka_unit_test(test_one_shape_and_bad_values),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
