/* KV block pool: a LIFO free list of block ids and a reference count per block (block_pool.h). */
#include "kv/block_pool.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

struct rg_kv_pool {
	int n_blocks;
	int block_size;
	int32_t *refcount; /* (n_blocks) */
	int32_t *free_ids; /* (n_blocks) stack of free block ids, top at n_free - 1 */
	int n_free;
	bool *cached;      /* (n_blocks) held by the prefix cache (rg_kv_pool_set_cached) */
	int n_cached_idle; /* cached blocks that only the cache holds (refcount 1): evictable */
};

rg_status rg_kv_pool_init(rg_kv_pool **out, int n_blocks, int block_size)
{
	rg_kv_pool *p;

	*out = NULL;
	if (n_blocks < 1 || block_size < 1 || (long long)n_blocks * block_size > INT32_MAX)
		return rg_errorf(RG_ERR_INVALID_INPUT, "kv pool: %d blocks of %d tokens out of range",
				 n_blocks, block_size);
	p = calloc(1, sizeof(*p));
	if (!p)
		return rg_errorf(RG_ERR_OOM, "kv pool: out of memory");
	p->refcount = calloc((size_t)n_blocks, sizeof(int32_t));
	p->free_ids = malloc((size_t)n_blocks * sizeof(int32_t));
	p->cached = calloc((size_t)n_blocks, sizeof(bool));
	if (!p->refcount || !p->free_ids || !p->cached) {
		rg_kv_pool_free(p);
		return rg_errorf(RG_ERR_OOM, "kv pool: out of memory for %d blocks", n_blocks);
	}
	p->n_blocks = n_blocks;
	p->block_size = block_size;
	/* block 0 on top: a fresh pool hands out 0, 1, 2... */
	for (int i = 0; i < n_blocks; i++)
		p->free_ids[i] = n_blocks - 1 - i;
	p->n_free = n_blocks;
	*out = p;
	return RG_OK;
}

void rg_kv_pool_free(rg_kv_pool *p)
{
	if (!p)
		return;
	free(p->refcount);
	free(p->free_ids);
	free(p->cached);
	free(p);
}

int rg_kv_pool_block_size(const rg_kv_pool *p) { return p->block_size; }
int rg_kv_pool_n_blocks(const rg_kv_pool *p) { return p->n_blocks; }
int rg_kv_pool_n_free(const rg_kv_pool *p) { return p->n_free; }
int rg_kv_pool_n_used(const rg_kv_pool *p) { return p->n_blocks - p->n_free; }
bool rg_kv_pool_can_allocate(const rg_kv_pool *p, int n) { return n <= p->n_free; }

int rg_kv_pool_refcount(const rg_kv_pool *p, int32_t b)
{
	return b < 0 || b >= p->n_blocks ? -1 : p->refcount[b];
}

static int32_t pool_take(rg_kv_pool *p)
{
	int32_t b = p->free_ids[--p->n_free];

	p->refcount[b] = 1;
	return b;
}

/* refcount + 1 on a block in use (a cached block that only the cache held stops being idle) */
static void pool_ref(rg_kv_pool *p, int32_t b)
{
	if (p->cached[b] && p->refcount[b] == 1)
		p->n_cached_idle--;
	p->refcount[b]++;
}

static void pool_unref(rg_kv_pool *p, int32_t b)
{
	if (--p->refcount[b] == 0)
		p->free_ids[p->n_free++] = b; /* (a cached block never gets here: the cache holds it) */
	else if (p->refcount[b] == 1 && p->cached[b])
		p->n_cached_idle++;
}

void rg_kv_pool_set_cached(rg_kv_pool *p, int32_t b, bool on)
{
	if (b < 0 || b >= p->n_blocks || p->refcount[b] < 1 || p->cached[b] == on)
		return;
	p->cached[b] = on;
	if (p->refcount[b] == 1)
		p->n_cached_idle += on ? 1 : -1;
}

int rg_kv_pool_n_cached_idle(const rg_kv_pool *p) { return p->n_cached_idle; }

void rg_kv_seq_init(rg_kv_seq *s) { memset(s, 0, sizeof(*s)); }

/* Whether appending to s writes into its shared, partially filled last block first. */
static bool needs_cow(const rg_kv_pool *p, const rg_kv_seq *s, int n)
{
	return n > 0 && s->n_tokens % p->block_size != 0 &&
	       p->refcount[s->blocks[s->n_blocks - 1]] > 1;
}

int rg_kv_seq_blocks_needed(const rg_kv_pool *p, const rg_kv_seq *s, int n)
{
	long long total = (long long)s->n_tokens + (n > 0 ? n : 0);
	long long want = (total + p->block_size - 1) / p->block_size;
	long long need = want - s->n_blocks + (needs_cow(p, s, n) ? 1 : 0);

	return need > INT_MAX ? INT_MAX : (int)need;
}

