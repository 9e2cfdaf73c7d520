/* Prefix caching over the KV block pool (vLLM's automatic prefix caching, Kwon et al. SOSP'23
 * and vLLM's block hashing; SGLang's RadixAttention shares the idea): a FULL block of KV is
 * keyed by a chained hash of its block_size tokens and of every token before it,
 *     h_0 = hash(RG_PREFIX_ROOT, tokens[0 .. bs)),  h_i = hash(h_{i-1}, tokens[i*bs .. (i+1)*bs)),
 * so two sequences with equal first k*bs tokens have equal first k hashes whatever follows. A new
 * request looks its prompt up block by block and shares the blocks found (refcount), skipping
 * their computation. Entries also keep their parent hash and tokens and a lookup compares both,
 * so a 64-bit collision of the chained hash alone cannot alias two different blocks (two chains
 * would have to collide on the parent hash too).
 *
 * Ownership: the cache holds one reference of its own on every cached block (rg_kv_pool_block_ref),
 * so a cached block outlives the sequences that computed it. A cached block whose only reference
 * is the cache's (pool refcount 1) is unreferenced: it can be evicted, least recently used first
 * (a lookup hit makes its blocks most recent, the head of the prefix last; an insert puts the
 * new block just behind its parent when that is cached, else first: among the blocks of one
 * prefix the later blocks are older, so a prefix is evicted from its tail, as vLLM does). A block in use by a sequence
 * (refcount > 1) is never evicted. The pool must outlive the cache; one owner drives both (not
 * thread-safe). No CUDA, no model: block ids only. */
#ifndef RG_KV_PREFIX_CACHE_H
#define RG_KV_PREFIX_CACHE_H
#include <stdbool.h>
#include <stdint.h>

#include "core/export.h"
#include "kv/block_pool.h"
#include "ragged.h"

#define RG_PREFIX_ROOT 0x9e3779b97f4a7c15ull /* the parent hash of a sequence's first block */

typedef struct rg_prefix_cache rg_prefix_cache;

typedef struct rg_prefix_cache_stats {
	long long query_blocks; /* full prompt blocks looked up by admitted requests */
	long long hit_blocks;   /* of those, found in the cache (hit rate = hit / query) */
	long long inserted;     /* blocks registered */
	long long evicted;      /* blocks evicted (LRU) */
	int n_cached;           /* blocks in the cache now */
} rg_prefix_cache_stats;

/* The chained hash of one block: n tokens after a prefix whose last block hashed to parent
 * (RG_PREFIX_ROOT for the first block). Deterministic across runs and machines. */
RG_TEST_API uint64_t rg_prefix_hash(uint64_t parent, const int32_t *tokens, int n);

/* Make a cache over pool (borrowed; holds at most one entry per pool block).
 * RG_ERR_INVALID_INPUT (NULL pool), RG_ERR_OOM. */
RG_TEST_API rg_status rg_prefix_cache_init(rg_prefix_cache **out, rg_kv_pool *pool);
/* Drop every entry and the cache's references (blocks no sequence holds return to the free
 * list), then free the cache. NULL accepted. */
RG_TEST_API void rg_prefix_cache_free(rg_prefix_cache *c);

/* Look up the leading full blocks of tokens (n_tokens ids): at most max_blocks and at most
 * n_tokens / block_size. blocks (max_blocks) receives the cached block of each hit, hashes
 * (max_blocks, may be NULL) their chained hashes. Returns the number of leading hits (stops at
 * the first miss). Pure: no reference taken, no LRU or counter change (rg_prefix_cache_attach
 * does that once the caller admits the request). */
RG_TEST_API int rg_prefix_cache_lookup(const rg_prefix_cache *c, const int32_t *tokens,
				       int n_tokens, int max_blocks, int32_t *blocks,
				       uint64_t *hashes);

/* Share n blocks found by rg_prefix_cache_lookup (still cached: nothing ran in between) onto the
 * empty or block-aligned sequence s (rg_kv_seq_share_blocks) and make them most recently used.
 * Errors as rg_kv_seq_share_blocks; on error nothing changes. */
RG_TEST_API rg_status rg_prefix_cache_attach(rg_prefix_cache *c, rg_kv_seq *s,
					     const int32_t *blocks, int n);

/* Count an admitted request's lookup in the hit-rate counters: query full blocks asked, hit of
 * them found. */
RG_TEST_API void rg_prefix_cache_record(rg_prefix_cache *c, int query, int hit);

/* Register block (in use, its block_size tokens fully computed) as the block after a prefix
 * whose last block hashed to parent; *hash (may be NULL) receives its chained hash. If an equal
 * block is already cached (same parent and tokens), or this block is already cached, nothing is
 * added and RG_OK is returned. Otherwise the cache takes a reference on block.
 * RG_ERR_INVALID_INPUT for a free or out-of-range block. */
RG_TEST_API rg_status rg_prefix_cache_insert(rg_prefix_cache *c, uint64_t parent,
					     const int32_t *tokens, int32_t block, uint64_t *hash);

/* Evict up to n unreferenced cached blocks (pool refcount 1), least recently used first; their
 * blocks go back to the free list. Returns the number evicted. O(cached blocks) per call. */
RG_TEST_API int rg_prefix_cache_evict(rg_prefix_cache *c, int n);

/* Cached blocks that rg_prefix_cache_evict could free now (the pool's count, O(1)). */
RG_TEST_API int rg_prefix_cache_n_evictable(const rg_prefix_cache *c);

/* Whether block b is cached. */
RG_TEST_API bool rg_prefix_cache_contains(const rg_prefix_cache *c, int32_t b);

RG_TEST_API void rg_prefix_cache_stats_get(const rg_prefix_cache *c, rg_prefix_cache_stats *out);
#endif
