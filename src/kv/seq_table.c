/* Block tables by sequence id (seq_table.h): an open-addressing hash table (linear probing,
 * backward-shift deletion, at most half full) of id -> rg_kv_seq over the block pool, and a
 * refcounted cross table per encoder-decoder sequence. */
#include "kv/seq_table.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

/* A sequence's cross blocks, shared by the forks and beams of that sequence. */
typedef struct kv_cross {
	rg_kv_seq t;  /* t.n_tokens = the encoder tokens; its blocks hold one pool reference each */
	int refs;     /* sequences holding it */
} kv_cross;

typedef struct kv_ent {
	uint64_t id;
	bool used;
	rg_kv_seq t;     /* the self-attention block table */
	kv_cross *cross; /* NULL: none */
} kv_ent;

struct rg_kv {
	rg_kv_pool *pool;
	rg_prefix_cache *cache; /* NULL: no eviction */
	int bs;
	kv_ent *ents;           /* (cap) cap a power of two, 0 before the first insert */
	int cap, n;
};

static uint64_t id_hash(uint64_t x)
{
	/* splitmix64's finaliser: ids are often consecutive */
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static int ent_find(const rg_kv *kv, uint64_t id)
{
	if (kv->cap == 0)
		return -1;
	for (size_t i = id_hash(id) & (size_t)(kv->cap - 1);; i = (i + 1) & (size_t)(kv->cap - 1)) {
		if (!kv->ents[i].used)
			return -1;
		if (kv->ents[i].id == id)
			return (int)i;
	}
}

/* Place e (its id not present; room guaranteed) into ents (cap). */
static kv_ent *ent_place(kv_ent *ents, int cap, const kv_ent *e)
{
	size_t i = id_hash(e->id) & (size_t)(cap - 1);

	while (ents[i].used)
		i = (i + 1) & (size_t)(cap - 1);
	ents[i] = *e;
	return &ents[i];
}

/* Make room for n_more inserts (the table stays at most half full). RG_ERR_OOM: unchanged. */
static rg_status ent_reserve(rg_kv *kv, int n_more)
{
	long long want = 2LL * ((long long)kv->n + n_more);
	kv_ent *ne;
	int cap;

	if (want <= kv->cap)
		return RG_OK;
	if (want > INT_MAX / 2)
		return rg_errorf(RG_ERR_OOM, "kv table: %d sequences", kv->n + n_more);
	cap = kv->cap ? kv->cap : 16;
	while (cap < want)
		cap *= 2;
	ne = calloc((size_t)cap, sizeof(*ne));
	if (!ne)
		return rg_errorf(RG_ERR_OOM, "kv table: out of memory for %d entries", cap);
	for (int i = 0; i < kv->cap; i++)
		if (kv->ents[i].used)
			ent_place(ne, cap, &kv->ents[i]);
	free(kv->ents);
	kv->ents = ne;
	kv->cap = cap;
	return RG_OK;
}

/* Insert an empty sequence id (not present; ent_reserve done). */
static kv_ent *ent_insert(rg_kv *kv, uint64_t id)
{
	kv_ent e = {.id = id, .used = true};

	rg_kv_seq_init(&e.t);
	kv->n++;
	return ent_place(kv->ents, kv->cap, &e);
}

/* Take entry i out of the table (its blocks untouched), shifting its probe chain back. */
static void ent_erase(rg_kv *kv, int i)
{
	size_t mask = (size_t)(kv->cap - 1), hole = (size_t)i;

	kv->ents[hole].used = false;
	kv->n--;
	for (size_t j = (hole + 1) & mask; kv->ents[j].used; j = (j + 1) & mask) {
		size_t home = id_hash(kv->ents[j].id) & mask;

		/* move j into the hole unless its home lies cyclically in (hole, j] */
		if (hole <= j ? (home <= hole || home > j) : (home <= hole && home > j)) {
			kv->ents[hole] = kv->ents[j];
			kv->ents[j].used = false;
			hole = j;
		}
	}
}

static void cross_unref(rg_kv_pool *p, kv_cross *c)
{
	if (c && --c->refs == 0) {
		rg_kv_seq_free(p, &c->t);
		free(c);
	}
}

static void ent_release(rg_kv *kv, kv_ent *e)
{
	rg_kv_seq_free(kv->pool, &e->t);
	cross_unref(kv->pool, e->cross);
	e->cross = NULL;
}

rg_status rg_kv_init(rg_kv **out, rg_kv_pool *pool, rg_prefix_cache *cache)
{
	rg_kv *kv;

	*out = NULL;
	if (!pool)
		return rg_errorf(RG_ERR_INVALID_INPUT, "kv table: no pool");
	kv = calloc(1, sizeof(*kv));
	if (!kv)
		return rg_errorf(RG_ERR_OOM, "kv table: out of memory");
	kv->pool = pool;
	kv->cache = cache;
	kv->bs = rg_kv_pool_block_size(pool);
	*out = kv;
	return RG_OK;
}

void rg_kv_free(rg_kv *kv)
{
	if (!kv)
		return;
	for (int i = 0; i < kv->cap; i++)
		if (kv->ents[i].used)
			ent_release(kv, &kv->ents[i]);
	free(kv->ents);
	free(kv);
}

bool rg_kv_has(const rg_kv *kv, uint64_t seq) { return ent_find(kv, seq) >= 0; }
int rg_kv_n_seqs(const rg_kv *kv) { return kv->n; }

static const rg_kv_seq *seq_of(const rg_kv *kv, uint64_t seq)
{
	static const rg_kv_seq empty;
	int i = ent_find(kv, seq);

	return i >= 0 ? &kv->ents[i].t : &empty;
}

int rg_kv_n_tokens(const rg_kv *kv, uint64_t seq) { return seq_of(kv, seq)->n_tokens; }
int rg_kv_n_blocks(const rg_kv *kv, uint64_t seq) { return seq_of(kv, seq)->n_blocks; }

int rg_kv_n_avail(const rg_kv *kv)
{
	return rg_kv_pool_n_free(kv->pool) +
	       (kv->cache ? rg_prefix_cache_n_evictable(kv->cache) : 0);
}

int rg_kv_blocks_needed(const rg_kv *kv, uint64_t seq, int n_new)
{
	return rg_kv_seq_blocks_needed(kv->pool, seq_of(kv, seq), n_new);
}

int rg_kv_fit(const rg_kv *kv, uint64_t seq, int n_new, int avail)
{
	const rg_kv_seq *q = seq_of(kv, seq);
	long long room = (long long)q->n_blocks * kv->bs - q->n_tokens + (long long)avail * kv->bs;
	int fit = room < n_new ? (int)(room > 0 ? room : 0) : n_new;

	/* room overcounts by the copy-on-write block; step down to what really fits */
	while (fit > 0 && rg_kv_seq_blocks_needed(kv->pool, q, fit) > avail)
		fit--;
	return fit;
}

/* Have need blocks on the free list, evicting unreferenced cached blocks; RG_ERR_BUSY (nothing
 * evicted) when free + evictable fall short. */
static rg_status make_room(rg_kv *kv, int need, const char *what)
{
	int n_free = rg_kv_pool_n_free(kv->pool);

	if (need <= n_free)
		return RG_OK;
	if (kv->cache && need <= n_free + rg_prefix_cache_n_evictable(kv->cache)) {
		rg_prefix_cache_evict(kv->cache, need - n_free);
		if (need <= rg_kv_pool_n_free(kv->pool))
			return RG_OK;
	}
	return rg_errorf(RG_ERR_BUSY, "KV cache full: %s needs %d blocks, %d free of %d", what,
			 need, rg_kv_pool_n_free(kv->pool), rg_kv_pool_n_blocks(kv->pool));
}

/* The entry of seq, created empty when absent (*created says so). NULL: RG_ERR_OOM reported. */
static kv_ent *ent_get(rg_kv *kv, uint64_t seq, bool *created)
{
	int i = ent_find(kv, seq);

	*created = i < 0;
	if (i >= 0)
		return &kv->ents[i];
	if (ent_reserve(kv, 1) != RG_OK)
		return NULL;
	return ent_insert(kv, seq);
}

/* Undo ent_get's creation after a failure (the entry is still empty). */
static void ent_drop_created(rg_kv *kv, uint64_t seq, bool created)
{
	if (created)
		ent_erase(kv, ent_find(kv, seq));
}

rg_status rg_kv_attach(rg_kv *kv, uint64_t seq, const int32_t *blocks, int n)
{
	bool created;
	kv_ent *e;
	rg_status st;

	if (n < 0 || (n > 0 && !blocks))
		return rg_errorf(RG_ERR_INVALID_INPUT, "kv attach: %d blocks", n);
	if (!(e = ent_get(kv, seq, &created)))
		return RG_ERR_OOM;
	st = kv->cache ? rg_prefix_cache_attach(kv->cache, &e->t, blocks, n)
		       : rg_kv_seq_share_blocks(kv->pool, &e->t, blocks, n);
	if (st != RG_OK)
		ent_drop_created(kv, seq, created);
	return st;
}

rg_status rg_kv_allocate(rg_kv *kv, uint64_t seq, int n_new, int32_t *slots, rg_kv_copy *copy,
			 int *n_copy)
{
	bool created;
	kv_ent *e;
	rg_status st;

	if (n_copy)
		*n_copy = 0;
	if (n_new < 1)
		return rg_errorf(RG_ERR_INVALID_INPUT, "kv allocate: %d new tokens", n_new);
	if (!(e = ent_get(kv, seq, &created)))
		return RG_ERR_OOM;
	/* the eviction cannot touch e's blocks: they are held, not evictable */
	if ((st = make_room(kv, rg_kv_seq_blocks_needed(kv->pool, &e->t, n_new), "an allocation"))
	    != RG_OK || (st = rg_kv_seq_append(kv->pool, &e->t, n_new, slots, copy, n_copy)) != RG_OK)
		ent_drop_created(kv, seq, created);
	return st;
}

rg_status rg_kv_slots(const rg_kv *kv, uint64_t seq, int pos, int n, int32_t *slots)
{
	int i = ent_find(kv, seq);
	const rg_kv_seq *t;

	if (i < 0)
		return rg_errorf(RG_ERR_INVALID_INPUT, "kv slots: no sequence %llu",
				 (unsigned long long)seq);
	t = &kv->ents[i].t;
	if (pos < 0 || n < 0 || pos > t->n_tokens - n)
		return rg_errorf(RG_ERR_INVALID_INPUT, "kv slots: positions [%d, %d) of %d tokens",
				 pos, pos + n, t->n_tokens);
	for (int k = 0; k < n; k++)
		slots[k] = rg_kv_seq_slot(t, kv->bs, pos + k);
	return RG_OK;
}

rg_status rg_kv_fork(rg_kv *kv, uint64_t parent, uint64_t child)
{
	int ip = ent_find(kv, parent);
	rg_kv_seq t;
	rg_status st;
	kv_ent *c;

	if (ip < 0)
		return rg_errorf(RG_ERR_INVALID_INPUT, "kv fork: no sequence %llu",
				 (unsigned long long)parent);
	if (ent_find(kv, child) >= 0)
		return rg_errorf(RG_ERR_INVALID_INPUT, "kv fork: sequence %llu already held",
				 (unsigned long long)child);
	if ((st = ent_reserve(kv, 1)) != RG_OK)
		return st;
	ip = ent_find(kv, parent); /* the reserve may have moved it */
	if ((st = rg_kv_seq_fork(kv->pool, &kv->ents[ip].t, &t)) != RG_OK)
		return st;
	c = ent_insert(kv, child);
	c->t = t;
	ip = ent_find(kv, parent);
	if ((c->cross = kv->ents[ip].cross))
		c->cross->refs++;
	return RG_OK;
}

rg_status rg_kv_reseat(rg_kv *kv, const uint64_t *members, const int32_t *parent, int n)
{
	kv_ent old[RG_KV_MAX_RESEAT];
	rg_kv_seq fresh[RG_KV_MAX_RESEAT];
	bool held[RG_KV_MAX_RESEAT], forked[RG_KV_MAX_RESEAT];
	int children[RG_KV_MAX_RESEAT] = {0};
	rg_status st;

	if (n < 1 || n > RG_KV_MAX_RESEAT || !members || !parent)
		return rg_errorf(RG_ERR_INVALID_INPUT, "kv reseat: %d members outside [1, %d]", n,
				 RG_KV_MAX_RESEAT);
	for (int j = 0; j < n; j++) {
		for (int m = 0; m < j; m++)
			if (members[m] == members[j])
				return rg_errorf(RG_ERR_INVALID_INPUT, "kv reseat: sequence %llu "
						 "named twice", (unsigned long long)members[j]);
		held[j] = ent_find(kv, members[j]) >= 0;
	}
	for (int j = 0; j < n; j++) {
		if (parent[j] < -1 || parent[j] >= n || (parent[j] >= 0 && !held[parent[j]]))
			return rg_errorf(RG_ERR_INVALID_INPUT, "kv reseat: beam %d continues %d, no "
					 "member held", j, parent[j]);
		if (parent[j] >= 0)
			children[parent[j]]++;
	}
	/* every member may be held after: room for all of them, then the forks (all but the last
	 * child of each parent); both undone on failure */
	if ((st = ent_reserve(kv, n)) != RG_OK)
		return st;
	for (int j = 0; j < n; j++) {
		forked[j] = parent[j] >= 0 && --children[parent[j]] > 0;
		if (!forked[j])
			continue;
		st = rg_kv_seq_fork(kv->pool, &kv->ents[ent_find(kv, members[parent[j]])].t,
				    &fresh[j]);
		if (st != RG_OK) {
			for (int i = 0; i < j; i++)
				if (forked[i])
					rg_kv_seq_free(kv->pool, &fresh[i]);
			return st;
		}
	}
	/* from here on nothing can fail: take the old members out, seat the new ones */
	for (int m = 0; m < n; m++)
		if (held[m]) {
			int i = ent_find(kv, members[m]);

			old[m] = kv->ents[i];
			ent_erase(kv, i);
		}
	for (int j = 0; j < n; j++) {
		kv_ent *e;

		if (parent[j] < 0)
			continue;
		e = ent_insert(kv, members[j]);
		if (forked[j]) {
			e->t = fresh[j];
		} else {
			e->t = old[parent[j]].t;  /* the last child takes the table over */
			rg_kv_seq_init(&old[parent[j]].t);
		}
		if ((e->cross = old[parent[j]].cross))
			e->cross->refs++;
	}
	/* the old holders let go: childless members' blocks go back, in slot order */
	for (int m = 0; m < n; m++)
		if (held[m])
			ent_release(kv, &old[m]);
	return RG_OK;
}

rg_status rg_kv_truncate(rg_kv *kv, uint64_t seq, int n_tokens)
{
	int i = ent_find(kv, seq);

	if (i < 0)
		return rg_errorf(RG_ERR_INVALID_INPUT, "kv truncate: no sequence %llu",
				 (unsigned long long)seq);
	return rg_kv_seq_truncate(kv->pool, &kv->ents[i].t, n_tokens);
}

void rg_kv_remove(rg_kv *kv, uint64_t seq)
{
	int i = ent_find(kv, seq);

	if (i < 0)
		return;
	ent_release(kv, &kv->ents[i]);
	ent_erase(kv, i);
}

static int table_out(const rg_kv_seq *t, int32_t *blocks, int cap)
{
	int n = t->n_blocks < cap ? t->n_blocks : cap;

	if (n > 0)
		memcpy(blocks, t->blocks, (size_t)n * sizeof(int32_t));
	if (cap > n)
		memset(blocks + n, 0, (size_t)(cap - n) * sizeof(int32_t));
	return t->n_blocks;
}

int rg_kv_table(const rg_kv *kv, uint64_t seq, int32_t *blocks, int cap)
{
	int i = ent_find(kv, seq);

	return i < 0 ? -1 : table_out(&kv->ents[i].t, blocks, cap);
}

rg_status rg_kv_cross(rg_kv *kv, uint64_t seq, int n_enc_tokens)
{
	int need = n_enc_tokens >= 1 ? (int)(((long long)n_enc_tokens + kv->bs - 1) / kv->bs) : 0;
	bool created;
	kv_cross *c;
	kv_ent *e;
	rg_status st;

	if (n_enc_tokens < 1)
		return rg_errorf(RG_ERR_INVALID_INPUT, "kv cross: %d encoder tokens", n_enc_tokens);
	if (rg_kv_has(kv, seq) && kv->ents[ent_find(kv, seq)].cross)
		return rg_errorf(RG_ERR_INVALID_INPUT, "kv cross: sequence %llu has cross blocks "
				 "already", (unsigned long long)seq);
	if (!(c = calloc(1, sizeof(*c))))
		return rg_errorf(RG_ERR_OOM, "kv cross: out of memory");
	rg_kv_seq_init(&c->t);
	c->refs = 1;
	if (!(e = ent_get(kv, seq, &created))) {
		st = RG_ERR_OOM;
		goto out_free_cross;
	}
	if ((st = make_room(kv, need, "cross blocks")) != RG_OK ||
	    (st = rg_kv_seq_append(kv->pool, &c->t, n_enc_tokens, NULL, NULL, NULL)) != RG_OK) {
		ent_drop_created(kv, seq, created);
		goto out_free_cross;
	}
	e->cross = c;
	return RG_OK;
out_free_cross:
	free(c);
	return st;
}

int rg_kv_cross_table(const rg_kv *kv, uint64_t seq, int32_t *blocks, int cap, int *n_enc_tokens)
{
	static const rg_kv_seq none;
	int i = ent_find(kv, seq);
	const rg_kv_seq *t;

	if (n_enc_tokens)
		*n_enc_tokens = 0;
	if (i < 0)
		return -1;
	t = kv->ents[i].cross ? &kv->ents[i].cross->t : &none;
	if (n_enc_tokens)
		*n_enc_tokens = t->n_tokens;
	return table_out(t, blocks, cap);
}