rg_status rg_kv_seq_append(rg_kv_pool *p, rg_kv_seq *s, int n, int32_t *slots, rg_kv_copy *copy,
			   int *n_copy)
{
	int bs = p->block_size;
	int need, new_blocks;
	bool cow;

	if (n_copy)
		*n_copy = 0;
	if (n < 0 || (long long)s->n_tokens + n > INT32_MAX)
		return rg_errorf(RG_ERR_INVALID_INPUT, "kv append: %d tokens out of range", n);
	if (n == 0)
		return RG_OK;
	cow = needs_cow(p, s, n);
	if (cow && (!copy || !n_copy))
		return rg_errorf(RG_ERR_INVALID_INPUT, "kv append: copy-on-write with no copy output");
	need = rg_kv_seq_blocks_needed(p, s, n);
	if (need > p->n_free)
		return rg_errorf(RG_ERR_BUSY, "KV cache full: %d blocks needed, %d free of %d", need,
				 p->n_free, p->n_blocks);
	new_blocks = (s->n_tokens + n + bs - 1) / bs;
	if (new_blocks > s->cap) {
		int cap = s->cap ? s->cap : 4;
		int32_t *nb;

		while (cap < new_blocks)
			cap = cap > INT_MAX / 2 ? new_blocks : cap * 2;
		nb = realloc(s->blocks, (size_t)cap * sizeof(int32_t));
		if (!nb)
			return rg_errorf(RG_ERR_OOM, "kv append: out of memory for a %d-block table",
					 cap);
		s->blocks = nb;
		s->cap = cap;
	}
	/* from here on nothing can fail */
	if (cow) {
		int32_t old = s->blocks[s->n_blocks - 1];
		int32_t b = pool_take(p);

		pool_unref(p, old); /* shared: never reaches 0 here */
		s->blocks[s->n_blocks - 1] = b;
		copy->src = old;
		copy->dst = b;
		*n_copy = 1;
	}
	while (s->n_blocks < new_blocks)
		s->blocks[s->n_blocks++] = pool_take(p);
	for (int i = 0; i < n; i++) {
		int pos = s->n_tokens + i;

		if (slots)
			slots[i] = s->blocks[pos / bs] * bs + pos % bs;
	}
	s->n_tokens += n;
	return RG_OK;
}

rg_status rg_kv_seq_truncate(rg_kv_pool *p, rg_kv_seq *s, int n_tokens)
{
	int keep;

	if (n_tokens < 0 || n_tokens > s->n_tokens)
		return rg_errorf(RG_ERR_INVALID_INPUT, "kv truncate: %d tokens of %d", n_tokens,
				 s->n_tokens);
	keep = (n_tokens + p->block_size - 1) / p->block_size;
	while (s->n_blocks > keep)
		pool_unref(p, s->blocks[--s->n_blocks]);
	s->n_tokens = n_tokens;
	return RG_OK;
}

rg_status rg_kv_seq_fork(rg_kv_pool *p, const rg_kv_seq *parent, rg_kv_seq *child)
{
	rg_kv_seq_init(child);
	if (parent->n_blocks > 0) {
		child->blocks = malloc((size_t)parent->n_blocks * sizeof(int32_t));
		if (!child->blocks)
			return rg_errorf(RG_ERR_OOM, "kv fork: out of memory");
		memcpy(child->blocks, parent->blocks, (size_t)parent->n_blocks * sizeof(int32_t));
		child->cap = parent->n_blocks;
	}
	child->n_blocks = parent->n_blocks;
	child->n_tokens = parent->n_tokens;
	for (int i = 0; i < parent->n_blocks; i++)
		pool_ref(p, parent->blocks[i]);
	return RG_OK;
}

void rg_kv_seq_free(rg_kv_pool *p, rg_kv_seq *s)
{
	for (int i = 0; i < s->n_blocks; i++)
		pool_unref(p, s->blocks[i]);
	free(s->blocks);
	rg_kv_seq_init(s);
}

rg_status rg_kv_pool_block_ref(rg_kv_pool *p, int32_t b)
{
	if (b < 0 || b >= p->n_blocks || p->refcount[b] < 1)
		return rg_errorf(RG_ERR_INVALID_INPUT, "kv ref: block %d is not in use", (int)b);
	pool_ref(p, b);
	return RG_OK;
}

rg_status rg_kv_pool_block_unref(rg_kv_pool *p, int32_t b)
{
	if (b < 0 || b >= p->n_blocks || p->refcount[b] < 1)
		return rg_errorf(RG_ERR_INVALID_INPUT, "kv unref: block %d is not in use", (int)b);
	pool_unref(p, b);
	return RG_OK;
}

rg_status rg_kv_seq_share_blocks(rg_kv_pool *p, rg_kv_seq *s, const int32_t *blocks, int n)
{
	int want;

	if (n < 0 || s->n_tokens % p->block_size != 0 ||
	    (long long)s->n_tokens + (long long)n * p->block_size > INT32_MAX)
		return rg_errorf(RG_ERR_INVALID_INPUT, "kv share: %d blocks onto %d tokens", n,
				 s->n_tokens);
	for (int i = 0; i < n; i++)
		if (blocks[i] < 0 || blocks[i] >= p->n_blocks || p->refcount[blocks[i]] < 1)
			return rg_errorf(RG_ERR_INVALID_INPUT, "kv share: block %d is not in use",
					 (int)blocks[i]);
	want = s->n_blocks + n;
	if (want > s->cap) {
		int cap = s->cap ? s->cap : 4;
		int32_t *nb;

		while (cap < want)
			cap = cap > INT_MAX / 2 ? want : cap * 2;
		nb = realloc(s->blocks, (size_t)cap * sizeof(int32_t));
		if (!nb)
			return rg_errorf(RG_ERR_OOM, "kv share: out of memory for a %d-block table",
					 cap);
		s->blocks = nb;
		s->cap = cap;
	}
	for (int i = 0; i < n; i++) {
		pool_ref(p, blocks[i]);
		s->blocks[s->n_blocks++] = blocks[i];
	}
	s->n_tokens += n * p->block_size;
	return RG_OK;
}
