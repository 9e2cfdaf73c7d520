/* Iteration-level scheduling of generation (Orca, Yu et al. OSDI'22; vLLM's scheduler, Kwon et
 * al. SOSP'23), with chunked prefill (Sarathi-Serve, Agrawal et al. OSDI'24; vLLM's
 * enable_chunked_prefill), prefix caching (src/kv/prefix_cache.h) and deadline-aware admission
 * (TCB's DAS, Fu et al. ICPP'22 sec. 5.2, applied to steps instead of whole requests).
 * Policy only: no clock of its own (the caller passes times, ms on any monotonic clock, or a
 * simulated one), no model, no CUDA. The runner contract is include/ragged.h's rg_step_batch.
 *
 * Lifecycle of a request: rg_iter_add (admitted into the waiting queue, or refused at once) ->
 * scheduled by rg_iter_schedule in chunks of its prompt (running, prefilling) -> one token per
 * step (running, decoding) -> finished (max_tokens, the context limit, a stop the caller
 * reports, or rg_iter_abort), its blocks freed in rg_iter_update. The driver loop:
 *     for (;;) {
 *         rg_iter_schedule(s, now, &plan);              // the next step
 *         if (plan.batch.n_seq == 0) { wait for requests; continue; }
 *         copy_blocks(plan.copy_src, plan.copy_dst, plan.n_copies);   // copy-on-write first
 *         step(&plan.batch) -> logits of plan.batch.n_logits rows -> sample one token per row;
 *         rg_iter_update(s, sampled, stop, now, step_ms);  // tokens, finishes, blocks freed
 *         rg_iter_finished(s, &n) -> the requests that ended since the last call
 *     }
 * One schedule, then one update: a second schedule before the update is refused.
 *
 * One step (rg_iter_schedule): a budget of max_num_batched_tokens new tokens and max_num_seqs
 * sequences is given, in this order, to
 *   1. running sequences that decode (one token each), oldest admission first;
 *   2. running sequences still prefilling (the rest of their prompt, cut to the budget left),
 *      oldest first;
 *   3. waiting requests, in the queue's order (below): each admitted one first shares the
 *      cached blocks of its prompt's prefix (prefix caching: those tokens are not computed),
 *      then gets a chunk of the rest. Admission stops at the first request that does not fit
 *      (no overtaking): one is admitted only when the blocks of all its tokens (not only the
 *      chunk) fit with a headroom left free (the cache's unreferenced blocks counted as free),
 *      the headroom being watermark_blocks, by default (-1) max(1% of the pool, the sequences
 *      running after it): one block for each running sequence's next decode block (vLLM's
 *      watermark; without it a preempted sequence came back into the same squeeze at once).
 *      Nothing running: no headroom. No admission in a step that preempted.
 * The queue's order (waiting, and running too): priority (higher first), then start-time fair
 * queueing across fair shares (Goyal, Vin, Cheng, SIGCOMM'96: a request's virtual start tag is
 * where its share's previous live request ends, each request costing its prompt plus
 * max_tokens, or the virtual time now, the tag of the last admitted request, when its share
 * has none live), then arrival. Requests of one share (rg_iter_request.fair_key: one HTTP
 * request's thousands of prompts, or one API key) thus line up behind each other while a
 * request of another share starts at the virtual time now: it waits for about one request of
 * each other share, not for all of them. Each request its own share (the default) is first
 * come, first served.
 * So a long prompt is cut into chunks that share steps with every decoding stream, and decodes
 * never wait for a prefill. KV slots come from the sequence table (src/kv/seq_table.h, over the
 * pool given at init; the scheduler names its sequences there by id and holds no block table)
 * as the step is built; when the free list runs dry the cache's LRU unreferenced blocks are
 * evicted, and then the LAST running sequence in the queue's order (the newest arrival of the
 * lowest priority and most served share) is preempted (vLLM's recompute preemption): its
 * blocks are freed, it goes back to waiting with its prompt and the tokens it generated, and is
 * later prefilled again (its earlier full blocks often still cached). If it was already part of
 * the step being built it is taken out of it. A running sequence never fails for lack of blocks:
 * the pool must hold one sequence of max_context tokens (checked at init), and the oldest
 * running sequence can always take every other's blocks.
 *
 * Deadline-aware admission: a request may carry deadline_ms (time to first token, from its
 * arrival) and tpot_ms (mean time between its output tokens). rg_iter_add then simulates the
 * steps this scheduler would run from now, with the candidate at its place in the queue's order:
 * the same three passes, budget and order, so the candidate's first token comes after every
 * prompt token ahead of it, in chunks of max_num_batched_tokens beside the decode steps of
 * everything running and admitted ahead (decoding requests assumed to run to max_tokens). Each
 * simulated step lasts what the step cost model says of its shape (src/core/cost_model.h
 * rg_step_cost: per step, per token, per prefill attention pair, per decode context token, per
 * sampled row), fitted online from the steps measured (rg_iter_cost_observe, or rg_iter_update's
 * step_ms; rg_step_learner: recent steps decide; a prior may be set, and rg_iter_cost_settle
 * folds warm-up steps into it). The estimates (rg_iter_admission: TTFT from arrival, the mean
 * TPOT, as the model predicts them) times deadline_slack must meet the targets: it refuses at
 * once (RG_ERR_BUSY, for HTTP 429 with Retry-After) when the candidate would miss its TTFT or
 * TPOT target, or when it would make a request in the engine that would meet its targets miss
 * them; otherwise it admits. Retry-After comes from the queue: for TTFT, how far the estimate
 * overshoots (the queue ahead must drain that much first); for TPOT, when the simulated batch
 * without it shrinks to the rows at which its TPOT is met; for another's target, when that one
 * has its first token. An all-zero cost model (nothing measured, no prior) estimates nothing and
 * admits. A request without targets is refused for time only when it would make another miss.
 * The simulation of a candidate with a deadline stops at 16 times its deadline's horizon
 * without its first token (missed by far; its estimate is then that lower bound), so a request
 * behind thousands does not simulate them all.
 * This is TCB's DAS (Fu et al. ICPP'22 sec. 5.2: schedule what meets its deadline), moved
 * from batch selection to admission, so that what is accepted is kept. The simulation ignores
 * KV pressure (preemption) and prefix hits of the requests already queued (both make it
 * optimistic, resp. pessimistic), and assumes every running request generates max_tokens
 * (pessimistic when EOS comes first). Cost: O(simulated steps x running) per rg_iter_add with
 * targets live (waiting entries are met once each). Not thread-safe: one owner (the engine's
 * step thread, or its lock) drives it.
 *
 * Beam groups (vLLM's per-step beam search, LightSeq sec. 2's beam search inside the step loop):
 * a request with n_beams >= 2 is prefilled as one sequence; the plan marks its rows with their
 * beam slot (plan.beam_slot). When its prompt's last row comes, and at every step after, the
 * caller runs its beam search (src/gen/beam.h) on the group's rows and, before rg_iter_update,
 * gives the next beams with rg_iter_beam_next: new beam j continues the member of slot
 * parent[j] with token[j] (parent -1: slot j is not live, e.g. a finished group of a diverse
 * search). rg_iter_update then re-seats the members (rg_kv_reseat): a parent's last child
 * takes its block table over, the others fork it (no cache is copied; a shared, partially
 * filled last block is copied on the next append, reported in plan.copy_src/dst). The members
 * run in lockstep: a step schedules all of a group's members or none, and they stay contiguous
 * in slot order, so the group's rows come in slot order. The caller ends the search with a stop
 * on any of its rows (the search is done), or the scheduler ends it at max_tokens; either way
 * one entry is listed by rg_iter_finished and every member's blocks go back. Preemption takes a
 * group whole and restarts it (its blocks freed, the prompt alone back to waiting): when the
 * prompt's row comes again (rg_iter_tokens gives prompt_len tokens), the caller restarts its
 * search, which is deterministic. A group is admitted only with room for all its members
 * (n_running + n_beams <= max_num_seqs) and only if n_beams sequences of prompt + max_tokens
 * fit in the pool (else RG_ERR_TOO_LONG at rg_iter_add). Admission's simulation counts the
 * members running as sequences and a waiting group as one (optimistic for its decode steps).
 *
 * Speculative decoding (Leviathan et al. 2023, "Fast inference from transformers via
 * speculative decoding"; Chen et al. 2023; the drafts here come from the caller, e.g. prompt
 * lookup, src/gen/spec.h; the caller's token for each row is its greedy choice or its draw): before rg_iter_schedule the caller may give a decoding sequence
 * draft tokens (rg_iter_set_draft). Its row in the step is then its last token plus the n
 * drafts (a short chunk over its paged KV, like a prefill chunk), n cut so that the budget
 * keeps one token for every other decoding sequence, and to the blocks it can have; the plan
 * asks for the logits of each of its 1 + n positions (adjacent rows, position order;
 * plan.n_draft gives n). rg_iter_update verifies: walking the rows j = 0..n, the token given
 * for row j is appended; the walk stops at a stop on that row, at max_tokens, at j == n, or
 * where the token differs from draft j (so the tokens kept are the longest prefix of the draft
 * that the caller's choices match, plus the caller's next token). The KV of the rejected
 * positions is rolled back (rg_kv_truncate: blocks that held only them go back to the pool).
 * The caller runs the same walk to accept tokens (stops, text) and reports a stop on the row
 * where it stopped; rows after that are ignored. A draft lives for one schedule. Beam groups
 * and encoder-decoders take no drafts.
 *
 * Prompt scoring (OpenAI completions' echo with logprobs, vLLM's prompt_logprobs): a request
 * with prompt_logits set asks for the logits of each prompt position p < prompt_len - 1 (they
 * score prompt token p + 1) as its prefill chunks compute them. They come as extra logits rows
 * after the step's sampling rows (plan.n_prompt_rows, plan.prompt_pos), at most
 * max_prompt_logits of them per step (the caller's host buffer of vocab-sized rows): such a
 * sequence's chunk is cut to the rows left, and waits for the next step when none are. It
 * shares no cached prefix (the skipped positions would have no logits; vLLM does the same),
 * though its own blocks are cached for others. A preempted one scores its prompt again when it
 * is prefilled again. Admission's simulation does not model the row cut (its estimates of such
 * a request are optimistic when max_prompt_logits < max_num_batched_tokens). */
