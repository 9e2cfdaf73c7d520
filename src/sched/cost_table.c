/* Batch cost table (TurboTransformers, PPoPP'21, sec. 5 `cached_cost` and sec. 6.3): a measured
 * grid of batch latencies, interpolated, persisted in SQLite. See cost_table.h. */
#include "sched/cost_table.h"

#include <math.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

#define RG_COST_MAX_GRID 4096

struct rg_cost_table {
	int n_lens, n_batches;
	int *lens;    /* (n_lens) strictly increasing */
	int *batches; /* (n_batches) strictly increasing */
	double *ms;   /* (n_lens, n_batches) row-major; NaN = unmeasured */
	size_t n_missing; /* cells still NaN */
};

static bool grid_ok(const int *v, int n)
{
	if (!v || n < 1 || n > RG_COST_MAX_GRID)
		return false;
	for (int i = 0; i < n; i++) {
		if (v[i] < 1 || (i > 0 && v[i] <= v[i - 1]))
			return false;
	}
	return true;
}

rg_cost_table *rg_cost_table_create(const int *lens, int n_lens, const int *batches, int n_batches,
				    rg_status *st)
{
	rg_status s = RG_OK;
	rg_cost_table *t = NULL;

	if (!grid_ok(lens, n_lens) || !grid_ok(batches, n_batches)) {
		s = rg_errorf(RG_ERR_INVALID_INPUT, "cost table: grids must be 1..%d strictly "
			      "increasing positive ints", RG_COST_MAX_GRID);
		goto out;
	}
	t = calloc(1, sizeof(*t));
	if (!t)
		goto out_oom;
	t->n_lens = n_lens;
	t->n_batches = n_batches;
	t->lens = malloc(sizeof(int) * (size_t)n_lens);
	t->batches = malloc(sizeof(int) * (size_t)n_batches);
	t->ms = malloc(sizeof(double) * (size_t)n_lens * (size_t)n_batches);
	if (!t->lens || !t->batches || !t->ms)
		goto out_free_t;
	memcpy(t->lens, lens, sizeof(int) * (size_t)n_lens);
	memcpy(t->batches, batches, sizeof(int) * (size_t)n_batches);
	for (size_t i = 0; i < (size_t)n_lens * (size_t)n_batches; i++)
		t->ms[i] = NAN;
	t->n_missing = (size_t)n_lens * (size_t)n_batches;
	goto out;

out_free_t:
	rg_cost_table_free(t);
	t = NULL;
out_oom:
	s = rg_errorf(RG_ERR_OOM, "cost table: out of memory");
out:
	if (st)
		*st = s;
	return t;
}

/* Append v to a[*n] unless it is not above the last value. */
static void push_inc(int *a, int *n, int v)
{
	if (*n == 0 || v > a[*n - 1])
		a[(*n)++] = v;
}

rg_cost_table *rg_cost_table_create_default(int max_len, int max_batch, rg_status *st)
{
	static const int len_steps[] = {8, 16, 32, 64, 96, 128, 192, 256, 320, 384, 448, 512};
	static const int batch_steps[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32};
	int lens[RG_COST_MAX_GRID], batches[RG_COST_MAX_GRID];
	int nl = 0, nb = 0;

	if (max_len < 1 || max_batch < 1 || max_len > 1 << 20 || max_batch > 1 << 20) {
		rg_status s = rg_errorf(RG_ERR_INVALID_INPUT, "cost table: bad max_len %d or "
					"max_batch %d", max_len, max_batch);
		if (st)
			*st = s;
		return NULL;
	}
	for (size_t i = 0; i < sizeof(len_steps) / sizeof(len_steps[0]); i++)
		if (len_steps[i] < max_len)
			push_inc(lens, &nl, len_steps[i]);
	for (int v = 640; v < max_len && nl < RG_COST_MAX_GRID - 1; v += 128)
		push_inc(lens, &nl, v);
	push_inc(lens, &nl, max_len);
	for (size_t i = 0; i < sizeof(batch_steps) / sizeof(batch_steps[0]); i++)
		if (batch_steps[i] < max_batch)
			push_inc(batches, &nb, batch_steps[i]);
	for (int v = 48; v < max_batch && nb < RG_COST_MAX_GRID - 1; v += v / 2)
		push_inc(batches, &nb, v);
	push_inc(batches, &nb, max_batch);
	return rg_cost_table_create(lens, nl, batches, nb, st);
}

