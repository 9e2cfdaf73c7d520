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
 * (rg_cost_model_from_table, app/server/sched/cost_table.h). Pure arithmetic, no model, no
 * CUDA, no state: it lives in core/ because both sides use it, the library's iteration scheduler
 * (src/sched/iter.c) and the server's encoder schedulers (app/server/sched/), and the ragged
 * binary compiles its own copy beside libragged.so (where it is hidden). */
#ifndef RG_CORE_COST_MODEL_H
#define RG_CORE_COST_MODEL_H
#include <stdbool.h>
#include "ragged.h"

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

/* rg_cost_model_fit with a weight w[i] >= 0 (finite) per measurement: least squares of
 * sum w[i] * residual[i]^2 (w NULL: all 1). RG_ERR_INVALID_INPUT also when every weight is 0. */
rg_status rg_cost_model_fit_weighted(const double *tokens, const double *pairs, const double *ms,
				     const double *w, int n, rg_cost_model *out);

/* Online refit from the batches a server actually runs. A fit made once at start-up can be far
 * off (measured on a busy machine: 66 ms a batch and nothing per token), and one scale factor
 * cannot mend its shape; so the batches run are sorted into shape classes (log2 of the computed
 * tokens x log2 of the mean attention length pairs/tokens), each class keeps an exponentially
 * weighted mean (alpha 1/4) of its recent batches, and the model is refitted (NNLS on relative
 * errors) to one point per class, a class weighing 0.95^(batches since it last ran), at least
 * 0.05, so that what runs now counts most and shapes seen long ago still inform. The start-up
 * model (prior) enters as four points (the shapes of the start-up measurement: 1 x 16, 1 x L,
 * L/16 x 16, 4 x L tokens, L = min(256, max_len)) of weight 0.0025 each: it decides only what
 * the batches run cannot (with one shape of batch, how its time splits into fixed and
 * per-token cost). An all-zero prior adds no point. Pure arithmetic, fixed size, no
 * allocation. */
enum { RG_COST_LEARN_TOK_BINS = 24, RG_COST_LEARN_LEN_BINS = 16 };

typedef struct rg_cost_learner {
	double prior_tok[4], prior_pairs[4], prior_ms[4];
	struct {
		double tokens, pairs, ms; /* EW means of the class's batches */
		unsigned long long last;  /* batch number of its last batch; 0: never */
	} cls[RG_COST_LEARN_TOK_BINS * RG_COST_LEARN_LEN_BINS];
	unsigned long long n_batches;
} rg_cost_learner;

/* Start from the prior model m (all zero: no prior information) for a model of max_len tokens. */
void rg_cost_learner_init(rg_cost_learner *l, const rg_cost_model *m, int max_len);
/* Replace the prior only (a better start-up model came: the DP cost table's fit). */
void rg_cost_learner_set_prior(rg_cost_learner *l, const rg_cost_model *m, int max_len);

/* One batch of `tokens` computed tokens and `pairs` attention pairs ran in ms. Ignored unless
 * every value is finite, tokens >= 1, pairs >= 0, ms >= 0. */
void rg_cost_learner_add(rg_cost_learner *l, double tokens, double pairs, double ms);

/* The model refitted to the classes and the prior (see above); the zero model when there is
 * neither. Errors as rg_cost_model_fit_weighted's. */
rg_status rg_cost_learner_fit(const rg_cost_learner *l, rg_cost_model *out);

/* ---- The cost of one generation step (the iteration scheduler's admission, src/sched/iter.h)
 *
 * A step of the iteration scheduler mixes decode rows (one new token after c cached ones) and
 * prefill chunks (n new tokens after c cached ones). Its time is modelled as
 *     step_ms + token_ms * tokens + pair_ms * pairs + ctx_ms * ctx + row_ms * rows
 * with tokens the computed tokens (the GEMM rows of every layer), pairs the query-key pairs of
 * the prefill chunks under the causal mask (n * (c + (n + 1) / 2) each: attention's compute),
 * ctx the context the decode rows read (the sum of their context lengths: attention's KV reads,
 * which on a GPU cost per pair several times what a prefill pair costs), and rows the logits
 * rows sampled (sampling, detokenizing and the host's per-stream work). step_ms is what every
 * step pays (launches, the weights read once per step when decoding is memory bound).
 * Vidur (Agrawal et al., MLSys'24) models a step the same way, per operation, from the
 * batch's prefill and decode composition.
 *
 * rg_step_learner fits it online from the steps an engine runs: steps are sorted into shape
 * classes (decode rows x prefill tokens x mean context, each on a log2 scale); a class keeps an
 * exponentially weighted mean of its recent steps (alpha 1 / (1 + its count of steps decayed
 * as below, at most 3): at least 1/4, near 1 for a class met again after long), a new
 * measurement first clipped
 * to 4x the class's mean (one step that paid a one-time cost, allocation or a graph capture,
 * moves it by at most 3/4 of its mean); the model is the non-negative least-squares fit on
 * relative errors of one point per class, a class weighing 2^-(steps since it last ran / 64),
 * at least 0.01, so that what runs now decides and shapes seen long ago only fill in what
 * nothing recent measures. A prior (a start-up fit, e.g. of warm-up steps:
 * rg_step_learner_settle) enters as five points of weight 0.0025. Pure arithmetic, fixed
 * size (about 90 KB: allocate it with its owner), no allocation. */
