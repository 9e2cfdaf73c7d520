/* The one owner of block tables, by sequence id (vLLM's KVCacheManager: allocate_slots,
 * free, the block ids of a request; llama.cpp's sequence verbs on its KV memory: seq_cp,
 * seq_rm; the tables themselves are PagedAttention's, Kwon et al. SOSP'23). A scheduler names
 * its sequences by a uint64 id and never sees an rg_kv_seq: it asks for the slots of n new
 * tokens, attaches cached prefix blocks, forks, re-seats a beam group, frees, and reads the
 * tables out into the step's row-major block_tables (include/ragged.h's rg_step_batch).
 *
 * Over a block pool (src/kv/block_pool.h, borrowed) and optionally its prefix cache
 * (src/kv/prefix_cache.h, borrowed): when the free list runs short, an allocation first evicts
 * the cache's least recently used unreferenced blocks (vLLM's BlockPool.get_new_blocks). The
 * pool and the cache must outlive the table; free the table before them.
 *
 * Sharing: a fork shares every block of its parent (refcount + 1 each, nothing copied); a
 * shared, partially filled last block is replaced on the next append and the (src, dst) copy is
 * reported to the caller, who runs it (every layer, K and V) before the step that writes the
 * new slots (copy-on-write, block_pool.h).
 *
 * Cross blocks (encoder-decoder models: the decoder attends to the encoder's K/V, fixed once the
 * encoder has run): rg_kv_cross gives a sequence ceil(n_enc_tokens / block_size) blocks of its
 * own, apart from its self-attention table. They are one refcounted object: a fork or a beam
 * re-seat shares it (no pool block is taken or copied), and its blocks go back to the pool with
 * the last sequence holding it.
 *
 * Ids are the caller's, unique among the sequences the table holds; an id is held from the
 * first rg_kv_attach / rg_kv_allocate / rg_kv_fork (as child) / rg_kv_cross / rg_kv_reseat that
 * names it until rg_kv_remove or a re-seat that leaves it out. Failure: every action returns
 * RG_OK or changes nothing (the cache's evictions aside: they free only blocks no sequence
 * holds). Not thread-safe: one owner drives the table, the pool and the cache. */
#ifndef RG_KV_SEQ_TABLE_H
#define RG_KV_SEQ_TABLE_H
#include <stdbool.h>
#include <stdint.h>

#include "core/export.h"
#include "kv/block_pool.h"
#include "kv/prefix_cache.h"
#include "ragged.h"

/* The widest beam group rg_kv_reseat takes. */
#define RG_KV_MAX_RESEAT 256

typedef struct rg_kv rg_kv;

/* Make an empty table over pool (borrowed) and cache (borrowed, over the same pool, or NULL: no
 * eviction). RG_ERR_INVALID_INPUT (NULL pool), RG_ERR_OOM. */
RG_TEST_API rg_status rg_kv_init(rg_kv **out, rg_kv_pool *pool, rg_prefix_cache *cache);
/* Remove every sequence (their blocks and cross blocks back to the pool), then free the table.
 * NULL accepted. */
RG_TEST_API void rg_kv_free(rg_kv *kv);

/* Whether the table holds sequence seq. */
RG_TEST_API bool rg_kv_has(const rg_kv *kv, uint64_t seq);
/* Sequences held. */
RG_TEST_API int rg_kv_n_seqs(const rg_kv *kv);
/* Token slots written in seq's table (its context length: cached + allocated), and the blocks of
 * its table (ceil(tokens / block_size); cross blocks not counted). 0 for an unknown seq. */
RG_TEST_API int rg_kv_n_tokens(const rg_kv *kv, uint64_t seq);
RG_TEST_API int rg_kv_n_blocks(const rg_kv *kv, uint64_t seq);

/* Blocks that could be had now: the pool's free list plus the cache's unreferenced blocks
 * (evicted on demand). O(cached blocks). */
RG_TEST_API int rg_kv_n_avail(const rg_kv *kv);
/* Blocks that allocating n_new tokens to seq would take (copy-on-write included); an unknown
 * seq counts as empty. */
RG_TEST_API int rg_kv_blocks_needed(const rg_kv *kv, uint64_t seq, int n_new);
/* The most of n_new tokens that seq (unknown: empty) could allocate within avail blocks, in
 * [0, n_new]. */
RG_TEST_API int rg_kv_fit(const rg_kv *kv, uint64_t seq, int n_new, int avail);

/* Attach n >= 0 cached full blocks (blocks: (n) ids in use, found by rg_prefix_cache_lookup
 * and still cached, nothing having run in between) to seq, which must be unknown (it is then
 * created) or end on a block boundary: they are shared (refcount + 1), seq's tokens grow by
 * n * block_size, and the cache makes them most recently used (rg_prefix_cache_attach; without
 * a cache, rg_kv_seq_share_blocks). This is vLLM's allocate_slots' new_computed_blocks, and the
 * n_cached of DESIGN-generation.md's rg_kv_allocate: apart, so that the hits are held (no longer
 * evictable) before the caller measures the room for the rest with rg_kv_fit.
 * RG_ERR_INVALID_INPUT (unaligned seq, a free or out-of-range block), RG_ERR_OOM. */