#ifndef RG_SCHED_ITER_H
#define RG_SCHED_ITER_H
#include <stdbool.h>
#include <stdint.h>

#include "core/export.h"
#include "kv/block_pool.h"
#include "kv/prefix_cache.h"
#include "ragged.h"
#include "core/cost_model.h"

/* The widest beam group (rg_iter_request.n_beams). */
#define RG_ITER_MAX_BEAMS 64
/* The most draft tokens of one sequence's step (rg_iter_params.max_draft). */
#define RG_ITER_MAX_DRAFT 32

typedef struct rg_iter rg_iter;

/* Limits and switches (rg_iter_params_default gives the defaults in brackets). */
typedef struct rg_iter_params {
	int max_num_batched_tokens; /* token budget of one step, >= 1 [512] */
	int max_num_seqs;           /* sequences in one step, >= 1 [64] */
	int max_context;            /* longest sequence, prompt + generated, >= 2 [2048] */
	int max_waiting;            /* waiting requests at most; more: RG_ERR_BUSY [1024] */
	int watermark_blocks;       /* free blocks kept when admitting (beside the blocks of the
				     * whole sequence admitted); -1: max(1% of the pool, one per
				     * sequence running after the admission) [-1] */
	bool prefix_caching;        /* share cached prefix blocks [true] */
	double deadline_slack;      /* estimates are multiplied by this before comparing with a
				     * target, >= 1 [1.1] */
	int max_sim_steps;          /* admission simulates at most this many steps; a target not
				     * resolved by then counts as missed [8192] */
	int max_source;             /* encoder-decoders: the longest source, its cross blocks held
				     * by each sequence (kv/seq_table.c rg_kv_cross); 0: decoder-only
				     * [0] */
	int max_draft;              /* speculative draft tokens per sequence and step at most
				     * (rg_iter_set_draft), 0..RG_ITER_MAX_DRAFT; 0: none [0] */
	int max_prompt_logits;      /* prompt-logits rows of one step at most (requests with
				     * prompt_logits: the header's prompt scoring), >= 0; 0: such
				     * requests are refused [0] */
} rg_iter_params;

