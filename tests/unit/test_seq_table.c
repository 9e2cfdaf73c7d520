/* Block tables by sequence id (src/kv/seq_table.c). Checked by hand: slots, fork and
 * copy-on-write, a two-step beam re-seat against tables and refcounts worked out on paper (and
 * the free list's order after it), cross blocks shared by forks and re-seats and freed with the
 * last holder, prefix-cache attach and eviction on demand, and the errors (unknown id,
 * duplicate id, pool exhausted -> RG_ERR_BUSY with nothing changed). Under random operations
 * (many ids, so the hash table grows and deletes through collisions): every pool refcount
 * equals the references recomputed from all tables and cross tables, every sequence reads back
 * its own tokens and encoder values through its tables from a fake cache written through the
 * slots handed out (copy-on-write copies run first), and the pool is empty once every sequence
 * is removed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kv/seq_table.h"
#include "test_rng.h"

/* seq's table equals want (n blocks), read into a row of cap with zero padding. */
static void assert_table(const rg_kv *kv, uint64_t seq, const int32_t *want, int n)
{
	int32_t row[16];

	assert_true(n <= 12);
	assert_int_equal(rg_kv_table(kv, seq, row, n + 4), n);
	for (int i = 0; i < n; i++)
		assert_int_equal(row[i], want[i]);
	for (int i = n; i < n + 4; i++)
		assert_int_equal(row[i], 0);
}

static void test_allocate_fork_cow_free(void **state)
{
	rg_kv_pool *p;
	rg_kv *kv;
	int32_t slots[8], row[2];
	rg_kv_copy cp;
	int n_copy;
	(void)state;

	assert_int_equal(rg_kv_pool_init(&p, 8, 4), RG_OK);
	assert_int_equal(rg_kv_init(&kv, p, NULL), RG_OK);
	assert_int_equal(rg_kv_allocate(kv, 1, 6, slots, &cp, &n_copy), RG_OK);
	assert_int_equal(n_copy, 0);
	for (int i = 0; i < 6; i++)
		assert_int_equal(slots[i], i); /* blocks 0 and 1 of a fresh pool */
	assert_int_equal(rg_kv_n_tokens(kv, 1), 6);
	assert_int_equal(rg_kv_n_blocks(kv, 1), 2);
	assert_table(kv, 1, (const int32_t[]){0, 1}, 2);
	assert_int_equal(rg_kv_table(kv, 1, row, 1), 2); /* truncated, as snprintf */
	assert_int_equal(row[0], 0);
	assert_int_equal(rg_kv_slots(kv, 1, 4, 2, slots), RG_OK);
	assert_int_equal(slots[0], 4);
	assert_int_equal(slots[1], 5);
	assert_int_equal(rg_kv_slots(kv, 1, 5, 2, slots), RG_ERR_INVALID_INPUT);

	/* fork: nothing taken, both blocks shared */
	assert_int_equal(rg_kv_fork(kv, 1, 2), RG_OK);
	assert_int_equal(rg_kv_pool_n_used(p), 2);
	assert_int_equal(rg_kv_pool_refcount(p, 0), 2);
	assert_int_equal(rg_kv_pool_refcount(p, 1), 2);
	assert_table(kv, 2, (const int32_t[]){0, 1}, 2);
	assert_int_equal(rg_kv_n_tokens(kv, 2), 6);
	/* the child appends into the shared half-full block 1: copied to block 2 first */
	assert_int_equal(rg_kv_blocks_needed(kv, 2, 1), 1);
	assert_int_equal(rg_kv_allocate(kv, 2, 1, slots, &cp, &n_copy), RG_OK);
	assert_int_equal(n_copy, 1);
	assert_int_equal(cp.src, 1);
	assert_int_equal(cp.dst, 2);
	assert_int_equal(slots[0], 2 * 4 + 2);
	assert_table(kv, 2, (const int32_t[]){0, 2}, 2);
	/* block 1 is the parent's alone now: no copy */
	assert_int_equal(rg_kv_allocate(kv, 1, 3, slots, &cp, &n_copy), RG_OK);
	assert_int_equal(n_copy, 0);
	assert_int_equal(slots[0], 6);
	assert_int_equal(slots[1], 7);
	assert_int_equal(slots[2], 3 * 4); /* a new block 3 */
	assert_int_equal(rg_kv_pool_n_used(p), 4);
	assert_int_equal(rg_kv_n_seqs(kv), 2);
	rg_kv_remove(kv, 1);
	assert_false(rg_kv_has(kv, 1));
	assert_int_equal(rg_kv_pool_refcount(p, 0), 1);
	rg_kv_remove(kv, 2);
	assert_int_equal(rg_kv_n_seqs(kv), 0);
	assert_int_equal(rg_kv_pool_n_used(p), 0);
	rg_kv_free(kv);
	rg_kv_pool_free(p);
}

