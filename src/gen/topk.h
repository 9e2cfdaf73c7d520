/* Top-k selection on the host. rg_topk_hier is LightSeq's hierarchical retrieve-and-rerank
 * (Wang et al., NAACL'21 industry track, sec. 2.2): split x into k groups, take each group's
 * maximum m_i, and let R = min_i m_i, a rough k-th largest value. Each of the k groups holds an
 * element >= R, so at least k elements are >= R and the true top k are among them: retrieve the
 * candidates x_i >= R (usually a few dozen on logits), then rerank only those. The result is exact,
 * identical to a full sort. Groups are strided (element i in group i % k), as a GPU kernel's threads
 * stride the row. The CPU version is what samplers and beam search use on the host and the
 * reference for a device kernel. */
#ifndef RG_GEN_TOPK_H
#define RG_GEN_TOPK_H
#include <stdint.h>

#include "core/export.h"
#include "ragged.h"

/* The k largest of x (n) float32: idx (k) int32 and val (k) float32 (val may be NULL), caller-
 * owned, in the order of a stable full sort: value descending, ties by ascending index.
 * 1 <= k <= n. x must hold no NaN (NaN compares false and its place is undefined).
 * scratch: (n) int32 working space, or NULL to allocate it here. *n_cand (may be NULL)
 * receives the number of retrieved candidates (k..n). RG_ERR_INVALID_INPUT, RG_ERR_OOM. */
RG_TEST_API rg_status rg_topk_hier(const float *x, int n, int k, int32_t *idx, float *val,
				   int32_t *scratch, int *n_cand);

/* Same contract by a full sort of all n indices: the reference for rg_topk_hier. */
RG_TEST_API rg_status rg_topk_sort(const float *x, int n, int k, int32_t *idx, float *val);
/* rg_topk_hier on float64 values (beam scores), indices only. */
rg_status rg_topk_hier_f64(const double *x, int n, int k, int32_t *idx, int32_t *scratch);
#endif
