/* Prefix cache (src/kv/prefix_cache.c) over the block pool, against a model kept beside it: a
 * fake KV cache (the token written in each slot), the set of live sequences and their tokens.
 * Checked: the chained hash (equal prefixes hash equal, a change anywhere changes every later
 * hash); a lookup returns exactly the blocks whose fake-cache contents equal the prompt's
 * blocks; sharing takes references and later appends start a new block; LRU eviction order,
 * tail of a prefix first; a block in use is never evicted; hit counters; and under random
 * operations, refcount(b) = (sequences holding b) + (cached ? 1 : 0), used + free = total, and
 * zero blocks used once every sequence and the cache are freed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kv/prefix_cache.h"
#include "test_rng.h"

static void test_chained_hash(void **state)
{
	int32_t a[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, b[12];
	uint64_t ha[3], hb[3], pa = RG_PREFIX_ROOT, pb = RG_PREFIX_ROOT;
	(void)state;

	memcpy(b, a, sizeof(a));
	b[5] = 99; /* block 1 of 4-token blocks differs */
	for (int i = 0; i < 3; i++) {
		ha[i] = pa = rg_prefix_hash(pa, a + 4 * i, 4);
		hb[i] = pb = rg_prefix_hash(pb, b + 4 * i, 4);
	}
	assert_true(ha[0] == hb[0]);
	assert_true(ha[1] != hb[1]);
	assert_true(ha[2] != hb[2]); /* block 2's tokens are equal, its prefix is not */
	assert_true(rg_prefix_hash(RG_PREFIX_ROOT, a, 4) == ha[0]);
	assert_true(rg_prefix_hash(RG_PREFIX_ROOT, a, 4) != rg_prefix_hash(ha[0], a, 4));
}

/* Append toks to s, writing them into the fake cache. */
static void seq_write(rg_kv_pool *p, rg_kv_seq *s, const int32_t *toks, int n, int32_t *fake)
{
	int32_t slots[256];

	assert_true(n <= 256);
	assert_int_equal(rg_kv_seq_append(p, s, n, slots, NULL, NULL), RG_OK);
	for (int i = 0; i < n; i++)
		fake[slots[i]] = toks[i];
}

/* Register every full block of s (tokens toks) in the cache. */
static void seq_register(rg_prefix_cache *c, const rg_kv_seq *s, const int32_t *toks, int bs)
{
	uint64_t parent = RG_PREFIX_ROOT;

	for (int b = 0; b < s->n_tokens / bs; b++)
		assert_int_equal(rg_prefix_cache_insert(c, parent, toks + b * bs, s->blocks[b],
							&parent), RG_OK);
}

static void test_share_and_evict(void **state)
{
	rg_kv_pool *p;
	rg_prefix_cache *c;
	rg_kv_seq a, b;
	int32_t fake[64], toks[14], blocks[8];
	rg_prefix_cache_stats st;
	(void)state;

	for (int i = 0; i < 14; i++)
		toks[i] = 100 + i;
	assert_int_equal(rg_kv_pool_init(&p, 16, 4), RG_OK);
	assert_int_equal(rg_prefix_cache_init(&c, p), RG_OK);
	rg_kv_seq_init(&a);
	rg_kv_seq_init(&b);
	seq_write(p, &a, toks, 14, fake); /* 3 full blocks + 2 tokens */
	seq_register(c, &a, toks, 4);
	rg_prefix_cache_stats_get(c, &st);
	assert_int_equal(st.n_cached, 3);
	for (int i = 0; i < 3; i++)
		assert_int_equal(rg_kv_pool_refcount(p, a.blocks[i]), 2);
	assert_int_equal(rg_kv_pool_refcount(p, a.blocks[3]), 1); /* partial: not cached */
	/* inserting again is a no-op */
	seq_register(c, &a, toks, 4);
	assert_int_equal(rg_kv_pool_refcount(p, a.blocks[0]), 2);

	/* a prompt sharing 9 tokens (2 full blocks): 2 hits, the same blocks, same contents */
	{
		int32_t q[10];

		memcpy(q, toks, 9 * sizeof(int32_t));
		q[9] = 7;
		assert_int_equal(rg_prefix_cache_lookup(c, q, 10, 8, blocks, NULL), 2);
		for (int i = 0; i < 2; i++) {
			assert_int_equal(blocks[i], a.blocks[i]);
			for (int k = 0; k < 4; k++)
				assert_int_equal(fake[blocks[i] * 4 + k], q[i * 4 + k]);
		}
		/* max_blocks caps it */
		assert_int_equal(rg_prefix_cache_lookup(c, q, 10, 1, blocks, NULL), 1);
		assert_int_equal(rg_prefix_cache_lookup(c, q, 10, 8, blocks, NULL), 2);
		assert_int_equal(rg_prefix_cache_attach(c, &b, blocks, 2), RG_OK);
		rg_prefix_cache_record(c, 2, 2);
		assert_int_equal(b.n_tokens, 8);
		assert_int_equal(rg_kv_pool_refcount(p, a.blocks[0]), 3);
		seq_write(p, &b, q + 8, 2, fake);
		assert_int_equal(b.n_blocks, 3);
		assert_true(b.blocks[2] != a.blocks[2]); /* a new block, nothing copied */
		assert_int_equal(fake[a.blocks[2] * 4], toks[8]);
	}
	/* a different first token: no hit */
	{
		int32_t q[8];

		memcpy(q, toks, sizeof(q));
		q[0] = 1;
		assert_int_equal(rg_prefix_cache_lookup(c, q, 8, 8, blocks, NULL), 0);
	}
	/* every cached block is in use: nothing to evict */
	assert_int_equal(rg_prefix_cache_n_evictable(c), 0);
	assert_int_equal(rg_prefix_cache_evict(c, 8), 0);
	/* a ends: its block 2 is held by the cache only; blocks 0, 1 still by b */
	{
		int32_t a2 = a.blocks[2], a0 = a.blocks[0];

		rg_kv_seq_free(p, &a);
		assert_int_equal(rg_prefix_cache_n_evictable(c), 1);
		assert_int_equal(rg_prefix_cache_evict(c, 8), 1);
		assert_false(rg_prefix_cache_contains(c, a2));
		assert_true(rg_prefix_cache_contains(c, a0));
		assert_int_equal(rg_kv_pool_refcount(p, a2), 0);
	}
	rg_prefix_cache_stats_get(c, &st);
	assert_int_equal(st.hit_blocks, 2);
	assert_int_equal(st.query_blocks, 2);
	assert_int_equal(st.evicted, 1);
	rg_kv_seq_free(p, &b);
	rg_prefix_cache_free(c); /* drops the cache's references */
	assert_int_equal(rg_kv_pool_n_used(p), 0);
	rg_kv_pool_free(p);
}