/* Rollback of rejected speculative positions (rg_kv_truncate), bs 4: 10 tokens in blocks
 * {0, 1, 2}; truncating to 5 frees block 2 and keeps block 1 (position 4 is in it); the next
 * append writes position 5 into block 1's slot 1 again. A fork's shared tail is not freed by
 * the child's truncate (refcount 2 -> 1), and a truncate of a shared last block is followed
 * by a copy-on-write on the next append. Out-of-range sizes and unknown ids change nothing. */
static void test_truncate(void **state)
{
	rg_kv_pool *p;
	rg_kv *kv;
	int32_t slots[12];
	rg_kv_copy cp;
	int n_copy;
	(void)state;

	assert_int_equal(rg_kv_pool_init(&p, 8, 4), RG_OK);
	assert_int_equal(rg_kv_init(&kv, p, NULL), RG_OK);
	assert_int_equal(rg_kv_allocate(kv, 1, 10, slots, &cp, &n_copy), RG_OK);
	assert_int_equal(rg_kv_pool_n_used(p), 3);
	assert_int_equal(rg_kv_truncate(kv, 1, 11), RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_kv_truncate(kv, 1, -1), RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_kv_truncate(kv, 9, 0), RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_kv_n_tokens(kv, 1), 10);
	assert_int_equal(rg_kv_truncate(kv, 1, 5), RG_OK);
	assert_int_equal(rg_kv_n_tokens(kv, 1), 5);
	assert_int_equal(rg_kv_n_blocks(kv, 1), 2);
	assert_int_equal(rg_kv_pool_n_used(p), 2);
	assert_int_equal(rg_kv_pool_refcount(p, 2), 0);
	assert_table(kv, 1, (const int32_t[]){0, 1}, 2);
	assert_int_equal(rg_kv_allocate(kv, 1, 4, slots, &cp, &n_copy), RG_OK);
	assert_int_equal(n_copy, 0);
	assert_int_equal(slots[0], 1 * 4 + 1);
	assert_int_equal(slots[3], 2 * 4 + 0); /* block 2 again: the LIFO free list's top */
	/* truncating to a block boundary frees the block after it; to 0 frees all */
	assert_int_equal(rg_kv_truncate(kv, 1, 8), RG_OK);
	assert_int_equal(rg_kv_pool_n_used(p), 2);
	/* a fork shares {0, 1}; the child's truncate to 6 keeps both (shared), then its append
	 * into shared block 1 copies it on write */
	assert_int_equal(rg_kv_fork(kv, 1, 2), RG_OK);
	assert_int_equal(rg_kv_truncate(kv, 2, 6), RG_OK);
	assert_int_equal(rg_kv_pool_refcount(p, 1), 2);
	assert_int_equal(rg_kv_allocate(kv, 2, 1, slots, &cp, &n_copy), RG_OK);
	assert_int_equal(n_copy, 1);
	assert_int_equal(cp.src, 1);
	assert_int_equal(slots[0], cp.dst * 4 + 2);
	assert_int_equal(rg_kv_truncate(kv, 2, 0), RG_OK);
	assert_int_equal(rg_kv_n_blocks(kv, 2), 0);
	assert_int_equal(rg_kv_pool_refcount(p, 0), 1);
	rg_kv_remove(kv, 2);
	rg_kv_remove(kv, 1);
	assert_int_equal(rg_kv_pool_n_used(p), 0);
	rg_kv_free(kv);
	rg_kv_pool_free(p);
}

/* Worked on paper: bs 4, a 5-token prompt in blocks {0, 1} held by member 10 of beams
 * {10, 11, 12, 13}.
 * Step 1 (the prompt's): every beam continues slot 0. Slot 3 (the last child) takes 10's table
 * over, slots 0-2 fork it: four tables {0, 1}, refcounts 4 and 4, 2 blocks used. One token
 * each, in slot order: 10, 11, 12 find block 1 shared and copy it to 2, 3, 4; 13 is then its
 * only holder and writes slot 1*4+1 in place.
 *   10 {0, 2}   11 {0, 3}   12 {0, 4}   13 {0, 1}
 * Step 2: parent = {3, 3, -1, 0}. Slot 1 is 13's last child (takes {0, 1} over), slot 0 forks
 * it; slot 3 takes 10's {0, 2} over; slot 2 holds nothing; 11 and 12 have no child and are
 * freed in slot order (block 3, then 4, pushed on the LIFO free list).
 *   10 {0, 1}   11 {0, 1}   12 -   13 {0, 2}
 * refcounts 0: 3, 1: 2, 2: 1, 3 and 4 free; the next block handed out is 4, then 3. */
