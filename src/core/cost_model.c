/* Batch latency model; see cost_model.h. */
#include "core/cost_model.h"

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
	return rg_cost_model_fit_weighted(tokens, pairs, ms, NULL, n, out);
}

rg_status rg_cost_model_fit_weighted(const double *tokens, const double *pairs, const double *ms,
				     const double *w, int n, rg_cost_model *out)
{
	double ata[3][3] = {{0}}, atb[3] = {0}, yy = 0, norm[3] = {0}, sw = 0;
	double best_sse = INFINITY, best[3] = {0};

	if (!tokens || !pairs || !ms || !out || n < 1)
		return rg_errorf(RG_ERR_INVALID_INPUT, "cost model fit: no measurements");
	for (int i = 0; i < n; i++) {
		double wi = w ? w[i] : 1;

		if (!(isfinite(tokens[i]) && isfinite(pairs[i]) && isfinite(ms[i]) && tokens[i] >= 0 &&
		      pairs[i] >= 0 && ms[i] >= 0 && isfinite(wi) && wi >= 0))
			return rg_errorf(RG_ERR_INVALID_INPUT, "cost model fit: measurement %d "
					 "(tokens %g, pairs %g, ms %g, weight %g) is not finite and "
					 ">= 0", i, tokens[i], pairs[i], ms[i], wi);
		sw += wi;
		norm[1] += wi * tokens[i] * tokens[i];
		norm[2] += wi * pairs[i] * pairs[i];
	}
	if (!(sw > 0))
		return rg_errorf(RG_ERR_INVALID_INPUT, "cost model fit: every weight is 0");
	norm[0] = 1;
	for (int j = 1; j < 3; j++)
		norm[j] = norm[j] > 0 ? sqrt(norm[j] / sw) : 1;
	for (int i = 0; i < n; i++) {
		double x[3] = {1 / norm[0], tokens[i] / norm[1], pairs[i] / norm[2]};
		double wi = w ? w[i] : 1;

		for (int r = 0; r < 3; r++) {
			for (int c = 0; c < 3; c++)
				ata[r][c] += wi * x[r] * x[c];
			atb[r] += wi * x[r] * ms[i];
		}
		yy += wi * ms[i] * ms[i];
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

void rg_cost_learner_init(rg_cost_learner *l, const rg_cost_model *m, int max_len)
{
	memset(l, 0, sizeof(*l));
	rg_cost_learner_set_prior(l, m, max_len);
}

void rg_cost_learner_set_prior(rg_cost_learner *l, const rg_cost_model *m, int max_len)
{
	double L = max_len < 256 ? (max_len < 1 ? 1 : max_len) : 256, s16 = L < 16 ? L : 16;
	double shape[4][2] = {{1, s16}, {1, L}, {floor(L / s16), s16}, {4, L}}; /* seqs x len */

	for (int i = 0; i < 4; i++) {
		l->prior_tok[i] = shape[i][0] * shape[i][1];
		l->prior_pairs[i] = shape[i][0] * shape[i][1] * shape[i][1];
		l->prior_ms[i] = m && rg_cost_model_valid(m) ?
				 rg_cost_model_ms(m, l->prior_tok[i], l->prior_pairs[i]) : 0;
	}
}

/* floor(log2(x)) for x >= 1, capped at n - 1. */
static int log2_bin(double x, int n)
{
	int b = 0;

	while (x >= 2 && b < n - 1) {
		x /= 2;
		b++;
	}
	return b;
}

void rg_cost_learner_add(rg_cost_learner *l, double tokens, double pairs, double ms)
{
	int c;

	if (!(isfinite(tokens) && isfinite(pairs) && isfinite(ms) && tokens >= 1 && pairs >= 0 &&
	      ms >= 0))
		return;
	c = log2_bin(tokens, RG_COST_LEARN_TOK_BINS) * RG_COST_LEARN_LEN_BINS +
	    log2_bin(pairs / tokens, RG_COST_LEARN_LEN_BINS);
	l->n_batches++;
	if (l->cls[c].last == 0) {
		l->cls[c].tokens = tokens;
		l->cls[c].pairs = pairs;
		l->cls[c].ms = ms;
	} else {
		l->cls[c].tokens += 0.25 * (tokens - l->cls[c].tokens);
		l->cls[c].pairs += 0.25 * (pairs - l->cls[c].pairs);
		l->cls[c].ms += 0.25 * (ms - l->cls[c].ms);
	}
	l->cls[c].last = l->n_batches;
}

rg_status rg_cost_learner_fit(const rg_cost_learner *l, rg_cost_model *out)
{
	enum { N_CLS = RG_COST_LEARN_TOK_BINS * RG_COST_LEARN_LEN_BINS };
	double tok[N_CLS + 4], pairs[N_CLS + 4], ms[N_CLS + 4], w[N_CLS + 4];
	int n = 0;

	for (int i = 0; i < 4 && l->prior_ms[i] > 0; i++) {
		tok[n] = l->prior_tok[i];
		pairs[n] = l->prior_pairs[i];
		ms[n] = l->prior_ms[i];
		w[n++] = 0.0025;
	}
	for (int c = 0; c < N_CLS; c++) {
		if (l->cls[c].last == 0)
			continue;
		tok[n] = l->cls[c].tokens;
		pairs[n] = l->cls[c].pairs;
		ms[n] = l->cls[c].ms;
		w[n++] = fmax(0.05, pow(0.95, (double)(l->n_batches - l->cls[c].last)));
	}
	if (n == 0) {
		*out = (rg_cost_model){0, 0, 0};
		return RG_OK;
	}
	/* relative errors: a 2 ms error is small on a 500 ms batch, large on a 1 ms one */
	for (int i = 0; i < n; i++)
		w[i] /= fmax(ms[i], 1e-6) * fmax(ms[i], 1e-6);
	return rg_cost_model_fit_weighted(tok, pairs, ms, w, n, out);
}
