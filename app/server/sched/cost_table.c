/* Batch cost table (TurboTransformers, PPoPP'21, sec. 5 `cached_cost` and sec. 6.3): a measured
 * grid of batch latencies, interpolated. See cost_table.h; the server persists it
 * (app/server/cost_store.c). */
#include "server/sched/cost_table.h"

#include <math.h>
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

rg_status rg_cost_model_from_table(const rg_cost_table *t, rg_cost_model *out)
{
	int nl, nb, n = 0;
	double *tok, *pairs, *ms;
	rg_status st;

	if (!t || !out || !rg_cost_table_complete(t))
		return rg_errorf(RG_ERR_INVALID_INPUT, "cost model: needs a complete cost table");
	nl = rg_cost_table_n_lens(t);
	nb = rg_cost_table_n_batches(t);
	tok = malloc(sizeof(double) * (size_t)nl * (size_t)nb);
	pairs = malloc(sizeof(double) * (size_t)nl * (size_t)nb);
	ms = malloc(sizeof(double) * (size_t)nl * (size_t)nb);
	if (!tok || !pairs || !ms) {
		st = rg_errorf(RG_ERR_OOM, "cost model: out of memory");
		goto out_free;
	}
	for (int li = 0; li < nl; li++) {
		for (int bi = 0; bi < nb; bi++) {
			double len = rg_cost_table_len_at(t, li), b = rg_cost_table_batch_at(t, bi);

			tok[n] = b * len;
			pairs[n] = b * len * len;
			ms[n] = rg_cost_table_cell(t, li, bi);
			n++;
		}
	}
	st = rg_cost_model_fit(tok, pairs, ms, n, out);
out_free:
	free(tok);
	free(pairs);
	free(ms);
	return st;
}
