/* SQLite persistence of the batch cost table (TurboTransformers, PPoPP'21, sec. 6.3: the cost
 * table measured at warm-up). See cost_store.h. */
#include "server/cost_store.h"

#include <math.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/vec.h"

static bool key_ok(const rg_cost_key *k)
{
	return k && k->model_id && k->model_id[0] && k->device && k->device[0] && k->dtype &&
	       k->dtype[0] && k->mode && k->mode[0];
}

static const char *SQL_CREATE =
	"CREATE TABLE IF NOT EXISTS rg_cost (model_id TEXT NOT NULL, device TEXT NOT NULL, "
	"dtype TEXT NOT NULL, mode TEXT NOT NULL, len INTEGER NOT NULL, batch INTEGER NOT NULL, "
	"ms REAL NOT NULL, PRIMARY KEY (model_id, device, dtype, mode, len, batch))";

static void bind_key(sqlite3_stmt *stmt, const rg_cost_key *k)
{
	sqlite3_bind_text(stmt, 1, k->model_id, -1, SQLITE_STATIC);
	sqlite3_bind_text(stmt, 2, k->device, -1, SQLITE_STATIC);
	sqlite3_bind_text(stmt, 3, k->dtype, -1, SQLITE_STATIC);
	sqlite3_bind_text(stmt, 4, k->mode, -1, SQLITE_STATIC);
}

