/* Response cache: RAM LRU + optional SQLite (WAL) backing store. See cache.h. */
#include "server/cache.h"

#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
	/* SQLite: two connections. `rd` answers RAM misses on the HTTP threads (rd_mu, never
	 * c->mu, held; busy timeout RD_BUSY_MS: a locked database is a miss, not a wait). `wr`
	 * belongs to the writer thread alone, which drains the bounded queue of puts in one
	 * transaction per round and prunes the table to `capacity` rows in the same transaction. */
	char *db_path;
	pthread_mutex_t rd_mu;
	sqlite3 *rd;
	sqlite3_stmt *get_stmt;
	sqlite3 *wr;
	sqlite3_stmt *put_stmt, *count_stmt, *prune_stmt;
	pthread_t writer;
	bool writer_started;
	pthread_mutex_t q_mu;
	pthread_cond_t q_cv;              /* signalled on a push and on stop */
	struct db_item *q_head, *q_tail;
	size_t q_len, q_cap;
	bool stop;                        /* under q_mu: drain what is queued, then exit */
	uint64_t n_dropped;               /* under q_mu */
};

/* One queued write: a copy of the key and the vector. */
typedef struct db_item {
	struct db_item *next;
	uint64_t hash;
	size_t n_ids;
	int32_t *ids;                     /* (n_ids) */
	float vec[];                      /* (dim) */
} db_item;

