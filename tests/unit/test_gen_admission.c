/* The generation engine's admission (issue 28), end to end over a toy runner whose steps take
 * step_delay_ms (a slow device: step times stable enough on a loaded machine):
 *  - a request admitted under a deadline meets it, and its TTFT is what admission predicted
 *    (rg_gen_output.est_ttft_ms, the model's own recorded estimate, fitted online from the
 *    engine's steps) to within a tolerance that holds under load; some are refused with a
 *    Retry-After, none admitted misses;
 *  - default_ttft_ms is the deadline of a request that sets none;
 *  - releasing a request that is still waiting leaves nothing queued and no block held, at once
 *    and during a step in flight (the server's rollback of a partly submitted fan-out);
 *  - a request that can never fit is told apart from a busy engine (TOO_LONG / INVALID_INPUT
 *    naming the limit, retry_after_ms -1; BUSY with retry_after_ms >= 1). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gen/engine.h"
#include "test_toy.h"

#define V 31

/* Logits of a row: the toy hash of its last token and position (no cache needed). */
static rg_status light_step(void *ctx, const rg_step_batch *b, float *logits)
{
	(void)ctx;
	for (int r = 0; r < b->n_logits; r++) {
		int row = b->logits_rows[r];
		int32_t c[2] = {b->tokens[row], b->positions[row]};

		toy_logits(V, c, 2, logits + (size_t)r * V);
	}
	return RG_OK;
}

static rg_status light_copy(void *ctx, const int32_t *src, const int32_t *dst, int n)
{
	(void)ctx, (void)src, (void)dst, (void)n;
	return RG_OK;
}

static rg_gen_engine *make_engine(int n_blocks, const rg_gen_engine_params *p)
{
	rg_gen_runner r = {.vocab_size = V, .block_size = 4, .n_blocks = n_blocks,
			   .max_context = 256, .step = light_step, .copy_blocks = light_copy};
	rg_status st;
	rg_gen_engine *e = rg_gen_engine_create_runner(&r, NULL, NULL, NULL, 0, p, &st);

	assert_int_equal(st, RG_OK);
	assert_non_null(e);
	return e;
}

static void prompt_of(int32_t *p, int n, int salt)
{
	for (int i = 0; i < n; i++)
		p[i] = (i * 7 + salt * 13) % V;
}

static rg_status add(rg_gen_engine *e, int n_prompt, int max_tokens, double deadline, int salt,
		     uint64_t *id, rg_gen_admission *adm)
{
	int32_t pr[256];
	rg_gen_params gp;
	rg_gen_options o;

	prompt_of(pr, n_prompt, salt);
	rg_gen_params_default(&gp);
	gp.max_tokens = max_tokens;
	gp.n_eos = -1;
	rg_gen_options_default(&o);
	o.deadline_ms = deadline;
	return rg_gen_engine_add(e, pr, n_prompt, &gp, &o, rg_gen_engine_now_ms(), id, adm);
}

static void run_all(rg_gen_engine *e)
{
	for (int guard = 0; guard < 100000 && rg_gen_engine_has_work(e); guard++)
		assert_int_equal(rg_gen_engine_step(e, rg_gen_engine_now_ms(), NULL, NULL), RG_OK);
	assert_false(rg_gen_engine_has_work(e));
}

/* Candidates of increasing deadlines behind a queue, on a device of 40 ms steps: the tight
 * ones are refused with a Retry-After, every admitted one meets its deadline, within 25% + 50
 * ms of its recorded estimate. deadline_slack 1.3 leaves room for a loaded machine's noise. */