static void test_reseat_by_hand(void **state)
{
	const uint64_t mem[4] = {10, 11, 12, 13};
	rg_kv_pool *p;
	rg_kv *kv;
	int32_t slots[8];
	rg_kv_copy cp;
	int n_copy;
	(void)state;

	assert_int_equal(rg_kv_pool_init(&p, 16, 4), RG_OK);
	assert_int_equal(rg_kv_init(&kv, p, NULL), RG_OK);
	assert_int_equal(rg_kv_allocate(kv, 10, 5, NULL, NULL, NULL), RG_OK);
	assert_int_equal(rg_kv_reseat(kv, mem, (const int32_t[]){0, 0, 0, 0}, 4), RG_OK);
	assert_int_equal(rg_kv_n_seqs(kv), 4);
	assert_int_equal(rg_kv_pool_n_used(p), 2);
	assert_int_equal(rg_kv_pool_refcount(p, 0), 4);
	assert_int_equal(rg_kv_pool_refcount(p, 1), 4);
	for (int j = 0; j < 4; j++) {
		assert_table(kv, mem[j], (const int32_t[]){0, 1}, 2);
		assert_int_equal(rg_kv_n_tokens(kv, mem[j]), 5);
	}
	for (int j = 0; j < 4; j++) {
		assert_int_equal(rg_kv_allocate(kv, mem[j], 1, slots, &cp, &n_copy), RG_OK);
		assert_int_equal(n_copy, j < 3);
		if (j < 3) {
			assert_int_equal(cp.src, 1);
			assert_int_equal(cp.dst, 2 + j);
		}
		assert_int_equal(slots[0], (j < 3 ? 2 + j : 1) * 4 + 1);
	}
	assert_table(kv, 10, (const int32_t[]){0, 2}, 2);
	assert_table(kv, 11, (const int32_t[]){0, 3}, 2);
	assert_table(kv, 12, (const int32_t[]){0, 4}, 2);
	assert_table(kv, 13, (const int32_t[]){0, 1}, 2);

	/* bad re-seats change nothing: a parent not held, out of range, a repeated member */
	assert_int_equal(rg_kv_reseat(kv, (const uint64_t[]){10, 11, 99}, (const int32_t[]){2, 0, 0},
				      3), RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_kv_reseat(kv, mem, (const int32_t[]){4, 0, 0, 0}, 4),
			 RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_kv_reseat(kv, (const uint64_t[]){10, 10}, (const int32_t[]){0, 0}, 2),
			 RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_kv_reseat(kv, mem, (const int32_t[]){0}, 0), RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_kv_n_seqs(kv), 4);
	assert_int_equal(rg_kv_pool_n_used(p), 5);

	assert_int_equal(rg_kv_reseat(kv, mem, (const int32_t[]){3, 3, -1, 0}, 4), RG_OK);
	assert_table(kv, 10, (const int32_t[]){0, 1}, 2);
	assert_table(kv, 11, (const int32_t[]){0, 1}, 2);
	assert_false(rg_kv_has(kv, 12));
	assert_int_equal(rg_kv_table(kv, 12, slots, 2), -1);
	assert_table(kv, 13, (const int32_t[]){0, 2}, 2);
	assert_int_equal(rg_kv_pool_refcount(p, 0), 3);
	assert_int_equal(rg_kv_pool_refcount(p, 1), 2);
	assert_int_equal(rg_kv_pool_refcount(p, 2), 1);
	assert_int_equal(rg_kv_pool_refcount(p, 3), 0);
	assert_int_equal(rg_kv_pool_refcount(p, 4), 0);
	assert_int_equal(rg_kv_pool_n_used(p), 3);
	assert_int_equal(rg_kv_allocate(kv, 99, 5, slots, NULL, NULL), RG_OK);
	assert_int_equal(slots[0], 4 * 4);
	assert_int_equal(slots[4], 3 * 4);
	rg_kv_remove(kv, 99);

	/* a slot that held nothing can receive a beam; a sole child takes over */
	assert_int_equal(rg_kv_reseat(kv, mem, (const int32_t[]){-1, -1, 3, -1}, 4), RG_OK);
	assert_int_equal(rg_kv_n_seqs(kv), 1);
	assert_table(kv, 12, (const int32_t[]){0, 2}, 2);
	assert_int_equal(rg_kv_pool_n_used(p), 2);
	rg_kv_free(kv); /* frees what it still holds */
	assert_int_equal(rg_kv_pool_n_used(p), 0);
	rg_kv_pool_free(p);
}

