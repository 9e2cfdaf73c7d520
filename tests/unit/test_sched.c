/* Batch schedulers (app/server/sched/sched.c).
 *  - DP (TurboTransformers PPoPP'21 sec. 5, Algorithm 2): total cost of the successive batches it
 *    picks equals the optimum found by brute force over ALL set partitions of small random queues
 *    (1-8 requests) with random cost tables that are non-decreasing in length (for those, some
 *    optimal partition is contiguous in length order, so Algorithm 2 must reach the optimum);
 *    the oldest request runs first; lazy waits and wakes at oldest + budget/2 - estimate.
 *  - DAS / slotted DAS (TCB ICPP'22 Algorithms 1 and 2): hand-worked cases, written out below.
 *  - ConcatBatching, slotted, naive, token, FCFS/SJF/EDF, nobatch: hand-worked cases.
 *  - Every policy: a long random simulation (arrivals, expiry, picks, removal) checking that the
 *    layout is valid (no overlap, inside rows/slots, within budgets), that no request is lost,
 *    duplicated or answered twice, and that expired requests are never picked; once more with a
 *    time budget (max_batch_ms), checking every batch's estimate against it.
 *  - The time budget on hand cases (packed, naive, concat, DP) and the cost model's fit
 *    (cost_model.c): exact coefficients back from noise-free data, non-negative least squares
 *    against a dense grid search, and the fit of a cost table. */
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
#include "server/sched/cost_table.h"
#include "server/sched/sched.h"

#include "test_rng.h"

#define RNG_SEED 0x243F6A8885A308D3ull

static double drand(void) /* uniform in [0, 1) */
{
	return (double)(next_u64() >> 11) / 9007199254740992.0;
}

/* Validate a picked batch against the contract of sched.h, independently of the policy. */
static void validate(const rg_sched *s, const rg_sched_req *q, int nq, double now,
		     const rg_sched_batch *b)
{
	const rg_sched_params *p = rg_sched_get_params(s);
	int max_len = rg_sched_max_len(s);
	assert_true(b->n >= 0 && b->n <= p->max_batch_requests);
	assert_true(b->layout.req_row == b->req_row && b->layout.req_offset == b->req_offset);
	assert_int_equal(b->layout.mode, rg_sched_kind_mode(p->kind, p->das_packed));
	if (b->n == 0)
		return;
	char *seen = calloc((size_t)nq, 1);
	assert_non_null(seen);
	int real = 0;
	for (int i = 0; i < b->n; i++) {
		int qi = b->queue_idx[i];
		assert_true(qi >= 0 && qi < nq);
		assert_false(seen[qi]);
		seen[qi] = 1;
		assert_true(q[qi].deadline_ms > now); /* never an expired request */
		assert_true(q[qi].len <= max_len);
		real += q[qi].len;
	}
	free(seen);
	assert_int_equal(b->real_tokens, real);
	assert_true(b->computed_tokens <= p->max_batch_tokens);
	const rg_layout *l = &b->layout;
	switch (l->mode) {
	case RG_EXEC_PACKED:
		assert_int_equal(b->computed_tokens, real);
		break;
	case RG_EXEC_PADDED: {
		assert_int_equal(l->n_rows, b->n);
		char *row_used = calloc((size_t)b->n, 1);
		for (int i = 0; i < b->n; i++) {
			assert_true(b->req_row[i] >= 0 && b->req_row[i] < b->n);
			assert_false(row_used[b->req_row[i]]);
			row_used[b->req_row[i]] = 1;
			assert_int_equal(b->req_offset[i], 0);
			assert_true(q[b->queue_idx[i]].len <= l->row_len);
		}
		free(row_used);
		assert_int_equal(b->computed_tokens, l->n_rows * l->row_len);
		break;
	}
	case RG_EXEC_CONCAT:
	case RG_EXEC_SLOTTED: {
		assert_true(l->n_rows >= 1 && l->n_rows <= p->n_rows);
		assert_true(l->row_len >= 1 && l->row_len <= p->row_len);
		if (l->mode == RG_EXEC_SLOTTED) {
			assert_true(l->slot_len >= 1 && l->row_len % l->slot_len == 0);
			if (p->kind == RG_SCHED_SLOTTED) {
				/* slot_len, or a multiple of it when a request is longer */
				bool long_req = false;
				for (int i = 0; i < b->n; i++)
					long_req |= q[b->queue_idx[i]].len > p->slot_len;
				assert_int_equal(l->slot_len % p->slot_len, 0);
				if (!long_req)
					assert_int_equal(l->slot_len, p->slot_len);
			}
		}
		char *occ = calloc((size_t)l->n_rows * (size_t)l->row_len, 1);
		for (int i = 0; i < b->n; i++) {
			int len = q[b->queue_idx[i]].len, row = b->req_row[i], off = b->req_offset[i];
			assert_true(row >= 0 && row < l->n_rows);
			assert_true(off >= 0 && off + len <= l->row_len);
			if (l->mode == RG_EXEC_SLOTTED)
				assert_int_equal(off / l->slot_len, (off + len - 1) / l->slot_len);
			for (int t = off; t < off + len; t++) {
				assert_false(occ[(size_t)row * l->row_len + t]);
				occ[(size_t)row * l->row_len + t] = 1;
			}
		}
		free(occ);
		assert_int_equal(b->computed_tokens, l->n_rows * l->row_len);
		break;
	}
	}
}

static rg_sched *make(const rg_sched_params *p)
{
	rg_status st;
	rg_sched *s = rg_sched_create(p, &st);
	if (!s)
		fail_msg("create %s: %s", rg_sched_kind_name(p->kind), rg_last_error());
	assert_int_equal(st, RG_OK);
	return s;
}

/* Queue with arrival = index, lengths and deadlines given (dl NULL: none). */
static void fill_queue(rg_sched_req *q, int n, const int *lens, const double *dl)
{
	for (int i = 0; i < n; i++)
		q[i] = (rg_sched_req){.id = 100 + (uint64_t)i, .len = lens[i], .arrival_ms = i,
				      .deadline_ms = dl ? dl[i] : INFINITY};
}

/* Pick once at `now` and compare with the expected batch, in order. */
static void expect_pick(const rg_sched_params *p, const int *lens, const double *dl, int nq,
			double now, int n, const int *qi, const int *row, const int *off)
{
	rg_sched *s = make(p);
	rg_sched_batch b;
	rg_sched_req q[32];
	double wake = -1;
	fill_queue(q, nq, lens, dl);
	assert_int_equal(rg_sched_batch_init(&b, p->max_batch_requests), RG_OK);
	assert_int_equal(rg_sched_pick(s, q, nq, now, &b, &wake), RG_OK);
	validate(s, q, nq, now, &b);
	if (b.n != n) {
		char got[256] = "";
		for (int i = 0; i < b.n; i++)
			snprintf(got + strlen(got), sizeof(got) - strlen(got), " %d@%d+%d",
				 b.queue_idx[i], b.req_row[i], b.req_offset[i]);
		fail_msg("%s: picked %d, want %d:%s", rg_sched_kind_name(p->kind), b.n, n, got);
	}
	for (int i = 0; i < n; i++) {
		assert_int_equal(b.queue_idx[i], qi[i]);
		if (row)
			assert_int_equal(b.req_row[i], row[i]);
		if (off)
			assert_int_equal(b.req_offset[i], off[i]);
	}
	assert_true(wake == now);
	rg_sched_batch_free(&b);
	rg_sched_free(s);
}