/* One request, as given to rg_iter_add (the prompt is copied). */
typedef struct rg_iter_request {
	uint64_t id;            /* the caller's id, unique among live requests */
	const int32_t *prompt;  /* (prompt_len) token ids */
	int prompt_len;         /* >= 1, < max_context */
	int max_tokens;         /* new tokens at most, >= 1 (also capped by max_context) */
	int priority;           /* higher runs first among waiting requests; 0 normal */
	double arrival_ms;      /* when it arrived (the caller's clock) */
	double deadline_ms;     /* TTFT target from arrival, ms; 0: none */
	double tpot_ms;         /* mean time per output token target, ms; 0: none */
	int n_beams;            /* >= 2: a beam group of that many beams (see the header),
				 * at most RG_ITER_MAX_BEAMS, max_num_seqs and
				 * max_num_batched_tokens; 0 or 1: one sequence */
	uint64_t fair_key;      /* its fair share of the queue (the header's order): requests of
				 * equal (fair_key, fair_own) share one */
	int n_src;              /* encoder-decoders: source tokens, 1..max_source (the source ids
				 * stay the caller's: a plan's encode list names the sequences whose
				 * encoder pass must run before its step); 0: decoder-only */
	bool fair_own;          /* fair_key is the caller's own name for the request (e.g. the
				 * engine's request id), apart from the keys the caller's clients
				 * give (false) */
	bool prompt_logits;     /* prompt scoring (the header): its prefill chunks ask for the
				 * logits of every prompt position but the last, and it takes no
				 * prefix from the cache; needs max_prompt_logits >= 1 and n_src 0 */
} rg_iter_request;

