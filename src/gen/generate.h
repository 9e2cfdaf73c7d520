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
#include "tokenizer/tokenizer.h"


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
	/* Optional (NULL: unused): a step that makes the greedy choice itself (ragged.h
	 * rg_model_step's greedy path): ids (n_logits) int32 and their log-softmax log-probs
	 * (n_logits) f32. Used for plain greedy requests (no sampling, beams, penalties, bias,
	 * no-repeat n-gram or top-N log-probs), so the logits need not reach the host. */
	rg_status (*step_argmax)(void *ctx, const rg_step_batch *b, int32_t *ids, float *logprobs);
	/* Optional (NULL: unused): a step that samples each logits row itself with that row's
	 * parameters (ragged.h rg_model_step's sampler path: rows (n_logits), the draw u from the
	 * sequence's own RNG stream, the same one the host chain would consume, so the tokens are
	 * the host path's): ids and log-probs (n_logits), top_ids / top_logprobs (n_logits, top_n)
	 * or NULL when top_n is 0. Used for sampled and processed-greedy requests without
	 * no_repeat_ngram_size (which has no device form) and without beams, so the logits need
	 * not reach the host. A logits row index may repeat: a prompt's n samples draw their first
	 * tokens from its last row. */
	rg_status (*step_sample)(void *ctx, const rg_step_batch *b, const rg_row_sampling *rows,
				 int top_n, int32_t *ids, float *logprobs, int32_t *top_ids,
				 float *top_logprobs);
	/* Optional (NULL: unused): step_sample that also copies the logits of the rows want[r]
	 * names into logits (n_logits, vocab_size) f32, the other rows left as they are (one
	 * forward for a step whose rows are partly sampled there and partly on the host: beam
	 * groups beside other streams, host-chain rows). */
	rg_status (*step_sample_logits)(void *ctx, const rg_step_batch *b,
					const rg_row_sampling *rows, int top_n, int32_t *ids,
					float *logprobs, int32_t *top_ids, float *top_logprobs,
					float *logits, const uint8_t *want);
} rg_gen_runner;

/* rg_gen_token_fn, rg_gen_params, rg_gen_seq, rg_gen_result and their functions:
 * include/ragged.h (the public generation API). */

/* rg_gen_params_check: include/ragged.h. */

/* The beam search of one prompt as rg_gen_run runs it (HF's semantics, src/gen/beam.h) for the
 * options p (num_beams > 1): num_beam_groups, diversity_penalty, length_penalty,
 * early_stopping, no_repeat_ngram_size, n returned, EOS and stop ids both end a hypothesis,
 * pad_id (else the first EOS) for a finished group, max_new new tokens at most. ids (len) the
 * prompt, copied. *out: the caller frees it with rg_beam_free. RG_ERR_INVALID_INPUT (over 64 EOS
 * and stop ids, bad counts), RG_ERR_OOM; *out NULL then. The engine of `ragged serve` runs the
 * same search one step at a time (app/server/engine_gen.c). */
rg_status rg_gen_beam_init(const rg_gen_params *p, const int32_t *ids, int len, int max_new,
			   int vocab, rg_beam_search **out);
/* A returned hypothesis's finish reason: LENGTH when it did not end on an EOS or stop id, STOP
 * when the id is one of p's stop ids only, else EOS. */
rg_finish_reason rg_gen_beam_finish(const rg_gen_params *p, const rg_beam_hyp *h);

/* Generate for n_prompts prompts (prompts[i]: prompt_lens[i] >= 1 ids in [0, vocab)) with the
 * runner r and the options p. pool: the KV pool to take blocks from (block size r->block_size), or NULL to make
 * one of r->n_blocks blocks for this call. On success *out (caller frees with
 * rg_gen_result_free) holds n_prompts * p->n sequences; every block taken from pool has been
 * returned. Errors: RG_ERR_INVALID_INPUT (params, prompts, runner), RG_ERR_TOO_LONG (a prompt
 * of max_context tokens or more), RG_ERR_BUSY (the KV pool ran out of blocks: nothing is
 * preempted here), RG_ERR_OOM, the runner's or a callback's status; then *out is NULL and every
 * block taken has been returned as well. */
/* rg_gen_run with the text of tok's streaming detokenizer (src/gen/seq.h; special tokens
 * skipped) when p->detokenize is NULL; tok may be NULL (no text then). rg_gen_run and
 * rg_generate both run it: the prompts are requests of one src/gen/engine.c engine (prefix
 * caching off, so every block comes back), stepped until done. */
rg_status rg_gen_run_ex(const rg_gen_runner *r, const int32_t *const *prompts,
			const int *prompt_lens, int n_prompts, const rg_gen_params *p,
			rg_kv_pool *pool, const rg_tokenizer *tok, rg_gen_result **out);

RG_TEST_API rg_status rg_gen_run(const rg_gen_runner *r, const int32_t *const *prompts,
				 const int *prompt_lens, int n_prompts, const rg_gen_params *p,
				 rg_kv_pool *pool, rg_gen_result **out);

#endif