static void test_kind_names(void **state)
{
	(void)state;
	for (int k = 0; k < RG_SCHED_N_KINDS; k++) {
		rg_sched_kind got;
		assert_int_equal(rg_sched_kind_parse(rg_sched_kind_name((rg_sched_kind)k), &got),
				 RG_OK);
		assert_int_equal(got, k);
	}
	rg_sched_kind got;
	assert_int_equal(rg_sched_kind_parse("slotted_das", &got), RG_OK);
	assert_int_equal(got, RG_SCHED_SLOTTED_DAS);
	assert_int_equal(rg_sched_kind_parse("bogus", &got), RG_ERR_INVALID_INPUT);
	assert_non_null(strstr(rg_last_error(), "slotted-das"));
	assert_string_equal(rg_sched_kind_name((rg_sched_kind)99), "?");
}

static void expect_bad(rg_sched_params p)
{
	rg_status st = RG_OK;
	assert_null(rg_sched_create(&p, &st));
	assert_int_equal(st, RG_ERR_INVALID_INPUT);
}

static void test_params_validation(void **state)
{
	(void)state;
	rg_sched_params p = rg_sched_params_default(RG_SCHED_DAS);
	p.eta = 0.6; /* eta + q != 1 */
	expect_bad(p);
	p = rg_sched_params_default(RG_SCHED_CONCAT);
	p.n_rows = 64; /* 64 * 512 > 16384 */
	expect_bad(p);
	p = rg_sched_params_default(RG_SCHED_SLOTTED);
	p.slot_len = 100; /* does not divide 512 */
	expect_bad(p);
	p = rg_sched_params_default(RG_SCHED_DP); /* no cost table */
	expect_bad(p);
	p = rg_sched_params_default(RG_SCHED_TOKEN);
	p.lazy = true; /* lazy is a DP strategy */
	expect_bad(p);
	p = rg_sched_params_default(RG_SCHED_SLOTTED_DAS);
	p.das_packed = true;
	expect_bad(p);
	p = rg_sched_params_default(RG_SCHED_TOKEN);
	p.max_batch_requests = 0;
	expect_bad(p);
	for (int k = 0; k < RG_SCHED_N_KINDS; k++) {
		if (k == RG_SCHED_DP)
			continue;
		p = rg_sched_params_default((rg_sched_kind)k);
		rg_sched *s = make(&p);
		rg_sched_free(s);
	}
}

static void test_pick_errors_and_empty(void **state)
{
	(void)state;
	rg_sched_params p = rg_sched_params_default(RG_SCHED_TOKEN);
	p.max_batch_requests = 4;
	rg_sched *s = make(&p);
	rg_sched_batch small, b;
	rg_sched_req q[3] = {{1, 5, 0, INFINITY}, {2, 0, 1, INFINITY}, {3, 5, 2, 1.0}};
	double wake = 0;
	assert_int_equal(rg_sched_batch_init(&small, 2), RG_OK);
	assert_int_equal(rg_sched_batch_init(&b, 4), RG_OK);
	assert_int_equal(rg_sched_pick(s, q, 1, 0, &small, &wake), RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_sched_pick(s, q, 2, 0, &b, &wake), RG_ERR_INVALID_INPUT); /* len 0 */
	assert_int_equal(rg_sched_pick(s, NULL, 1, 0, &b, &wake), RG_ERR_INVALID_INPUT);
	/* Empty queue, and a queue whose only request expired: nothing, wake never. */
	assert_int_equal(rg_sched_pick(s, NULL, 0, 0, &b, &wake), RG_OK);
	assert_int_equal(b.n, 0);
	assert_true(isinf(wake) && wake > 0);
	assert_int_equal(rg_sched_pick(s, &q[2], 1, 1.0, &b, &wake), RG_OK);
	assert_int_equal(b.n, 0);
	assert_true(isinf(wake));
	assert_int_equal(rg_sched_pick(s, &q[2], 1, 0.5, &b, &wake), RG_OK);
	assert_int_equal(b.n, 1);
	rg_sched_batch_free(&small);
	rg_sched_batch_free(&b);
	rg_sched_batch_free(NULL);
	rg_sched_free(s);
	rg_sched_free(NULL);
}

/* PACKED policies, budget 10 tokens, 3 requests; lens 4,5,2,1, deadlines 50,10,30,20.
 *  token (TEI): 4, 5 (9), then 2 would make 11 > 10: stop          -> {0, 1}
 *  fcfs: 4, 5, skip 2 (11), take 1 (10)                          -> {0, 1, 3}
 *  sjf: by length 1, 2, 4 -> 7 tokens, 3 requests: full           -> {3, 2, 0}
 *  edf: by deadline 5 (10), 1 (20), 2 (30) -> 8 tokens, full     -> {1, 3, 2}
 *  nobatch: the oldest                                            -> {0} */
static void test_packed_policies(void **state)
{
	(void)state;
	int lens[] = {4, 5, 2, 1};
	double dl[] = {50, 10, 30, 20};
	rg_sched_params p = rg_sched_params_default(RG_SCHED_TOKEN);
	p.max_batch_tokens = 10;
	p.max_batch_requests = 3;
	expect_pick(&p, lens, dl, 4, 0, 2, (int[]){0, 1}, (int[]){0, 0}, (int[]){0, 4});
	p.kind = RG_SCHED_FCFS;
	expect_pick(&p, lens, dl, 4, 0, 3, (int[]){0, 1, 3}, NULL, (int[]){0, 4, 9});
	p.kind = RG_SCHED_SJF;
	expect_pick(&p, lens, dl, 4, 0, 3, (int[]){3, 2, 0}, NULL, (int[]){0, 1, 3});
	p.kind = RG_SCHED_EDF;
	expect_pick(&p, lens, dl, 4, 0, 3, (int[]){1, 3, 2}, NULL, (int[]){0, 5, 6});
	p.kind = RG_SCHED_NOBATCH;
	expect_pick(&p, lens, dl, 4, 0, 1, (int[]){0}, NULL, NULL);
	/* At now = 10 request 1 has expired: EDF takes 3, 2, 0 (1+2+4 = 7); nobatch still 0. */
	p.kind = RG_SCHED_EDF;
	expect_pick(&p, lens, dl, 4, 10, 3, (int[]){3, 2, 0}, NULL, (int[]){0, 1, 3});
	/* nobatch skips an expired head. */
	p.kind = RG_SCHED_NOBATCH;
	double dl2[] = {5, 10, 30, 20};
	expect_pick(&p, lens, dl2, 4, 5, 1, (int[]){1}, NULL, NULL);
}

/* NaiveBatching (PADDED), lens 3,5,4,2, 4 requests max:
 *  budget 20: rows 1*3, 2*5, 3*5, 4*5 = 20 <= 20     -> all four, row_len 5
 *  budget 19: the fourth would need 4*5 = 20 > 19    -> {0, 1, 2} */
static void test_naive(void **state)
{
	(void)state;
	int lens[] = {3, 5, 4, 2};
	rg_sched_params p = rg_sched_params_default(RG_SCHED_NAIVE);
	p.max_batch_tokens = 20;
	p.max_batch_requests = 4;
	expect_pick(&p, lens, NULL, 4, 0, 4, (int[]){0, 1, 2, 3}, (int[]){0, 1, 2, 3},
		    (int[]){0, 0, 0, 0});
	p.max_batch_tokens = 19;
	expect_pick(&p, lens, NULL, 4, 0, 3, (int[]){0, 1, 2}, (int[]){0, 1, 2}, NULL);
}