/* The answer of admission (filled whether admitted or refused). */
typedef struct rg_iter_admission {
	double est_ttft_ms;     /* the model's time to first token from arrival, ms, slack not
				 * applied (0: not estimated) */
	double est_tpot_ms;     /* the model's mean time per output token, ms, slack not applied
				 * (0: not estimated, or one token) */
	double retry_after_ms;  /* refused: estimated wait before the same request could be met
				 * (>= 1); -1 when it could not be met even on an idle engine */
	bool refused_for_others; /* refused because an admitted request would miss its target */
} rg_iter_admission;

/* One step to run. Every array is owned by the scheduler and valid until the next call of
 * rg_iter_update / rg_iter_free. */
typedef struct rg_iter_plan {
	rg_step_batch batch;      /* the step (ragged.h); batch.n_seq == 0: nothing to run */
	const uint64_t *seq_ids;  /* (batch.n_seq) request id of each sequence of the batch */
	const int32_t *beam_slot; /* (batch.n_seq) the beam slot of a beam group's member, -1 for
				   * other requests */
	const int32_t *logits_seq; /* (batch.n_logits) which sequence (index into the batch) each
				    * logits row samples for: sequences whose prompt is complete
				    * after this step, one row each, or 1 + n_draft adjacent rows */
	const int32_t *n_draft;   /* (batch.n_seq) draft tokens verified in each sequence's row
				   * (its last n_draft tokens in batch.tokens; 0: none) */
	int n_sample;             /* logits rows that sample: rows [0, n_sample) of
				   * batch.logits_rows, as above; rg_iter_update reads n_sample
				   * tokens */
	int n_prompt_rows;        /* = batch.n_logits - n_sample: prompt-scoring rows, after the
				   * sampling rows; logits_seq names their sequence too */
	const int32_t *prompt_pos; /* (n_prompt_rows) the position of each prompt row: its logits
				    * score that sequence's prompt token prompt_pos + 1 */
	int n_copies;             /* block copies to run before the step (copy-on-write) */
	const int32_t *copy_src, *copy_dst; /* (n_copies) */
	int n_decode_seqs;        /* sequences decoding one token */
	int n_prefill_tokens;     /* new tokens of prefilling sequences */
	double pairs;             /* attention pairs of the step, decode rows' included */
	rg_step_shape shape;      /* the step's shape, the cost model's input */
	int n_preempted;          /* sequences preempted while building it */
	/* encoder-decoders (max_source > 0): every sequence's cross blocks are in batch's cross
	 * fields; the n_encode sequences admitted by this plan (batch indices enc_seq) need their
	 * encoder pass before the step, their cross K / V written at enc_slots, enc_cu[i] ..
	 * enc_cu[i + 1] for the i-th (rg_model_encode_cross's slot_mapping) */
	int n_encode;
	const int32_t *enc_seq;   /* (n_encode) */
	const int32_t *enc_cu;    /* (n_encode + 1) */
	const int32_t *enc_slots; /* (enc_cu[n_encode]) */
} rg_iter_plan;

