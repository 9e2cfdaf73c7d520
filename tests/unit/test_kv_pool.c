/* KV block pool (src/kv/block_pool.c) against a simple model: every sequence's expected token
 * content is kept beside the pool, a fake cache (one int per slot) is written through the
 * slots the pool hands out (after performing its copy-on-write copies), and after every
 * operation each live sequence must read back exactly its content through its block table, the
 * pool's refcounts must equal the counts recomputed from all tables, and used + free = total. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/rng.h"
#include "kv/block_pool.h"
#include "test_rng.h"

static void test_append_slots_and_counts(void **state)
{
	rg_kv_pool *p;
	rg_kv_seq s;
	int32_t slots[10];
	(void)state;

	assert_int_equal(rg_kv_pool_init(&p, 4, 4), RG_OK);
	rg_kv_seq_init(&s);
	assert_int_equal(rg_kv_seq_blocks_needed(p, &s, 5), 2);
	assert_int_equal(rg_kv_seq_append(p, &s, 5, slots, NULL, NULL), RG_OK);
	/* fresh pool hands out block 0 then 1 */
	for (int i = 0; i < 5; i++)
		assert_int_equal(slots[i], (i < 4 ? 0 : 4) + i % 4);
	assert_int_equal(rg_kv_pool_n_used(p), 2);
	assert_int_equal(rg_kv_pool_n_free(p), 2);
	assert_int_equal(rg_kv_seq_append(p, &s, 3, slots, NULL, NULL), RG_OK);
	assert_int_equal(s.n_blocks, 2);
	assert_int_equal(slots[0], 5);
	/* 8 + 9 tokens need 5 blocks: busy, and nothing changed */
	assert_int_equal(rg_kv_seq_append(p, &s, 9, slots, NULL, NULL), RG_ERR_BUSY);
	assert_int_equal(s.n_tokens, 8);
	assert_int_equal(rg_kv_pool_n_used(p), 2);
	assert_false(rg_kv_pool_can_allocate(p, 3));
	assert_true(rg_kv_pool_can_allocate(p, 2));
	assert_int_equal(rg_kv_seq_append(p, &s, -1, slots, NULL, NULL), RG_ERR_INVALID_INPUT);
	rg_kv_seq_free(p, &s);
	assert_int_equal(rg_kv_pool_n_used(p), 0);
	assert_int_equal(rg_kv_pool_n_free(p), 4);
	rg_kv_pool_free(p);
	assert_int_equal(rg_kv_pool_init(&p, 0, 4), RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_kv_pool_init(&p, 4, 0), RG_ERR_INVALID_INPUT);
}

static void test_fork_copy_on_write(void **state)
{
	rg_kv_pool *p;
	rg_kv_seq a, b;
	int32_t slot;
	rg_kv_copy cp;
	int n_copy;
	(void)state;

	assert_int_equal(rg_kv_pool_init(&p, 8, 4), RG_OK);
	rg_kv_seq_init(&a);
	assert_int_equal(rg_kv_seq_append(p, &a, 6, NULL, NULL, NULL), RG_OK); /* blocks 0, 1 */
	assert_int_equal(rg_kv_seq_fork(p, &a, &b), RG_OK);
	assert_int_equal(rg_kv_pool_refcount(p, 0), 2);
	assert_int_equal(rg_kv_pool_refcount(p, 1), 2);
	assert_int_equal(rg_kv_pool_n_used(p), 2);
	/* the shared last block is half full: a copy is needed and must be reportable */
	assert_int_equal(rg_kv_seq_blocks_needed(p, &b, 1), 1);
	assert_int_equal(rg_kv_seq_append(p, &b, 1, &slot, NULL, NULL), RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_kv_seq_append(p, &b, 1, &slot, &cp, &n_copy), RG_OK);
	assert_int_equal(n_copy, 1);
	assert_int_equal(cp.src, 1);
	assert_int_equal(cp.dst, 2);
	assert_int_equal(slot, 2 * 4 + 2);
	assert_int_equal(rg_kv_pool_refcount(p, 1), 1);
	/* a is now the only owner of block 1: appends in place, no copy */
	assert_int_equal(rg_kv_seq_append(p, &a, 1, &slot, &cp, &n_copy), RG_OK);
	assert_int_equal(n_copy, 0);
	assert_int_equal(slot, 1 * 4 + 2);
	rg_kv_seq_free(p, &a);
	assert_int_equal(rg_kv_pool_refcount(p, 0), 1);
	rg_kv_seq_free(p, &b);
	assert_int_equal(rg_kv_pool_n_used(p), 0);
	/* a full shared last block is never copied */
	assert_int_equal(rg_kv_seq_append(p, &a, 4, NULL, NULL, NULL), RG_OK);
	assert_int_equal(rg_kv_seq_fork(p, &a, &b), RG_OK);
	assert_int_equal(rg_kv_seq_append(p, &b, 1, &slot, &cp, &n_copy), RG_OK);
	assert_int_equal(n_copy, 0);
	assert_int_equal(rg_kv_pool_n_used(p), 2);
	rg_kv_seq_free(p, &a);
	rg_kv_seq_free(p, &b);
	assert_int_equal(rg_kv_pool_n_used(p), 0);
	rg_kv_pool_free(p);
}

#define MAX_SEQ 12
#define MAX_TOK 200

typedef struct model_seq {
	bool live;
	int n;
	int content[MAX_TOK]; /* expected token in each position */
} model_seq;