/* Pure ConcatBatching, B = 2 rows of L = 8, first-fit in arrival order, lens 5,4,3,6,2:
 *  r0 (5) -> row 0 [0,5); r1 (4) -> row 0 full at 9 > 8, row 1 [0,4); r2 (3) -> row 0 [5,8);
 *  r3 (6) fits nowhere (8+6, 4+6) -> skipped; r4 (2) -> row 0 full, row 1 [4,6).
 * Slotted, B = 1 row of L = 8 cut into slots of 4, lens 3,2,4,1 (and 5: longer than a slot):
 *  r0 (3) -> slot 0 [0,3); r1 (2) -> slot 0 full at 5 > 4, slot 1 [4,6); r2 (4) fits no slot
 *  (3+4, 2+4) -> skipped; r3 (1) -> slot 0 [3,4); r4 (5) > slot_len: not in a batch of 4-token
 *  slots (it gets wider slots when it leads a batch: test_slotted_long_requests). */
static void test_concat_and_slotted(void **state)
{
	(void)state;
	rg_sched_params p = rg_sched_params_default(RG_SCHED_CONCAT);
	p.n_rows = 2;
	p.row_len = 8;
	p.max_batch_tokens = 16;
	expect_pick(&p, (int[]){5, 4, 3, 6, 2}, NULL, 5, 0, 4, (int[]){0, 1, 2, 4},
		    (int[]){0, 1, 0, 1}, (int[]){0, 0, 5, 4});
	p.kind = RG_SCHED_SLOTTED;
	p.n_rows = 1;
	p.slot_len = 4;
	expect_pick(&p, (int[]){3, 2, 4, 1, 5}, NULL, 5, 0, 3, (int[]){0, 1, 3},
		    (int[]){0, 0, 0}, (int[]){0, 4, 3});
	rg_sched *s = make(&p);
	assert_int_equal(rg_sched_max_len(s), 8); /* the row, not the slot (issue 18, item 19) */
	rg_sched_free(s);
}

/* A scheduler decides when a request runs, never whether (issue 18, item 19): under SLOTTED a
 * request longer than a slot is placed in a batch with wider slots.
 * B = 2 rows of L = 16, slots of 4, lens 6, 3, 9, 2, 5: the oldest (6) needs slots of 8 (the
 *  smallest multiple of 4 >= 6 dividing 16): 4 slots of 8. r0 (6) -> slot 0 [0,6); r1 (3) ->
 *  slot 0 full at 9 > 8, slot 1 [8,11); r2 (9) > 8 -> skipped; r3 (2) -> slot 0 [6,8); r4 (5)
 *  -> slot 1 [11,16). Then r2 (9) alone with r5 (1): 12 does not divide 16 -> slots of 16 (a row
 *  of its own): r2 [0,9), r5 [9,10).
 * Lens 2, 9, 1 (a long request behind a short one): the batch has slots of 4 and takes r0, r2;
 *  r1 runs in the next batch, which it leads. */
static void test_slotted_long_requests(void **state)
{
	(void)state;
	rg_sched_params p = rg_sched_params_default(RG_SCHED_SLOTTED);
	rg_sched_batch b;
	rg_sched_req q[4];
	double wake;

	p.n_rows = 2;
	p.row_len = 16;
	p.slot_len = 4;
	p.max_batch_tokens = 32;
	expect_pick(&p, (int[]){6, 3, 9, 2, 5}, NULL, 5, 0, 4, (int[]){0, 1, 3, 4},
		    (int[]){0, 0, 0, 0}, (int[]){0, 8, 6, 11});
	expect_pick(&p, (int[]){9, 1}, NULL, 2, 0, 2, (int[]){0, 1}, (int[]){0, 0},
		    (int[]){0, 9});
	expect_pick(&p, (int[]){2, 9, 1}, NULL, 3, 0, 2, (int[]){0, 2}, (int[]){0, 0},
		    (int[]){0, 2});
	rg_sched *s = make(&p);
	assert_int_equal(rg_sched_batch_init(&b, p.max_batch_requests), RG_OK);
	fill_queue(q, 2, (int[]){6, 3}, NULL);
	assert_int_equal(rg_sched_pick(s, q, 2, 0, &b, &wake), RG_OK);
	assert_int_equal(b.layout.slot_len, 8);
	fill_queue(q, 2, (int[]){3, 6}, NULL);
	assert_int_equal(rg_sched_pick(s, q, 2, 0, &b, &wake), RG_OK);
	assert_int_equal(b.layout.slot_len, 4);
	assert_int_equal(b.n, 1);
	fill_queue(q, 1, (int[]){16}, NULL); /* the whole row */
	assert_int_equal(rg_sched_pick(s, q, 1, 0, &b, &wake), RG_OK);
	assert_int_equal(b.n, 1);
	assert_int_equal(b.layout.slot_len, 16);
	rg_sched_batch_free(&b);
	rg_sched_free(s);

	/* The server's geometry (rows of 512, slots of 128): every length 1..512 is placed, within
	 * two picks of a queue of it behind a short request, and the slot holds it. */
	p = rg_sched_params_default(RG_SCHED_SLOTTED);
	p.row_len = p.n_rows = p.slot_len = 0;
	rg_sched_params_derive(&p, 512);
	s = make(&p);
	assert_int_equal(rg_sched_max_len(s), 512);
	assert_int_equal(rg_sched_batch_init(&b, p.max_batch_requests), RG_OK);
	for (int len = 1; len <= 512; len++) {
		int n = 2;

		fill_queue(q, n, (int[]){7, len}, NULL);
		for (int round = 0; round < 2 && n > 0; round++) {
			assert_int_equal(rg_sched_pick(s, q, n, 0, &b, &wake), RG_OK);
			validate(s, q, n, 0, &b);
			assert_true(b.n >= 1);
			for (int i = b.n - 1; i >= 0; i--) { /* drop the picked ones */
				int qi = b.queue_idx[i];
				assert_true(q[qi].len <= b.layout.slot_len);
				memmove(&q[qi], &q[qi + 1], sizeof(*q) * (size_t)(n - qi - 1));
				n--;
			}
		}
		if (n != 0)
			fail_msg("slotted: a request of %d tokens was not placed in two picks", len);
	}
	rg_sched_batch_free(&b);
	rg_sched_free(s);
}

static rg_sched_params das_params(int B, int L, double eta)
{
	rg_sched_params p = rg_sched_params_default(RG_SCHED_DAS);
	p.n_rows = B;
	p.row_len = L;
	p.max_batch_tokens = B * L;
	p.eta = eta;
	p.q = 1.0 - eta;
	return p;
}

