/* Prompt lookup drafts (src/gen/spec.c): worked by hand (the longest n-gram wins, its most
 * recent earlier occurrence, a continuation cut at the end of the context, no match, bad
 * sizes), and against a brute-force reference written from the definition on random contexts
 * over a small alphabet (so that matches of every length occur). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "gen/spec.h"
#include "test_rng.h"

static void test_by_hand(void **state)
{
	/* 5 1 2 3 9 9 1 2 3 7 8 | 1 2 3: "1 2 3" last occurred at 6, followed by 7 8 1 2 */
	const int32_t a[] = {5, 1, 2, 3, 9, 9, 1, 2, 3, 7, 8, 1, 2, 3};
	/* 4 6 | 6: only the 1-gram "6" matches (at 1), followed by 6 (itself the suffix) */
	const int32_t b[] = {4, 6, 6};
	const int32_t c[] = {1, 2, 3, 4};
	int32_t d[8];
	(void)state;

	assert_int_equal(rg_spec_ngram_propose(a, 14, 1, 3, 4, d), 4);
	assert_memory_equal(d, ((int32_t[]){7, 8, 1, 2}), 4 * sizeof(int32_t));
	/* max_n 2: "2 3" most recently at 7, followed by 7 8 1 2 3; k 8 is cut at the end */
	assert_int_equal(rg_spec_ngram_propose(a, 14, 1, 2, 8, d), 5);
	assert_memory_equal(d, ((int32_t[]){7, 8, 1, 2, 3}), 5 * sizeof(int32_t));
	assert_int_equal(rg_spec_ngram_propose(b, 3, 1, 3, 4, d), 1);
	assert_int_equal(d[0], 6);
	assert_int_equal(rg_spec_ngram_propose(c, 4, 1, 3, 4, d), 0);
	/* min_n 2 refuses the 1-gram match of b */
	assert_int_equal(rg_spec_ngram_propose(b, 3, 2, 3, 4, d), 0);
	assert_int_equal(rg_spec_ngram_propose(a, 1, 1, 3, 4, d), 0);
	assert_int_equal(rg_spec_ngram_propose(a, 14, 0, 3, 4, d), 0);
	assert_int_equal(rg_spec_ngram_propose(a, 14, 3, 2, 4, d), 0);
	assert_int_equal(rg_spec_ngram_propose(a, 14, 1, 3, 0, d), 0);
}

/* The definition, searched the other way round: every start i of every length n, keeping
 * the largest i of the largest n. */
static int ref_propose(const int32_t *x, int len, int lo, int hi, int k, int32_t *out)
{
	for (int n = hi; n >= lo; n--) {
		int best = -1;

		for (int i = 0; i + n < len; i++) {
			bool eq = n <= len - 1;

			for (int j = 0; eq && j < n; j++)
				eq = x[i + j] == x[len - n + j];
			if (eq)
				best = i;
		}
		if (best >= 0) {
			int got = 0;

			for (int t = best + n; t < len && got < k; t++)
				out[got++] = x[t];
			return got;
		}
	}
	return 0;
}

static void test_random(void **state)
{
	int32_t x[64], d[8], r[8];
	(void)state;

	rng = 0x5bec;
	for (int it = 0; it < 3000; it++) {
		int len = irand(1, 64), lo = irand(1, 3), hi = lo + irand(0, 3), k = irand(1, 8);
		int got, want;

		for (int i = 0; i < len; i++)
			x[i] = irand(0, 3);
		got = rg_spec_ngram_propose(x, len, lo, hi, k, d);
		want = ref_propose(x, len, lo, hi, k, r);
		assert_int_equal(got, want);
		assert_memory_equal(d, r, (size_t)got * sizeof(int32_t));
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_by_hand),
		cmocka_unit_test(test_random),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
