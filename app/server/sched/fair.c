/* Weighted fair queueing over an emulated fluid server; see fair.h. */
#include "server/sched/fair.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/vec.h"

rg_status rg_fair_init(rg_fair *f, const rg_fair_params *p, double now_ms)
{
	memset(f, 0, sizeof(*f));
	if (!p || !(p->serial_ms >= 0) || !isfinite(p->serial_ms))
		return rg_errorf(RG_ERR_INVALID_INPUT, "fair queue: serial_ms must be >= 0");
	f->p = *p;
	f->v = now_ms;
	f->serial_end = -INFINITY;
	return RG_OK;
}

void rg_fair_free(rg_fair *f)
{
	if (!f)
		return;
	free(f->fin);
	f->fin = NULL;
	f->n = f->cap = 0;
}

/* Position of the first tag <= x in the descending array (n when none). */
static size_t lower_pos(const rg_fair *f, double x)
{
	size_t lo = 0, hi = f->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (f->fin[mid] > x)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Insert tag x (room reserved). */
static void tag_insert(rg_fair *f, double x)
{
	size_t i = lower_pos(f, x);

	memmove(f->fin + i + 1, f->fin + i, (f->n - i) * sizeof(*f->fin));
	f->fin[i] = x;
	f->n++;
}

/* Remove one tag equal to x; false when there is none. */
static bool tag_remove(rg_fair *f, double x)
{
	size_t i = lower_pos(f, x);

	if (i >= f->n || f->fin[i] != x)
		return false;
	memmove(f->fin + i, f->fin + i + 1, (f->n - i - 1) * sizeof(*f->fin));
	f->n--;
	return true;
}

/* Advance the fluid server by w ms of service: V grows by w / n while n flows are backlogged,
 * a flow leaving when V reaches its last tag. */
void rg_fair_served(rg_fair *f, double w)
{
	while (f->n > 0 && w > 0) {
		double need = (f->fin[f->n - 1] - f->v) * (double)f->n;

		if (need <= w) {
			f->v = fmax(f->v, f->fin[f->n - 1]);
			w -= fmax(need, 0);
			while (f->n > 0 && f->fin[f->n - 1] <= f->v)
				f->n--;
		} else {
			f->v += w / (double)f->n;
			w = 0;
		}
	}
}

rg_status rg_fair_stamp(rg_fair *f, double now_ms, const double *piece_ms, int n, double *stamps,
			double *flow_end)
{
	double total = 0, start, tag;
	bool serial;

	if (n < 1 || !piece_ms || !stamps)
		return rg_errorf(RG_ERR_INVALID_INPUT, "fair queue: a job needs pieces");
	for (int k = 0; k < n; k++) {
		if (!(piece_ms[k] >= 0) || !isfinite(piece_ms[k]))
			return rg_errorf(RG_ERR_INVALID_INPUT, "fair queue: piece %d time %g", k,
					 piece_ms[k]);
		total += piece_ms[k];
	}
	if (!rg_vec_reserve((void **)&f->fin, &f->cap, f->n + 1, sizeof(*f->fin), 64))
		return rg_errorf(RG_ERR_OOM, "fair queue: out of memory");
	if (f->n == 0) /* idle: the clock catches V up */
		f->v = fmax(f->v, now_ms);
	serial = f->p.serial_ms > 0 && total > f->p.serial_ms;
	start = f->v;
	if (serial && f->serial_end > f->v) {
		/* the serial flow is backlogged: this job starts where the last one ends */
		start = f->serial_end;
		tag_remove(f, f->serial_end);
	}
	tag = start;
	for (int k = 0; k < n; k++) {
		tag += piece_ms[k];
		stamps[k] = tag;
	}
	if (tag > f->v)
		tag_insert(f, tag); /* a job of no estimated time is never backlogged */
	if (serial)
		f->serial_end = tag;
	if (flow_end)
		*flow_end = serial ? NAN : tag;
	return RG_OK;
}

void rg_fair_leave(rg_fair *f, double flow_end)
{
	if (!isnan(flow_end) && flow_end > f->v)
		tag_remove(f, flow_end);
}

double rg_fair_vtime(const rg_fair *f)
{
	return f->v;
}

size_t rg_fair_backlogged(const rg_fair *f)
{
	return f->n;
}
