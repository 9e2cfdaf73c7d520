/* Prefix cache: a hash table of cached full blocks with an LRU list (prefix_cache.h). Entries are
 * indexed by block id (a block is cached at most once); buckets chain through next_in_bucket. */
#include "kv/prefix_cache.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

typedef struct pc_entry {
	uint64_t hash, parent;
	int32_t next_in_bucket; /* block id of the next entry in the bucket, -1 last */
	int32_t prev, next;     /* LRU list: prev towards most recent, next towards least */
	bool used;
} pc_entry;

struct rg_prefix_cache {
	rg_kv_pool *pool;
	int n_blocks, bs;
	pc_entry *ent;     /* (n_blocks) by block id */
	int32_t *tokens;   /* (n_blocks, bs) the tokens of each cached block */
	int32_t *buckets;  /* (n_buckets) first block id of each chain, -1 empty */
	uint64_t mask;     /* n_buckets - 1, n_buckets a power of two >= 2 n_blocks */
	int32_t mru, lru;  /* LRU list ends, -1 when empty */
	rg_prefix_cache_stats st;
};

static uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

uint64_t rg_prefix_hash(uint64_t parent, const int32_t *tokens, int n)
{
	uint64_t h = mix64(parent ^ 0x5bd1e9955bd1e995ull);

	for (int i = 0; i < n; i++)
		h = mix64(h ^ ((uint64_t)(uint32_t)tokens[i] + 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1)));
	return mix64(h ^ (uint64_t)n);
}

rg_status rg_prefix_cache_init(rg_prefix_cache **out, rg_kv_pool *pool)
{
	rg_prefix_cache *c;
	size_t nb = 2;

	*out = NULL;
	if (!pool)
		return rg_errorf(RG_ERR_INVALID_INPUT, "prefix cache: no pool");
	c = calloc(1, sizeof(*c));
	if (!c)
		return rg_errorf(RG_ERR_OOM, "prefix cache: out of memory");
	c->pool = pool;
	c->n_blocks = rg_kv_pool_n_blocks(pool);
	c->bs = rg_kv_pool_block_size(pool);
	while (nb < 2 * (size_t)c->n_blocks)
		nb *= 2;
	c->mask = nb - 1;
	c->ent = calloc((size_t)c->n_blocks, sizeof(pc_entry));
	c->tokens = malloc((size_t)c->n_blocks * c->bs * sizeof(int32_t));
	c->buckets = malloc(nb * sizeof(int32_t));
	if (!c->ent || !c->tokens || !c->buckets) {
		free(c->ent);
		free(c->tokens);
		free(c->buckets);
		free(c);
		return rg_errorf(RG_ERR_OOM, "prefix cache: out of memory for %d blocks",
				 rg_kv_pool_n_blocks(pool));
	}
	for (size_t i = 0; i < nb; i++)
		c->buckets[i] = -1;
	c->mru = c->lru = -1;
	*out = c;
	return RG_OK;
}

static void lru_unlink(rg_prefix_cache *c, int32_t b)
{
	pc_entry *e = &c->ent[b];

	if (e->prev >= 0)
		c->ent[e->prev].next = e->next;
	else
		c->mru = e->next;
	if (e->next >= 0)
		c->ent[e->next].prev = e->prev;
	else
		c->lru = e->prev;
	e->prev = e->next = -1;
}

static void lru_push_front(rg_prefix_cache *c, int32_t b)
{
	pc_entry *e = &c->ent[b];

	e->prev = -1;
	e->next = c->mru;
	if (c->mru >= 0)
		c->ent[c->mru].prev = b;
	c->mru = b;
	if (c->lru < 0)
		c->lru = b;
}

/* Put b right after a (less recently used than a) in the LRU list. */
static void lru_insert_after(rg_prefix_cache *c, int32_t a, int32_t b)
{
	pc_entry *e = &c->ent[b];

	e->prev = a;
	e->next = c->ent[a].next;
	if (e->next >= 0)
		c->ent[e->next].prev = b;
	else
		c->lru = b;
	c->ent[a].next = b;
}

/* Remove entry b from its bucket, the LRU list and the pool (drop the cache's reference). */
static void entry_remove(rg_prefix_cache *c, int32_t b)
{
	pc_entry *e = &c->ent[b];
	int32_t *link = &c->buckets[e->hash & c->mask];

	while (*link != b)
		link = &c->ent[*link].next_in_bucket;
	*link = e->next_in_bucket;
	lru_unlink(c, b);
	e->used = false;
	c->st.n_cached--;
	rg_kv_pool_set_cached(c->pool, b, false);
	rg_kv_pool_block_unref(c->pool, b);
}

void rg_prefix_cache_free(rg_prefix_cache *c)
{
	if (!c)
		return;
	while (c->mru >= 0)
		entry_remove(c, c->mru);
	free(c->ent);
	free(c->tokens);
	free(c->buckets);
	free(c);
}