static void test_cross_blocks(void **state)
{
	rg_kv_pool *p;
	rg_kv *kv;
	int32_t row[8];
	int n_enc;
	(void)state;

	assert_int_equal(rg_kv_pool_init(&p, 10, 4), RG_OK);
	assert_int_equal(rg_kv_init(&kv, p, NULL), RG_OK);
	/* 9 encoder tokens: 3 blocks; the sequence is created with an empty self table */
	assert_int_equal(rg_kv_cross(kv, 1, 9), RG_OK);
	assert_true(rg_kv_has(kv, 1));
	assert_int_equal(rg_kv_n_tokens(kv, 1), 0);
	assert_int_equal(rg_kv_table(kv, 1, row, 4), 0);
	assert_int_equal(rg_kv_cross_table(kv, 1, row, 4, &n_enc), 3);
	assert_int_equal(n_enc, 9);
	for (int i = 0; i < 3; i++)
		assert_int_equal(row[i], i);
	assert_int_equal(row[3], 0);
	assert_int_equal(rg_kv_cross(kv, 1, 4), RG_ERR_INVALID_INPUT); /* already has them */
	assert_int_equal(rg_kv_cross(kv, 2, 0), RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_kv_allocate(kv, 1, 2, NULL, NULL, NULL), RG_OK); /* block 3 */
	assert_int_equal(rg_kv_pool_n_used(p), 4);

	/* forks share the cross blocks: nothing taken, one pool reference each */
	assert_int_equal(rg_kv_fork(kv, 1, 2), RG_OK);
	assert_int_equal(rg_kv_fork(kv, 2, 3), RG_OK);
	assert_int_equal(rg_kv_pool_n_used(p), 4);
	for (uint64_t s = 2; s <= 3; s++) {
		assert_int_equal(rg_kv_cross_table(kv, s, row, 3, &n_enc), 3);
		assert_int_equal(n_enc, 9);
		assert_int_equal(row[0], 0);
		assert_int_equal(row[2], 2);
	}
	assert_int_equal(rg_kv_pool_refcount(p, 0), 1);
	assert_int_equal(rg_kv_pool_refcount(p, 3), 3);
	/* a beam re-seat carries them to the new members: 1 and 3 freed, 2 and 4 hold */
	assert_int_equal(rg_kv_reseat(kv, (const uint64_t[]){1, 2, 3, 4},
				      (const int32_t[]){-1, 1, -1, 1}, 4), RG_OK);
	assert_false(rg_kv_has(kv, 1));
	assert_int_equal(rg_kv_cross_table(kv, 4, row, 3, &n_enc), 3);
	assert_int_equal(row[1], 1);
	assert_int_equal(rg_kv_pool_n_used(p), 4);
	assert_int_equal(rg_kv_pool_refcount(p, 3), 2);
	rg_kv_remove(kv, 2);
	assert_int_equal(rg_kv_pool_n_used(p), 4); /* 4 still holds the cross and block 3 */
	rg_kv_remove(kv, 4);
	assert_int_equal(rg_kv_pool_n_used(p), 0); /* the last holder gave them back */

	/* no cross blocks: 0; unknown: -1 */
	assert_int_equal(rg_kv_allocate(kv, 5, 1, NULL, NULL, NULL), RG_OK);
	assert_int_equal(rg_kv_cross_table(kv, 5, row, 3, &n_enc), 0);
	assert_int_equal(n_enc, 0);
	assert_int_equal(row[0], 0);
	assert_int_equal(rg_kv_cross_table(kv, 6, row, 3, NULL), -1);
	/* pool exhausted: 37 tokens need 10 blocks, 9 are free; nothing changes */
	assert_int_equal(rg_kv_cross(kv, 6, 37), RG_ERR_BUSY);
	assert_false(rg_kv_has(kv, 6));
	assert_int_equal(rg_kv_cross(kv, 5, 37), RG_ERR_BUSY);
	assert_int_equal(rg_kv_cross_table(kv, 5, row, 3, NULL), 0);
	assert_int_equal(rg_kv_pool_n_used(p), 1);
	assert_int_equal(rg_kv_cross(kv, 5, 36), RG_OK); /* 9 blocks: exactly the rest */
	assert_int_equal(rg_kv_pool_n_free(p), 0);
	rg_kv_remove(kv, 5);
	assert_int_equal(rg_kv_pool_n_used(p), 0);
	rg_kv_free(kv);
	rg_kv_pool_free(p);
}