/* DAS (TCB Algorithm 1), one row of L = 10, eta = q = 0.5. Arrival = index.
 * Case A: (len, deadline) = r0 (6,100) r1 (2,500) r2 (3,400) r3 (4,50) r4 (5,60); sum 20 > 10.
 *   N~ by utility: r1 2, r2 3, r3 4, r4 5, r0 6; prefix sums 2, 5, 9, 14 -> s = 3, p = 1.
 *   N^U = {r1}, vbar = 1/2, threshold q*vbar = 1/4 -> N^D = lengths <= 4 = {r2, r3}.
 *   By deadline: r3 (50) -> fill 6, r2 (400) -> fill 9. Rest {r4 5, r0 6}: neither fits.
 *   -> r1@0, r3@2, r2@6.
 * Case B: r0 (1,1000) r1 (2,1000) r2 (4,10) r3 (3,1000) r4 (3,1000) r5 (1,1000).
 *   N~: r0 1, r5 1, r1 2, r3 3, r4 3, r2 4; prefix 1,2,4,7,10,14 -> s = 5, p = 2.
 *   N^U = {r0, r5}, vbar = 1, threshold 1/2 -> N^D = {r1}; r1 -> fill 4.
 *   Rest in utility order: r3 -> 7, r4 -> 10, r2 (urgent but utility 1/4) -> no room.
 *   -> r0@0, r5@1, r1@2, r3@4, r4@7.
 * Case B with eta = 0.75, q = 0.25: p = floor(3.75) = 3, N^U = {r0, r5, r1} (fill 4),
 *   vbar = 2.5/3, threshold 0.2083 -> N^D = {r3, r4, r2}; by deadline r2 (10) -> fill 8, r3 and
 *   r4 (3 each) no longer fit. -> r0@0, r5@1, r1@2, r2@4: the urgent request now makes it.
 * Case C: r0 (2,1000) r1 (2,1000) r2 (3,1000) r3 (4,5) r4 (3,1000).
 *   N~: r0 2, r1 2, r2 3, r4 3, r3 4; prefix 2,4,7,10,14 -> s = 4, p = 2.
 *   N^U = {r0, r1} (fill 4), vbar = 1/2, threshold 1/4 -> N^D = {r2, r3, r4}.
 *   By deadline: r3 (5) -> fill 8; r2, r4 (3 each) -> 11 > 10. Rest: empty.
 *   -> r0@0, r1@2, r3@4 (SJF would have taken r0, r1, r2, r4 and let r3 miss its deadline).
 * Case C plus r5 (1, deadline -1, already expired at now = 0): excluded, same answer (had it
 *   been considered, it would have led N~ and changed N^U). */
static void test_das_hand_cases(void **state)
{
	(void)state;
	rg_sched_params p = das_params(1, 10, 0.5);
	expect_pick(&p, (int[]){6, 2, 3, 4, 5}, (double[]){100, 500, 400, 50, 60}, 5, 0, 3,
		    (int[]){1, 3, 2}, (int[]){0, 0, 0}, (int[]){0, 2, 6});
	int lb[] = {1, 2, 4, 3, 3, 1};
	double db[] = {1000, 1000, 10, 1000, 1000, 1000};
	expect_pick(&p, lb, db, 6, 0, 5, (int[]){0, 5, 1, 3, 4}, NULL, (int[]){0, 1, 2, 4, 7});
	int lc[] = {2, 2, 3, 4, 3, 1};
	double dc[] = {1000, 1000, 1000, 5, 1000, -1};
	expect_pick(&p, lc, dc, 5, 0, 3, (int[]){0, 1, 3}, NULL, (int[]){0, 2, 4});
	expect_pick(&p, lc, dc, 6, 0, 3, (int[]){0, 1, 3}, NULL, (int[]){0, 2, 4});
	/* das_packed: one PACKED "row" of max_batch_tokens = 10 tokens: the same choice. */
	p.das_packed = true;
	expect_pick(&p, lc, dc, 5, 0, 3, (int[]){0, 1, 3}, (int[]){0, 0, 0}, (int[]){0, 2, 4});
	p = das_params(1, 10, 0.75);
	expect_pick(&p, lb, db, 6, 0, 4, (int[]){0, 5, 1, 2}, NULL, (int[]){0, 1, 2, 4});
}

/* DAS with B = 2 rows of L = 6, eta = q = 0.5 (case D):
 *   r0 (5,100) r1 (1,100) r2 (3,20) r3 (2,100) r4 (4,30) r5 (6,10).
 * Row 0: sum 21 > 6. N~: r1 1, r3 2, r2 3, r4 4, r0 5, r5 6; prefix 1,3,6,10 -> s = 3, p = 1.
 *   N^U = {r1}, vbar = 1, threshold 1/2 -> N^D = {r3}: fill 3. Rest in utility order: r2 -> 6.
 *   Row 0 = r1@0, r3@1, r2@3.
 * Row 1: remaining r4 4, r0 5, r5 6 (sum 15 > 6); s = 1, p = floor(0.5) = 0 -> clamped to 1:
 *   N^U = {r4}, vbar = 1/4, threshold 1/8 -> N^D = {r0, r5}: by deadline r5 (6) and r0 (5) do
 *   not fit after 4. Row 1 = r4@0.
 * Slotted DAS (TCB Algorithm 2) on the same queue: H^U = {r1} u {r4}, slot size m = 4, one slot
 *   of 4 per row (computed row_len 4). Row 0 in DAS order: r1 -> [0,1), r3 -> [1,3), r2 (3)
 *   -> 6 > 4: dropped this time. Row 1: r4 -> [0,4). -> r1 0@0, r3 0@1, r4 1@0.
 * Slotted DAS, B = 2, L = 8, lens 3, 2, 1 (sum 6 <= 8: the whole set goes into row 0 and counts
 *   as utility-dominant): m = 3, two slots of 3 (row_len 6). r0 -> slot 0 [0,3); r1 -> slot 0
 *   full, slot 1 [3,5); r2 -> slot 0 full, slot 1 [5,6). */
static void test_das_rows_and_slotted_das(void **state)
{
	(void)state;
	int ld[] = {5, 1, 3, 2, 4, 6};
	double dd[] = {100, 100, 20, 100, 30, 10};
	rg_sched_params p = das_params(2, 6, 0.5);
	expect_pick(&p, ld, dd, 6, 0, 4, (int[]){1, 3, 2, 4}, (int[]){0, 0, 0, 1},
		    (int[]){0, 1, 3, 0});
	p.kind = RG_SCHED_SLOTTED_DAS;
	expect_pick(&p, ld, dd, 6, 0, 3, (int[]){1, 3, 4}, (int[]){0, 0, 1}, (int[]){0, 1, 0});

	rg_sched *s = make(&p);
	rg_sched_batch b;
	rg_sched_req q[6];
	fill_queue(q, 6, ld, dd);
	assert_int_equal(rg_sched_batch_init(&b, p.max_batch_requests), RG_OK);
	assert_int_equal(rg_sched_pick(s, q, 6, 0, &b, NULL), RG_OK);
	assert_int_equal(b.layout.slot_len, 4);
	assert_int_equal(b.layout.row_len, 4);
	assert_int_equal(b.layout.n_rows, 2);
	rg_sched_free(s);

	p = das_params(2, 8, 0.5);
	p.kind = RG_SCHED_SLOTTED_DAS;
	s = make(&p);
	fill_queue(q, 3, (int[]){3, 2, 1}, NULL);
	assert_int_equal(rg_sched_pick(s, q, 3, 0, &b, NULL), RG_OK);
	validate(s, q, 3, 0, &b);
	assert_int_equal(b.n, 3);
	int want_off[] = {0, 3, 5};
	for (int i = 0; i < 3; i++) {
		assert_int_equal(b.queue_idx[i], i);
		assert_int_equal(b.req_row[i], 0);
		assert_int_equal(b.req_offset[i], want_off[i]);
	}
	assert_int_equal(b.layout.slot_len, 3);
	assert_int_equal(b.layout.row_len, 6);
	assert_int_equal(b.layout.n_rows, 1);
	rg_sched_batch_free(&b);
	rg_sched_free(s);
}

/* ---- DP (TurboTransformers Algorithm 2) against brute force ---- */

#define DP_LMAX 24
#define DP_BMAX 8
static double tcost[DP_LMAX + 1][DP_BMAX + 1]; /* test's own copy of the cost table */

/* Random table non-decreasing in length (any shape in batch size), on a grid holding every
 * length 1..DP_LMAX and batch 1..DP_BMAX, so the table returns the cells exactly. */