/* The cached block with this (hash, parent, tokens), or -1. */
static int32_t find(const rg_prefix_cache *c, uint64_t hash, uint64_t parent, const int32_t *toks)
{
	for (int32_t b = c->buckets[hash & c->mask]; b >= 0; b = c->ent[b].next_in_bucket) {
		const pc_entry *e = &c->ent[b];

		if (e->hash == hash && e->parent == parent &&
		    !memcmp(c->tokens + (size_t)b * c->bs, toks, (size_t)c->bs * sizeof(int32_t)))
			return b;
	}
	return -1;
}

int rg_prefix_cache_lookup(const rg_prefix_cache *c, const int32_t *tokens, int n_tokens,
			   int max_blocks, int32_t *blocks, uint64_t *hashes)
{
	uint64_t parent = RG_PREFIX_ROOT;
	int n = n_tokens / c->bs, k;

	if (n > max_blocks)
		n = max_blocks;
	for (k = 0; k < n; k++) {
		const int32_t *t = tokens + (size_t)k * c->bs;
		uint64_t h = rg_prefix_hash(parent, t, c->bs);
		int32_t b = find(c, h, parent, t);

		if (b < 0)
			break;
		blocks[k] = b;
		if (hashes)
			hashes[k] = h;
		parent = h;
	}
	return k;
}

rg_status rg_prefix_cache_attach(rg_prefix_cache *c, rg_kv_seq *s, const int32_t *blocks, int n)
{
	rg_status st;

	for (int i = 0; i < n; i++)
		if (blocks[i] < 0 || blocks[i] >= c->n_blocks || !c->ent[blocks[i]].used)
			return rg_errorf(RG_ERR_INVALID_INPUT, "prefix attach: block %d not cached",
					 (int)blocks[i]);
	if ((st = rg_kv_seq_share_blocks(c->pool, s, blocks, n)) != RG_OK)
		return st;
	/* tail first, so the head of the prefix ends most recent and is evicted last */
	for (int i = n - 1; i >= 0; i--) {
		lru_unlink(c, blocks[i]);
		lru_push_front(c, blocks[i]);
	}
	return RG_OK;
}

void rg_prefix_cache_record(rg_prefix_cache *c, int query, int hit)
{
	c->st.query_blocks += query;
	c->st.hit_blocks += hit;
}

rg_status rg_prefix_cache_insert(rg_prefix_cache *c, uint64_t parent, const int32_t *tokens,
				 int32_t block, uint64_t *hash)
{
	uint64_t h = rg_prefix_hash(parent, tokens, c->bs);
	pc_entry *e;
	int32_t p;

	if (hash)
		*hash = h;
	if (rg_kv_pool_refcount(c->pool, block) < 1)
		return rg_errorf(RG_ERR_INVALID_INPUT, "prefix insert: block %d is not in use",
				 (int)block);
	if (c->ent[block].used || find(c, h, parent, tokens) >= 0)
		return RG_OK;
	rg_kv_pool_block_ref(c->pool, block);
	rg_kv_pool_set_cached(c->pool, block, true);
	e = &c->ent[block];
	e->hash = h;
	e->parent = parent;
	e->used = true;
	memcpy(c->tokens + (size_t)block * c->bs, tokens, (size_t)c->bs * sizeof(int32_t));
	e->next_in_bucket = c->buckets[h & c->mask];
	c->buckets[h & c->mask] = block;
	/* just behind its parent block when that is cached: a prefix is evicted from its tail */
	for (p = c->buckets[parent & c->mask]; p >= 0; p = c->ent[p].next_in_bucket)
		if (c->ent[p].hash == parent)
			break;
	if (p >= 0 && p != block)
		lru_insert_after(c, p, block);
	else
		lru_push_front(c, block);
	c->st.n_cached++;
	c->st.inserted++;
	return RG_OK;
}

int rg_prefix_cache_evict(rg_prefix_cache *c, int n)
{
	int done = 0;
	int32_t b = c->lru;

	while (b >= 0 && done < n) {
		int32_t prev = c->ent[b].prev;

		if (rg_kv_pool_refcount(c->pool, b) == 1) {
			entry_remove(c, b);
			done++;
		}
		b = prev;
	}
	c->st.evicted += done;
	return done;
}

int rg_prefix_cache_n_evictable(const rg_prefix_cache *c)
{
	return rg_kv_pool_n_cached_idle(c->pool);
}

bool rg_prefix_cache_contains(const rg_prefix_cache *c, int32_t b)
{
	return b >= 0 && b < c->n_blocks && c->ent[b].used;
}

void rg_prefix_cache_stats_get(const rg_prefix_cache *c, rg_prefix_cache_stats *out)
{
	*out = c->st;
}