typedef enum rg_iter_finish {
	RG_ITER_FINISH_LENGTH = 1, /* max_tokens or max_context reached */
	RG_ITER_FINISH_STOP,       /* the caller reported a stop (EOS, stop id or string) */
	RG_ITER_FINISH_ABORT,      /* rg_iter_abort (the client went away) */
} rg_iter_finish;

typedef struct rg_iter_done {
	uint64_t id;
	rg_iter_finish reason;
	int n_generated;          /* tokens generated (the stop token included) */
	int n_preemptions;        /* times it was preempted */
	int n_cached_tokens;      /* prompt tokens taken from the prefix cache at its (last)
				   * admission */
	double first_token_ms;    /* time of its first token (the update's now_ms); -1 none */
} rg_iter_done;

typedef struct rg_iter_stats {
	int n_running, n_waiting;
	long long n_steps, n_admitted, n_refused, n_preemptions, n_finished;
	int blocks_used, blocks_free; /* of the pool (cached blocks count as used) */
	rg_prefix_cache_stats prefix;  /* zero without prefix caching */
	long long n_drafted, n_draft_accepted; /* draft tokens verified, and accepted */
} rg_iter_stats;

RG_TEST_API void rg_iter_params_default(rg_iter_params *p);

/* Make a scheduler over pool (borrowed: the caller frees it after rg_iter_free; its block size
 * is the model's). RG_ERR_INVALID_INPUT for a bad parameter or a pool that cannot hold one
 * sequence of max_context tokens; RG_ERR_OOM. */
RG_TEST_API rg_status rg_iter_init(rg_iter **out, rg_kv_pool *pool, const rg_iter_params *p);
/* Free every request (their blocks back to the pool) and the prefix cache (its blocks back).
 * NULL accepted. */
RG_TEST_API void rg_iter_free(rg_iter *s);

/* Replace the cost model's prior (e.g. fitted from start-up measurements of steps); the online
 * fit then refines it (rg_step_learner). */
RG_TEST_API void rg_iter_set_cost_prior(rg_iter *s, const rg_step_cost *m);
/* One step of shape x (a plan's shape) took ms: fed to the cost model. For a caller that
 * measures a step's whole period (the host's work around the model included) rather than
 * passing step_ms to rg_iter_update. Ignored for a bad value. */
RG_TEST_API void rg_iter_cost_observe(rg_iter *s, const rg_step_shape *x, double ms);
/* The steps measured so far become the prior, and are forgotten (rg_step_learner_settle):
 * call it after warm-up steps. */
RG_TEST_API void rg_iter_cost_settle(rg_iter *s);
/* The cost model fitted now (all zero: nothing known). */
RG_TEST_API rg_status rg_iter_cost_model(rg_iter *s, rg_step_cost *out);

/* Admit r at time now_ms into the waiting queue (see the header's admission), or refuse it.
 * adm (may be NULL) receives the estimates and, when refused, Retry-After. Errors (nothing
 * admitted): RG_ERR_INVALID_INPUT (a bad field, a duplicate id), RG_ERR_TOO_LONG (prompt_len >=
 * max_context), RG_ERR_BUSY (the waiting queue is full, or a target cannot be met), RG_ERR_OOM. */
