/* CPU twins of rg_op_sample_rows and rg_op_topk_rows (src/ops/ops.h has the contracts). Written
 * from the host chain's definition (src/gen/sampler.h), not by calling it, with the same float32
 * steps and the same float64 summation orders (top-p's total in sorted order, the draw and the
 * log-softmax in id order), so that for the same logits and u it picks what the host chain
 * picks; tests/unit/test_sample_ops.c checks that. Removed candidates are set to -inf (they
 * carry no mass, and the chain drops -inf before its draw). The top-k is the hierarchical
 * retrieve-and-rerank the CUDA kernel runs (same RG_SAMPLE_GROUPS strided groups). */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/threadpool.h"
#include "ops/cpu/ops_cpu.h"

static _Thread_local const float *g_x; /* qsort's comparator context */

/* value descending, then index ascending */
static int cmp_desc(const void *a, const void *b)
{
	int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
	float xi = g_x[i], xj = g_x[j];

	if (xi > xj)
		return -1;
	if (xi < xj)
		return 1;
	return (i > j) - (i < j);
}

static void sort_desc(const float *x, int32_t *ix, int n)
{
	g_x = x;
	qsort(ix, (size_t)n, sizeof(int32_t), cmp_desc);
}

/* The k largest of x (n), 1 <= k <= n, by value descending and index ascending, into idx (k):
 * LightSeq's retrieve (R = the k-th largest of the RG_SAMPLE_GROUPS strided group maxima) and
 * rerank (sort of the candidates >= R). k over the group count: a full sort. scratch (n). */
static void topk_hier(const float *x, int n, int k, int32_t *idx, int32_t *scratch)
{
	const int G = n < RG_SAMPLE_GROUPS ? n : RG_SAMPLE_GROUPS;
	float gm[RG_SAMPLE_GROUPS];
	int32_t gi[RG_SAMPLE_GROUPS];
	float R = -INFINITY;
	int m = 0;

	if (k <= G) {
		for (int g = 0; g < G; g++) {
			float mx = x[g];

			for (int i = g + G; i < n; i += G)
				mx = x[i] > mx ? x[i] : mx;
			gm[g] = mx;
			gi[g] = g;
		}
		sort_desc(gm, gi, G);
		R = gm[gi[k - 1]];
		for (int i = 0; i < n; i++)
			if (x[i] >= R)
				scratch[m++] = i;
	} else {
		for (int i = 0; i < n; i++)
			scratch[m++] = i;
	}
	sort_desc(x, scratch, m);
	if (idx != scratch)
		memcpy(idx, scratch, (size_t)k * sizeof(int32_t));
}

rg_status rg_cpu_topk_rows(const float *x, int M, int N, int k, void *work, int32_t *idx,
			   float *val)
{
	int32_t *scratch = work;

	for (int r = 0; r < M; r++) {
		const float *row = x + (size_t)r * N;

		topk_hier(row, N, k, idx + (size_t)r * k, scratch);
		if (val)
			for (int j = 0; j < k; j++)
				val[(size_t)r * k + j] = row[idx[(size_t)r * k + j]];
	}
	return RG_OK;
}

/* Steps 1-3 of the contract: f32 logits with NaN -> -inf, +inf -> FLT_MAX, the mask's
 * columns -inf, bias, penalties. */
static void load_row(const float *x, int N, int r, const rg_sample_args *a, float *l)
{
	const rg_sample_row *p = &a->rows[r];

	for (int j = 0; j < N; j++)
		l[j] = isnan(x[j]) ? -INFINITY : (x[j] > FLT_MAX ? FLT_MAX : x[j]);
	if (a->mask) {
		const uint64_t *m = a->mask + (size_t)r * (size_t)((N + 63) / 64);

		for (int j = 0; j < N; j++)
			if (!(m[j >> 6] >> (j & 63) & 1))
				l[j] = -INFINITY;
	}
	if (a->bias_off)
		for (int e = a->bias_off[r]; e < a->bias_off[r + 1]; e++)
			if (a->bias[e].token >= 0 && a->bias[e].token < N)
				l[a->bias[e].token] += a->bias[e].bias;
	if (a->pen_off)
		for (int e = a->pen_off[r]; e < a->pen_off[r + 1]; e++) {
			const rg_sample_pen *q = &a->pen[e];
			float *d;

			if (q->token < 0 || q->token >= N)
				continue;
			d = &l[q->token];
			if (p->repetition_penalty != 1.f && (q->count > 0 || q->in_prompt))
				*d = *d < 0.f ? *d * p->repetition_penalty
					      : *d / p->repetition_penalty;
			if (q->count > 0) {
				*d -= (float)q->count * p->frequency_penalty;
				*d -= p->presence_penalty;
			}
			*d = *d > FLT_MAX ? FLT_MAX : *d; /* never +inf (ops.h) */
		}
	if (a->bias_off)
		for (int e = a->bias_off[r]; e < a->bias_off[r + 1]; e++)
			if (a->bias[e].token >= 0 && a->bias[e].token < N &&
			    l[a->bias[e].token] > FLT_MAX)
				l[a->bias[e].token] = FLT_MAX;
}