static void test_attach_and_evict(void **state)
{
	const int32_t toks[4] = {7, 8, 9, 10};
	rg_kv_pool *p;
	rg_prefix_cache *c;
	rg_kv *kv;
	int32_t blocks[2], row[2];
	uint64_t parent = RG_PREFIX_ROOT;
	rg_prefix_cache_stats st;
	(void)state;

	assert_int_equal(rg_kv_pool_init(&p, 4, 2), RG_OK);
	assert_int_equal(rg_prefix_cache_init(&c, p), RG_OK);
	assert_int_equal(rg_kv_init(&kv, p, c), RG_OK);
	assert_int_equal(rg_kv_allocate(kv, 1, 4, NULL, NULL, NULL), RG_OK); /* blocks 0, 1 */
	assert_int_equal(rg_kv_table(kv, 1, row, 2), 2);
	for (int b = 0; b < 2; b++)
		assert_int_equal(rg_prefix_cache_insert(c, parent, toks + 2 * b, row[b], &parent),
				 RG_OK);
	rg_kv_remove(kv, 1);
	assert_int_equal(rg_kv_pool_n_free(p), 2);
	assert_int_equal(rg_kv_n_avail(kv), 4); /* the two cached blocks count */

	/* a hit shares them: held, no longer evictable */
	assert_int_equal(rg_prefix_cache_lookup(c, toks, 4, 2, blocks, NULL), 2);
	assert_int_equal(rg_kv_attach(kv, 2, blocks, 2), RG_OK);
	assert_int_equal(rg_kv_n_tokens(kv, 2), 4);
	assert_int_equal(rg_kv_pool_refcount(p, 0), 2);
	assert_int_equal(rg_kv_n_avail(kv), 2);
	/* later tokens start a new block, no copy */
	assert_int_equal(rg_kv_fit(kv, 2, 9, rg_kv_n_avail(kv)), 4);
	assert_int_equal(rg_kv_allocate(kv, 2, 1, NULL, NULL, NULL), RG_OK);
	assert_int_equal(rg_kv_allocate(kv, 3, 3, NULL, NULL, NULL), RG_ERR_BUSY);
	assert_false(rg_kv_has(kv, 3));
	rg_kv_remove(kv, 2); /* blocks 0, 1 cached, unreferenced again; 2 free */
	assert_int_equal(rg_kv_n_avail(kv), 4);
	/* 6 new tokens need 3 blocks, 2 on the free list: one cached block is evicted */
	assert_int_equal(rg_kv_pool_n_free(p), 2);
	assert_int_equal(rg_kv_allocate(kv, 3, 6, NULL, NULL, NULL), RG_OK);
	rg_prefix_cache_stats_get(c, &st);
	assert_int_equal(st.evicted, 1);
	assert_int_equal(st.n_cached, 1);
	assert_int_equal(rg_kv_allocate(kv, 4, 3, NULL, NULL, NULL), RG_ERR_BUSY); /* 1 left */
	rg_prefix_cache_stats_get(c, &st);
	assert_int_equal(st.evicted, 1); /* a refused allocation evicts nothing */
	/* attach errors: an unaligned sequence, a block outside the pool; nothing changes */
	assert_int_equal(rg_kv_allocate(kv, 4, 1, NULL, NULL, NULL), RG_OK); /* evicts the last */
	assert_int_equal(rg_kv_attach(kv, 4, blocks, 1), RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_kv_attach(kv, 5, (const int32_t[]){99}, 1), RG_ERR_INVALID_INPUT);
	assert_false(rg_kv_has(kv, 5));
	assert_int_equal(rg_kv_n_tokens(kv, 4), 1);
	rg_kv_free(kv);
	rg_prefix_cache_free(c);
	assert_int_equal(rg_kv_pool_n_used(p), 0);
	rg_kv_pool_free(p);
}

