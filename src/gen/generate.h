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
#include "gen/engine.h"
#include "gen/params.h"
#include "gen/sampler.h"
#include "gen/stop.h"
#include "kv/block_pool.h"
#include "ragged.h"
#include "tokenizer/tokenizer.h"



/* rg_gen_token_fn, rg_gen_params, rg_gen_seq, rg_gen_result and their functions:
 * include/ragged.h (the public generation API). */

/* rg_gen_params_check: include/ragged.h. */


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