RG_TEST_API rg_status rg_iter_add(rg_iter *s, const rg_iter_request *r, double now_ms,
				  rg_iter_admission *adm);

/* Build the next step into *plan (see the header). RG_ERR_INVALID_INPUT when the previous plan
 * has not been reported with rg_iter_update. A plan with batch.n_seq == 0 means nothing to run
 * (no request, or none that fits). Never fails a running sequence. */
RG_TEST_API rg_status rg_iter_schedule(rg_iter *s, double now_ms, rg_iter_plan *plan);

/* Report the step of the last plan: sampled (plan.batch.n_logits) the token sampled for each
 * logits row (a beam group's rows: ignored, rg_iter_beam_next gives its tokens); stop (n_logits, may be NULL) true where that token ends its request (EOS, a stop id
 * or string: the caller's stop conditions); now_ms the time the step ended (first-token times);
 * step_ms its measured duration, fed to the cost model (< 0 or NaN: not measured). The computed
 * KV of full blocks is registered in the prefix cache; finished requests free their blocks and
 * are listed by rg_iter_finished. RG_ERR_INVALID_INPUT with no plan pending. */
RG_TEST_API rg_status rg_iter_update(rg_iter *s, const int32_t *sampled, const bool *stop,
				     double now_ms, double step_ms);

/* The next beams of beam group id, whose rows are in the pending plan (call before
 * rg_iter_update, at most once per group and step; see the header): parent (n) the slot each
 * new beam j continues (-1: slot j not live after this step, rg_beam_slot_live false: the
 * search may name a parent for a slot whose group it has just ended; at the prompt's step every
 * parent >= 0 continues the prompt), token (n) its new token (>= 0 where parent >= 0);
 * n must be the group's n_beams. Copied. rg_iter_update re-seats the members; a parent that is
 * no live member, or one at max_tokens, ends the group there as an abort and the update returns
 * RG_ERR_INVALID_INPUT. Errors here (nothing stored): RG_ERR_INVALID_INPUT (no plan pending, id
 * no beam group with rows in it, n wrong, a negative token). */
RG_TEST_API rg_status rg_iter_beam_next(rg_iter *s, uint64_t id, const int32_t *parent,
					const int32_t *token, int n);

/* The requests that ended since the last call (in rg_iter_update or rg_iter_abort), each
 * returned exactly once: (*n) entries, owned by the scheduler, valid until the next call of any
 * function that takes s. */
RG_TEST_API const rg_iter_done *rg_iter_finished(rg_iter *s, int *n);

/* Cancel request id (the client went away): its blocks are freed now, or in the next
 * rg_iter_update when it is part of the pending plan; it is then listed as finished with
 * RG_ITER_FINISH_ABORT. RG_ERR_INVALID_INPUT for an unknown id. */
RG_TEST_API rg_status rg_iter_abort(rg_iter *s, uint64_t id);

/* Draft tokens (n, copied) for live request id's next step (see the header's speculative
 * decoding): used when it is decoding one sequence (not prefilling, waiting, a beam group or an
 * encoder-decoder: RG_OK and no draft), cut to max_draft and to max_tokens less one (the step
 * adds at most n + 1 tokens); n 0 clears it. Call before rg_iter_schedule; it lives for that
 * schedule. RG_ERR_INVALID_INPUT: a plan pending, an unknown id, n < 0, a negative token. */
RG_TEST_API rg_status rg_iter_set_draft(rg_iter *s, uint64_t id, const int32_t *draft, int n);

/* The tokens of a live request, prompt then generated: (*n) ids owned by the scheduler, valid
 * until the next call that changes it. NULL for an unknown id. */
RG_TEST_API const int32_t *rg_iter_tokens(const rg_iter *s, uint64_t id, int *n);

RG_TEST_API void rg_iter_stats_get(const rg_iter *s, rg_iter_stats *out);
/* The prefix cache (NULL without prefix caching), for its counters. */
RG_TEST_API const rg_prefix_cache *rg_iter_prefix_cache(const rg_iter *s);
#endif