static void test_admitted_meet_their_deadline(void **state)
{
	rg_gen_engine_params p;
	rg_gen_engine *e;
	static const double dl[] = {60, 150, 300, 450, 600, 800, 1000, 1400};
	enum { N = sizeof(dl) / sizeof(dl[0]) };
	uint64_t ids[N], warm[2], bg[3];
	double arrival[N];
	rg_status st[N];
	int admitted = 0, refused = 0;
	rg_step_cost m;
	(void)state;

	rg_gen_engine_params_default(&p);
	p.max_num_batched_tokens = 16;
	p.max_num_seqs = 4;
	p.prefix_caching = false;
	p.step_delay_ms = 40;
	p.deadline_slack = 1.3;
	e = make_engine(256, &p);
	/* the cost model learns from the steps run: nothing known yet */
	assert_int_equal(rg_gen_engine_cost_model(e, &m), RG_OK);
	assert_true(rg_step_cost_zero(&m));
	for (int k = 0; k < 2; k++)
		assert_int_equal(add(e, 20, 6, 0, k, &warm[k], NULL), RG_OK);
	run_all(e);
	assert_int_equal(rg_gen_engine_cost_model(e, &m), RG_OK);
	assert_false(rg_step_cost_zero(&m));
	/* 120 prompt tokens ahead: 8 chunks of 16, then their decodes beside what follows */
	for (int k = 0; k < 3; k++)
		assert_int_equal(add(e, 40, 10, 0, 10 + k, &bg[k], NULL), RG_OK);
	for (int k = 0; k < N; k++) {
		rg_gen_admission adm;

		arrival[k] = rg_gen_engine_now_ms();
		st[k] = add(e, 8, 4, dl[k], 20 + k, &ids[k], &adm);
		print_message("deadline %6.0f ms: %s, estimated TTFT %.1f ms, retry after %.1f ms\n",
			      dl[k], st[k] == RG_OK ? "admitted" : "refused ", adm.est_ttft_ms,
			      adm.retry_after_ms);
		if (st[k] == RG_OK) {
			admitted++;
			assert_true(adm.est_ttft_ms > 0 && 1.3 * adm.est_ttft_ms <= dl[k] + 1e-9);
		} else {
			assert_int_equal(st[k], RG_ERR_BUSY);
			assert_true(adm.retry_after_ms >= 1);
			refused++;
		}
	}
	run_all(e);
	for (int k = 0; k < N; k++) {
		rg_gen_output o;
		double ttft;

		if (st[k] != RG_OK)
			continue;
		assert_int_equal(rg_gen_engine_output(e, ids[k], 0, &o), RG_OK);
		assert_int_equal(o.n_ids, 4);
		ttft = o.first_token_ms - arrival[k];
		print_message("deadline %6.0f ms: TTFT %.1f ms, estimated %.1f ms\n", dl[k], ttft,
			      o.est_ttft_ms);
		assert_true(ttft <= dl[k]);
		assert_true(fabs(ttft - o.est_ttft_ms) <= 0.25 * o.est_ttft_ms + 50);
	}
	assert_true(admitted >= 2);
	assert_true(refused >= 2);
	for (int k = 0; k < N; k++)
		rg_gen_engine_release(e, ids[k]);
	for (int k = 0; k < 3; k++)
		rg_gen_engine_release(e, bg[k]);
	for (int k = 0; k < 2; k++)
		rg_gen_engine_release(e, warm[k]);
	rg_gen_engine_free(e);
}

/* default_ttft_ms: a request without a deadline gets the engine's; one that an idle engine
 * misses (1 ms against 5 ms steps) is refused with retry_after_ms -1; with a deadline of its
 * own it is admitted. */
static void test_default_ttft(void **state)
{
	rg_gen_engine_params p;
	rg_gen_engine *e;
	rg_gen_admission adm;
	uint64_t id;
	(void)state;

	rg_gen_engine_params_default(&p);
	p.max_num_batched_tokens = 16;
	p.step_delay_ms = 5;
	p.default_ttft_ms = 1;
	e = make_engine(64, &p);
	/* nothing measured: nothing estimated, admitted */
	assert_int_equal(add(e, 20, 3, 0, 1, &id, &adm), RG_OK);
	assert_true(adm.est_ttft_ms == 0);
	run_all(e);
	rg_gen_engine_release(e, id);
	assert_int_equal(add(e, 20, 3, 0, 2, &id, &adm), RG_ERR_BUSY);
	assert_true(adm.retry_after_ms == -1);
	assert_true(adm.est_ttft_ms >= 5);
	assert_int_equal(add(e, 20, 3, 5000, 2, &id, &adm), RG_OK);
	run_all(e);
	rg_gen_engine_release(e, id);
	rg_gen_engine_free(e);
}

/* Releasing waiting requests: gone from the queue at once, no block held, also while a step is
 * in flight (between _begin and _end, as the server's fan-out rollback runs under its lock);
 * the others still finish and every block comes back. */
