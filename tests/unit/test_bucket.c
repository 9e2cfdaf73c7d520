/* CUDA-graph buckets of packed encoder batches (src/model/bucket.c), the policy alone:
 *  - without an envelope a bucket is what model.c always formed (tokens rounded up by 16 / 64 /
 *    256 / 1024, sequences and the longest length to powers of two, the longest at least 64);
 *  - with one (a server's: 16384 tokens, 256 sequences, BERT's 512 positions), every batch of
 *    the envelope -- random batches of uniform 2-100-token requests as `ragged loadgen` sends,
 *    of 1-8-token queries, and one long request -- falls in a bucket of rg_bucket_ladder, so the
 *    graphs captured at start-up are all a server needs; the ladder holds one bucket per token
 *    bucket and reachable length bucket (468 for those limits: the memory the warm-up takes), no
 *    two alike, each with an example batch that falls in it;
 *  - the padding stays within its bounds (T - n under one rounding step, S <= 2 T / 8 and
 *    <= 256);
 *  - a batch outside the envelope (more sequences than T / 8) still gets a bucket that holds it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "model/bucket.h"

static const rg_bucket_policy SERVER = {16384, 512, 1024, 256};

static bool same(rg_bucket a, rg_bucket b)
{
	return a.T == b.T && a.S == b.S && a.L == b.L;
}

static void test_no_envelope_is_the_old_rule(void **state)
{
	rg_bucket_policy p = {16384, 512, 1024, 0};
	struct {
		int n, n_seq, max_len;
		rg_bucket want;
	} cases[] = {
		{1, 1, 1, {16, 1, 64}},      {7, 3, 4, {16, 4, 64}},
		{100, 2, 65, {112, 2, 128}}, {257, 5, 100, {320, 8, 128}},
		{4097, 80, 100, {4352, 128, 128}}, {16384, 256, 512, {16384, 256, 512}},
		{5000, 1000, 20, {5120, 1024, 64}},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		rg_bucket b = rg_bucket_of(&p, cases[i].n, cases[i].n_seq, cases[i].max_len);

		assert_true(same(b, cases[i].want));
	}
	assert_int_equal(rg_bucket_env_seqs(&p, 4096), 0);
	assert_int_equal(rg_bucket_ladder(&p, 512, NULL, 0), 0);
	/* capped at the model's limits */
	p.max_tokens = 1000;
	p.max_len_model = 510;
	assert_true(same(rg_bucket_of(&p, 999, 3, 300), (rg_bucket){1000, 4, 510}));
}

/* Index of b in the ladder, or -1. */
static int ladder_find(const rg_bucket *lad, int n, rg_bucket b)
{
	for (int i = 0; i < n; i++)
		if (same(lad[i], b))
			return i;
	return -1;
}

static uint64_t rng = 88172645463325252ull;

static int uniform(int lo, int hi) /* [lo, hi] */
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return lo + (int)(rng % (uint64_t)(hi - lo + 1));
}