static void test_errors(void **state)
{
	rg_kv_pool *p;
	rg_kv *kv;
	int32_t slots[8];
	rg_kv_copy cp;
	int n_copy;
	(void)state;

	assert_int_equal(rg_kv_init(&kv, NULL, NULL), RG_ERR_INVALID_INPUT);
	assert_null(kv);
	assert_int_equal(rg_kv_pool_init(&p, 4, 4), RG_OK);
	assert_int_equal(rg_kv_init(&kv, p, NULL), RG_OK);
	/* unknown ids */
	assert_int_equal(rg_kv_fork(kv, 1, 2), RG_ERR_INVALID_INPUT);
	assert_false(rg_kv_has(kv, 2));
	assert_int_equal(rg_kv_slots(kv, 1, 0, 1, slots), RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_kv_table(kv, 1, slots, 4), -1);
	assert_int_equal(rg_kv_n_tokens(kv, 1), 0);
	assert_int_equal(rg_kv_blocks_needed(kv, 1, 5), 2); /* as an empty sequence */
	rg_kv_remove(kv, 1);                                 /* ignored */
	/* duplicate ids */
	assert_int_equal(rg_kv_allocate(kv, 1, 3, NULL, NULL, NULL), RG_OK);
	assert_int_equal(rg_kv_allocate(kv, 2, 1, NULL, NULL, NULL), RG_OK);
	assert_int_equal(rg_kv_fork(kv, 1, 2), RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_kv_fork(kv, 1, 1), RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_kv_n_tokens(kv, 2), 1);
	assert_int_equal(rg_kv_pool_refcount(p, 0), 1);
	/* bad counts */
	assert_int_equal(rg_kv_allocate(kv, 1, 0, slots, NULL, NULL), RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_kv_allocate(kv, 3, -1, slots, NULL, NULL), RG_ERR_INVALID_INPUT);
	assert_false(rg_kv_has(kv, 3));
	/* pool exhausted: 2 blocks free; 3 + 9 tokens fill 3 blocks (2 more), 3 + 10 need 3 */
	assert_int_equal(rg_kv_blocks_needed(kv, 1, 9), 2);
	assert_int_equal(rg_kv_fit(kv, 1, 20, 2), 9);
	assert_int_equal(rg_kv_allocate(kv, 1, 10, slots, NULL, NULL), RG_ERR_BUSY);
	assert_int_equal(rg_kv_n_tokens(kv, 1), 3);
	assert_int_equal(rg_kv_n_blocks(kv, 1), 1);
	assert_int_equal(rg_kv_pool_n_used(p), 2);
	assert_int_equal(rg_kv_allocate(kv, 3, 9, slots, NULL, NULL), RG_ERR_BUSY);
	assert_false(rg_kv_has(kv, 3)); /* not created */
	/* a copy-on-write with no place to report it: refused, nothing changes */
	assert_int_equal(rg_kv_fork(kv, 1, 3), RG_OK);
	assert_int_equal(rg_kv_allocate(kv, 3, 1, slots, NULL, NULL), RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_kv_n_tokens(kv, 3), 3);
	assert_int_equal(rg_kv_pool_refcount(p, 0), 2);
	/* busy with a copy pending: nothing changes either */
	assert_int_equal(rg_kv_allocate(kv, 3, 14, slots, &cp, &n_copy), RG_ERR_BUSY);
	assert_int_equal(n_copy, 0);
	assert_int_equal(rg_kv_pool_refcount(p, 0), 2);
	assert_int_equal(rg_kv_pool_n_used(p), 2);
	rg_kv_remove(kv, 1);
	rg_kv_remove(kv, 2);
	rg_kv_remove(kv, 3);
	assert_int_equal(rg_kv_pool_n_used(p), 0);
	rg_kv_free(kv);
	rg_kv_pool_free(p);
}

/* ---- random operations against recomputed references and a fake cache ---- */

#define F_IDS 96
#define F_BLOCKS 160
#define F_BS 3
#define F_MAX_ENC 9

/* The model: a fake KV cache (one value per slot, written through the slots handed out after
 * running the copy-on-write copies) and what each sequence must read back through its tables. */
static int32_t fake[F_BLOCKS * F_BS], next_val;
static int32_t want[F_IDS][F_BLOCKS * F_BS], want_x[F_IDS][F_MAX_ENC];
static int want_n[F_IDS], want_xn[F_IDS];

