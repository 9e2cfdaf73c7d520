/* Whole-request generation over the step API (include/ragged.h rg_step_batch), independent of
 * any model: a runner provides a step function (and a block copy for copy-on-write), this loop
 * does the rest, as llama.cpp's examples and HF's generate() do over their model calls:
 *   1. prefill: the prompts are packed into steps of at most max_step_tokens tokens (a long
 *      prompt is split over several steps: chunked prefill); each prompt's last row asks for
 *      logits;
 *   2. each prompt's n samples (or num_beams beams) fork its prompt's KV block table
 *      (src/kv/block_pool.h): the prompt is computed and stored once;
 *   3. batched decode: one token per running sequence per step, all prompts together (at most
 *      max_step_tokens sequences per runner call; a prompt's beams always share a call);
 *   4. sampling (src/gen/sampler.h) or beam search (src/gen/beam.h) on the host, stop conditions
 *      (src/gen/stop.h), a per-token callback for streaming;
 *   5. every KV block taken is released at the end and on every error path.
 * Sample j of a prompt draws from an RNG seeded with rg_rng_seed_stream(seed, j): the output of a
 * prompt does not depend on the other prompts of the call (batch invariance).
 * Not thread-safe per pool: one call at a time on a given pool.
 *
 * A model plugs in with two functions over its paged cache (src/model/decoder.c's job):
 *   static rg_status my_step(void *m, const rg_step_batch *b, float *logits)
 *   {   stage b (tokens, positions, cu_seqlens_q, context_lens, block_tables, slot_mapping),
 *       run the forward pass writing K/V at slot_mapping, gather rows b->logits_rows,
 *       LM head -> logits (n_logits, vocab) f32 on the host;  }
 *   static rg_status my_copy(void *m, const int32_t *src, const int32_t *dst, int n)
 *   {   for every layer: K[dst[i]] = K[src[i]], V[dst[i]] = V[src[i]] (whole blocks);  }
 *   rg_gen_runner r = {model, vocab, block_size, n_blocks, max_context, my_step, my_copy};
 *   rg_gen_params p; rg_gen_params_default(&p); p.max_tokens = 64; ...
 *   rg_gen_result *res; st = rg_gen_run(&r, prompts, lens, n, &p, NULL, &res); ...
 *   rg_gen_result_free(res); */
#ifndef RG_GEN_GENERATE_H
#define RG_GEN_GENERATE_H
#include <stdbool.h>
#include <stdint.h>

#include "core/export.h"
#include "gen/beam.h"
#include "gen/sampler.h"
#include "gen/stop.h"
#include "kv/block_pool.h"
#include "ragged.h"

#define RG_GEN_MAX_LOGPROBS 20 /* top alternatives per token, as OpenAI's limit */

/* What a model provides. */
typedef struct rg_gen_runner {
	void *ctx;
	int vocab_size;  /* logits per row */
	int block_size;  /* tokens per KV block */
	int n_blocks;    /* blocks of its cache (used when rg_gen_run makes the pool) */
	int max_context; /* longest sequence (prompt + generated) it can hold */
	/* Run one step (ragged.h rg_step_batch): write K/V of the new tokens to their slots and the
	 * logits of the rows b->logits_rows, (b->n_logits, vocab_size) f32 row-major, into logits
	 * (host memory, owned by the loop). A non-OK status aborts the run with that status. */
	rg_status (*step)(void *ctx, const rg_step_batch *b, float *logits);
	/* Copy blocks src[i] -> dst[i] (every layer, K and V) for i < n: copy-on-write, called
	 * before the step that writes into dst. Needed when n > 1 or num_beams > 1. */
	rg_status (*copy_blocks)(void *ctx, const int32_t *src, const int32_t *dst, int n);
} rg_gen_runner;

/* Per-token callback for streaming: output sequence seq (index into rg_gen_result.seqs) got
 * token with its log-probability. Sampling calls it as each token is chosen; beam search once the
 * search ends, for the returned hypotheses' tokens in order. A non-OK return cancels the run,
 * which returns that status. */
typedef rg_status (*rg_gen_token_fn)(void *ctx, int seq, int32_t token, float logprob);

/* Every option of a request (rg_gen_params_default gives: greedy, n 1, max_tokens 16, no beams,
 * length_penalty 1, early_stopping false, max_step_tokens 512). */