void rg_cost_table_free(rg_cost_table *t)
{
	if (!t)
		return;
	free(t->lens);
	free(t->batches);
	free(t->ms);
	free(t);
}

int rg_cost_table_n_lens(const rg_cost_table *t) { return t ? t->n_lens : 0; }
int rg_cost_table_n_batches(const rg_cost_table *t) { return t ? t->n_batches : 0; }

int rg_cost_table_len_at(const rg_cost_table *t, int li)
{
	return (t && li >= 0 && li < t->n_lens) ? t->lens[li] : -1;
}

int rg_cost_table_batch_at(const rg_cost_table *t, int bi)
{
	return (t && bi >= 0 && bi < t->n_batches) ? t->batches[bi] : -1;
}

rg_status rg_cost_table_set(rg_cost_table *t, int li, int bi, double ms)
{
	if (!t || li < 0 || li >= t->n_lens || bi < 0 || bi >= t->n_batches)
		return rg_errorf(RG_ERR_INVALID_INPUT, "cost table: cell (%d, %d) out of range", li,
				 bi);
	if (!isfinite(ms) || ms < 0)
		return rg_errorf(RG_ERR_INVALID_INPUT, "cost table: bad latency %g ms", ms);
	double *cell = &t->ms[(size_t)li * (size_t)t->n_batches + (size_t)bi];
	if (isnan(*cell))
		t->n_missing--;
	*cell = ms;
	return RG_OK;
}

double rg_cost_table_cell(const rg_cost_table *t, int li, int bi)
{
	if (!t || li < 0 || li >= t->n_lens || bi < 0 || bi >= t->n_batches)
		return NAN;
	return t->ms[(size_t)li * (size_t)t->n_batches + (size_t)bi];
}

bool rg_cost_table_complete(const rg_cost_table *t)
{
	return t && t->n_missing == 0;
}

/* Locate x on grid g (n points): segment [*i0, *i1] and weight *w of g[*i1], such that the
 * interpolant is (1-w) f(i0) + w f(i1). Below g[0]: clamp (i0 = i1 = 0). Above g[n-1]: linear
 * extrapolation on the last segment (w > 1), or clamp for a one-point grid. */
static void locate(const int *g, int n, int x, int *i0, int *i1, double *w)
{
	if (n == 1 || x <= g[0]) {
		*i0 = *i1 = 0;
		*w = 0;
		return;
	}
	if (x >= g[n - 1]) {
		*i0 = n - 2;
		*i1 = n - 1;
		*w = (double)(x - g[n - 2]) / (double)(g[n - 1] - g[n - 2]);
		return;
	}
	int lo = 0, hi = n - 1; /* g[lo] < x < g[hi] or x == one of them */
	while (hi - lo > 1) {
		int mid = (lo + hi) / 2;
		if (g[mid] <= x)
			lo = mid;
		else
			hi = mid;
	}
	*i0 = lo;
	*i1 = hi;
	*w = (double)(x - g[lo]) / (double)(g[hi] - g[lo]);
}

/* Bilinear interpolation (or extrapolation) of the grid at (len, batch). */
static double interp(const rg_cost_table *t, int len, int batch)
{
	int l0, l1, b0, b1;
	double wl, wb;

	locate(t->lens, t->n_lens, len, &l0, &l1, &wl);
	locate(t->batches, t->n_batches, batch, &b0, &b1, &wb);
	const double *m = t->ms;
	size_t nb = (size_t)t->n_batches;
	double f00 = m[l0 * nb + b0], f01 = m[l0 * nb + b1];
	double f10 = m[l1 * nb + b0], f11 = m[l1 * nb + b1];
	return (1 - wl) * ((1 - wb) * f00 + wb * f01) + wl * ((1 - wb) * f10 + wb * f11);
}