static void check_content(const rg_kv *kv)
{
	int32_t slots[F_BLOCKS * F_BS], row[F_BLOCKS];

	for (uint64_t id = 0; id < F_IDS; id++) {
		int n_enc;

		if (!rg_kv_has(kv, id)) {
			assert_int_equal(want_n[id], 0);
			assert_int_equal(want_xn[id], 0);
			continue;
		}
		assert_int_equal(rg_kv_n_tokens(kv, id), want_n[id]);
		assert_int_equal(rg_kv_slots(kv, id, 0, want_n[id], slots), RG_OK);
		for (int i = 0; i < want_n[id]; i++)
			assert_int_equal(fake[slots[i]], want[id][i]);
		assert_int_equal(rg_kv_cross_table(kv, id, row, F_BLOCKS, &n_enc),
				 (want_xn[id] + F_BS - 1) / F_BS);
		assert_int_equal(n_enc, want_xn[id]);
		for (int t = 0; t < n_enc; t++)
			assert_int_equal(fake[row[t / F_BS] * F_BS + t % F_BS], want_x[id][t]);
	}
}

static void check_refs(const rg_kv *kv, const rg_kv_pool *p)
{
	int refs[F_BLOCKS] = {0}, used = 0;
	int32_t row[F_BLOCKS], cross_first[F_IDS];
	int n_cross = 0;

	for (uint64_t id = 0; id < F_IDS; id++) {
		int n = rg_kv_table(kv, id, row, F_BLOCKS), nc;

		if (n < 0)
			continue;
		assert_true(n <= F_BLOCKS);
		assert_int_equal(n, rg_kv_n_blocks(kv, id));
		for (int i = 0; i < n; i++)
			refs[row[i]]++;
		nc = rg_kv_cross_table(kv, id, row, F_BLOCKS, NULL);
		if (nc > 0) {
			/* one pool reference per cross object, whoever shares it */
			bool seen = false;

			for (int k = 0; k < n_cross; k++)
				seen |= cross_first[k] == row[0];
			if (!seen) {
				cross_first[n_cross++] = row[0];
				for (int i = 0; i < nc; i++)
					refs[row[i]]++;
			}
		}
	}
	for (int b = 0; b < F_BLOCKS; b++) {
		assert_int_equal(rg_kv_pool_refcount(p, b), refs[b]);
		used += refs[b] > 0;
	}
	assert_int_equal(rg_kv_pool_n_used(p), used);
}