static rg_cost_table *random_table(void)
{
	int lens[DP_LMAX], batches[DP_BMAX];
	for (int i = 0; i < DP_LMAX; i++)
		lens[i] = i + 1;
	for (int i = 0; i < DP_BMAX; i++)
		batches[i] = i + 1;
	rg_cost_table *t = rg_cost_table_create(lens, DP_LMAX, batches, DP_BMAX, NULL);
	assert_non_null(t);
	for (int b = 1; b <= DP_BMAX; b++) {
		double v = 0.5 + 2.0 * drand() * b * (drand() < 0.5 ? 0.3 : 1.0);
		for (int l = 1; l <= DP_LMAX; l++) {
			if (drand() < 0.6)
				v += drand() * (drand() < 0.3 ? 2.0 : 0.2);
			tcost[l][b] = v;
			assert_int_equal(rg_cost_table_set(t, l - 1, b - 1, v), RG_OK);
		}
	}
	return t;
}

/* Brute force: every set partition of n requests (restricted growth strings), each group
 * feasible (size <= maxb, size * longest <= max_tok), cost sum of tcost[longest][size]. */
static double brute_force(const int *len, int n, int maxb, int max_tok)
{
	int a[DP_BMAX + 1] = {0}, best_set = 0;
	double best = INFINITY;
	for (;;) {
		int k = 0;
		for (int i = 0; i < n; i++)
			if (a[i] + 1 > k)
				k = a[i] + 1;
		double c = 0;
		bool ok = true;
		for (int g = 0; g < k && ok; g++) {
			int size = 0, mx = 0;
			for (int i = 0; i < n; i++) {
				if (a[i] != g)
					continue;
				size++;
				if (len[i] > mx)
					mx = len[i];
			}
			ok = size <= maxb && size * mx <= max_tok;
			c += tcost[mx][size];
		}
		if (ok && c < best) {
			best = c;
			best_set = 1;
		}
		/* next restricted growth string */
		int i = n - 1;
		for (; i > 0; i--) {
			int m = 0;
			for (int j = 0; j < i; j++)
				if (a[j] > m)
					m = a[j];
			if (a[i] <= m) {
				a[i]++;
				for (int j = i + 1; j < n; j++)
					a[j] = 0;
				break;
			}
		}
		if (i == 0)
			break;
	}
	assert_true(best_set);
	return best;
}

static void test_dp_matches_brute_force(void **state)
{
	(void)state;
	for (int trial = 0; trial < 400; trial++) {
		rg_cost_table *t = random_table();
		int n = irand(1, 8);
		rg_sched_params p = rg_sched_params_default(RG_SCHED_DP);
		p.cost = t;
		p.max_batch_requests = irand(1, DP_BMAX);
		p.max_batch_tokens = irand(DP_LMAX, DP_LMAX * DP_BMAX);
		rg_sched *s = make(&p);
		rg_sched_batch b;
		assert_int_equal(rg_sched_batch_init(&b, p.max_batch_requests), RG_OK);
		rg_sched_req q[DP_BMAX];
		int lens[DP_BMAX];
		for (int i = 0; i < n; i++) {
			lens[i] = irand(1, DP_LMAX);
			q[i] = (rg_sched_req){.id = (uint64_t)i, .len = lens[i],
					      .arrival_ms = drand() * 10, .deadline_ms = INFINITY};
		}
		double opt = brute_force(lens, n, p.max_batch_requests, p.max_batch_tokens);
		double total = 0;
		int nq = n, picks = 0;
		while (nq > 0) {
			double wake;
			assert_int_equal(rg_sched_pick(s, q, nq, 100.0, &b, &wake), RG_OK);
			validate(s, q, nq, 100.0, &b);
			assert_true(b.n >= 1);
			/* The batch holding the oldest request runs first. */
			int oldest = 0;
			for (int i = 1; i < nq; i++)
				if (q[i].arrival_ms < q[oldest].arrival_ms)
					oldest = i;
			bool has_oldest = false;
			int mx = 0;
			for (int i = 0; i < b.n; i++) {
				has_oldest |= b.queue_idx[i] == oldest;
				if (q[b.queue_idx[i]].len > mx)
					mx = q[b.queue_idx[i]].len;
			}
			assert_true(has_oldest);
			assert_int_equal(b.layout.row_len, mx);
			double c = tcost[mx][b.n];
			if (!(fabs(b.est_ms - c) <= 1e-9))
				fail_msg("est_ms %g, table says %g", b.est_ms, c);
			total += c;
			/* Remove the picked requests, keeping arrival order. */
			char gone[DP_BMAX] = {0};
			for (int i = 0; i < b.n; i++)
				gone[b.queue_idx[i]] = 1;
			int w = 0;
			for (int i = 0; i < nq; i++)
				if (!gone[i])
					q[w++] = q[i];
			nq = w;
			picks++;
		}
		if (!(fabs(total - opt) <= 1e-9 * (1 + opt)))
			fail_msg("trial %d (n=%d maxb=%d tok=%d): DP total %.12g, brute force %.12g",
				 trial, n, p.max_batch_requests, p.max_batch_tokens, total, opt);
		rg_sched_batch_free(&b);
		rg_sched_free(s);
		rg_cost_table_free(t);
	}
}

/* T(len, b) = 2 + 0.01 * len * b is bilinear, so a grid on its corners reproduces it exactly. */
static double lazy_cost(int len, int b) { return 2.0 + 0.01 * len * b; }

static rg_cost_table *lazy_table(void)
{
	int lens[] = {1, 512}, batches[] = {1, 64};
	rg_cost_table *t = rg_cost_table_create(lens, 2, batches, 2, NULL);
	for (int li = 0; li < 2; li++)
		for (int bi = 0; bi < 2; bi++)
			rg_cost_table_set(t, li, bi, lazy_cost(lens[li], batches[bi]));
	return t;
}

static void assert_near(double got, double want)
{
	if (!(fabs(got - want) <= 1e-9 * (1 + fabs(want))))
		fail_msg("got %.12g want %.12g", got, want);
}

/* Lazy DP (TurboTransformers sec. 5): budget 100 ms, so half is 50 ms; max 4 requests.
 *  One request (len 10, arrived at 0): estimate T(10,1) = 2.1 -> wait until 50 - 2.1 = 47.9.
 *  Plus one (len 30, at 5): estimate = min(T(10,1) + T(30,1), T(30,2)) = min(4.4, 2.6) = 2.6
 *   -> wake at 47.4; at 47.4 both run together (one batch of 2 rows of 30).
 *  Four queued: the batch is full -> run at once. Hungry: run at once.
 *  The oldest expired (deadline 3, now 20): the front is now the request from 5, wake 52.4. */