static void test_ladder_covers_the_envelope(void **state)
{
	int n_lad = rg_bucket_ladder(&SERVER, 512, NULL, 0);
	rg_bucket *lad = calloc((size_t)n_lad, sizeof(*lad));
	int *hits = calloc((size_t)n_lad, sizeof(int)), used = 0, outside[3] = {0, 0, 0};

	(void)state;
	assert_int_equal(rg_bucket_ladder(&SERVER, 512, lad, n_lad), n_lad);
	printf("  ladder: %d buckets for 16384 tokens, 256 sequences, 512 positions\n", n_lad);
	/* 124 token buckets; L 64 below 65 tokens, 64-128 to 128, 64-256 to 256, all four past */
	assert_int_equal(n_lad, 468);
	for (int i = 0; i < n_lad; i++) {
		int lens[1024], n, n_seq, ml = 0;

		assert_int_equal(ladder_find(lad, i, lad[i]), -1); /* no two alike */
		assert_true(i == 0 || lad[i].T > lad[i - 1].T ||
			    (lad[i].T == lad[i - 1].T && lad[i].L > lad[i - 1].L));
		assert_true(lad[i].S <= 256 && lad[i].S * RG_BUCKET_MIN_AVG_LEN < 2 * lad[i].T + 16);
		rg_bucket_example(&SERVER, lad[i], &n, &n_seq, lens);
		assert_true(n >= 1 && n <= lad[i].T && n_seq >= 1 && n_seq <= lad[i].S);
		for (int k = 0, sum = 0; k < n_seq; k++) {
			assert_true(lens[k] >= 1 && lens[k] <= lens[0]);
			sum += lens[k];
			ml = lens[0];
			if (k == n_seq - 1)
				assert_int_equal(sum, n);
		}
		assert_true(same(rg_bucket_of(&SERVER, n, n_seq, ml), lad[i]));
	}
	/* loadgen-like batches (uniform 2-100 tokens, 1-256 requests, at most 16384 tokens), short
	 * queries (1-8 tokens), single long requests: all on the ladder */
	for (int r = 0; r < 200000; r++) {
		int kind = r % 3, n_seq = uniform(1, 256), n = 0, ml = 0, i;
		rg_bucket b;

		if (kind == 2)
			n_seq = 1;
		for (int k = 0; k < n_seq; k++) {
			int len = kind == 0 ? uniform(2, 100) : kind == 1 ? uniform(1, 8)
									 : uniform(1, 512);

			if (n + len > 16384) {
				n_seq = k;
				break;
			}
			n += len;
			ml = len > ml ? len : ml;
		}
		if (n_seq > (n + RG_BUCKET_MIN_AVG_LEN - 1) / RG_BUCKET_MIN_AVG_LEN) {
			outside[kind]++; /* averaging under 8 tokens: outside the envelope */
			continue;
		}
		b = rg_bucket_of(&SERVER, n, n_seq, ml);
		i = ladder_find(lad, n_lad, b);
		if (i < 0)
			fail_msg("batch of %d tokens, %d seqs, longest %d -> (%d, %d, %d) is not on the "
				 "ladder", n, n_seq, ml, b.T, b.S, b.L);
		used += hits[i]++ == 0;
		/* padding: under one rounding step of n; S from the envelope */
		assert_true(b.T >= n && b.T - n < (n <= 256 ? 16 : n <= 4096 ? 64 : 256));
		assert_int_equal(b.S, rg_bucket_env_seqs(&SERVER, b.T));
	}
	printf("  random batches of the envelope fell in %d of the %d buckets; outside it: %d of "
	       "66667 loadgen-like, %d of 66667 queries\n", used, n_lad, outside[0], outside[1]);
	assert_true(outside[0] < 100 && outside[2] == 0); /* loadgen's: only a few tiny batches */
	/* the ladder for a shorter longest length is a prefix of each token bucket's lengths */
	assert_true(rg_bucket_ladder(&SERVER, 100, NULL, 0) < n_lad);
	assert_int_equal(rg_bucket_ladder(&SERVER, 512, NULL, 0),
			 rg_bucket_ladder(&SERVER, 300, NULL, 0));
	free(lad);
	free(hits);
}

static void test_outside_the_envelope_still_holds_the_batch(void **state)
{
	rg_bucket b;

	(void)state;
	/* 200 one-token sequences: more than T / 8 */
	b = rg_bucket_of(&SERVER, 200, 200, 1);
	assert_true(b.T == 208 && b.S == 256 && b.L == 64);
	assert_true(b.S > rg_bucket_env_seqs(&SERVER, b.T));
	/* envelope of few sequences: S follows env_seqs, not T / 8 */
	{
		rg_bucket_policy p = {16384, 512, 1024, 4};

		assert_int_equal(rg_bucket_env_seqs(&p, 16384), 4);
		assert_int_equal(rg_bucket_of(&p, 1000, 2, 500).S, 4);
		assert_int_equal(rg_bucket_of(&p, 1000, 9, 500).S, 16);
		/* 4 sequences of at most 512 tokens never fill more than 2048 tokens */
		for (int i = 0, n = rg_bucket_ladder(&p, 512, NULL, 0); i < 1; i++) {
			rg_bucket *lad = calloc((size_t)n, sizeof(*lad));

			rg_bucket_ladder(&p, 512, lad, n);
			for (int k = 0; k < n; k++)
				assert_true(lad[k].T <= 2048 + 64);
			free(lad);
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_no_envelope_is_the_old_rule),
		cmocka_unit_test(test_ladder_covers_the_envelope),
		cmocka_unit_test(test_outside_the_envelope_still_holds_the_batch),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
