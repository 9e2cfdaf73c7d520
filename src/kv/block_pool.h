/* KV block bookkeeping (PagedAttention, Kwon et al. SOSP'23; vLLM's BlockSpaceManager): the
 * cache is n_blocks blocks of block_size token slots each; slot = block * block_size + offset.
 * This module owns no cache memory and includes no model or CUDA header: it hands out block ids
 * and slots, counts references and says which blocks the runner must copy. The runner's
 * rg_step_batch (include/ragged.h) carries the block tables and slots built here.
 *
 * Sharing: rg_kv_seq_fork makes a child that shares every block of its parent (n samples of one
 * prompt, beam forks): no cache is copied. A block with refcount > 1 is read-only. Appending into
 * a shared, partially filled last block first moves the appender to a fresh block and reports a
 * (src, dst) copy that the runner performs before the step that writes the new slots
 * (copy-on-write). Full shared blocks are never copied: new tokens start a new block.
 *
 * Failure: an append or fork that would need more blocks than are free returns RG_ERR_BUSY, and
 * a host allocation failure RG_ERR_OOM; either way the pool and the sequence are unchanged.
 * Not thread-safe: one owner (the generate loop, the engine's step thread) drives a pool. */
#ifndef RG_KV_BLOCK_POOL_H
#define RG_KV_BLOCK_POOL_H
#include <stdbool.h>
#include <stdint.h>

#include "core/export.h"
#include "ragged.h"

typedef struct rg_kv_pool rg_kv_pool;

/* One sequence's block table. Zero it with rg_kv_seq_init; release it with rg_kv_seq_free. */
typedef struct rg_kv_seq {
	int32_t *blocks; /* (n_blocks) physical block ids in position order, owned by the seq */
	int n_blocks;    /* blocks in the table = ceil(n_tokens / block_size) */
	int cap;         /* allocated entries of blocks */
	int n_tokens;    /* token slots written (the sequence's context length) */
} rg_kv_seq;

/* A block copy the runner must perform (every layer, K and V) before the next step. */
typedef struct rg_kv_copy {
	int32_t src, dst;
} rg_kv_copy;

/* Create a pool of n_blocks blocks of block_size tokens (both >= 1; n_blocks * block_size must
 * fit in int32 slots). Every block starts free. RG_ERR_INVALID_INPUT, RG_ERR_OOM. */
RG_TEST_API rg_status rg_kv_pool_init(rg_kv_pool **out, int n_blocks, int block_size);
/* Free the pool (NULL accepted). Sequences still holding blocks must not be used afterwards. */
RG_TEST_API void rg_kv_pool_free(rg_kv_pool *p);

RG_TEST_API int rg_kv_pool_block_size(const rg_kv_pool *p);
RG_TEST_API int rg_kv_pool_n_blocks(const rg_kv_pool *p);
RG_TEST_API int rg_kv_pool_n_free(const rg_kv_pool *p);  /* blocks on the free list */
RG_TEST_API int rg_kv_pool_n_used(const rg_kv_pool *p);  /* blocks with refcount >= 1 */
/* Reference count of block b (0 when free; -1 for an id outside the pool). */
RG_TEST_API int rg_kv_pool_refcount(const rg_kv_pool *p, int32_t b);
/* Whether n more blocks can be allocated now. */
RG_TEST_API bool rg_kv_pool_can_allocate(const rg_kv_pool *p, int n);

/* Blocks that appending n tokens to s would take from the free list, copy-on-write included. */
RG_TEST_API int rg_kv_seq_blocks_needed(const rg_kv_pool *p, const rg_kv_seq *s, int n);

RG_TEST_API void rg_kv_seq_init(rg_kv_seq *s);

/* Append n >= 0 tokens to s: slots (n) receives the slot of each new token, in order. When the
 * last block is shared and partially filled, it is replaced by a fresh block and *copy gets the
 * (src, dst) pair to copy before the step (*n_copy = 1); otherwise *n_copy = 0. copy and n_copy
 * may be NULL only when the caller knows no copy can occur (the sequence shares nothing).
 * RG_ERR_BUSY when the free blocks do not suffice; RG_ERR_OOM when the table cannot grow;
 * RG_ERR_INVALID_INPUT for n < 0 or a needed copy with no place to report it. On error nothing
 * changes. */