typedef struct rg_gen_params {
	rg_sampling_params sampling; /* greedy/temperature/top-k/top-p/min-p/penalties/bias/ngram */
	int n;                       /* outputs per prompt: samples, or beams returned; >= 1 */
	uint64_t seed;               /* RNG seed of the request */
	int logprobs;                /* top alternatives reported per token, 0..RG_GEN_MAX_LOGPROBS */
	int max_tokens;              /* new tokens at most, >= 1 (also capped by max_context) */
	/* beam search: num_beams > 1 selects it (do_sample must be false) */
	int num_beams;
	int num_beam_groups;         /* diverse beam search when > 1; divides num_beams */
	float diversity_penalty;
	float length_penalty;
	rg_early_stopping early_stopping;
	/* stop conditions */
	const int32_t *eos_ids;      /* (n_eos) finish "eos" */
	int n_eos;
	const int32_t *stop_ids;     /* (n_stop_ids) finish "stop"; with beams they end beams as EOS */
	int n_stop_ids;
	const char *const *stop;     /* (n_stop) stop strings, non-empty; sampling only */
	int n_stop;
	rg_detokenize_fn detokenize; /* needed for stop strings; fills rg_gen_seq.text when set */
	void *detokenize_ctx;
	int32_t pad_id;              /* beam groups: the pad token of finished groups; -1: eos_ids[0] */
	/* scheduling */
	int max_step_tokens;         /* token budget of one runner call (prefill chunk size), >= 1 */
	rg_gen_token_fn on_token;    /* may be NULL */
	void *on_token_ctx;
} rg_gen_params;

/* One output sequence. Arrays are owned by the result. */
typedef struct rg_gen_seq {
	int prompt_index;       /* which prompt */
	int index;              /* which of its n outputs (beams: rank, 0 the best) */
	int32_t *ids;           /* (n_ids) generated ids; an EOS or stop id that ended it is last */
	int n_ids;
	float *logprobs;        /* (n_ids) log-probability of each chosen token (sampler.h says of
				 * which distribution; beams: the model's log-softmax) */
	int n_top;              /* alternatives per token (params.logprobs; 0 for beams) */
	int32_t *top_ids;       /* (n_ids, n_top) most probable ids, -1 past the candidates */
	float *top_logprobs;    /* (n_ids, n_top) */
	char *text;             /* with a detokenizer: the completion (without a final EOS / stop id,
				 * cut before a stop string), NUL-terminated; else NULL */
	size_t text_len;
	rg_finish_reason finish;
	int prompt_tokens;
	int completion_tokens;  /* = n_ids */
	double score;           /* beams: HF's hypothesis score; sampling: sum of logprobs */
} rg_gen_seq;

typedef struct rg_gen_result {
	int n_seqs;          /* n_prompts * n, prompt-major */
	rg_gen_seq *seqs;    /* (n_seqs) */
} rg_gen_result;

RG_TEST_API void rg_gen_params_default(rg_gen_params *p);
/* RG_ERR_INVALID_INPUT naming the field; RG_ERR_UNSUPPORTED for sampling with beams, stop
 * strings with beams, or penalties/bias with beams. */
RG_TEST_API rg_status rg_gen_params_check(const rg_gen_params *p, int vocab);

/* Generate for n_prompts prompts (prompts[i]: prompt_lens[i] >= 1 ids in [0, vocab)) with the
 * runner r and the options p. pool: the KV pool to take blocks from (block size r->block_size), or NULL to make
 * one of r->n_blocks blocks for this call. On success *out (caller frees with
 * rg_gen_result_free) holds n_prompts * p->n sequences; every block taken from pool has been
 * returned. Errors: RG_ERR_INVALID_INPUT (params, prompts, runner), RG_ERR_TOO_LONG (a prompt
 * of max_context tokens or more), RG_ERR_BUSY (the KV pool ran out of blocks: nothing is
 * preempted here), RG_ERR_OOM, the runner's or a callback's status; then *out is NULL and every
 * block taken has been returned as well. */
RG_TEST_API rg_status rg_gen_run(const rg_gen_runner *r, const int32_t *const *prompts,
				 const int *prompt_lens, int n_prompts, const rg_gen_params *p,
				 rg_kv_pool *pool, rg_gen_result **out);

/* Free a result (NULL accepted). */
RG_TEST_API void rg_gen_result_free(rg_gen_result *res);
#endif