typedef struct rg_step_shape {
	double tokens;   /* computed tokens of the step, >= 1 */
	double n_decode; /* decode rows among them (classes only; not a model term) */
	double pairs;    /* attention pairs of its prefill chunks */
	double ctx;      /* context lengths of its decode rows, summed */
	double rows;     /* logits rows sampled */
} rg_step_shape;

typedef struct rg_step_cost {
	double step_ms;  /* per step, ms, >= 0 */
	double token_ms; /* per computed token */
	double pair_ms;  /* per prefill attention pair */
	double ctx_ms;   /* per context token read by a decode row */
	double row_ms;   /* per sampled row */
} rg_step_cost;

/* Estimated time (ms) of a step of shape x; an all-zero model estimates 0 (no information). */
double rg_step_cost_ms(const rg_step_cost *m, const rg_step_shape *x);
/* True when every coefficient is 0. */
bool rg_step_cost_zero(const rg_step_cost *m);
/* True when every coefficient is finite and >= 0. */
bool rg_step_cost_valid(const rg_step_cost *m);

/* Fit the model to n >= 1 measured steps x[i] -> ms[i] with weights w[i] >= 0 (NULL: all 1) by
 * weighted least squares with every coefficient >= 0 (the exact optimum over the 31 supports of
 * the 5 terms, columns scaled to unit RMS). RG_ERR_INVALID_INPUT for n < 1, a value that is
 * not finite and >= 0, or every weight 0. */
rg_status rg_step_cost_fit(const rg_step_shape *x, const double *ms, const double *w, int n,
			   rg_step_cost *out);

enum { RG_STEP_LEARN_DEC = 9, RG_STEP_LEARN_PF = 12, RG_STEP_LEARN_CTX = 14,
       RG_STEP_LEARN_PRIOR = 5 };

typedef struct rg_step_learner {
	rg_step_shape prior_x[RG_STEP_LEARN_PRIOR];
	double prior_ms[RG_STEP_LEARN_PRIOR];
	int n_prior;
	struct {
		rg_step_shape x;         /* EW mean of the class's steps */
		double ms;
		double w;                /* its decayed count of steps, at most 3 */
		unsigned long long last; /* step number of its last step; 0: never */
	} cls[RG_STEP_LEARN_DEC * RG_STEP_LEARN_PF * RG_STEP_LEARN_CTX];
	unsigned long long n_steps;
	int max_tokens, max_seqs, max_context; /* the engine's limits: the prior's shapes */
} rg_step_learner;

/* Start from prior m (NULL or all zero: none) for an engine of max_tokens new tokens and
 * max_seqs sequences a step and max_context tokens a sequence. */
void rg_step_learner_init(rg_step_learner *l, const rg_step_cost *m, int max_tokens, int max_seqs,
			  int max_context);
/* Replace the prior only. */
void rg_step_learner_set_prior(rg_step_learner *l, const rg_step_cost *m);
/* One step of shape x ran in ms. Ignored unless every value is finite, x->tokens >= 1, the
 * others >= 0 and ms >= 0. */
void rg_step_learner_add(rg_step_learner *l, const rg_step_shape *x, double ms);
/* The model refitted to the classes and the prior; the zero model when there is neither. */
rg_status rg_step_learner_fit(const rg_step_learner *l, rg_step_cost *out);
/* Fold what was measured into the prior and forget the measurements: after a warm-up, whose
 * steps ran cold (first shapes, caches, a machine not yet loaded as it will be), so that they
 * inform only what the steps run later do not. Nothing measured: the prior is kept. */
void rg_step_learner_settle(rg_step_learner *l);

#endif
