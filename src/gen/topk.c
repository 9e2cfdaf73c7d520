/* Hierarchical retrieve-and-rerank top-k (LightSeq sec. 2.2) and a full-sort reference. */
#include "gen/topk.h"

#include <stdlib.h>

#include "core/error.h"

/* value descending, then index ascending; candidates are few, so an insertion sort of the
 * retrieved set is cheap, but a tie-heavy row can retrieve all n: qsort then. */
static _Thread_local const float *g_sort_x; /* qsort has no context argument in C11 */

static int cmp_desc(const void *a, const void *b)
{
	int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
	float xi = g_sort_x[i], xj = g_sort_x[j];

	if (xi > xj)
		return -1;
	if (xi < xj)
		return 1;
	return (i > j) - (i < j);
}

static void sort_idx(const float *x, int32_t *ix, int m)
{
	if (m <= 32) {
		for (int a = 1; a < m; a++) {
			int32_t v = ix[a];
			int b = a - 1;

			while (b >= 0 && (x[ix[b]] < x[v] || (x[ix[b]] == x[v] && ix[b] > v))) {
				ix[b + 1] = ix[b];
				b--;
			}
			ix[b + 1] = v;
		}
		return;
	}
	/* qsort_r would be reentrant; the comparator's context is thread-local instead */
	g_sort_x = x;
	qsort(ix, (size_t)m, sizeof(int32_t), cmp_desc);
}

rg_status rg_topk_hier(const float *x, int n, int k, int32_t *idx, float *val, int32_t *scratch,
		       int *n_cand)
{
	int32_t *cand = scratch;
	float r = 0.f;
	int m = 0;

	if (n < 1 || k < 1 || k > n)
		return rg_errorf(RG_ERR_INVALID_INPUT, "topk: k=%d of n=%d", k, n);
	if (!cand && !(cand = malloc((size_t)n * sizeof(int32_t))))
		return rg_errorf(RG_ERR_OOM, "topk: out of memory");
	/* retrieve: R = min over the k strided groups of the group maximum */
	for (int g = 0; g < k; g++) {
		float mx = x[g];

		for (int i = g + k; i < n; i += k)
			if (x[i] > mx)
				mx = x[i];
		if (g == 0 || mx < r)
			r = mx;
	}
	for (int i = 0; i < n; i++)
		if (x[i] >= r)
			cand[m++] = i;
	/* rerank the candidates only */
	sort_idx(x, cand, m);
	for (int i = 0; i < k; i++) {
		idx[i] = cand[i];
		if (val)
			val[i] = x[cand[i]];
	}
	if (n_cand)
		*n_cand = m;
	if (cand != scratch)
		free(cand);
	return RG_OK;
}

rg_status rg_topk_sort(const float *x, int n, int k, int32_t *idx, float *val)
{
	int32_t *all;

	if (n < 1 || k < 1 || k > n)
		return rg_errorf(RG_ERR_INVALID_INPUT, "topk: k=%d of n=%d", k, n);
	if (!(all = malloc((size_t)n * sizeof(int32_t))))
		return rg_errorf(RG_ERR_OOM, "topk: out of memory");
	for (int i = 0; i < n; i++)
		all[i] = i;
	g_sort_x = x;
	qsort(all, (size_t)n, sizeof(int32_t), cmp_desc);
	for (int i = 0; i < k; i++) {
		idx[i] = all[i];
		if (val)
			val[i] = x[all[i]];
	}
	free(all);
	return RG_OK;
}

static _Thread_local const double *g_sort_d;

static int cmp_desc_d(const void *a, const void *b)
{
	int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
	double xi = g_sort_d[i], xj = g_sort_d[j];

	if (xi > xj)
		return -1;
	if (xi < xj)
		return 1;
	return (i > j) - (i < j);
}

rg_status rg_topk_hier_f64(const double *x, int n, int k, int32_t *idx, int32_t *scratch)
{
	int32_t *cand = scratch;
	double r = 0.0;
	int m = 0;

	if (n < 1 || k < 1 || k > n)
		return rg_errorf(RG_ERR_INVALID_INPUT, "topk: k=%d of n=%d", k, n);
	if (!cand && !(cand = malloc((size_t)n * sizeof(int32_t))))
		return rg_errorf(RG_ERR_OOM, "topk: out of memory");
	for (int g = 0; g < k; g++) {
		double mx = x[g];

		for (int i = g + k; i < n; i += k)
			if (x[i] > mx)
				mx = x[i];
		if (g == 0 || mx < r)
			r = mx;
	}
	for (int i = 0; i < n; i++)
		if (x[i] >= r)
			cand[m++] = i;
	g_sort_d = x;
	qsort(cand, (size_t)m, sizeof(int32_t), cmp_desc_d);
	for (int i = 0; i < k; i++)
		idx[i] = cand[i];
	if (cand != scratch)
		free(cand);
	return RG_OK;
}