double rg_cost_table_get(const rg_cost_table *t, int len, int batch)
{
	if (!t || len < 1 || batch < 1 || !rg_cost_table_complete(t))
		return NAN;
	double v = interp(t, len, batch);
	/* Extrapolating past the grid never predicts less than the value at the grid's edge. */
	int last_len = t->lens[t->n_lens - 1], last_batch = t->batches[t->n_batches - 1];
	if (len > last_len || batch > last_batch) {
		double edge = interp(t, len < last_len ? len : last_len,
				     batch < last_batch ? batch : last_batch);
		if (v < edge)
			v = edge;
	}
	return v;
}

rg_status rg_cost_table_warmup(rg_cost_table *t, double (*measure)(void *ctx, int len, int batch),
			       void *ctx)
{
	if (!t || !measure)
		return rg_errorf(RG_ERR_INVALID_INPUT, "cost warm-up: NULL table or callback");
	for (int li = 0; li < t->n_lens; li++) {
		for (int bi = 0; bi < t->n_batches; bi++) {
			int len = t->lens[li], batch = t->batches[bi];
			rg_error_clear();
			double ms = measure(ctx, len, batch);
			if (!isfinite(ms) || ms < 0) {
				if (rg_last_error()[0])
					return rg_error_wrap(RG_ERR_INTERNAL,
							     "cost warm-up len=%d batch=%d", len,
							     batch);
				return rg_errorf(RG_ERR_INTERNAL, "cost warm-up len=%d batch=%d: "
						 "measure returned %g", len, batch, ms);
			}
			rg_status st = rg_cost_table_set(t, li, bi, ms);
			if (st != RG_OK)
				return st;
		}
	}
	return RG_OK;
}

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

rg_status rg_cost_table_save(const rg_cost_table *t, const char *db_path, const rg_cost_key *key)
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
	sqlite3_busy_timeout(db, 5000);
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
	for (int li = 0; li < t->n_lens; li++) {
		for (int bi = 0; bi < t->n_batches; bi++) {
			sqlite3_reset(ins);
			bind_key(ins, key);
			sqlite3_bind_int(ins, 5, t->lens[li]);
			sqlite3_bind_int(ins, 6, t->batches[bi]);
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

rg_cost_table *rg_cost_table_load(const char *db_path, const rg_cost_key *key, rg_status *st)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *sel = NULL;
	rg_cost_table *t = NULL;
	rg_status s = RG_OK;
	int *rl = NULL, *rb = NULL, *lens = NULL, *batches = NULL;
	double *rms = NULL;
	int n = 0, cap = 0;

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
		if (n == cap) {
			int nc = cap ? cap * 2 : 64;
			int *nl = realloc(rl, sizeof(int) * (size_t)nc);
			if (nl)
				rl = nl;
			int *nbt = realloc(rb, sizeof(int) * (size_t)nc);
			if (nbt)
				rb = nbt;
			double *nm = realloc(rms, sizeof(double) * (size_t)nc);
			if (nm)
				rms = nm;
			if (!nl || !nbt || !nm) {
				s = rg_errorf(RG_ERR_OOM, "cost table load: out of memory");
				goto out;
			}
			cap = nc;
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
	if ((long)nl * nb != n || !grid_ok(lens, nl) || !grid_ok(batches, nb)) {
		s = rg_errorf(RG_ERR_FORMAT, "cost table load: stored grid has holes or bad keys "
			      "(%d rows for %d lengths x %d batches)", n, nl, nb);
		goto out;
	}
	t = rg_cost_table_create(lens, nl, batches, nb, &s);
	if (!t)
		goto out;
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