static void check_against_model(rg_kv_pool *p, rg_kv_seq *seqs, model_seq *m, const int *cache,
				int n_blocks, int bs)
{
	int ref[64] = {0};
	int used = 0;

	for (int i = 0; i < MAX_SEQ; i++) {
		if (!m[i].live)
			continue;
		assert_int_equal(seqs[i].n_tokens, m[i].n);
		assert_int_equal(seqs[i].n_blocks, (m[i].n + bs - 1) / bs);
		for (int b = 0; b < seqs[i].n_blocks; b++)
			ref[seqs[i].blocks[b]]++;
		for (int t = 0; t < m[i].n; t++)
			assert_int_equal(cache[rg_kv_seq_slot(&seqs[i], bs, t)], m[i].content[t]);
	}
	for (int b = 0; b < n_blocks; b++) {
		assert_int_equal(rg_kv_pool_refcount(p, b), ref[b]);
		used += ref[b] > 0;
	}
	assert_int_equal(rg_kv_pool_n_used(p), used);
	assert_int_equal(rg_kv_pool_n_free(p), n_blocks - used);
}

static void test_random_against_model(void **state)
{
	(void)state;
	rng = 0x1234567887654321ull;
	for (int round = 0; round < 40; round++) {
		int bs = irand(1, 5), n_blocks = irand(4, 64);
		rg_kv_pool *p;
		rg_kv_seq seqs[MAX_SEQ];
		model_seq m[MAX_SEQ];
		int *cache = calloc((size_t)n_blocks * bs, sizeof(int));
		int next_val = 1, busy = 0;

		assert_non_null(cache);
		assert_int_equal(rg_kv_pool_init(&p, n_blocks, bs), RG_OK);
		memset(m, 0, sizeof(m));
		for (int i = 0; i < MAX_SEQ; i++)
			rg_kv_seq_init(&seqs[i]);
		for (int op = 0; op < 400; op++) {
			int i = irand(0, MAX_SEQ - 1), kind = irand(0, 9);

			if (kind < 6) { /* append (creates the seq when dead) */
				int n = irand(0, 7);
				int32_t slots[8];
				rg_kv_copy cp;
				int n_copy;
				int free_before = rg_kv_pool_n_free(p);
				int need = rg_kv_seq_blocks_needed(p, &seqs[i], n);
				rg_status st;

				if (m[i].n + n > MAX_TOK)
					continue;
				st = rg_kv_seq_append(p, &seqs[i], n, slots, &cp, &n_copy);
				if (need > free_before) {
					assert_int_equal(st, RG_ERR_BUSY);
					assert_int_equal(rg_kv_pool_n_free(p), free_before);
					busy++;
				} else {
					assert_int_equal(st, RG_OK);
					assert_int_equal(free_before - rg_kv_pool_n_free(p), need);
					if (n_copy) /* the runner's job: copy the block first */
						memcpy(cache + cp.dst * bs, cache + cp.src * bs,
						       (size_t)bs * sizeof(int));
					for (int t = 0; t < n; t++) {
						cache[slots[t]] = next_val;
						m[i].content[m[i].n++] = next_val++;
					}
					m[i].live = true;
				}
			} else if (kind < 8) { /* fork i into a dead slot */
				int j = irand(0, MAX_SEQ - 1);

				if (!m[i].live || m[j].live || i == j)
					continue;
				assert_int_equal(rg_kv_seq_fork(p, &seqs[i], &seqs[j]), RG_OK);
				m[j] = m[i];
			} else if (m[i].live) {
				rg_kv_seq_free(p, &seqs[i]);
				m[i].live = false;
				m[i].n = 0;
			}
			check_against_model(p, seqs, m, cache, n_blocks, bs);
		}
		for (int i = 0; i < MAX_SEQ; i++)
			rg_kv_seq_free(p, &seqs[i]);
		/* blocks in use return to zero */
		assert_int_equal(rg_kv_pool_n_used(p), 0);
		assert_int_equal(rg_kv_pool_n_free(p), n_blocks);
		(void)busy;
		rg_kv_pool_free(p);
		free(cache);
	}
}

static void test_rng_reference_values(void **state)
{
	rg_rng r;
	uint64_t x = 1234567;
	(void)state;

	/* splitmix64 reference outputs for seed 1234567 (Vigna's splitmix64.c) */
	assert_true(rg_splitmix64(&x) == 6457827717110365317ull);
	assert_true(rg_splitmix64(&x) == 3203168211198807973ull);
	/* xoshiro256** from state {1, 2, 3, 4}: first outputs of the reference C code */
	r.s[0] = 1, r.s[1] = 2, r.s[2] = 3, r.s[3] = 4;
	assert_true(rg_rng_next(&r) == 11520ull);
	assert_true(rg_rng_next(&r) == 0ull);
	assert_true(rg_rng_next(&r) == 1509978240ull);
	assert_true(rg_rng_next(&r) == 1215971899390074240ull);
	rg_rng_seed(&r, 42);
	for (int i = 0; i < 1000; i++) {
		double u = rg_rng_uniform(&r);

		assert_true(u >= 0.0 && u < 1.0);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_append_slots_and_counts),
		cmocka_unit_test(test_fork_copy_on_write),
		cmocka_unit_test(test_random_against_model),
		cmocka_unit_test(test_rng_reference_values),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
