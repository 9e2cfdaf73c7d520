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

/* Solve the k x k system a x = b in place (Gaussian elimination, partial pivoting); a is row-major
 * with row stride ld >= k. False when singular (a pivot below 1e-12 of the largest diagonal). */
static bool solve_ld(double *a, int ld, double *b, int k, double *x)
{
	double scale = 0;

	for (int i = 0; i < k; i++)
		scale = fmax(scale, fabs(a[i * ld + i]));
	if (!(scale > 0))
		return false;
	for (int c = 0; c < k; c++) {
		int piv = c;

		for (int r = c + 1; r < k; r++)
			if (fabs(a[r * ld + c]) > fabs(a[piv * ld + c]))
				piv = r;
		if (!(fabs(a[piv * ld + c]) > 1e-12 * scale))
			return false;
		if (piv != c) {
			for (int j = 0; j < k; j++) {
				double t = a[c * ld + j];

				a[c * ld + j] = a[piv * ld + j];
				a[piv * ld + j] = t;
			}
			double t = b[c];

			b[c] = b[piv];
			b[piv] = t;
		}
		for (int r = c + 1; r < k; r++) {
			double f = a[r * ld + c] / a[c * ld + c];

			for (int j = c; j < k; j++)
				a[r * ld + j] -= f * a[c * ld + j];
			b[r] -= f * b[c];
		}
	}
	for (int r = k - 1; r >= 0; r--) {
		double s = b[r];

		for (int j = r + 1; j < k; j++)
			s -= a[r * ld + j] * x[j];
		x[r] = s / a[r * ld + r];
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
		if (!solve_ld(&a[0][0], 3, b, k, x))
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

/* ---- the generation step's cost ------------------------------------------------------------ */

enum { K_STEP = 5 };

static void step_features(const rg_step_shape *x, double f[K_STEP])
{
	f[0] = 1;
	f[1] = x->tokens;
	f[2] = x->pairs;
	f[3] = x->ctx;
	f[4] = x->rows;
}

double rg_step_cost_ms(const rg_step_cost *m, const rg_step_shape *x)
{
	return m->step_ms + m->token_ms * x->tokens + m->pair_ms * x->pairs + m->ctx_ms * x->ctx +
	       m->row_ms * x->rows;
}

bool rg_step_cost_zero(const rg_step_cost *m)
{
	return m->step_ms == 0 && m->token_ms == 0 && m->pair_ms == 0 && m->ctx_ms == 0 &&
	       m->row_ms == 0;
}

bool rg_step_cost_valid(const rg_step_cost *m)
{
	const double c[K_STEP] = {m->step_ms, m->token_ms, m->pair_ms, m->ctx_ms, m->row_ms};

	for (int j = 0; j < K_STEP; j++)
		if (!(isfinite(c[j]) && c[j] >= 0))
			return false;
	return true;
}


/* The measurements of a fit, point by point: point i's shape, time and weight; false past the
 * last. */
typedef bool (*step_point_fn)(void *ctx, int i, rg_step_shape *x, double *ms, double *w);

/* NNLS by enumeration of the supports, as rg_cost_model_fit_weighted (the KKT point of a
 * non-negative least-squares problem is the unconstrained optimum on its own support), here
 * over K_STEP columns: 31 supports; ties go to the smaller support (found first). Two passes
 * over the points (column norms, then the normal equations): no copy of them. */
static rg_status step_fit(step_point_fn get, void *ctx, rg_step_cost *out)
{
	double ata[K_STEP][K_STEP] = {{0}}, atb[K_STEP] = {0}, yy = 0, norm[K_STEP] = {0}, sw = 0;
	double best_sse = INFINITY, best[K_STEP] = {0}, ms, wi;
	rg_step_shape x;
	int n = 0;

	for (int i = 0; get(ctx, i, &x, &ms, &wi); i++, n++) {
		double f[K_STEP];
		bool ok = isfinite(ms) && ms >= 0 && isfinite(wi) && wi >= 0;

		step_features(&x, f);
		for (int j = 1; j < K_STEP; j++)
			ok &= isfinite(f[j]) && f[j] >= 0;
		if (!ok)
			return rg_errorf(RG_ERR_INVALID_INPUT, "step cost fit: measurement %d (tokens "
					 "%g, pairs %g, ctx %g, rows %g, ms %g, weight %g) is not "
					 "finite and >= 0", i, x.tokens, x.pairs, x.ctx, x.rows, ms,
					 wi);
		sw += wi;
		for (int j = 0; j < K_STEP; j++)
			norm[j] += wi * f[j] * f[j];
	}
	if (n < 1)
		return rg_errorf(RG_ERR_INVALID_INPUT, "step cost fit: no measurements");
	if (!(sw > 0))
		return rg_errorf(RG_ERR_INVALID_INPUT, "step cost fit: every weight is 0");
	for (int j = 0; j < K_STEP; j++)
		norm[j] = norm[j] > 0 ? sqrt(norm[j] / sw) : 1;
	for (int i = 0; get(ctx, i, &x, &ms, &wi); i++) {
		double f[K_STEP];

		step_features(&x, f);
		for (int j = 0; j < K_STEP; j++)
			f[j] /= norm[j];
		for (int r = 0; r < K_STEP; r++) {
			for (int c = 0; c < K_STEP; c++)
				ata[r][c] += wi * f[r] * f[c];
			atb[r] += wi * f[r] * ms;
		}
		yy += wi * ms * ms;
	}
	for (int mask = 1; mask < (1 << K_STEP); mask++) {
		int idx[K_STEP], k = 0;
		double a[K_STEP][K_STEP], b[K_STEP], sol[K_STEP] = {0}, theta[K_STEP] = {0}, sse;
		bool ok = true;

		for (int j = 0; j < K_STEP; j++)
			if (mask & (1 << j))
				idx[k++] = j;
		for (int r = 0; r < k; r++) {
			for (int c = 0; c < k; c++)
				a[r][c] = ata[idx[r]][idx[c]];
			b[r] = atb[idx[r]];
		}
		if (!solve_ld(&a[0][0], K_STEP, b, k, sol))
			continue;
		for (int r = 0; r < k; r++) {
			ok &= sol[r] >= 0;
			theta[idx[r]] = sol[r];
		}
		if (!ok)
			continue;
		sse = yy;
		for (int r = 0; r < K_STEP; r++) {
			sse -= 2 * theta[r] * atb[r];
			for (int c = 0; c < K_STEP; c++)
				sse += theta[r] * ata[r][c] * theta[c];
		}
		if (sse < best_sse - 1e-9 * (1 + yy)) {
			best_sse = sse;
			memcpy(best, theta, sizeof(best));
		}
	}
	*out = (rg_step_cost){best[0] / norm[0], best[1] / norm[1], best[2] / norm[2],
			      best[3] / norm[3], best[4] / norm[4]};
	return RG_OK;
}

typedef struct step_arrays {
	const rg_step_shape *x;
	const double *ms, *w;
	int n;
} step_arrays;

static bool step_array_point(void *ctx, int i, rg_step_shape *x, double *ms, double *w)
{
	const step_arrays *a = ctx;

	if (i >= a->n)
		return false;
	*x = a->x[i];
	*ms = a->ms[i];
	*w = a->w ? a->w[i] : 1;
	return true;
}

rg_status rg_step_cost_fit(const rg_step_shape *x, const double *ms, const double *w, int n,
			   rg_step_cost *out)
{
	step_arrays a = {x, ms, w, n};

	if (!x || !ms || !out || n < 1)
		return rg_errorf(RG_ERR_INVALID_INPUT, "step cost fit: no measurements");
	return step_fit(step_array_point, &a, out);
}

/* The prior's shapes: steps an engine of these limits runs (a short decode, a full decode batch
 * at a long context, a full prefill chunk, a short prefill, a mixed step). */
static void step_prior_shapes(const rg_step_learner *l, rg_step_shape x[RG_STEP_LEARN_PRIOR])
{
	double B = l->max_tokens, S = l->max_seqs < l->max_tokens ? l->max_seqs : l->max_tokens;
	double L = l->max_context, c = L / 2, h = floor(S / 2) > 0 ? floor(S / 2) : 1;
	double pf = B - h > 0 ? B - h : 1;

	x[0] = (rg_step_shape){.tokens = 1, .n_decode = 1, .ctx = 16 < L ? 16 : L, .rows = 1};
	x[1] = (rg_step_shape){.tokens = S, .n_decode = S, .ctx = S * c, .rows = S};
	x[2] = (rg_step_shape){.tokens = B, .pairs = B * (B + 1) / 2, .rows = 1};
	x[3] = (rg_step_shape){.tokens = 16, .pairs = 16 * 17 / 2.0, .rows = 1};
	x[4] = (rg_step_shape){.tokens = h + pf, .n_decode = h, .ctx = h * c,
			       .pairs = pf * (c + (pf + 1) / 2), .rows = h + 1};
}

void rg_step_learner_init(rg_step_learner *l, const rg_step_cost *m, int max_tokens, int max_seqs,
			  int max_context)
{
	memset(l, 0, sizeof(*l));
	l->max_tokens = max_tokens > 0 ? max_tokens : 1;
	l->max_seqs = max_seqs > 0 ? max_seqs : 1;
	l->max_context = max_context > 1 ? max_context : 2;
	rg_step_learner_set_prior(l, m);
}

void rg_step_learner_set_prior(rg_step_learner *l, const rg_step_cost *m)
{
	l->n_prior = 0;
	if (!m || !rg_step_cost_valid(m) || rg_step_cost_zero(m))
		return;
	step_prior_shapes(l, l->prior_x);
	for (int i = 0; i < RG_STEP_LEARN_PRIOR; i++)
		l->prior_ms[i] = rg_step_cost_ms(m, &l->prior_x[i]);
	l->n_prior = RG_STEP_LEARN_PRIOR;
}

/* 0 for x < 1, else 1 + floor(log2 x), capped at n - 1. */
static int log2_bin0(double x, int n)
{
	int b;

	if (x < 1)
		return 0;
	for (b = 1; x >= 2 && b < n - 1; b++)
		x /= 2;
	return b;
}

static int step_class(const rg_step_shape *x)
{
	double pf = x->tokens - x->n_decode;
	int d = log2_bin0(x->n_decode, RG_STEP_LEARN_DEC);
	int p = log2_bin0(pf, RG_STEP_LEARN_PF);
	int c = log2_bin0((x->ctx + x->pairs) / x->tokens, RG_STEP_LEARN_CTX);

	return (d * RG_STEP_LEARN_PF + p) * RG_STEP_LEARN_CTX + c;
}

void rg_step_learner_add(rg_step_learner *l, const rg_step_shape *x, double ms)
{
	double f[K_STEP];
	bool ok = isfinite(ms) && ms >= 0 && isfinite(x->n_decode) && x->n_decode >= 0 &&
		  x->tokens >= 1;
	int c;

	step_features(x, f);
	for (int j = 1; j < K_STEP; j++)
		ok &= isfinite(f[j]) && f[j] >= 0;
	if (!ok)
		return;
	c = step_class(x);
	l->n_steps++;
	if (l->cls[c].last == 0) {
		l->cls[c].x = *x;
		l->cls[c].ms = ms;
		l->cls[c].w = 1;
	} else {
		/* the class's weight decays as the fit's does: a class met again after long takes
		 * mostly the new step */
		double w = l->cls[c].w * exp2(-(double)(l->n_steps - l->cls[c].last) / 64);
		double a = 1 / (w + 1), m = fmin(ms, 4 * l->cls[c].ms);

		l->cls[c].w = fmin(w + 1, 3); /* alpha at least 1/4 */

		l->cls[c].x.tokens += a * (x->tokens - l->cls[c].x.tokens);
		l->cls[c].x.n_decode += a * (x->n_decode - l->cls[c].x.n_decode);
		l->cls[c].x.pairs += a * (x->pairs - l->cls[c].x.pairs);
		l->cls[c].x.ctx += a * (x->ctx - l->cls[c].x.ctx);
		l->cls[c].x.rows += a * (x->rows - l->cls[c].x.rows);
		l->cls[c].ms += a * ((l->cls[c].ms > 0 ? m : ms) - l->cls[c].ms);
	}
	l->cls[c].last = l->n_steps;
}

enum { N_STEP_CLS = RG_STEP_LEARN_DEC * RG_STEP_LEARN_PF * RG_STEP_LEARN_CTX };

/* Point i of a learner: its prior points, then the classes that ran, weighed as the header
 * says and by 1 / ms^2 (relative errors: 2 ms off is small on a 500 ms step, large on a 1 ms
 * one). Walks the classes from the last point's (the fit asks in order). */
typedef struct learner_walk {
	const rg_step_learner *l;
	int i, c; /* the last point given and its class */
} learner_walk;

static bool learner_point(void *ctx, int i, rg_step_shape *x, double *ms, double *w)
{
	learner_walk *k = ctx;
	const rg_step_learner *l = k->l;

	if (i < l->n_prior) {
		*x = l->prior_x[i];
		*ms = l->prior_ms[i];
		*w = 0.0025;
		k->i = i;
		k->c = -1;
	} else {
		int c = i == k->i + 1 ? k->c + 1 : 0, skip = i == k->i + 1 ? 0 : i - l->n_prior;

		for (; c < N_STEP_CLS; c++)
			if (l->cls[c].last != 0 && skip-- == 0)
				break;
		if (c >= N_STEP_CLS)
			return false;
		*x = l->cls[c].x;
		*ms = l->cls[c].ms;
		*w = fmax(0.01, exp2(-(double)(l->n_steps - l->cls[c].last) / 64));
		k->i = i;
		k->c = c;
	}
	*w /= fmax(*ms, 1e-6) * fmax(*ms, 1e-6);
	return true;
}

rg_status rg_step_learner_fit(const rg_step_learner *l, rg_step_cost *out)
{
	learner_walk k = {l, -2, -1};
	rg_step_shape x;
	double ms, w;

	if (!learner_point(&k, 0, &x, &ms, &w)) {
		*out = (rg_step_cost){0};
		return RG_OK;
	}
	k = (learner_walk){l, -2, -1};
	return step_fit(learner_point, &k, out);
}

void rg_step_learner_settle(rg_step_learner *l)
{
	rg_step_cost m;

	if (l->n_steps == 0 || rg_step_learner_fit(l, &m) != RG_OK)
		return;
	memset(l->cls, 0, sizeof(l->cls));
	l->n_steps = 0;
	rg_step_learner_set_prior(l, &m);
}
