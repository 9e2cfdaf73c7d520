/* Batch schedulers: which queued requests run next, and where each sits in the batch.
 * Policy only (no model, no CUDA): the server's engine worker calls rg_sched_pick whenever the
 * runtime is idle (or when *wake_ms says so), then runs the chosen requests with
 * rg_model_embed_layout(..., &batch.layout, ...), removes them from its queue and calls again.
 *
 * Policies (rg_sched_kind) and the execution mode (rg_exec_mode) each one targets:
 *  NOBATCH      one request, oldest first.                                          PACKED
 *  NAIVE        the oldest requests, one per row, rows padded to the longest
 *               (TCB, ICPP'22, sec. 6.1 "TNB", NaiveBatching).                      PADDED
 *  TOKEN        oldest first until max_batch_tokens or max_batch_requests would be
 *               exceeded (TEI-style continuous token budget).                       PACKED
 *  DP           TurboTransformers (PPoPP'21) sec. 5, Algorithm 2: sort by length, DP
 *               over prefixes minimizing the total padded-batch cost from the cost
 *               table; hungry or lazy (half-latency-budget rule).                   PADDED
 *  CONCAT       TCB sec. 4.1 pure ConcatBatching, first-fit in arrival order into B
 *               rows of L tokens (the engine of TCB sec. 6.2.2, FCFS).              CONCAT
 *  SLOTTED      TCB sec. 4.2 slotted ConcatBatching: as CONCAT, rows cut into slots
 *               of slot_len tokens, a request never crosses a slot; a batch led by
 *               a request longer than slot_len has slots of the smallest multiple
 *               of slot_len that holds it and divides L (at most a row).           SLOTTED
 *  DAS          TCB sec. 5.2, Algorithm 1 (utility 1/len, eta, q, deadlines) on B
 *               rows of L tokens; with das_packed one row of max_batch_tokens.      CONCAT/PACKED
 *  SLOTTED_DAS  TCB sec. 5.3, Algorithm 2: DAS, then slot size = longest request of
 *               the utility-dominant sets, requests placed greedily into slots.     SLOTTED
 *  FCFS/SJF/EDF TCB sec. 6.2.4 comparison policies (arrival / shortest / earliest
 *               deadline first), greedy under the PACKED token budget.              PACKED
 *
 * Common rules for every policy:
 *  - a request whose deadline has passed (deadline_ms <= now_ms) is never picked: the caller
 *    answers it (504) and drops it;
 *  - a request longer than rg_sched_max_len() is never picked: the caller must reject it at
 *    admission (413), or it stays queued until its deadline;
 *  - a batch never holds more than max_batch_requests requests nor computes more than
 *    max_batch_tokens tokens (padding included: batch.computed_tokens);
 *  - with max_batch_ms > 0, a batch's estimated latency stays within max_batch_ms (the time
 *    budget: a long queue runs as several short batches, so a request that arrives meanwhile
 *    waits one short batch, not one long one). The estimate is cost_model's (cost_model.h) for
 *    every policy but DP, which reads its cost table. A batch of one request (row policies: of
 *    one row) may exceed it: a sequence cannot be split.
 * Not thread-safe: one scheduler belongs to one thread. */
#ifndef RG_SERVER_SCHED_SCHED_H
#define RG_SERVER_SCHED_SCHED_H
#include <stdbool.h>
#include <stdint.h>
#include "ragged.h"
#include "core/cost_model.h"
#include "server/sched/cost_table.h"

typedef enum rg_sched_kind {
	RG_SCHED_NOBATCH = 0,
	RG_SCHED_NAIVE,
	RG_SCHED_TOKEN,
	RG_SCHED_DP,
	RG_SCHED_CONCAT,
	RG_SCHED_SLOTTED,
	RG_SCHED_DAS,
	RG_SCHED_SLOTTED_DAS,
	RG_SCHED_FCFS,
	RG_SCHED_SJF,
	RG_SCHED_EDF,
	RG_SCHED_N_KINDS,
} rg_sched_kind;

