/* Activation offset planner (src/core/mem_plan.c; TurboTransformers PPoPP'21 sec. 4.2, Algorithm 1).
 *  - Random instances (seeded): every plan is valid (tensors live at the same op never share a byte,
 *    offsets aligned, zero-byte tensors at 0) and lies between the lower bound (max over ops of the
 *    bytes live at that op) and the naive one-buffer-per-tensor sum; the checker itself is shown to
 *    reject a broken plan.
 *  - One BERT layer for several token counts: the plan reaches the lower bound 6*T*H exactly, with the
 *    offsets worked out by hand below.
 *  - Best fit: the tensor goes into the smallest gap that fits, not the lowest one.
 *  - Edges: n = 0, zero-byte tensors, identical lifetimes (= naive sum), disjoint lifetimes (= max
 *    size), bad arguments and overflow (RG_ERR_INVALID_INPUT with a message). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "core/mem_plan.h"

#define MAX_T 30
#define MAX_OPS 24

#include "test_rng.h"

#define RNG_SEED 0x9E3779B97F4A7C15ull

static size_t rup(size_t b, size_t align)
{
	return (b + align - 1) / align * align;
}

/* Max over ops of the rounded bytes live at that op: no valid plan can be smaller. */
static size_t lower_bound(const rg_mem_tensor *t, int n, size_t align)
{
	size_t best = 0;
	int lo = 0, hi = -1;

	for (int i = 0; i < n; i++) {
		if (i == 0 || t[i].first < lo)
			lo = t[i].first;
		if (i == 0 || t[i].last > hi)
			hi = t[i].last;
	}
	for (int op = lo; op <= hi; op++) {
		size_t live = 0;

		for (int i = 0; i < n; i++)
			if (t[i].first <= op && op <= t[i].last)
				live += rup(t[i].bytes, align);
		if (live > best)
			best = live;
	}
	return best;
}

/* Checks a plan; on failure writes the reason to why (256 bytes) and returns false. */
static bool plan_ok(const rg_mem_tensor *t, int n, size_t align, size_t total, char *why)
{
	size_t end = 0;

	for (int i = 0; i < n; i++) {
		size_t sz = rup(t[i].bytes, align);

		if (t[i].offset % align) {
			snprintf(why, 256, "tensor %d offset %zu not aligned to %zu", i, t[i].offset, align);
			return false;
		}
		if (sz == 0 && t[i].offset != 0) {
			snprintf(why, 256, "zero-byte tensor %d at %zu", i, t[i].offset);
			return false;
		}
		if (sz && t[i].offset + sz > end)
			end = t[i].offset + sz;
		for (int j = 0; j < i; j++) {
			size_t szj = rup(t[j].bytes, align);
			bool live = t[i].first <= t[j].last && t[j].first <= t[i].last;
			bool bytes = t[i].offset < t[j].offset + szj && t[j].offset < t[i].offset + sz;

			if (live && bytes && sz && szj) {
				snprintf(why, 256, "tensors %d [%zu,+%zu) and %d [%zu,+%zu) overlap", i,
					 t[i].offset, sz, j, t[j].offset, szj);
				return false;
			}
		}
	}
	if (total != end || total % align) {
		snprintf(why, 256, "total %zu, but the tensors end at %zu (align %zu)", total, end, align);
		return false;
	}
	if (total < lower_bound(t, n, align) || total > rg_mem_plan_naive(t, n, align)) {
		snprintf(why, 256, "total %zu outside [%zu, %zu]", total, lower_bound(t, n, align),
			 rg_mem_plan_naive(t, n, align));
		return false;
	}
	return true;
}

static void test_random_valid(void **state)
{
	static const size_t aligns[] = { 1, 2, 64, 256 };
	rg_mem_tensor t[MAX_T];
	char why[256];
	size_t total;
	int tight = 0, saved = 0;

	for (int iter = 0; iter < 2000; iter++) {
		int n = irand(1, MAX_T);
		size_t align = aligns[irand(0, 3)];

		for (int i = 0; i < n; i++) {
			int kind = irand(0, 19);

			t[i].name = "r";
			t[i].bytes = kind == 0 ? 0 : kind < 10 ? (size_t)irand(1, 1000) : (size_t)irand(1, 1 << 20);
			t[i].first = irand(0, MAX_OPS - 9);
			t[i].last = t[i].first + irand(0, 8);
			t[i].offset = (size_t)-1;
		}
		assert_int_equal(rg_mem_plan(t, n, align, &total), RG_OK);
		if (!plan_ok(t, n, align, total, why))
			fail_msg("instance %d (n=%d align=%zu): %s", iter, n, align, why);
		tight += total == lower_bound(t, n, align);
		saved += total < rg_mem_plan_naive(t, n, align);
	}
	/* Not a property of the algorithm, only a sign the instances exercise reuse at all. */
	assert_true(saved > 1000);
	print_message("random: %d/2000 plans at the lower bound, %d below the naive sum\n", tight, saved);
}

