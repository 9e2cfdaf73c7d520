/* Batch latency model of the time budget (sched.h max_batch_ms) and of the server's admission by
 * time: the estimated latency (ms) of one forward pass over a batch is
 *     batch_ms + token_ms * tokens + pair_ms * pairs
 * where tokens are the computed tokens (padding included) and pairs the query-key pairs that
 * attention computes, the sum over its attention segments of length^2 (PACKED: one segment per
 * sequence; PADDED and CONCAT: one per row; SLOTTED: one per slot). batch_ms is the fixed cost of
 * a pass (launches, pooling), token_ms the per-token cost of the linear layers, pair_ms the
 * quadratic part of attention: the first-order shape of an encoder's cost (TurboTransformers,
 * PPoPP'21, sec. 5 makes the same point for its cost table: cost grows with batch x length and
 * super-linearly in length).
 *
 * The coefficients come from measured batches by non-negative least squares: a few packed
 * batches measured at start-up, or the cells of the DP scheduler's measured cost table
 * (rg_cost_model_from_table). Pure arithmetic, no model, no CUDA. */
#ifndef RG_SCHED_COST_MODEL_H
#define RG_SCHED_COST_MODEL_H
#include <stdbool.h>
#include "ragged.h"
#include "sched/cost_table.h"

typedef struct rg_cost_model {
	double batch_ms; /* fixed cost of one pass, ms, >= 0 */
	double token_ms; /* per computed token, ms, >= 0 */
	double pair_ms;  /* per attention query-key pair, ms, >= 0 */
} rg_cost_model;

/* Estimated latency (ms) of a batch of `tokens` computed tokens and `pairs` attention pairs.
 * An all-zero model estimates 0 (no information: callers treat it as "no bound"). */
double rg_cost_model_ms(const rg_cost_model *m, double tokens, double pairs);

/* True when every coefficient is finite and >= 0 (all zero included). */
bool rg_cost_model_valid(const rg_cost_model *m);

/* Fit the model to n >= 1 measurements (tokens[i], pairs[i]) -> ms[i] by least squares with
 * every coefficient >= 0 (the exact optimum over the 7 supports of the 3 coefficients; columns
 * scaled before solving, so tokens ~1e4 and pairs ~1e7 are fine). Measurements need
 * tokens, pairs, ms finite and >= 0. Errors: RG_ERR_INVALID_INPUT (n < 1, a bad value). */
rg_status rg_cost_model_fit(const double *tokens, const double *pairs, const double *ms, int n,
			    rg_cost_model *out);

/* Fit the model to a complete cost table (PADDED cells: a batch of b rows of len tokens computes
 * b*len tokens and b*len^2 pairs). RG_ERR_INVALID_INPUT when t is NULL or incomplete; RG_ERR_OOM. */
rg_status rg_cost_model_from_table(const rg_cost_table *t, rg_cost_model *out);
#endif