static void test_fuzz(void **state)
{
	rg_kv_pool *p;
	rg_kv *kv;
	int32_t slots[64];
	rg_kv_copy cp;
	int n_copy, n_ok[11] = {0}, n_busy = 0, n_cow = 0;
	(void)state;

	rng = 0x5eed7ab1e;
	memset(want_n, 0, sizeof(want_n));
	memset(want_xn, 0, sizeof(want_xn));
	assert_int_equal(rg_kv_pool_init(&p, F_BLOCKS, F_BS), RG_OK);
	assert_int_equal(rg_kv_init(&kv, p, NULL), RG_OK);
	for (int it = 0; it < 6000; it++) {
		uint64_t a = (uint64_t)irand(0, F_IDS - 1), b = (uint64_t)irand(0, F_IDS - 1);
		int op = irand(0, 10), used = rg_kv_pool_n_used(p), na = rg_kv_n_tokens(kv, a);
		rg_status st;

		switch (op) {
		case 0: case 1: case 2: { /* allocate */
			int n = irand(1, 7), need = rg_kv_blocks_needed(kv, a, n);
			int n_free = rg_kv_pool_n_free(p);

			st = rg_kv_allocate(kv, a, n, slots, &cp, &n_copy);
			if (need > n_free) {
				n_busy++;
				assert_int_equal(st, RG_ERR_BUSY);
				assert_int_equal(rg_kv_n_tokens(kv, a), na);
				assert_int_equal(rg_kv_pool_n_used(p), used);
			} else {
				assert_int_equal(st, RG_OK);
				assert_int_equal(rg_kv_n_tokens(kv, a), na + n);
				assert_int_equal(rg_kv_pool_n_used(p), used + need);
				n_ok[op]++;
				n_cow += n_copy;
				if (n_copy)
					memcpy(fake + cp.dst * F_BS, fake + cp.src * F_BS,
					       F_BS * sizeof(int32_t));
				for (int i = 0; i < n; i++)
					fake[slots[i]] = want[a][na + i] = ++next_val;
				want_n[a] = na + n;
			}
			break;
		}
		case 3: { /* fork */
			bool ok = rg_kv_has(kv, a) && !rg_kv_has(kv, b);

			assert_int_equal(rg_kv_fork(kv, a, b), ok ? RG_OK : RG_ERR_INVALID_INPUT);
			if (ok) {
				assert_int_equal(rg_kv_n_tokens(kv, b), na);
				memcpy(want[b], want[a], sizeof(want[a]));
				memcpy(want_x[b], want_x[a], sizeof(want_x[a]));
				want_n[b] = want_n[a];
				want_xn[b] = want_xn[a];
			}
			n_ok[op] += ok;
			assert_int_equal(rg_kv_pool_n_used(p), used);
			break;
		}
		case 4: case 5: case 6: /* remove */
			rg_kv_remove(kv, a);
			assert_false(rg_kv_has(kv, a));
			want_n[a] = want_xn[a] = 0;
			break;
		case 7: { /* cross: the encoder's K/V written once */
			int n_enc = irand(1, F_MAX_ENC);

			if (rg_kv_cross(kv, a, n_enc) == RG_OK) {
				assert_int_equal(rg_kv_cross_table(kv, a, slots, 64, NULL),
						 (n_enc + F_BS - 1) / F_BS);
				for (int t = 0; t < n_enc; t++)
					fake[slots[t / F_BS] * F_BS + t % F_BS] = want_x[a][t] =
						++next_val;
				want_xn[a] = n_enc;
				n_ok[op]++;
			}
			break;
		}
		default: { /* reseat a group of up to 6 consecutive ids */
			uint64_t mem[6];
			int32_t par[6];
			int n = irand(1, 6), held[6], nh = 0;

			for (int j = 0; j < n; j++) {
				mem[j] = (a + (uint64_t)j) % F_IDS;
				if (rg_kv_has(kv, mem[j]))
					held[nh++] = j;
			}
			for (int j = 0; j < n; j++)
				par[j] = nh && irand(0, 3) ? held[irand(0, nh - 1)] : -1;
			st = rg_kv_reseat(kv, mem, par, n);
			assert_int_equal(st, RG_OK);
			{
				static int32_t ow[6][F_BLOCKS * F_BS], ox[6][F_MAX_ENC];
				int on[6], oxn[6];

				for (int j = 0; j < n; j++) {
					memcpy(ow[j], want[mem[j]], sizeof(ow[j]));
					memcpy(ox[j], want_x[mem[j]], sizeof(ox[j]));
					on[j] = want_n[mem[j]];
					oxn[j] = want_xn[mem[j]];
				}
				for (int j = 0; j < n; j++) {
					int q = par[j];

					want_n[mem[j]] = q >= 0 ? on[q] : 0;
					want_xn[mem[j]] = q >= 0 ? oxn[q] : 0;
					if (q >= 0) {
						memcpy(want[mem[j]], ow[q], sizeof(ow[q]));
						memcpy(want_x[mem[j]], ox[q], sizeof(ox[q]));
					}
				}
			}
			for (int j = 0; j < n; j++)
				assert_int_equal(rg_kv_has(kv, mem[j]), par[j] >= 0);
			assert_true(rg_kv_pool_n_used(p) <= used);
			n_ok[op] += nh > 0;
			break;
		}
		}
		check_refs(kv, p);
		check_content(kv);
	}
	print_message("fuzz: %d allocations (%d busy, %d copies), %d forks, %d cross, %d re-seats\n",
		      n_ok[0] + n_ok[1] + n_ok[2], n_busy, n_cow, n_ok[3], n_ok[7],
		      n_ok[8] + n_ok[9] + n_ok[10]);
	/* every kind of operation ran, and the pool was exhausted and copied on write */
	assert_true(n_ok[0] + n_ok[1] + n_ok[2] > 500 && n_ok[3] > 50 && n_ok[7] > 20 &&
		    n_ok[8] + n_ok[9] + n_ok[10] > 300 && n_busy > 100 && n_cow > 100);
	for (uint64_t id = 0; id < F_IDS; id++)
		rg_kv_remove(kv, id);
	assert_int_equal(rg_kv_n_seqs(kv), 0);
	assert_int_equal(rg_kv_pool_n_used(p), 0);
	rg_kv_free(kv);
	rg_kv_pool_free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_allocate_fork_cow_free),
		cmocka_unit_test(test_reseat_by_hand),
		cmocka_unit_test(test_truncate),
		cmocka_unit_test(test_cross_blocks),
		cmocka_unit_test(test_attach_and_evict),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_fuzz),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