/* The checker rejects overlap, misalignment and a wrong total (so the random test can fail). */
static void test_checker_rejects(void **state)
{
	rg_mem_tensor t[2] = { { "a", 100, 0, 1, 0 }, { "b", 100, 1, 2, 0 } };
	char why[256];
	size_t total;

	assert_int_equal(rg_mem_plan(t, 2, 64, &total), RG_OK);
	assert_true(plan_ok(t, 2, 64, total, why));
	t[1].offset = t[0].offset;
	assert_false(plan_ok(t, 2, 64, total, why));
	t[1].offset = 130;
	assert_false(plan_ok(t, 2, 64, total, why));
	assert_int_equal(rg_mem_plan(t, 2, 64, &total), RG_OK);
	assert_false(plan_ok(t, 2, 64, total + 64, why));
}

/* One BERT layer (ops: 0 embed/LN, 1 QKV gemm, 2 attention, 3 out proj, 4 add+LN, 5 FFN1, 6 FFN2, 7 add+LN).
 * Greedy by size: inter(4) at 0; qkv(3) at 0 (disjoint from inter); hidden at 4 (above both);
 * ctx in the gap [3,4) under hidden; attn_out at 0 (best gap [0,3) below ctx); ffn_out at 5.
 * Peak: op 6 holds hidden + inter + ffn_out = 6 TH, which the plan reaches. Naive: 11 TH. */
static void test_bert_layer(void **state)
{
	static const int tokens[] = { 1, 7, 33, 200, 240, 1000, 4096 };
	const size_t H = 768, elt = 2;

	for (size_t k = 0; k < sizeof(tokens) / sizeof(tokens[0]); k++) {
		size_t th = (size_t)tokens[k] * H * elt, total;
		rg_mem_tensor t[] = {
			{ "hidden", th, 0, 7, 0 },   { "qkv", 3 * th, 1, 2, 0 },   { "ctx", th, 2, 3, 0 },
			{ "attn_out", th, 3, 4, 0 }, { "inter", 4 * th, 5, 6, 0 }, { "ffn_out", th, 6, 7, 0 },
		};
		char why[256];

		assert_int_equal(rg_mem_plan(t, 6, 256, &total), RG_OK);
		if (!plan_ok(t, 6, 256, total, why))
			fail_msg("T=%d: %s", tokens[k], why);
		assert_int_equal(total, 6 * th);
		assert_int_equal(lower_bound(t, 6, 256), 6 * th);
		assert_int_equal(rg_mem_plan_naive(t, 6, 256), 11 * th);
		assert_int_equal(t[0].offset, 4 * th);
		assert_int_equal(t[1].offset, 0);
		assert_int_equal(t[2].offset, 3 * th);
		assert_int_equal(t[3].offset, 0);
		assert_int_equal(t[4].offset, 0);
		assert_int_equal(t[5].offset, 5 * th);
	}
}

/* Placed: A [0,10) ops 0..0, B [10,15) 0..1, D [15,19) 0..0, E [19,22) 0..1. T (3 bytes, op 1) conflicts
 * only with B and E: gaps [0,10) and [15,19) both fit; best fit takes the smaller, at 15. */
static void test_best_fit(void **state)
{
	rg_mem_tensor t[] = { { "T", 3, 1, 1, 0 }, { "A", 10, 0, 0, 0 }, { "B", 5, 0, 1, 0 },
			      { "D", 4, 0, 0, 0 }, { "E", 3, 0, 1, 0 } };
	size_t total;

	assert_int_equal(rg_mem_plan(t, 5, 1, &total), RG_OK);
	assert_int_equal(total, 22);
	assert_int_equal(t[1].offset, 0);
	assert_int_equal(t[2].offset, 10);
	assert_int_equal(t[3].offset, 15);
	assert_int_equal(t[4].offset, 19);
	assert_int_equal(t[0].offset, 15);
}