/* "nobatch", "naive", "token", "dp", "concat", "slotted", "das", "slotted-das" (also
 * "slotted_das"), "fcfs", "sjf", "edf". RG_ERR_INVALID_INPUT on an unknown name (the message lists
 * the valid ones). */
rg_status rg_sched_kind_parse(const char *name, rg_sched_kind *out);
/* Canonical name of a kind; "?" when out of range. */
const char *rg_sched_kind_name(rg_sched_kind kind);
/* Execution mode the kind produces (DAS with das_packed: PACKED). */
rg_exec_mode rg_sched_kind_mode(rg_sched_kind kind, bool das_packed);

/* One queued request, as the caller's queue holds it. */
typedef struct rg_sched_req {
	uint64_t id;        /* caller's id, not interpreted */
	int len;            /* tokens, >= 1 */
	double arrival_ms;  /* arrival time, same clock as now_ms */
	double deadline_ms; /* absolute deadline, same clock; INFINITY for none */
} rg_sched_req;

typedef struct rg_sched_params {
	rg_sched_kind kind;
	int max_batch_tokens;   /* computed tokens per batch, padding included (the model's arena) */
	int max_batch_requests; /* requests per batch */
	int n_rows;             /* B: CONCAT/SLOTTED/DAS/SLOTTED_DAS rows; n_rows*row_len <= max_batch_tokens */
	int row_len;            /* L: tokens per row (<= the model's max_position_embeddings) */
	int slot_len;           /* SLOTTED: tokens per slot, row_len % slot_len == 0 */
	double eta, q;          /* DAS (TCB sec. 5.2): eta, q in (0,1), eta + q = 1 (+-1e-9) */
	bool lazy;              /* DP: lazy strategy (TurboTransformers sec. 5) instead of hungry */
	double latency_budget_ms; /* DP lazy: the latency constraint (> 0) */
	const rg_cost_table *cost; /* DP: required, complete, mode PADDED; borrowed, must outlive s */
	bool das_packed;        /* DAS: one row of max_batch_tokens, PACKED layout */
	double max_batch_ms;    /* time budget of one batch by estimate, ms; 0: none */
	rg_cost_model cost_model; /* batch latency estimate of the time budget and of
				   * batch.est_ms (every policy but DP); all zero: none */
} rg_sched_params;

/* Defaults for a kind: max_batch_tokens 16384, max_batch_requests 256, n_rows 32, row_len 512,
 * slot_len 128, eta = q = 0.5, hungry, latency budget 100 ms, no cost table, das_packed false,
 * no time budget (max_batch_ms 0) and an all-zero cost model. */
rg_sched_params rg_sched_params_default(rg_sched_kind kind);

/* Fill the fields that depend on the model and the batch budget, for a server's choices left at
 * 0: row_len <= 0 -> min(max_position_embeddings, 512) (TCB sec. 4: a row holds one sequence of
 * the longest length); row_len is then capped at max_batch_tokens; n_rows <= 0 ->
 * max_batch_tokens / row_len (>= 1); slot_len <= 0 -> min(128, row_len), or row_len when that
 * does not divide it; q = 1 - eta. Fields already set are kept. */
void rg_sched_params_derive(rg_sched_params *p, int max_position_embeddings);

/* A chosen batch. Storage is allocated once by rg_sched_batch_init for `cap` requests and reused.
 * Request i of the batch is queue[queue_idx[i]] of the queue passed to rg_sched_pick; it sits in
 * row req_row[i] starting at token req_offset[i] of that row (PACKED: row 0, offsets back to
 * back). The caller builds tokens/cu_seqlens in the order i = 0..n-1 and passes &layout to
 * rg_model_embed_layout; layout.req_row/req_offset point into this struct.
 * layout.n_rows counts only the rows used (<= params n_rows); CONCAT/SLOTTED keep row_len = L;
 * SLOTTED's layout.slot_len is params slot_len, or a multiple of it dividing L when the batch's
 * oldest request is longer than a slot;
 * SLOTTED_DAS chooses slot_len = m per batch (TCB Algorithm 2) and computes rows of
 * floor(L/m)*m tokens, so its layout.row_len can be below params row_len. */
