/* Batch latency model; see cost_model.h. */
#include "sched/cost_model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

double rg_cost_model_ms(const rg_cost_model *m, double tokens, double pairs)
{
	return m->batch_ms + m->token_ms * tokens + m->pair_ms * pairs;
}

bool rg_cost_model_valid(const rg_cost_model *m)
{
	return m && isfinite(m->batch_ms) && isfinite(m->token_ms) && isfinite(m->pair_ms) &&
	       m->batch_ms >= 0 && m->token_ms >= 0 && m->pair_ms >= 0;
}

/* Solve the k x k system a x = b in place (Gaussian elimination, partial pivoting). False when
 * singular (a pivot below 1e-12 of the largest diagonal). */
static bool solve(double a[3][3], double b[3], int k, double x[3])
{
	double scale = 0;

	for (int i = 0; i < k; i++)
		scale = fmax(scale, fabs(a[i][i]));
	if (!(scale > 0))
		return false;
	for (int c = 0; c < k; c++) {
		int piv = c;

		for (int r = c + 1; r < k; r++)
			if (fabs(a[r][c]) > fabs(a[piv][c]))
				piv = r;
		if (!(fabs(a[piv][c]) > 1e-12 * scale))
			return false;
		if (piv != c) {
			for (int j = 0; j < k; j++) {
				double t = a[c][j];

				a[c][j] = a[piv][j];
				a[piv][j] = t;
			}
			double t = b[c];

			b[c] = b[piv];
			b[piv] = t;
		}
		for (int r = c + 1; r < k; r++) {
			double f = a[r][c] / a[c][c];

			for (int j = c; j < k; j++)
				a[r][j] -= f * a[c][j];
			b[r] -= f * b[c];
		}
	}
	for (int r = k - 1; r >= 0; r--) {
		double s = b[r];

		for (int j = r + 1; j < k; j++)
			s -= a[r][j] * x[j];
		x[r] = s / a[r][r];
	}
	return true;
}

/* Non-negative least squares over 3 columns by enumeration of the supports: for each non-empty
 * subset of the columns, solve the normal equations restricted to it; keep the feasible solution
 * (all >= 0) of least residual. With 3 columns the optimum is one of these 7 (the KKT point of
 * the NNLS problem is the unconstrained optimum on its own support). Columns are scaled to unit
 * RMS first. */
rg_status rg_cost_model_fit(const double *tokens, const double *pairs, const double *ms, int n,
			    rg_cost_model *out)
{
	double ata[3][3] = {{0}}, atb[3] = {0}, yy = 0, norm[3] = {0};
	double best_sse = INFINITY, best[3] = {0};

	if (!tokens || !pairs || !ms || !out || n < 1)
		return rg_errorf(RG_ERR_INVALID_INPUT, "cost model fit: no measurements");
	for (int i = 0; i < n; i++) {
		if (!(isfinite(tokens[i]) && isfinite(pairs[i]) && isfinite(ms[i]) && tokens[i] >= 0 &&
		      pairs[i] >= 0 && ms[i] >= 0))
			return rg_errorf(RG_ERR_INVALID_INPUT, "cost model fit: measurement %d "
					 "(tokens %g, pairs %g, ms %g) is not finite and >= 0", i,
					 tokens[i], pairs[i], ms[i]);
		norm[0] += 1;
		norm[1] += tokens[i] * tokens[i];
		norm[2] += pairs[i] * pairs[i];
	}
	for (int j = 0; j < 3; j++)
		norm[j] = norm[j] > 0 ? sqrt(norm[j] / n) : 1;
	for (int i = 0; i < n; i++) {
		double x[3] = {1 / norm[0], tokens[i] / norm[1], pairs[i] / norm[2]};

		for (int r = 0; r < 3; r++) {
			for (int c = 0; c < 3; c++)
				ata[r][c] += x[r] * x[c];
			atb[r] += x[r] * ms[i];
		}
		yy += ms[i] * ms[i];
	}
	for (int mask = 1; mask < 8; mask++) {
		int idx[3], k = 0;
		double a[3][3], b[3], x[3] = {0}, theta[3] = {0}, sse;
		bool ok = true;

		for (int j = 0; j < 3; j++)
			if (mask & (1 << j))
				idx[k++] = j;
		for (int r = 0; r < k; r++) {
			for (int c = 0; c < k; c++)
				a[r][c] = ata[idx[r]][idx[c]];
			b[r] = atb[idx[r]];
		}
		if (!solve(a, b, k, x))
			continue;
		for (int r = 0; r < k; r++) {
			ok &= x[r] >= 0;
			theta[idx[r]] = x[r];
		}
		if (!ok)
			continue;
		sse = yy;
		for (int r = 0; r < 3; r++) {
			sse -= 2 * theta[r] * atb[r];
			for (int c = 0; c < 3; c++)
				sse += theta[r] * ata[r][c] * theta[c];
		}
		if (sse < best_sse - 1e-12 * (1 + yy)) {
			best_sse = sse;
			memcpy(best, theta, sizeof(best));
		}
	}
	/* No support solvable (every column zero): the zero model. */
	out->batch_ms = best[0] / norm[0];
	out->token_ms = best[1] / norm[1];
	out->pair_ms = best[2] / norm[2];
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