rg_status rg_cost_store_save(const rg_cost_table *t, const char *db_path, const rg_cost_key *key)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *del = NULL, *ins = NULL;
	rg_status st = RG_OK;
	bool in_tx = false;

	if (!t || !db_path || !key_ok(key))
		return rg_errorf(RG_ERR_INVALID_INPUT, "cost table save: NULL table, path or key");
	if (!rg_cost_table_complete(t))
		return rg_errorf(RG_ERR_INVALID_INPUT, "cost table save: table not fully measured");
	if (sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) !=
	    SQLITE_OK) {
		st = rg_errorf(RG_ERR_IO, "cost table save: cannot open %s: %s", db_path,
			       db ? sqlite3_errmsg(db) : "out of memory");
		goto out_close;
	}
	/* the engine's worker saves between requests: a lock held elsewhere may delay them this
	 * long at most (the cells are stored already, rg_cost_store_put_cell) */
	sqlite3_busy_timeout(db, 1000);
	if (sqlite3_exec(db, SQL_CREATE, NULL, NULL, NULL) != SQLITE_OK ||
	    sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
		goto out_sqlerr;
	in_tx = true;
	if (sqlite3_prepare_v2(db, "DELETE FROM rg_cost WHERE model_id=?1 AND device=?2 AND "
			       "dtype=?3 AND mode=?4", -1, &del, NULL) != SQLITE_OK)
		goto out_sqlerr;
	bind_key(del, key);
	if (sqlite3_step(del) != SQLITE_DONE)
		goto out_sqlerr;
	if (sqlite3_prepare_v2(db, "INSERT INTO rg_cost VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)", -1,
			       &ins, NULL) != SQLITE_OK)
		goto out_sqlerr;
	for (int li = 0; li < rg_cost_table_n_lens(t); li++) {
		for (int bi = 0; bi < rg_cost_table_n_batches(t); bi++) {
			sqlite3_reset(ins);
			bind_key(ins, key);
			sqlite3_bind_int(ins, 5, rg_cost_table_len_at(t, li));
			sqlite3_bind_int(ins, 6, rg_cost_table_batch_at(t, bi));
			sqlite3_bind_double(ins, 7, rg_cost_table_cell(t, li, bi));
			if (sqlite3_step(ins) != SQLITE_DONE)
				goto out_sqlerr;
		}
	}
	if (sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
		goto out_sqlerr;
	in_tx = false;
	goto out_close;

out_sqlerr:
	st = rg_errorf(RG_ERR_IO, "cost table save: %s: %s", db_path, sqlite3_errmsg(db));
	if (in_tx)
		sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
out_close:
	sqlite3_finalize(del);
	sqlite3_finalize(ins);
	sqlite3_close(db);
	return st;
}

static int cmp_int(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;
	return (x > y) - (x < y);
}

/* Sort and deduplicate v[n] in place; returns the new count. */
static int uniq(int *v, int n)
{
	int m = 0;
	qsort(v, (size_t)n, sizeof(int), cmp_int);
	for (int i = 0; i < n; i++)
		if (m == 0 || v[i] != v[m - 1])
			v[m++] = v[i];
	return m;
}

static int find_int(const int *v, int n, int x)
{
	const int *p = bsearch(&x, v, (size_t)n, sizeof(int), cmp_int);
	return p ? (int)(p - v) : -1;
}

rg_cost_table *rg_cost_store_load(const char *db_path, const rg_cost_key *key, rg_status *st)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *sel = NULL;
	rg_cost_table *t = NULL;
	rg_status s = RG_OK;
	int *rl = NULL, *rb = NULL, *lens = NULL, *batches = NULL;
	double *rms = NULL;
	int n = 0;
	size_t cap_l = 0, cap_b = 0, cap_m = 0;

	if (!db_path || !key_ok(key)) {
		s = rg_errorf(RG_ERR_INVALID_INPUT, "cost table load: NULL path or bad key");
		goto out;
	}
	if (sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
		s = rg_errorf(RG_ERR_IO, "cost table load: cannot open %s: %s", db_path,
			      db ? sqlite3_errmsg(db) : "out of memory");
		goto out;
	}
	sqlite3_busy_timeout(db, 5000);
	if (sqlite3_prepare_v2(db, "SELECT len, batch, ms FROM rg_cost WHERE model_id=?1 AND "
			       "device=?2 AND dtype=?3 AND mode=?4", -1, &sel, NULL) != SQLITE_OK) {
		s = rg_errorf(RG_ERR_IO, "cost table load: %s: %s", db_path, sqlite3_errmsg(db));
		goto out;
	}
	bind_key(sel, key);
	for (;;) {
		int rc = sqlite3_step(sel);
		if (rc == SQLITE_DONE)
			break;
		if (rc != SQLITE_ROW) {
			s = rg_errorf(RG_ERR_IO, "cost table load: %s: %s", db_path,
				      sqlite3_errmsg(db));
			goto out;
		}
		if (!rg_vec_reserve((void **)&rl, &cap_l, (size_t)n + 1, sizeof(*rl), 64) ||
		    !rg_vec_reserve((void **)&rb, &cap_b, (size_t)n + 1, sizeof(*rb), 64) ||
		    !rg_vec_reserve((void **)&rms, &cap_m, (size_t)n + 1, sizeof(*rms), 64)) {
			s = rg_errorf(RG_ERR_OOM, "cost table load: out of memory");
			goto out;
		}
		rl[n] = sqlite3_column_int(sel, 0);
		rb[n] = sqlite3_column_int(sel, 1);
		rms[n] = sqlite3_column_double(sel, 2);
		n++;
	}
	if (n == 0) {
		s = rg_errorf(RG_ERR_IO, "cost table load: no table for %s/%s/%s/%s in %s",
			      key->model_id, key->device, key->dtype, key->mode, db_path);
		goto out;
	}
	lens = malloc(sizeof(int) * (size_t)n);
	batches = malloc(sizeof(int) * (size_t)n);
	if (!lens || !batches) {
		s = rg_errorf(RG_ERR_OOM, "cost table load: out of memory");
		goto out;
	}
	memcpy(lens, rl, sizeof(int) * (size_t)n);
	memcpy(batches, rb, sizeof(int) * (size_t)n);
	int nl = uniq(lens, n), nb = uniq(batches, n);
	if ((long)nl * nb != n) {
		s = rg_errorf(RG_ERR_FORMAT, "cost table load: stored grid has holes or bad keys "
			      "(%d rows for %d lengths x %d batches)", n, nl, nb);
		goto out;
	}
	t = rg_cost_table_create(lens, nl, batches, nb, &s);
	if (!t) {
		/* the stored grid itself is bad (non-positive or too many keys) */
		if (s == RG_ERR_INVALID_INPUT)
			s = rg_errorf(RG_ERR_FORMAT, "cost table load: stored grid has bad keys (%s)",
				      rg_last_error());
		goto out;
	}
	for (int i = 0; i < n; i++) {
		int li = find_int(lens, nl, rl[i]), bi = find_int(batches, nb, rb[i]);
		if (li < 0 || bi < 0 || !isnan(rg_cost_table_cell(t, li, bi)) ||
		    rg_cost_table_set(t, li, bi, rms[i]) != RG_OK) {
			s = rg_errorf(RG_ERR_FORMAT, "cost table load: bad row len=%d batch=%d "
				      "ms=%g", rl[i], rb[i], rms[i]);
			rg_cost_table_free(t);
			t = NULL;
			goto out;
		}
	}
out:
	sqlite3_finalize(sel);
	sqlite3_close(db);
	free(rl);
	free(rb);
	free(rms);
	free(lens);
	free(batches);
	if (st)
		*st = s;
	return t;
}