/* LRU: of three unreferenced cached prefixes, the least recently used goes first, tail first. */
static void test_lru_order(void **state)
{
	rg_kv_pool *p;
	rg_prefix_cache *c;
	rg_kv_seq s[3], h;
	int32_t fake[128], toks[3][8], blocks[4], ids[3][2];
	(void)state;

	assert_int_equal(rg_kv_pool_init(&p, 32, 4), RG_OK);
	assert_int_equal(rg_prefix_cache_init(&c, p), RG_OK);
	for (int i = 0; i < 3; i++) {
		for (int k = 0; k < 8; k++)
			toks[i][k] = 10 * i + k;
		rg_kv_seq_init(&s[i]);
		seq_write(p, &s[i], toks[i], 8, fake);
		seq_register(c, &s[i], toks[i], 4);
		ids[i][0] = s[i].blocks[0];
		ids[i][1] = s[i].blocks[1];
		rg_kv_seq_free(p, &s[i]);
	}
	assert_int_equal(rg_prefix_cache_n_evictable(c), 6);
	/* touch prefix 0: now 1 is the least recently used */
	rg_kv_seq_init(&h);
	assert_int_equal(rg_prefix_cache_lookup(c, toks[0], 8, 4, blocks, NULL), 2);
	assert_int_equal(rg_prefix_cache_attach(c, &h, blocks, 2), RG_OK);
	rg_kv_seq_free(p, &h);
	assert_int_equal(rg_prefix_cache_evict(c, 1), 1);
	assert_false(rg_prefix_cache_contains(c, ids[1][1])); /* the tail of prefix 1 */
	assert_true(rg_prefix_cache_contains(c, ids[1][0]));
	assert_int_equal(rg_prefix_cache_evict(c, 2), 2);
	assert_false(rg_prefix_cache_contains(c, ids[1][0]));
	assert_false(rg_prefix_cache_contains(c, ids[2][1]));
	assert_true(rg_prefix_cache_contains(c, ids[2][0]));
	assert_true(rg_prefix_cache_contains(c, ids[0][0]));
	assert_true(rg_prefix_cache_contains(c, ids[0][1]));
	/* a lookup after eviction of the tail returns only the head */
	assert_int_equal(rg_prefix_cache_lookup(c, toks[2], 8, 4, blocks, NULL), 1);
	assert_int_equal(rg_prefix_cache_evict(c, 100), 3);
	assert_int_equal(rg_kv_pool_n_used(p), 0);
	rg_prefix_cache_free(c);
	rg_kv_pool_free(p);
}