static void test_dp_lazy(void **state)
{
	(void)state;
	rg_cost_table *t = lazy_table();
	rg_sched_params p = rg_sched_params_default(RG_SCHED_DP);
	p.cost = t;
	p.lazy = true;
	p.latency_budget_ms = 100;
	p.max_batch_requests = 4;
	rg_sched *s = make(&p);
	rg_sched_batch b;
	double wake;
	assert_int_equal(rg_sched_batch_init(&b, 4), RG_OK);
	rg_sched_req q[4] = {{0, 10, 0, INFINITY}, {1, 30, 5, INFINITY}, {2, 7, 6, INFINITY},
			     {3, 9, 7, INFINITY}};

	assert_int_equal(rg_sched_pick(s, q, 1, 0, &b, &wake), RG_OK);
	assert_int_equal(b.n, 0);
	assert_near(wake, 50 - lazy_cost(10, 1));
	assert_int_equal(rg_sched_pick(s, q, 1, wake - 0.1, &b, &wake), RG_OK);
	assert_int_equal(b.n, 0);
	assert_int_equal(rg_sched_pick(s, q, 1, wake, &b, &wake), RG_OK);
	assert_int_equal(b.n, 1);

	assert_int_equal(rg_sched_pick(s, q, 2, 20, &b, &wake), RG_OK);
	assert_int_equal(b.n, 0);
	assert_near(wake, 50 - lazy_cost(30, 2));
	assert_int_equal(rg_sched_pick(s, q, 2, wake, &b, &wake), RG_OK);
	assert_int_equal(b.n, 2);
	assert_int_equal(b.layout.row_len, 30);
	assert_near(b.est_ms, lazy_cost(30, 2));

	assert_int_equal(rg_sched_pick(s, q, 4, 8, &b, &wake), RG_OK);
	assert_true(b.n >= 1);
	assert_true(wake == 8);

	rg_sched_req q2[2] = {{0, 10, 0, 3}, {1, 30, 5, INFINITY}};
	assert_int_equal(rg_sched_pick(s, q2, 2, 20, &b, &wake), RG_OK);
	assert_int_equal(b.n, 0);
	assert_near(wake, 5 + 50 - lazy_cost(30, 1));
	rg_sched_free(s);

	p.lazy = false;
	s = make(&p);
	assert_int_equal(rg_sched_pick(s, q, 1, 0, &b, &wake), RG_OK);
	assert_int_equal(b.n, 1);
	assert_true(wake == 0);
	rg_sched_batch_free(&b);
	rg_sched_free(s);
	rg_cost_table_free(t);
}

/* ---- time budget (max_batch_ms) ---- */

/* A batch's estimate is within the budget unless it holds one request (row policies: one row). */
static void check_time_budget(const rg_sched_params *p, const rg_sched_batch *b)
{
	bool rows = b->layout.mode == RG_EXEC_CONCAT || b->layout.mode == RG_EXEC_SLOTTED;
	double est = p->kind == RG_SCHED_DP ? b->est_ms
		: rg_cost_model_ms(&p->cost_model, b->computed_tokens, b->attn_pairs);

	if (b->n == 0)
		return;
	if (p->kind != RG_SCHED_DP && !(fabs(b->est_ms - est) <= 1e-9 * (1 + est)))
		fail_msg("%s: est_ms %g, model says %g", rg_sched_kind_name(p->kind), b->est_ms,
			 est);
	if (p->max_batch_ms <= 0 || b->n == 1 || (rows && b->layout.n_rows == 1))
		return;
	if (!(est <= p->max_batch_ms * (1 + 1e-12)))
		fail_msg("%s: batch of %d (%d tokens, %g pairs) estimated %g ms, budget %g ms",
			 rg_sched_kind_name(p->kind), b->n, b->computed_tokens, b->attn_pairs, est,
			 p->max_batch_ms);
}

/* Model 1 ms + 0.1 ms/token (no attention term), budget 10 ms: at most 90 tokens per batch.
 *  token: 50, 30 (80 tokens, 9 ms); 20 would make 100 tokens, 11 ms: stop          -> {0, 1}
 *  fcfs: 50, 30, skips 20, takes 5 (85 tokens, 9.5 ms)                          -> {0, 1, 3}
 *  without the budget: token takes all four (105 tokens)
 *  a request alone over the budget (200 tokens, 21 ms) still runs, alone          -> {0}
 *  naive (padded): rows of the longest, 2 rows of 50 = 100 tokens = 11 ms        -> {0}
 *   lens 30, 20, 25: 3 rows of 30 = 90 tokens = 10 ms                            -> {0, 1, 2}
 *  concat, rows of 40 tokens: 2 rows = 9 ms, 3 rows = 13 ms -> 2 of the 4 rows used;
 *   lens 30, 20, 25, 10: r0 row 0, r1 row 1, r2 fits nowhere, r3 row 0 [30, 40)  -> {0, 1, 3}
 *  pairs: model 0 + 0.01 ms/pair, budget 10 ms = 1000 pairs: packed 30 (900),
 *   then 10 (1000): full; 5 would be 1025                                        -> {0, 1} */
static void test_time_budget_hand_cases(void **state)
{
	(void)state;
	rg_sched_params p = rg_sched_params_default(RG_SCHED_TOKEN);
	p.max_batch_ms = 10;
	p.cost_model = (rg_cost_model){1, 0.1, 0};
	int lens[] = {50, 30, 20, 5};
	expect_pick(&p, lens, NULL, 4, 0, 2, (int[]){0, 1}, NULL, (int[]){0, 50});
	p.kind = RG_SCHED_FCFS;
	expect_pick(&p, lens, NULL, 4, 0, 3, (int[]){0, 1, 3}, NULL, NULL);
	p.kind = RG_SCHED_TOKEN;
	p.max_batch_ms = 0;
	expect_pick(&p, lens, NULL, 4, 0, 4, (int[]){0, 1, 2, 3}, NULL, NULL);
	p.max_batch_ms = 10;
	expect_pick(&p, (int[]){200, 1}, NULL, 2, 0, 1, (int[]){0}, NULL, NULL);

	p.kind = RG_SCHED_NAIVE;
	expect_pick(&p, lens, NULL, 4, 0, 1, (int[]){0}, NULL, NULL);
	expect_pick(&p, (int[]){30, 20, 25, 10}, NULL, 4, 0, 3, (int[]){0, 1, 2}, NULL, NULL);

	p = rg_sched_params_default(RG_SCHED_CONCAT);
	p.n_rows = 4;
	p.row_len = 40;
	p.max_batch_tokens = 160;
	p.max_batch_ms = 10;
	p.cost_model = (rg_cost_model){1, 0.1, 0};
	expect_pick(&p, (int[]){30, 20, 25, 10}, NULL, 4, 0, 3, (int[]){0, 1, 3},
		    (int[]){0, 1, 0}, (int[]){0, 0, 30});

	p = rg_sched_params_default(RG_SCHED_TOKEN);
	p.max_batch_ms = 10;
	p.cost_model = (rg_cost_model){0, 0, 0.01};
	expect_pick(&p, (int[]){30, 10, 5}, NULL, 3, 0, 2, (int[]){0, 1}, NULL, NULL);
}

/* DP under a budget: T(len, b) = 2 + 0.01 * len * b (lazy_table), four requests of 100 tokens,
 * T(100, b) = 2 + b. Without a budget the optimum is one batch of 4 (6 ms). With 5 ms, groups
 * of 4 are out (6 > 5): the optimum is 3 + 1 or 2 + 2 (8 ms), so the first batch holds 2 or 3
 * and its estimate is within 5 ms. */
static rg_cost_table *lazy_table(void);
static void test_time_budget_dp(void **state)
{
	(void)state;
	rg_cost_table *t = lazy_table();
	rg_sched_params p = rg_sched_params_default(RG_SCHED_DP);
	p.cost = t;
	p.max_batch_requests = 8;
	rg_sched *s;
	rg_sched_batch b;
	rg_sched_req q[4];
	double wake;
	assert_int_equal(rg_sched_batch_init(&b, 8), RG_OK);
	fill_queue(q, 4, (int[]){100, 100, 100, 100}, NULL);
	s = make(&p);
	assert_int_equal(rg_sched_pick(s, q, 4, 10, &b, &wake), RG_OK);
	assert_int_equal(b.n, 4);
	rg_sched_free(s);
	p.max_batch_ms = 5;
	s = make(&p);
	assert_int_equal(rg_sched_pick(s, q, 4, 10, &b, &wake), RG_OK);
	assert_true(b.n >= 1 && b.n <= 3);
	assert_true(b.est_ms <= 5 + 1e-9);
	check_time_budget(&p, &b);
	rg_sched_free(s);
	rg_sched_batch_free(&b);
	rg_cost_table_free(t);
}