enum {
	RD_BUSY_MS = 5,      /* a reader waits this long for a lock, then misses */
	WR_BUSY_MS = 1000,   /* the writer waits this long per attempt (retried next round) */
	WR_QUEUE_MAX = 4096, /* queued writes beyond this are dropped (a cache: a future miss) */
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


static const char *DDL =
	"PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
	"CREATE TABLE IF NOT EXISTS rg_embed_cache(model TEXT NOT NULL, h INTEGER NOT NULL,"
	" ids BLOB NOT NULL, vec BLOB NOT NULL, PRIMARY KEY(model, h));";

/* Is this SQLite result the mark of a file that is not (or no longer) a database? */
static bool db_rc_corrupt(int rc)
{
	rc &= 0xff;
	return rc == SQLITE_CORRUPT || rc == SQLITE_NOTADB;
}

/* Open path as a cache database on *db (schema created). *corrupt is set when the file exists
 * but is not a sound SQLite database (garbage, or `PRAGMA quick_check` fails). */
static rg_status db_open_conn(const char *path, int busy_ms, sqlite3 **db, bool *corrupt)
{
	sqlite3_stmt *chk = NULL;
	char *msg = NULL;
	int rc;

	*corrupt = false;
	rc = sqlite3_open_v2(path, db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
			     SQLITE_OPEN_NOMUTEX, NULL);
	if (rc != SQLITE_OK)
		goto out_err;
	sqlite3_busy_timeout(*db, busy_ms);
	rc = sqlite3_exec(*db, DDL, NULL, NULL, &msg);
	if (rc != SQLITE_OK)
		goto out_err;
	/* a database whose header is sound but whose pages are not (a torn copy) passes the DDL;
	 * quick_check reads every page once (milliseconds for a 10,000-entry cache) */
	rc = sqlite3_prepare_v2(*db, "PRAGMA quick_check(1)", -1, &chk, NULL);
	if (rc == SQLITE_OK) {
		rc = sqlite3_step(chk);
		if (rc == SQLITE_ROW) {
			const char *r = (const char *)sqlite3_column_text(chk, 0);

			rc = r && !strcmp(r, "ok") ? SQLITE_OK : SQLITE_CORRUPT;
		}
		sqlite3_finalize(chk);
	}
	if (rc != SQLITE_OK)
		goto out_err;
	return RG_OK;
out_err:
	*corrupt = db_rc_corrupt(rc) || (*db && db_rc_corrupt(sqlite3_extended_errcode(*db)));
	rg_errorf(RG_ERR_IO, "cache db %s: %s", path,
		  msg ? msg : *db ? sqlite3_errmsg(*db) : sqlite3_errstr(rc));
	sqlite3_free(msg);
	sqlite3_close(*db);
	*db = NULL;
	return RG_ERR_IO;
}

/* Move a corrupt database (and its -wal / -shm) aside to "<path>.corrupt-<unix time>" so that a
 * fresh one can be created; the old file is kept for inspection. */
static rg_status db_set_aside(const char *path)
{
	static const char *const sfx[] = {"", "-wal", "-shm"};
	char from[4200], to[4300];
	long long now = (long long)time(NULL);

	for (size_t i = 0; i < sizeof(sfx) / sizeof(sfx[0]); i++) {
		snprintf(from, sizeof(from), "%s%s", path, sfx[i]);
		snprintf(to, sizeof(to), "%s.corrupt-%lld%s", path, now, sfx[i]);
		if (rename(from, to) != 0 && errno != ENOENT)
			return rg_errorf(RG_ERR_IO, "cache db %s: cannot move it aside to %s: %s",
					 path, to, strerror(errno));
	}
	fprintf(stderr, "ragged serve: warning: cache db %s is corrupt (%s); moved it aside to "
		"%s.corrupt-%lld and starting an empty one\n", path, rg_last_error(), path, now);
	return RG_OK;
}

static void *writer_main(void *arg);

static rg_status db_open(rg_cache *c, const char *path)
{
	bool corrupt;
	rg_status s;

	c->db_path = strdup(path);
	if (!c->db_path)
		return rg_errorf(RG_ERR_OOM, "cache: out of memory");
	s = db_open_conn(path, WR_BUSY_MS, &c->wr, &corrupt);
	if (s != RG_OK && corrupt) {
		if ((s = db_set_aside(path)) != RG_OK)
			return s;
		s = db_open_conn(path, WR_BUSY_MS, &c->wr, &corrupt);
	}
	if (s != RG_OK)
		return s;
	if ((s = db_open_conn(path, RD_BUSY_MS, &c->rd, &corrupt)) != RG_OK)
		return s;
	if (sqlite3_prepare_v2(c->rd, "SELECT ids, vec FROM rg_embed_cache WHERE model=? AND h=?",
			       -1, &c->get_stmt, NULL) != SQLITE_OK)
		return rg_errorf(RG_ERR_IO, "cache db %s: %s", path, sqlite3_errmsg(c->rd));
	/* INSERT OR REPLACE deletes then inserts: a refreshed entry gets the next rowid, so rowid
	 * order is least recently written first, which pruning follows */
	if (sqlite3_prepare_v2(c->wr, "INSERT OR REPLACE INTO rg_embed_cache(model, h, ids, vec) "
			       "VALUES(?, ?, ?, ?)", -1, &c->put_stmt, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(c->wr, "SELECT count(*) FROM rg_embed_cache", -1, &c->count_stmt,
			       NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(c->wr, "DELETE FROM rg_embed_cache WHERE rowid IN (SELECT rowid "
			       "FROM rg_embed_cache ORDER BY rowid LIMIT ?)", -1, &c->prune_stmt,
			       NULL) != SQLITE_OK)
		return rg_errorf(RG_ERR_IO, "cache db %s: %s", path, sqlite3_errmsg(c->wr));
	if (pthread_create(&c->writer, NULL, writer_main, c) != 0)
		return rg_errorf(RG_ERR_IO, "cache db %s: cannot start the writer thread", path);
	c->writer_started = true;
	return RG_OK;
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
	pthread_mutex_init(&c->rd_mu, NULL);
	pthread_mutex_init(&c->q_mu, NULL);
	pthread_cond_init(&c->q_cv, NULL);
	c->capacity = capacity;
	c->q_cap = capacity < WR_QUEUE_MAX ? capacity : WR_QUEUE_MAX;
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

static void items_free(db_item *it)
{
	while (it) {
		db_item *next = it->next;

		free(it->ids);
		free(it);
		it = next;
	}
}

void rg_cache_free(rg_cache *c)
{
	cache_entry *e, *next;

	if (!c)
		return;
	if (c->writer_started) { /* the writer commits what is queued, then exits */
		pthread_mutex_lock(&c->q_mu);
		c->stop = true;
		pthread_cond_broadcast(&c->q_cv);
		pthread_mutex_unlock(&c->q_mu);
		pthread_join(c->writer, NULL);
	}
	items_free(c->q_head);
	for (e = c->head; e; e = next) {
		next = e->next;
		free(e->ids);
		free(e);
	}
	sqlite3_finalize(c->get_stmt);
	sqlite3_finalize(c->put_stmt);
	sqlite3_finalize(c->count_stmt);
	sqlite3_finalize(c->prune_stmt);
	sqlite3_close(c->rd);
	sqlite3_close(c->wr);
	free(c->db_path);
	free(c->buckets);
	free(c->tag);
	pthread_cond_destroy(&c->q_cv);
	pthread_mutex_destroy(&c->q_mu);
	pthread_mutex_destroy(&c->rd_mu);
	pthread_mutex_destroy(&c->mu);
	free(c);
}

/* Write one round (the items, then prune to capacity rows) in one transaction on the writer's
 * connection. Returns false when the database stayed locked or failed (the round is lost: a
 * cache only costs future misses). */
static bool writer_round(rg_cache *c, db_item *items)
{
	sqlite3_int64 rows = 0;
	int rc;

	rc = sqlite3_exec(c->wr, "BEGIN IMMEDIATE", NULL, NULL, NULL);
	if (rc != SQLITE_OK)
		return false;
	for (db_item *it = items; it && rc == SQLITE_OK; it = it->next) {
		sqlite3_bind_text(c->put_stmt, 1, c->tag, -1, SQLITE_STATIC);
		sqlite3_bind_int64(c->put_stmt, 2, (sqlite3_int64)it->hash);
		sqlite3_bind_blob(c->put_stmt, 3, it->ids, (int)(it->n_ids * sizeof(int32_t)),
				  SQLITE_STATIC);
		sqlite3_bind_blob(c->put_stmt, 4, it->vec, (int)((size_t)c->dim * sizeof(float)),
				  SQLITE_STATIC);
		rc = sqlite3_step(c->put_stmt) == SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
		sqlite3_reset(c->put_stmt);
		sqlite3_clear_bindings(c->put_stmt);
	}
	if (rc == SQLITE_OK) {
		rc = sqlite3_step(c->count_stmt) == SQLITE_ROW ? SQLITE_OK : SQLITE_ERROR;
		rows = sqlite3_column_int64(c->count_stmt, 0);
		sqlite3_reset(c->count_stmt);
	}
	if (rc == SQLITE_OK && rows > (sqlite3_int64)c->capacity) {
		sqlite3_bind_int64(c->prune_stmt, 1, rows - (sqlite3_int64)c->capacity);
		rc = sqlite3_step(c->prune_stmt) == SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
		sqlite3_reset(c->prune_stmt);
	}
	if (rc == SQLITE_OK && sqlite3_exec(c->wr, "COMMIT", NULL, NULL, NULL) == SQLITE_OK)
		return true;
	sqlite3_exec(c->wr, "ROLLBACK", NULL, NULL, NULL);
	return false;
}

/* The writer thread: take everything queued, write it in one round, repeat; on stop, write
 * what is left and exit. The first round (with no items) prunes a database left larger by an
 * earlier run with a larger --cache-entries. */
static void *writer_main(void *arg)
{
	rg_cache *c = arg;
	bool first = true;

	for (;;) {
		db_item *items;
		bool stop;

		pthread_mutex_lock(&c->q_mu);
		while (!first && !c->q_head && !c->stop)
			pthread_cond_wait(&c->q_cv, &c->q_mu);
		items = c->q_head;
		c->q_head = c->q_tail = NULL;
		c->q_len = 0;
		stop = c->stop;
		pthread_mutex_unlock(&c->q_mu);
		if (items || first)
			writer_round(c, items);
		first = false;
		items_free(items);
		if (stop)
			break;
	}
	return NULL;
}

/* Queue a copy of (ids, vec) for the writer; dropped when the queue is full or out of memory. */
static void db_enqueue(rg_cache *c, uint64_t h, const int32_t *ids, size_t n, const float *vec)
{
	db_item *it;

	it = malloc(sizeof(*it) + (size_t)c->dim * sizeof(float));
	if (!it)
		return;
	it->ids = malloc(n ? n * sizeof(int32_t) : 1);
	if (!it->ids) {
		free(it);
		return;
	}
	memcpy(it->ids, ids, n * sizeof(int32_t));
	memcpy(it->vec, vec, (size_t)c->dim * sizeof(float));
	it->n_ids = n;
	it->hash = h;
	it->next = NULL;
	pthread_mutex_lock(&c->q_mu);
	if (c->q_len >= c->q_cap || c->stop) {
		c->n_dropped++;
		pthread_mutex_unlock(&c->q_mu);
		items_free(it);
		return;
	}
	if (c->q_tail)
		c->q_tail->next = it;
	else
		c->q_head = it;
	c->q_tail = it;
	c->q_len++;
	pthread_cond_signal(&c->q_cv);
	pthread_mutex_unlock(&c->q_mu);
}

/* SQLite lookup on the reader connection. true on a verified hit. */
static bool db_get(rg_cache *c, uint64_t h, const int32_t *ids, size_t n, float *out)
{
	bool hit = false;

	pthread_mutex_lock(&c->rd_mu);
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
	pthread_mutex_unlock(&c->rd_mu);
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
	}
	pthread_mutex_unlock(&c->mu);
	if (hit || !c->rd || !db_get(c, h, ids, n, out))
		return hit;
	pthread_mutex_lock(&c->mu);
	if (!ram_find(c, h, ids, n))
		ram_insert(c, h, ids, n, out);
	pthread_mutex_unlock(&c->mu);
	/* rewritten with a new rowid: the database prunes least recently used first */
	db_enqueue(c, h, ids, n, out);
	return true;
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
	pthread_mutex_unlock(&c->mu);
	if (c->wr)
		db_enqueue(c, h, ids, n, vec);
}

size_t rg_cache_size(rg_cache *c)
{
	size_t n;

	pthread_mutex_lock(&c->mu);
	n = c->size;
	pthread_mutex_unlock(&c->mu);
	return n;
}