/* Random operations against the invariants. */
#define FZ_SEQS 12
static void test_fuzz(void **state)
{
	enum { NB = 48, BS = 4, MAXT = 40 };
	rg_kv_pool *p;
	rg_prefix_cache *c;
	rg_kv_seq s[FZ_SEQS];
	int32_t toks[FZ_SEQS][MAXT], fake[NB * BS], blocks[MAXT / BS];
	bool live[FZ_SEQS] = {0};
	long long hits = 0;
	(void)state;

	rng = 0x1234567ull;
	assert_int_equal(rg_kv_pool_init(&p, NB, BS), RG_OK);
	assert_int_equal(rg_prefix_cache_init(&c, p), RG_OK);
	for (int it = 0; it < 4000; it++) {
		int i = irand(0, FZ_SEQS - 1), op = irand(0, 9);

		if (!live[i] && op < 7) {
			/* a new sequence: a prompt from a small alphabet (prefixes repeat) */
			int n = irand(1, MAXT), nh, need;

			for (int k = 0; k < n; k++)
				toks[i][k] = k < 12 ? irand(0, 1) : irand(0, 3);
			rg_kv_seq_init(&s[i]);
			nh = rg_prefix_cache_lookup(c, toks[i], n, (n - 1) / BS, blocks, NULL);
			for (int b = 0; b < nh; b++)
				for (int k = 0; k < BS; k++)
					assert_int_equal(fake[blocks[b] * BS + k], toks[i][b * BS + k]);
			assert_int_equal(rg_prefix_cache_attach(c, &s[i], blocks, nh), RG_OK);
			hits += nh;
			need = rg_kv_seq_blocks_needed(p, &s[i], n - nh * BS);
			if (need > rg_kv_pool_n_free(p)) {
				int ev = rg_prefix_cache_n_evictable(c);
				int got = rg_prefix_cache_evict(c, need - rg_kv_pool_n_free(p));

				assert_true(got <= ev);
			}
			if (need > rg_kv_pool_n_free(p)) {
				rg_kv_seq_free(p, &s[i]);
				continue;
			}
			seq_write(p, &s[i], toks[i] + nh * BS, n - nh * BS, fake);
			seq_register(c, &s[i], toks[i], BS);
			live[i] = true;
			/* the pool's running count equals a walk over every block */
			{
				int walk = 0;

				for (int32_t b = 0; b < rg_kv_pool_n_blocks(p); b++)
					walk += rg_prefix_cache_contains(c, b) &&
						rg_kv_pool_refcount(p, b) == 1;
				assert_int_equal(rg_prefix_cache_n_evictable(c), walk);
			}
		} else if (live[i] && op < 7) {
			rg_kv_seq_free(p, &s[i]);
			live[i] = false;
		} else {
			int before_ev = rg_prefix_cache_n_evictable(c);
			int got = rg_prefix_cache_evict(c, irand(0, 4));

			assert_int_equal(rg_prefix_cache_n_evictable(c), before_ev - got);
		}
		/* invariants */
		{
			int cnt[NB] = {0};

			for (int j = 0; j < FZ_SEQS; j++)
				if (live[j]) {
					for (int b = 0; b < s[j].n_blocks; b++)
						cnt[s[j].blocks[b]]++;
					/* each live sequence reads back its tokens */
					for (int k = 0; k < s[j].n_tokens; k++)
						assert_int_equal(fake[rg_kv_seq_slot(&s[j], BS, k)],
								 toks[j][k]);
				}
			for (int b = 0; b < NB; b++)
				assert_int_equal(rg_kv_pool_refcount(p, b),
						 cnt[b] + (rg_prefix_cache_contains(c, b) ? 1 : 0));
			assert_int_equal(rg_kv_pool_n_used(p) + rg_kv_pool_n_free(p), NB);
		}
	}
	assert_true(hits > 100);
	for (int j = 0; j < FZ_SEQS; j++)
		if (live[j])
			rg_kv_seq_free(p, &s[j]);
	rg_prefix_cache_free(c);
	assert_int_equal(rg_kv_pool_n_used(p), 0);
	rg_kv_pool_free(p);
}

static void test_pool_share_errors(void **state)
{
	rg_kv_pool *p;
	rg_kv_seq s, t;
	int32_t b[1];
	(void)state;

	assert_int_equal(rg_kv_pool_init(&p, 4, 4), RG_OK);
	rg_kv_seq_init(&s);
	rg_kv_seq_init(&t);
	b[0] = 2; /* free */
	assert_int_equal(rg_kv_seq_share_blocks(p, &s, b, 1), RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_kv_pool_block_ref(p, 2), RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_kv_pool_block_unref(p, 9), RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_kv_seq_append(p, &s, 5, NULL, NULL, NULL), RG_OK);
	b[0] = s.blocks[0];
	assert_int_equal(rg_kv_seq_share_blocks(p, &s, b, 1), RG_ERR_INVALID_INPUT); /* unaligned */
	assert_int_equal(s.n_tokens, 5);
	assert_int_equal(rg_kv_seq_share_blocks(p, &t, b, 1), RG_OK);
	assert_int_equal(t.n_tokens, 4);
	assert_int_equal(rg_kv_pool_refcount(p, b[0]), 2);
	rg_kv_seq_free(p, &s);
	assert_int_equal(rg_kv_pool_refcount(p, b[0]), 1);
	rg_kv_seq_free(p, &t);
	assert_int_equal(rg_kv_pool_n_used(p), 0);
	rg_kv_pool_free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_chained_hash),
		cmocka_unit_test(test_share_and_evict),
		cmocka_unit_test(test_lru_order),
		cmocka_unit_test(test_fuzz),
		cmocka_unit_test(test_pool_share_errors),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