/* Bad budgets and models are refused; set_time_budget validates. */
static void test_time_budget_params(void **state)
{
	(void)state;
	rg_sched_params p = rg_sched_params_default(RG_SCHED_TOKEN);
	rg_status st = RG_OK;
	p.max_batch_ms = -1;
	assert_null(rg_sched_create(&p, &st));
	assert_int_equal(st, RG_ERR_INVALID_INPUT);
	p.max_batch_ms = 5;
	p.cost_model.token_ms = -0.1;
	assert_null(rg_sched_create(&p, &st));
	p.cost_model.token_ms = NAN;
	assert_null(rg_sched_create(&p, &st));
	p.cost_model.token_ms = 0.1;
	rg_sched *s = make(&p);
	rg_cost_model bad = {1, INFINITY, 0}, good = {2, 0.5, 0};
	assert_int_equal(rg_sched_set_time_budget(s, 7, &bad), RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_sched_set_time_budget(s, -1, &good), RG_ERR_INVALID_INPUT);
	assert_true(rg_sched_get_params(s)->cost_model.token_ms == 0.1);
	assert_true(rg_sched_get_params(s)->max_batch_ms == 5);
	assert_int_equal(rg_sched_set_time_budget(s, 7, &good), RG_OK);
	assert_true(rg_sched_get_params(s)->cost_model.token_ms == 0.5);
	assert_true(rg_sched_get_params(s)->max_batch_ms == 7);
	rg_sched_free(s);
}

/* ---- cost model fit ---- */

static double sse_of(const rg_cost_model *m, const double *t, const double *pr, const double *y,
		     int n)
{
	double e = 0;
	for (int i = 0; i < n; i++) {
		double d = rg_cost_model_ms(m, t[i], pr[i]) - y[i];
		e += d * d;
	}
	return e;
}

static void test_cost_model_fit(void **state)
{
	(void)state;
	double t[64], pr[64], y[64];
	rg_cost_model m;

	/* noise-free data of a known model, batches of 1-32 sequences of 1-512 tokens */
	for (int trial = 0; trial < 50; trial++) {
		rg_cost_model truth = {drand() * 5, drand() * 0.01, drand() * 1e-5};
		if (trial % 5 == 1)
			truth.pair_ms = 0; /* a coefficient at the bound */
		if (trial % 5 == 2)
			truth.batch_ms = 0;
		for (int i = 0; i < 40; i++) {
			double b = irand(1, 32), len = irand(1, 512);
			t[i] = b * len;
			pr[i] = b * len * len;
			y[i] = rg_cost_model_ms(&truth, t[i], pr[i]);
		}
		assert_int_equal(rg_cost_model_fit(t, pr, y, 40, &m), RG_OK);
		if (!(fabs(m.batch_ms - truth.batch_ms) <= 1e-6 * (1 + truth.batch_ms) &&
		      fabs(m.token_ms - truth.token_ms) <= 1e-6 * (1e-3 + truth.token_ms) &&
		      fabs(m.pair_ms - truth.pair_ms) <= 1e-6 * (1e-6 + truth.pair_ms)))
			fail_msg("trial %d: fit %g %g %g, truth %g %g %g", trial, m.batch_ms,
				 m.token_ms, m.pair_ms, truth.batch_ms, truth.token_ms,
				 truth.pair_ms);
	}
	/* data that an unconstrained fit would give a negative slope: the NNLS optimum is at
	 * least as good as every point of a grid over the non-negative coefficients */
	for (int trial = 0; trial < 20; trial++) {
		for (int i = 0; i < 12; i++) {
			t[i] = irand(1, 2000);
			pr[i] = t[i] * irand(1, 300);
			y[i] = fmax(0, 20 - 0.004 * t[i] + (drand() - 0.5) * 3);
		}
		assert_int_equal(rg_cost_model_fit(t, pr, y, 12, &m), RG_OK);
		assert_true(rg_cost_model_valid(&m));
		double best = sse_of(&m, t, pr, y, 12);
		for (int a = 0; a <= 40; a++)
			for (int bb = 0; bb <= 20; bb++)
				for (int c = 0; c <= 20; c++) {
					rg_cost_model g = {a * 0.75, bb * 2e-4, c * 2e-7};
					assert_true(best <= sse_of(&g, t, pr, y, 12) * (1 + 1e-9) +
						    1e-9);
				}
	}
	/* one measurement, and bad input */
	t[0] = 100;
	pr[0] = 1e4;
	y[0] = 3;
	assert_int_equal(rg_cost_model_fit(t, pr, y, 1, &m), RG_OK);
	assert_true(fabs(rg_cost_model_ms(&m, 100, 1e4) - 3) <= 1e-9);
	assert_int_equal(rg_cost_model_fit(t, pr, y, 0, &m), RG_ERR_INVALID_INPUT);
	y[0] = -1;
	assert_int_equal(rg_cost_model_fit(t, pr, y, 1, &m), RG_ERR_INVALID_INPUT);
	y[0] = NAN;
	assert_int_equal(rg_cost_model_fit(t, pr, y, 1, &m), RG_ERR_INVALID_INPUT);

	/* a cost table T(len, b) = 2 + 0.01 len b: tokens b*len, so 2 ms + 0.01 ms/token */
	rg_cost_table *tab = lazy_table();
	assert_int_equal(rg_cost_model_from_table(tab, &m), RG_OK);
	assert_true(fabs(m.batch_ms - 2) < 1e-6 && fabs(m.token_ms - 0.01) < 1e-9 &&
		    fabs(m.pair_ms) < 1e-12);
	rg_cost_table_free(tab);
	int lens[] = {8, 16};
	tab = rg_cost_table_create(lens, 2, (int[]){1}, 1, NULL);
	assert_int_equal(rg_cost_model_from_table(tab, &m), RG_ERR_INVALID_INPUT); /* unmeasured */
	rg_cost_table_free(tab);
}

/* ---- long random simulation, every policy ---- */

enum { ST_PENDING, ST_QUEUED, ST_SERVED, ST_EXPIRED, ST_REJECTED };