rg_status rg_cost_store_put_cell(const char *db_path, const rg_cost_key *key, int len, int batch,
				 double ms)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *ins = NULL;
	rg_status st = RG_OK;

	if (!db_path || !key_ok(key) || len < 1 || batch < 1 || !isfinite(ms) || ms < 0)
		return rg_errorf(RG_ERR_INVALID_INPUT, "cost table cell: bad path, key or value");
	if (sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) !=
	    SQLITE_OK) {
		st = rg_errorf(RG_ERR_IO, "cost table cell: cannot open %s: %s", db_path,
			       db ? sqlite3_errmsg(db) : "out of memory");
		goto out_close;
	}
	sqlite3_busy_timeout(db, 200);
	if (sqlite3_exec(db, SQL_CREATE, NULL, NULL, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO rg_cost VALUES (?1, ?2, ?3, ?4, ?5, ?6, "
			       "?7)", -1, &ins, NULL) != SQLITE_OK)
		goto out_sqlerr;
	bind_key(ins, key);
	sqlite3_bind_int(ins, 5, len);
	sqlite3_bind_int(ins, 6, batch);
	sqlite3_bind_double(ins, 7, ms);
	if (sqlite3_step(ins) != SQLITE_DONE)
		goto out_sqlerr;
	goto out_close;

out_sqlerr:
	st = rg_errorf(RG_ERR_IO, "cost table cell: %s: %s", db_path, sqlite3_errmsg(db));
out_close:
	sqlite3_finalize(ins);
	sqlite3_close(db);
	return st;
}

/* Index of x in the grid of n entries given by at(t, i), -1 when absent. */
static int grid_find(const rg_cost_table *t, int n, int (*at)(const rg_cost_table *, int), int x)
{
	for (int i = 0; i < n; i++)
		if (at(t, i) == x)
			return i;
	return -1;
}

rg_status rg_cost_store_load_cells(const char *db_path, const rg_cost_key *key, rg_cost_table *t,
				   int *n_filled)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *sel = NULL;
	rg_status st = RG_OK;
	int filled = 0, rc;

	if (n_filled)
		*n_filled = 0;
	if (!db_path || !key_ok(key) || !t)
		return rg_errorf(RG_ERR_INVALID_INPUT, "cost table cells: NULL path, key or table");
	if (sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
		st = rg_errorf(RG_ERR_IO, "cost table cells: cannot open %s: %s", db_path,
			       db ? sqlite3_errmsg(db) : "out of memory");
		goto out;
	}
	sqlite3_busy_timeout(db, 200);
	if (sqlite3_prepare_v2(db, "SELECT len, batch, ms FROM rg_cost WHERE model_id=?1 AND "
			       "device=?2 AND dtype=?3 AND mode=?4", -1, &sel, NULL) != SQLITE_OK) {
		st = rg_errorf(RG_ERR_IO, "cost table cells: %s: %s", db_path, sqlite3_errmsg(db));
		goto out;
	}
	bind_key(sel, key);
	while ((rc = sqlite3_step(sel)) == SQLITE_ROW) {
		int li = grid_find(t, rg_cost_table_n_lens(t), rg_cost_table_len_at,
				   sqlite3_column_int(sel, 0));
		int bi = grid_find(t, rg_cost_table_n_batches(t), rg_cost_table_batch_at,
				   sqlite3_column_int(sel, 1));

		if (li < 0 || bi < 0 || !isnan(rg_cost_table_cell(t, li, bi)))
			continue;
		if (rg_cost_table_set(t, li, bi, sqlite3_column_double(sel, 2)) == RG_OK)
			filled++;
	}
	if (rc != SQLITE_DONE)
		st = rg_errorf(RG_ERR_IO, "cost table cells: %s: %s", db_path, sqlite3_errmsg(db));
out:
	sqlite3_finalize(sel);
	sqlite3_close(db);
	if (n_filled)
		*n_filled = filled;
	return st;
}