typedef struct rg_sched_batch {
	int n;               /* requests in the batch; 0 = nothing to run now */
	int cap;             /* capacity of the arrays */
	int *queue_idx;      /* (cap) indices into the queue, distinct */
	int32_t *req_row;    /* (cap) */
	int32_t *req_offset; /* (cap) */
	rg_layout layout;    /* mode, n_rows, row_len, slot_len, req_row, req_offset */
	int real_tokens;     /* sum of the requests' lengths */
	int computed_tokens; /* tokens the runtime computes: PACKED real_tokens, else n_rows*row_len */
	double attn_pairs;   /* query-key pairs attention computes (cost_model.h): PACKED the sum of
			      * len^2, PADDED/CONCAT n_rows*row_len^2, SLOTTED n_rows*row_len*slot_len */
	double est_ms;       /* estimated latency: DP the cost table's, other policies the cost
			      * model's (0 with an all-zero model) */
} rg_sched_batch;

/* Allocate storage for cap >= 1 requests (use params.max_batch_requests). RG_ERR_OOM,
 * RG_ERR_INVALID_INPUT. On failure *b is left zeroed. */
rg_status rg_sched_batch_init(rg_sched_batch *b, int cap);
void rg_sched_batch_free(rg_sched_batch *b); /* accepts NULL and a zeroed struct */

typedef struct rg_sched rg_sched;

/* Create a scheduler. Validates p (returns NULL, *st = RG_ERR_INVALID_INPUT with a message, on
 * out-of-range limits, eta + q != 1, DP without a complete cost table, lazy without a budget,
 * SLOTTED with row_len % slot_len != 0, SLOTTED_DAS with das_packed...). The params are copied;
 * p->cost is borrowed. Free with rg_sched_free. */
rg_sched *rg_sched_create(const rg_sched_params *p, rg_status *st);
void rg_sched_free(rg_sched *s); /* accepts NULL */
const rg_sched_params *rg_sched_get_params(const rg_sched *s);

/* Replace the time budget and the cost model (the server refines its estimate as batches run).
 * RG_ERR_INVALID_INPUT when max_batch_ms is negative or a coefficient is negative or not finite
 * (nothing is changed then). */
rg_status rg_sched_set_time_budget(rg_sched *s, double max_batch_ms, const rg_cost_model *m);

/* Longest request (tokens) this scheduler can ever place: max_batch_tokens for the packed and
 * padded policies, row_len for CONCAT/DAS/SLOTTED/SLOTTED_DAS (SLOTTED widens a batch's slots
 * for a request longer than slot_len). */
int rg_sched_max_len(const rg_sched *s);

/* Choose the next batch from `queue` (n_queue >= 0 pending requests, in arrival order).
 * out: batch from rg_sched_batch_init with cap >= max_batch_requests; overwritten.
 * Returns RG_OK with out->n >= 1 when a batch should run now, or out->n == 0 when nothing should
 * run now: then *wake_ms (if wake_ms) is the time at which to call again even if nothing arrives
 * (lazy DP waiting: oldest arrival + budget/2 - estimated time of the queue), or INFINITY when
 * nothing is pickable (empty queue, all expired or too long). When out->n >= 1, *wake_ms = now_ms.
 * Errors: RG_ERR_INVALID_INPUT (a len < 1, NULL queue with n_queue > 0, out->cap too small),
 * RG_ERR_OOM (scratch growth), RG_ERR_INTERNAL (a broken invariant). */
rg_status rg_sched_pick(rg_sched *s, const rg_sched_req *queue, int n_queue, double now_ms,
			rg_sched_batch *out, double *wake_ms);

#endif