RG_TEST_API rg_status rg_kv_seq_append(rg_kv_pool *p, rg_kv_seq *s, int n, int32_t *slots,
				       rg_kv_copy *copy, int *n_copy);

/* Make child (initialised or freed) share every block of parent: refcount + 1 on each, the same
 * n_tokens. RG_ERR_OOM when the child's table cannot be allocated (child left empty). */
RG_TEST_API rg_status rg_kv_seq_fork(rg_kv_pool *p, const rg_kv_seq *parent, rg_kv_seq *child);

/* Release s: refcount - 1 on each block, blocks reaching 0 go back to the free list; s is
 * emptied (reusable after). Accepts an initialised empty seq. */
RG_TEST_API void rg_kv_seq_free(rg_kv_pool *p, rg_kv_seq *s);

/* Shrink s to its first n_tokens positions (0 <= n_tokens <= s->n_tokens): the blocks past
 * ceil(n_tokens / block_size) are released (refcount - 1; at 0 back to the free list); the slots
 * of the positions dropped from the last kept block are simply reused by the next append. The
 * rollback of rejected speculative tokens (llama.cpp's seq_rm of a position range at the end;
 * vLLM frees the blocks of rejected tokens the same way). RG_ERR_INVALID_INPUT for n_tokens out
 * of range (nothing changes). A kept last block that is shared stays shared: the next append
 * copies it on write, as after a fork. */
RG_TEST_API rg_status rg_kv_seq_truncate(rg_kv_pool *p, rg_kv_seq *s, int n_tokens);

/* Shared-block primitives for the prefix cache (src/kv/prefix_cache.h), which holds its own
 * reference on each cached block. rg_kv_pool_block_ref: refcount + 1 on block b, which must be in
 * use (refcount >= 1). rg_kv_pool_block_unref: refcount - 1; at 0 the block returns to the free
 * list. Both RG_ERR_INVALID_INPUT for an id outside the pool or a free block (nothing changes). */
RG_TEST_API rg_status rg_kv_pool_block_ref(rg_kv_pool *p, int32_t b);
RG_TEST_API rg_status rg_kv_pool_block_unref(rg_kv_pool *p, int32_t b);

/* The prefix cache marks the blocks it holds (on: after it took its reference; off: before it
 * drops it), so that the pool counts, as references come and go, the cached blocks that nobody
 * but the cache holds: rg_kv_pool_n_cached_idle, in O(1), what the scheduler asks for every
 * sequence it sizes (it was a walk of the whole cache each time: 0.15 ms per step at 64 streams
 * with a few hundred cached blocks). No-op for a free block, an id outside the pool or no
 * change. */
RG_TEST_API void rg_kv_pool_set_cached(rg_kv_pool *p, int32_t b, bool on);
RG_TEST_API int rg_kv_pool_n_cached_idle(const rg_kv_pool *p);

/* Append n >= 0 full blocks (blocks: (n) ids in use, e.g. prefix-cache hits) to s, sharing them:
 * refcount + 1 on each, s->n_tokens += n * block_size. s->n_tokens must be a multiple of
 * block_size (the shared blocks start at a block boundary). The blocks are read-only to s while
 * shared: later appends start a new block (no copy). RG_ERR_INVALID_INPUT (unaligned s, a free
 * or out-of-range id), RG_ERR_OOM (the table cannot grow); on error nothing changes. */
RG_TEST_API rg_status rg_kv_seq_share_blocks(rg_kv_pool *p, rg_kv_seq *s, const int32_t *blocks,
					     int n);

/* The slot of position pos (0 <= pos < s->n_tokens) of s. */
static inline int32_t rg_kv_seq_slot(const rg_kv_seq *s, int block_size, int pos)
{
	return s->blocks[pos / block_size] * block_size + pos % block_size;
}
#endif
