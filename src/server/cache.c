/* Response cache: RAM LRU + optional SQLite (WAL) backing store. See cache.h. */
#include "server/cache.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

typedef struct cache_entry {
	uint64_t hash;
	struct cache_entry *chain;        /* next in the hash bucket */
	struct cache_entry *prev, *next;  /* recency list, head = most recent */
	size_t n_ids;
	int32_t *ids;                     /* (n_ids) */
	float vec[];                      /* (dim) */
} cache_entry;

struct rg_cache {
	pthread_mutex_t mu;
	size_t capacity, size, n_buckets;
	int dim;
	uint64_t tag_hash;
	char *tag;
	cache_entry **buckets;            /* (n_buckets), power of two */
	cache_entry *head, *tail;
	sqlite3 *db;
	sqlite3_stmt *get_stmt, *put_stmt;
};

/* FNV-1a 64 over the tag hash then the ids' bytes. */
static uint64_t fnv1a(uint64_t h, const void *data, size_t n)
{
	const unsigned char *p = data;

	for (size_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

static uint64_t key_hash(const rg_cache *c, const int32_t *ids, size_t n)
{
	return fnv1a(c->tag_hash, ids, n * sizeof(int32_t));
}

static void lru_unlink(rg_cache *c, cache_entry *e)
{
	if (e->prev)
		e->prev->next = e->next;
	else
		c->head = e->next;
	if (e->next)
		e->next->prev = e->prev;
	else
		c->tail = e->prev;
	e->prev = e->next = NULL;
}

static void lru_push_front(rg_cache *c, cache_entry *e)
{
	e->prev = NULL;
	e->next = c->head;
	if (c->head)
		c->head->prev = e;
	c->head = e;
	if (!c->tail)
		c->tail = e;
}

static cache_entry **bucket_of(rg_cache *c, uint64_t h)
{
	return &c->buckets[h & (c->n_buckets - 1)];
}

static cache_entry *ram_find(rg_cache *c, uint64_t h, const int32_t *ids, size_t n)
{
	for (cache_entry *e = *bucket_of(c, h); e; e = e->chain)
		if (e->hash == h && e->n_ids == n && !memcmp(e->ids, ids, n * sizeof(int32_t)))
			return e;
	return NULL;
}

static void ram_remove(rg_cache *c, cache_entry *e)
{
	cache_entry **pp = bucket_of(c, e->hash);

	while (*pp && *pp != e)
		pp = &(*pp)->chain;
	if (*pp)
		*pp = e->chain;
	lru_unlink(c, e);
	free(e->ids);
	free(e);
	c->size--;
}

/* Insert (caller holds the lock; key not present). */
static void ram_insert(rg_cache *c, uint64_t h, const int32_t *ids, size_t n, const float *vec)
{
	cache_entry *e, **b;

	if (c->size >= c->capacity && c->tail)
		ram_remove(c, c->tail);
	e = malloc(sizeof(*e) + (size_t)c->dim * sizeof(float));
	if (!e)
		return;
	e->ids = malloc(n * sizeof(int32_t));
	if (!e->ids) {
		free(e);
		return;
	}
	memcpy(e->ids, ids, n * sizeof(int32_t));
	memcpy(e->vec, vec, (size_t)c->dim * sizeof(float));
	e->n_ids = n;
	e->hash = h;
	b = bucket_of(c, h);
	e->chain = *b;
	*b = e;
	e->prev = e->next = NULL;
	lru_push_front(c, e);
	c->size++;
}

static rg_status db_open(rg_cache *c, const char *path)
{
	static const char *ddl =
		"PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
		"CREATE TABLE IF NOT EXISTS rg_embed_cache(model TEXT NOT NULL, h INTEGER NOT NULL,"
		" ids BLOB NOT NULL, vec BLOB NOT NULL, PRIMARY KEY(model, h));";
	char *msg = NULL;

	if (sqlite3_open_v2(path, &c->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
			    SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK)
		goto out_err;
	sqlite3_busy_timeout(c->db, 2000);
	if (sqlite3_exec(c->db, ddl, NULL, NULL, &msg) != SQLITE_OK)
		goto out_err;
	if (sqlite3_prepare_v2(c->db, "SELECT ids, vec FROM rg_embed_cache WHERE model=? AND h=?",
			       -1, &c->get_stmt, NULL) != SQLITE_OK)
		goto out_err;
	if (sqlite3_prepare_v2(c->db, "INSERT OR REPLACE INTO rg_embed_cache(model, h, ids, vec) "
			       "VALUES(?, ?, ?, ?)", -1, &c->put_stmt, NULL) != SQLITE_OK)
		goto out_err;
	return RG_OK;
out_err:
	rg_errorf(RG_ERR_IO, "cache db %s: %s", path, msg ? msg : sqlite3_errmsg(c->db));
	sqlite3_free(msg);
	return RG_ERR_IO;
}

rg_cache *rg_cache_create(size_t capacity, int dim, const char *model_tag, const char *db_path,
			  rg_status *st)
{
	rg_cache *c;
	rg_status s = RG_OK;

	if (capacity < 1 || dim < 1 || !model_tag) {
		s = rg_errorf(RG_ERR_INVALID_INPUT, "cache: bad capacity %zu or dim %d", capacity,
			      dim);
		goto out;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		s = rg_errorf(RG_ERR_OOM, "cache: out of memory");
		goto out;
	}
	pthread_mutex_init(&c->mu, NULL);
	c->capacity = capacity;
	c->dim = dim;
	c->n_buckets = 16;
	while (c->n_buckets < 2 * capacity)
		c->n_buckets *= 2;
	c->buckets = calloc(c->n_buckets, sizeof(*c->buckets));
	c->tag = strdup(model_tag);
	if (!c->buckets || !c->tag) {
		s = rg_errorf(RG_ERR_OOM, "cache: out of memory");
		goto out_free;
	}
	c->tag_hash = fnv1a(0xcbf29ce484222325ULL, model_tag, strlen(model_tag));
	if (db_path && (s = db_open(c, db_path)) != RG_OK)
		goto out_free;
	if (st)
		*st = RG_OK;
	return c;
out_free:
	rg_cache_free(c);
out:
	if (st)
		*st = s;
	return NULL;
}

void rg_cache_free(rg_cache *c)
{
	cache_entry *e, *next;

	if (!c)
		return;
	for (e = c->head; e; e = next) {
		next = e->next;
		free(e->ids);
		free(e);
	}
	sqlite3_finalize(c->get_stmt);
	sqlite3_finalize(c->put_stmt);
	sqlite3_close(c->db);
	free(c->buckets);
	free(c->tag);
	pthread_mutex_destroy(&c->mu);
	free(c);
}

/* SQLite lookup (lock held). true on a verified hit. */
static bool db_get(rg_cache *c, uint64_t h, const int32_t *ids, size_t n, float *out)
{
	bool hit = false;

	sqlite3_reset(c->get_stmt);
	sqlite3_bind_text(c->get_stmt, 1, c->tag, -1, SQLITE_STATIC);
	sqlite3_bind_int64(c->get_stmt, 2, (sqlite3_int64)h);
	if (sqlite3_step(c->get_stmt) == SQLITE_ROW) {
		const void *bids = sqlite3_column_blob(c->get_stmt, 0);
		size_t nb = (size_t)sqlite3_column_bytes(c->get_stmt, 0);
		const void *bvec = sqlite3_column_blob(c->get_stmt, 1);
		size_t nv = (size_t)sqlite3_column_bytes(c->get_stmt, 1);

		if (nb == n * sizeof(int32_t) && bids && !memcmp(bids, ids, nb) && bvec &&
		    nv == (size_t)c->dim * sizeof(float)) {
			memcpy(out, bvec, nv);
			hit = true;
		}
	}
	sqlite3_reset(c->get_stmt);
	return hit;
}

bool rg_cache_get(rg_cache *c, const int32_t *ids, size_t n, float *out)
{
	uint64_t h = key_hash(c, ids, n);
	cache_entry *e;
	bool hit = false;

	pthread_mutex_lock(&c->mu);
	e = ram_find(c, h, ids, n);
	if (e) {
		memcpy(out, e->vec, (size_t)c->dim * sizeof(float));
		lru_unlink(c, e);
		lru_push_front(c, e);
		hit = true;
	} else if (c->db && db_get(c, h, ids, n, out)) {
		ram_insert(c, h, ids, n, out);
		hit = true;
	}
	pthread_mutex_unlock(&c->mu);
	return hit;
}

void rg_cache_put(rg_cache *c, const int32_t *ids, size_t n, const float *vec)
{
	uint64_t h = key_hash(c, ids, n);
	cache_entry *e;

	pthread_mutex_lock(&c->mu);
	e = ram_find(c, h, ids, n);
	if (e) {
		memcpy(e->vec, vec, (size_t)c->dim * sizeof(float));
		lru_unlink(c, e);
		lru_push_front(c, e);
	} else {
		ram_insert(c, h, ids, n, vec);
	}
	if (c->db) {
		sqlite3_reset(c->put_stmt);
		sqlite3_bind_text(c->put_stmt, 1, c->tag, -1, SQLITE_STATIC);
		sqlite3_bind_int64(c->put_stmt, 2, (sqlite3_int64)h);
		sqlite3_bind_blob(c->put_stmt, 3, ids, (int)(n * sizeof(int32_t)), SQLITE_STATIC);
		sqlite3_bind_blob(c->put_stmt, 4, vec, (int)((size_t)c->dim * sizeof(float)),
				  SQLITE_STATIC);
		sqlite3_step(c->put_stmt); /* a failed write only costs a future miss */
		sqlite3_reset(c->put_stmt);
		sqlite3_clear_bindings(c->put_stmt);
	}
	pthread_mutex_unlock(&c->mu);
}

size_t rg_cache_size(rg_cache *c)
{
	size_t n;

	pthread_mutex_lock(&c->mu);
	n = c->size;
	pthread_mutex_unlock(&c->mu);
	return n;
}