RG_TEST_API rg_status rg_kv_attach(rg_kv *kv, uint64_t seq, const int32_t *blocks, int n);

/* Allocate the slots of n_new >= 1 new tokens of seq (unknown: created empty), evicting
 * unreferenced cached blocks when the free list is short. slots (n_new, may be NULL) receives
 * the KV slot (block * block_size + offset) of each new token, in position order. When seq's
 * last block is shared and partially filled it is replaced first: *copy gets the (src, dst)
 * block pair the caller must copy before the step and *n_copy = 1, else *n_copy = 0 (copy and
 * n_copy may be NULL only when seq shares nothing). RG_ERR_BUSY when the pool (free + evictable)
 * cannot supply the blocks: nothing changes, the caller preempts; RG_ERR_INVALID_INPUT (n_new <
 * 1, a needed copy with no place to report it); RG_ERR_OOM. */
RG_TEST_API rg_status rg_kv_allocate(rg_kv *kv, uint64_t seq, int n_new, int32_t *slots,
				     rg_kv_copy *copy, int *n_copy);

/* The slots of positions [pos, pos + n) of seq into slots (n). RG_ERR_INVALID_INPUT for an
 * unknown seq or positions outside its tokens. */
RG_TEST_API rg_status rg_kv_slots(const rg_kv *kv, uint64_t seq, int pos, int n, int32_t *slots);

/* Make child (not held) share every block of parent (held) and its cross blocks: refcount + 1
 * on each table block, the same tokens; no pool block is taken (llama.cpp's seq_cp, vLLM's
 * fork). RG_ERR_INVALID_INPUT (unknown parent, child already held, child == parent),
 * RG_ERR_OOM. */
RG_TEST_API rg_status rg_kv_fork(rg_kv *kv, uint64_t parent, uint64_t child);

/* Re-seat a beam group after a beam step (vLLM's per-step beam search; the rule rg_generate
 * and src/sched/iter.c used): members (n) are the group's ids by beam slot, before and after;
 * the sequences held before are those of members that the table holds. parent (n): new beam j
 * continues the table of members[parent[j]] (an index into members, which must be held), or
 * parent[j] = -1: slot j holds no sequence after. For each old member, its last child (the
 * highest j) takes its table over and the others fork it (nothing copied; a shared partially
 * filled last block is copied on the next append); an old member without children is freed.
 * Cross blocks follow the tables. 1 <= n <= RG_KV_MAX_RESEAT. RG_ERR_INVALID_INPUT (n, a
 * repeated member, a parent out of range or not held), RG_ERR_OOM; nothing changes on error. */
RG_TEST_API rg_status rg_kv_reseat(rg_kv *kv, const uint64_t *members, const int32_t *parent,
				   int n);

/* Shrink seq to its first n_tokens positions (rg_kv_seq_truncate: blocks past them go back
 * to the pool, refcount - 1): the rollback of rejected speculative positions. Cross blocks are
 * untouched. RG_ERR_INVALID_INPUT for an unknown seq or n_tokens outside [0, its tokens]. */
RG_TEST_API rg_status rg_kv_truncate(rg_kv *kv, uint64_t seq, int n_tokens);

/* Forget seq: refcount - 1 on each of its blocks (those reaching 0 go back to the pool) and on
 * its cross blocks (back with the last holder). An id the table does not hold is ignored, as
 * free(NULL) is (a waiting request has no table). */
RG_TEST_API void rg_kv_remove(rg_kv *kv, uint64_t seq);

/* Read seq's block table into blocks (cap): its blocks in position order, then 0 up to cap
 * (a row of the step's (n_seq, max_blocks_per_seq) block_tables). Returns the table's block
 * count (> cap: only cap written, as snprintf), -1 for an unknown seq (nothing written). */
RG_TEST_API int rg_kv_table(const rg_kv *kv, uint64_t seq, int32_t *blocks, int cap);

/* Reserve seq's cross blocks: ceil(n_enc_tokens / block_size) blocks for its encoder's
 * n_enc_tokens >= 1 K/V, written at slots block * block_size + offset of rg_kv_cross_table's
 * blocks. seq is created when unknown. RG_ERR_INVALID_INPUT (n_enc_tokens < 1, seq already has
 * cross blocks), RG_ERR_BUSY (the pool, evictable blocks counted, is short: nothing changes),
 * RG_ERR_OOM. */
RG_TEST_API rg_status rg_kv_cross(rg_kv *kv, uint64_t seq, int n_enc_tokens);
/* Read seq's cross table into blocks (cap) as rg_kv_table; *n_enc_tokens (may be NULL) gets
 * the encoder tokens reserved. Returns the cross block count (0: none reserved), -1 for an
 * unknown seq. */
RG_TEST_API int rg_kv_cross_table(const rg_kv *kv, uint64_t seq, int32_t *blocks, int cap,
				  int *n_enc_tokens);
#endif