/* top-p over the survivors (l > -inf): sorted by l descending, ties by id, keep while the mass
 * before is < p * total (float64, sorted order: the host chain's). ix: (N) scratch. */
static void top_p(float *l, int N, double p, int32_t *ix)
{
	double total = 0.0, before = 0.0;
	int n = 0, m = 0;
	float mx;

	for (int j = 0; j < N; j++)
		if (l[j] > -INFINITY)
			ix[n++] = j;
	if (n <= 1)
		return;
	sort_desc(l, ix, n);
	mx = l[ix[0]];
	for (int i = 0; i < n; i++)
		total += exp((double)l[ix[i]] - (double)mx);
	while (m < n && (m == 0 || before < p * total)) {
		before += exp((double)l[ix[m]] - (double)mx);
		m++;
	}
	for (int i = m; i < n; i++)
		l[ix[i]] = -INFINITY;
}

struct sample_job {
	const float *x;
	int M, N;
	const rg_sample_args *a;
};

/* One row r of rg_cpu_sample_rows: it reads row r of x and writes only row r's slices of the
 * work buffer and of the outputs, so rows run in parallel. */
static void sample_row(const float *x, int M, int N, const rg_sample_args *a, int r)
{
	float *w = a->work;
	int32_t *ix = (int32_t *)(w + (size_t)M * N);
	const rg_sample_row *p = &a->rows[r];
	float *l = w + (size_t)r * N;
	int32_t *sc = ix + (size_t)r * N;
	const bool greedy = !(p->temperature > 0.f);
	float mx = -INFINITY;
	double total = 0.0, lse;
	int32_t id = -1, last = -1;

	load_row(x + (size_t)r * N, N, r, a, l);
	if (!greedy) {
		if (p->temperature != 1.f)
			for (int j = 0; j < N; j++) {
				l[j] /= p->temperature;
				l[j] = l[j] > FLT_MAX ? FLT_MAX : l[j];
			}
		if (p->top_k > 0 && p->top_k < N) {
			float kth;

			topk_hier(l, N, p->top_k, sc, sc);
			kth = l[sc[p->top_k - 1]];
			for (int j = 0; j < N; j++)
				if (!(l[j] >= kth))
					l[j] = -INFINITY;
		}
		if (p->top_p < 1.f)
			top_p(l, N, p->top_p, sc);
	}
	for (int j = 0; j < N; j++)
		mx = l[j] > mx ? l[j] : mx;
	if (!greedy && p->min_p > 0.f)
		for (int j = 0; j < N; j++)
			if (exp((double)l[j] - (double)mx) < (double)p->min_p)
				l[j] = -INFINITY; /* the maximum stays: exp(0) = 1 */
	if (mx == -INFINITY) { /* nothing left to draw from */
		a->ids[r] = 0;
		if (a->logprobs)
			a->logprobs[r] = NAN;
		for (int j = 0; j < a->top_n; j++) {
			a->top_ids[(size_t)r * a->top_n + j] = -1;
			a->top_logprobs[(size_t)r * a->top_n + j] = -INFINITY;
		}
		return;
	}
	for (int j = 0; j < N; j++)
		if (l[j] > -INFINITY) {
			total += exp((double)l[j] - (double)mx);
			last = j;
			if (greedy && id < 0 && l[j] == mx)
				id = j;
		}
	if (!greedy) {
		const double target = p->u * total;
		double run = 0.0;

		id = last;
		for (int j = 0; j < N; j++)
			if (l[j] > -INFINITY) {
				run += exp((double)l[j] - (double)mx);
				if (run > target) {
					id = j;
					break;
				}
			}
	}
	lse = (double)mx + log(total);
	a->ids[r] = id;
	if (a->logprobs)
		a->logprobs[r] = (float)((double)l[id] - lse);
	if (a->top_n > 0) {
		const int k = a->top_n < N ? a->top_n : N;

		topk_hier(l, N, k, sc, sc);
		for (int j = 0; j < a->top_n; j++) {
			const bool ok = j < k && l[sc[j]] > -INFINITY;

			a->top_ids[(size_t)r * a->top_n + j] = ok ? sc[j] : -1;
			a->top_logprobs[(size_t)r * a->top_n + j] =
				ok ? (float)((double)l[sc[j]] - lse) : -INFINITY;
		}
	}
}

static void sample_task(void *ctx, int task, int thread)
{
	const struct sample_job *j = ctx;

	(void)thread;
	sample_row(j->x, j->M, j->N, j->a, task);
}

/* Rows spread over the global pool, one task each: a row costs O(N) exp() in float64 (58k for
 * opus-mt, 250k for mBART), and 4-beam steps of 32 sources have 128 rows. Each row's result
 * does not depend on the thread that ran it. */
rg_status rg_cpu_sample_rows(const float *x, int M, int N, const rg_sample_args *a)
{
	struct sample_job j = {x, M, N, a};

	if (M > 0)
		rg_threadpool_run(rg_threadpool_global(), M, sample_task, &j);
	return RG_OK;
}