static void test_empty_and_zero_bytes(void **state)
{
	rg_mem_tensor t[] = { { "z0", 0, 0, 5, 7 }, { "a", 300, 0, 2, 7 }, { "z1", 0, 1, 1, 7 },
			      { "b", 10, 1, 3, 7 } };
	size_t total = 123;

	assert_int_equal(rg_mem_plan(NULL, 0, 64, &total), RG_OK);
	assert_int_equal(total, 0);
	assert_int_equal(rg_mem_plan_naive(NULL, 0, 64), 0);

	assert_int_equal(rg_mem_plan(t, 4, 64, &total), RG_OK);
	assert_int_equal(total, 320 + 64);
	assert_int_equal(t[0].offset, 0);
	assert_int_equal(t[2].offset, 0);
	assert_int_equal(t[1].offset, 0);
	assert_int_equal(t[3].offset, 320);
	assert_int_equal(rg_mem_plan_naive(t, 4, 64), 384);

	assert_int_equal(rg_mem_plan(t, 1, 64, &total), RG_OK); /* only z0 */
	assert_int_equal(total, 0);
	assert_int_equal(t[0].offset, 0);
}

static void test_identical_and_disjoint(void **state)
{
	rg_mem_tensor same[] = { { "a", 1, 2, 4, 0 }, { "b", 100, 2, 4, 0 }, { "c", 257, 2, 4, 0 },
				 { "d", 256, 2, 4, 0 } };
	rg_mem_tensor apart[] = { { "a", 1, 0, 0, 0 }, { "b", 5000, 1, 2, 0 }, { "c", 257, 3, 3, 0 },
				  { "d", 4096, 4, 9, 0 } };
	char why[256];
	size_t total;

	assert_int_equal(rg_mem_plan(same, 4, 256, &total), RG_OK);
	assert_int_equal(total, 256 + 256 + 512 + 256);
	assert_int_equal(total, rg_mem_plan_naive(same, 4, 256));
	assert_true(plan_ok(same, 4, 256, total, why));

	assert_int_equal(rg_mem_plan(apart, 4, 256, &total), RG_OK);
	assert_int_equal(total, rup(5000, 256));
	for (int i = 0; i < 4; i++)
		assert_int_equal(apart[i].offset, 0);
	assert_int_equal(rg_mem_plan(apart, 4, 1, &total), RG_OK);
	assert_int_equal(total, 5000);
}

static void test_bad_args(void **state)
{
	rg_mem_tensor t[] = { { "a", 10, 0, 1, 0 }, { "b", 10, 1, 2, 0 } };
	rg_mem_tensor huge[] = { { "h", SIZE_MAX - 10, 0, 0, 0 } };
	rg_mem_tensor big[] = { { "x", SIZE_MAX / 2 + 1, 0, 1, 0 }, { "y", SIZE_MAX / 2 + 1, 1, 2, 0 } };
	size_t total;

	assert_int_equal(rg_mem_plan(t, 2, 8, NULL), RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_mem_plan(NULL, 2, 8, &total), RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_mem_plan(t, -1, 8, &total), RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_mem_plan(t, 2, 0, &total), RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_mem_plan(t, 2, 24, &total), RG_ERR_INVALID_INPUT);
	assert_true(strstr(rg_last_error(), "align") != NULL);
	t[1].first = 3;
	total = 99;
	assert_int_equal(rg_mem_plan(t, 2, 8, &total), RG_ERR_INVALID_INPUT);
	assert_int_equal(total, 0);
	assert_true(strstr(rg_last_error(), "(b)") != NULL);
	assert_int_equal(rg_mem_plan(huge, 1, 256, &total), RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_mem_plan(huge, 1, 1, &total), RG_OK);
	assert_int_equal(total, SIZE_MAX - 10);
	assert_int_equal(rg_mem_plan(big, 2, 1, &total), RG_ERR_INVALID_INPUT);
	assert_true(strstr(rg_last_error(), "overflow") != NULL);
	big[1].first = 2; /* disjoint now: they share bytes and fit */
	assert_int_equal(rg_mem_plan(big, 2, 1, &total), RG_OK);
	assert_int_equal(total, SIZE_MAX / 2 + 1);
	assert_int_equal(rg_mem_plan_naive(huge, 1, 256), SIZE_MAX);
	assert_int_equal(rg_mem_plan_naive(t, 2, 3), 0);
}

int main(void)
{
	rng = RNG_SEED;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_random_valid),
		cmocka_unit_test(test_checker_rejects),
		cmocka_unit_test(test_bert_layer),
		cmocka_unit_test(test_best_fit),
		cmocka_unit_test(test_empty_and_zero_bytes),
		cmocka_unit_test(test_identical_and_disjoint),
		cmocka_unit_test(test_bad_args),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