static void test_release_waiting(void **state)
{
	rg_gen_engine_params p;
	rg_gen_engine *e;
	rg_gen_engine_stats s0, s1;
	rg_gen_output o;
	uint64_t ids[6];
	bool ran;
	(void)state;

	rg_gen_engine_params_default(&p);
	p.max_num_batched_tokens = 16;
	p.max_num_seqs = 1;
	p.prefix_caching = false; /* no cached blocks: used means held */
	e = make_engine(64, &p);
	for (int k = 0; k < 6; k++)
		assert_int_equal(add(e, 12, 4, 0, k, &ids[k], NULL), RG_OK);
	assert_int_equal(rg_gen_engine_step(e, rg_gen_engine_now_ms(), NULL, NULL), RG_OK);
	rg_gen_engine_get_stats(e, &s0);
	assert_int_equal(s0.n_running, 1);
	assert_int_equal(s0.n_waiting, 5);
	rg_gen_engine_release(e, ids[4]);
	rg_gen_engine_release(e, ids[5]);
	rg_gen_engine_get_stats(e, &s1);
	assert_int_equal(s1.n_waiting, 3);
	assert_int_equal(s1.blocks_used, s0.blocks_used);
	assert_int_equal(rg_gen_engine_output(e, ids[4], 0, &o), RG_ERR_INVALID_INPUT);
	/* a step in flight: the waiting ones it does not hold leave at once */
	assert_int_equal(rg_gen_engine_step_begin(e, rg_gen_engine_now_ms(), &ran), RG_OK);
	assert_true(ran);
	rg_gen_engine_get_stats(e, &s0); /* the step took its blocks */
	rg_gen_engine_release(e, ids[2]);
	rg_gen_engine_release(e, ids[3]);
	rg_gen_engine_get_stats(e, &s1);
	assert_int_equal(s1.n_waiting, 1);
	assert_int_equal(s1.blocks_used, s0.blocks_used);
	assert_int_equal(rg_gen_engine_step_run(e), RG_OK);
	assert_int_equal(rg_gen_engine_step_end(e, rg_gen_engine_now_ms(), NULL, NULL), RG_OK);
	run_all(e);
	for (int k = 0; k < 2; k++) {
		assert_int_equal(rg_gen_engine_output(e, ids[k], 0, &o), RG_OK);
		assert_int_equal(o.n_ids, 4);
		rg_gen_engine_release(e, ids[k]);
	}
	rg_gen_engine_get_stats(e, &s1);
	assert_int_equal(s1.n_running + s1.n_waiting, 0);
	assert_int_equal(s1.blocks_used, 0);
	rg_gen_engine_free(e);
}

/* What can never fit is no 429: TOO_LONG / INVALID_INPUT naming the limit, retry -1; a full
 * queue is BUSY with a Retry-After. */
static void test_never_fit_is_not_busy(void **state)
{
	rg_gen_engine_params p;
	rg_gen_engine *e;
	rg_gen_admission adm;
	rg_gen_params gp;
	int32_t pr[300];
	uint64_t id, ids[4];
	(void)state;

	rg_gen_engine_params_default(&p);
	p.max_num_seqs = 4;
	p.max_waiting = 3;
	p.step_delay_ms = 1;
	e = make_engine(128, &p);
	prompt_of(pr, 300, 0);
	rg_gen_params_default(&gp);
	assert_int_equal(rg_gen_engine_add(e, pr, 256, &gp, NULL, 0, &id, &adm), RG_ERR_TOO_LONG);
	assert_true(adm.retry_after_ms == -1);
	assert_non_null(strstr(rg_last_error(), "context is 256"));
	gp.n = 4; /* four samples, three waiting places */
	assert_int_equal(rg_gen_engine_add(e, pr, 10, &gp, NULL, 0, &id, &adm),
			 RG_ERR_INVALID_INPUT);
	assert_true(adm.retry_after_ms == -1);
	assert_non_null(strstr(rg_last_error(), "max_waiting"));
	gp.n = 1;
	gp.num_beams = 5;
	assert_int_equal(rg_gen_engine_add(e, pr, 10, &gp, NULL, 0, &id, &adm),
			 RG_ERR_INVALID_INPUT);
	assert_true(adm.retry_after_ms == -1);
	assert_non_null(strstr(rg_last_error(), "max_num_seqs"));
	for (int k = 0; k < 3; k++)
		assert_int_equal(add(e, 10, 2, 0, k, &ids[k], NULL), RG_OK);
	assert_int_equal(add(e, 10, 2, 0, 9, &ids[3], &adm), RG_ERR_BUSY);
	assert_true(adm.retry_after_ms >= 0); /* >= 1 once a step has been measured */
	run_all(e);
	for (int k = 0; k < 3; k++)
		rg_gen_engine_release(e, ids[k]);
	for (int k = 0; k < 3; k++)
		assert_int_equal(add(e, 10, 2, 0, k, &ids[k], NULL), RG_OK);
	assert_int_equal(add(e, 10, 2, 0, 9, &ids[3], &adm), RG_ERR_BUSY);
	assert_true(adm.retry_after_ms >= 1);
	run_all(e);
	for (int k = 0; k < 3; k++)
		rg_gen_engine_release(e, ids[k]);
	rg_gen_engine_free(e);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_admitted_meet_their_deadline),
		cmocka_unit_test(test_default_ttft),
		cmocka_unit_test(test_release_waiting),
		cmocka_unit_test(test_never_fit_is_not_busy),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