static void simulate(const rg_sched_params *p, int n_req)
{
	rg_sched *s = make(p);
	rg_sched_batch b;
	assert_int_equal(rg_sched_batch_init(&b, p->max_batch_requests), RG_OK);
	rg_sched_req *all = malloc(sizeof(*all) * (size_t)n_req);
	rg_sched_req *q = malloc(sizeof(*q) * (size_t)n_req);
	int *status = calloc((size_t)n_req, sizeof(int));
	assert_true(all && q && status);
	int max_len = rg_sched_max_len(s);
	double t = 0;
	for (int i = 0; i < n_req; i++) {
		t += -log(1.0 - drand()) * 0.4; /* Poisson arrivals, ~2.5 per ms */
		int len = drand() < 0.05 ? irand(1, 3 * max_len / 2 + 1) : irand(1, 60);
		double dl = drand() < 0.2 ? INFINITY : t + 5 + drand() * 120;
		all[i] = (rg_sched_req){.id = (uint64_t)i, .len = len, .arrival_ms = t,
					.deadline_ms = dl};
	}
	int nq = 0, next = 0, done = 0, served = 0, expired = 0, iters = 0;
	double now = 0;
	while (done < n_req) {
		assert_true(++iters < 20 * n_req);
		for (; next < n_req && all[next].arrival_ms <= now; next++) {
			assert_int_equal(status[next], ST_PENDING);
			if (all[next].len > max_len) { /* the caller rejects at admission */
				status[next] = ST_REJECTED;
				done++;
				continue;
			}
			status[next] = ST_QUEUED;
			q[nq++] = all[next];
		}
		/* The caller answers expired requests (504) and drops them. */
		int w = 0;
		for (int i = 0; i < nq; i++) {
			if (q[i].deadline_ms <= now) {
				assert_int_equal(status[q[i].id], ST_QUEUED);
				status[q[i].id] = ST_EXPIRED;
				done++;
				expired++;
			} else {
				q[w++] = q[i];
			}
		}
		nq = w;
		/* Half of the time, leave the expired ones in the queue for one more call, so
		 * the scheduler itself must skip them. */
		double pick_now = now;
		if (nq > 0 && drand() < 0.5)
			pick_now = now + drand() * 3;
		double wake = -1;
		assert_int_equal(rg_sched_pick(s, q, nq, pick_now, &b, &wake), RG_OK);
		validate(s, q, nq, pick_now, &b);
		check_time_budget(p, &b);
		if (b.n > 0) {
			assert_true(wake == pick_now);
			char *gone = calloc((size_t)nq, 1);
			for (int i = 0; i < b.n; i++) {
				const rg_sched_req *r = &q[b.queue_idx[i]];
				assert_int_equal(status[r->id], ST_QUEUED);
				status[r->id] = ST_SERVED;
				gone[b.queue_idx[i]] = 1;
				done++;
				served++;
			}
			w = 0;
			for (int i = 0; i < nq; i++)
				if (!gone[i])
					q[w++] = q[i];
			nq = w;
			free(gone);
			now = pick_now + 0.2 + b.computed_tokens * 0.004;
			continue;
		}
		/* Nothing picked: only lazy DP may hold back pickable requests. */
		bool pickable = false;
		for (int i = 0; i < nq; i++)
			pickable |= q[i].deadline_ms > pick_now;
		if (pickable) {
			assert_true(p->lazy);
			assert_true(wake > pick_now && isfinite(wake));
		} else {
			assert_true(isinf(wake));
		}
		double na = next < n_req ? all[next].arrival_ms : INFINITY;
		double nt = pickable && wake < na ? wake : na;
		if (isinf(nt)) {
			nt = pick_now + 1; /* let the remaining ones expire */
			assert_true(nq > 0 || done == n_req); /* the last ones may expire above */
		}
		now = nt > now ? nt : now;
	}
	for (int i = 0; i < n_req; i++)
		assert_true(status[i] == ST_SERVED || status[i] == ST_EXPIRED ||
			    status[i] == ST_REJECTED);
	assert_int_equal(nq, 0);
	assert_true(served > n_req / 4);
	(void)expired;
	free(all);
	free(q);
	free(status);
	rg_sched_batch_free(&b);
	rg_sched_free(s);
}

/* The simulation's limits for policy k on the cost table t: 512 tokens and 16 requests a batch,
 * 4 rows of 128 tokens, 32-token slots. */
static rg_sched_params sim_params(rg_sched_kind k, const rg_cost_table *t)
{
	rg_sched_params p = rg_sched_params_default(k);

	p.max_batch_tokens = 512;
	p.max_batch_requests = 16;
	p.n_rows = 4;
	p.row_len = 128;
	p.slot_len = 32;
	p.cost = t;
	return p;
}

static void test_simulation_all_policies(void **state)
{
	(void)state;
	rg_cost_table *t = lazy_table();
	for (int k = 0; k < RG_SCHED_N_KINDS; k++) {
		for (int variant = 0; variant < 2; variant++) {
			rg_sched_params p = sim_params((rg_sched_kind)k, t);
			if (variant == 1) {
				if (k == RG_SCHED_DP) {
					p.lazy = true;
					p.latency_budget_ms = 40;
				} else if (k == RG_SCHED_DAS) {
					p.das_packed = true;
				} else if (k == RG_SCHED_SLOTTED_DAS) {
					p.eta = 0.3;
					p.q = 0.7;
				} else {
					p.max_batch_requests = 3;
					p.n_rows = 2;
					p.row_len = 64;
				}
			}
			simulate(&p, 3000);
		}
		/* the time budget: the simulation's own clock (0.2 ms + 0.004 ms per computed
		 * token) as the model, 1 ms per batch: about 200 of the 512 tokens */
		rg_sched_params p = sim_params((rg_sched_kind)k, t);
		p.das_packed = k == RG_SCHED_DAS;
		p.max_batch_ms = k == RG_SCHED_DP ? 4 : 1;
		p.cost_model = (rg_cost_model){0.2, 0.004, 1e-6};
		simulate(&p, 3000);
	}
	rg_cost_table_free(t);
}

/* The server's derivation of row/slot geometry from the model (rg_sched_params_derive). */
static void test_params_derive(void **state)
{
	rg_sched_params p = rg_sched_params_default(RG_SCHED_SLOTTED);
	(void)state;

	p.row_len = p.n_rows = p.slot_len = 0;
	p.max_batch_tokens = 16384;
	p.eta = 0.3;
	rg_sched_params_derive(&p, 512);
	assert_int_equal(p.row_len, 512);
	assert_int_equal(p.n_rows, 32);
	assert_int_equal(p.slot_len, 128);
	assert_true(p.q > 0.69 && p.q < 0.71);
	/* a short model: rows of its length; a slot that does not divide the row becomes the row */
	p.row_len = p.n_rows = p.slot_len = 0;
	rg_sched_params_derive(&p, 200);
	assert_int_equal(p.row_len, 200);
	assert_int_equal(p.n_rows, 16384 / 200);
	assert_int_equal(p.slot_len, 200);
	/* a small budget caps the row; values already set are kept */
	p.row_len = 0;
	p.n_rows = 3;
	p.slot_len = 64;
	p.max_batch_tokens = 100;
	rg_sched_params_derive(&p, 512);
	assert_int_equal(p.row_len, 100);
	assert_int_equal(p.n_rows, 3);
	assert_int_equal(p.slot_len, 64);
	rg_status st = RG_OK;
	assert_null(rg_sched_create(&p, &st)); /* a set slot_len must divide the row: 64 vs 100 */
	assert_int_equal(st, RG_ERR_INVALID_INPUT);
}

int main(void)
{
	rng = RNG_SEED;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kind_names),
		cmocka_unit_test(test_params_validation),
		cmocka_unit_test(test_params_derive),
		cmocka_unit_test(test_pick_errors_and_empty),
		cmocka_unit_test(test_packed_policies),
		cmocka_unit_test(test_naive),
		cmocka_unit_test(test_concat_and_slotted),
		cmocka_unit_test(test_slotted_long_requests),
		cmocka_unit_test(test_das_hand_cases),
		cmocka_unit_test(test_das_rows_and_slotted_das),
		cmocka_unit_test(test_dp_matches_brute_force),
		cmocka_unit_test(test_dp_lazy),
		cmocka_unit_test(test_simulation_all_policies),
		cmocka_unit_test(test_time_budget_hand_cases),
		cmocka_unit_test(test_time_budget_dp),
		cmocka_unit_test(test_time_budget_params),
		cmocka_unit_test(test_cost_model_fit),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
