/* The generation engine's internal entry points (include/ragged.h has the public API and the
 * contract): an engine over any runner (src/gen/generate.h rg_gen_runner: a model, or a test's
 * toy model), which is how rg_gen_run and the unit tests drive the same loop as the server. */
#ifndef RG_GEN_ENGINE_H
#define RG_GEN_ENGINE_H
#include "core/export.h"
#include "kv/block_pool.h"
#include "ragged.h"
#include "core/cost_model.h"
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
	/* Encoder-decoders (NULL for decoder-only runners): the encoder pass of n_seq packed
	 * sources before a step (ragged.h rg_model_encode_cross: tokens (n_tokens), cu_seqlens
	 * (n_seq + 1), slot_mapping (n_tokens), host arrays owned by the engine). A request's
	 * prompt is then its source; its decoder starts from decoder_start (one token). */
	rg_status (*encode)(void *ctx, int n_tokens, const int32_t *tokens, int n_seq,
			    const int32_t *cu_seqlens, const int32_t *slot_mapping);
	int max_source;        /* encoder-decoders: the longest source, tokens */
	int32_t decoder_start; /* encoder-decoders: the decoder's first token */
	/* The model's generation defaults (transformers' logits processors from its generation
	 * config), applied to every request: tokens never generated (bad_words_ids' single
	 * tokens: a -inf logit bias, so the others renormalize), forced_eos, the token forced
	 * as the last one max_tokens allows (log-prob 0), and forced_bos, the token forced as the
	 * first one after a one-token prompt (an encoder-decoder's decoder_start; transformers'
	 * ForcedBOSTokenLogitsProcessor at cur_len 1: mBART's / NLLB's target language). Where both
	 * apply (max_tokens 1), forced_eos wins, as transformers applies it after. */
	const int32_t *bad_ids; /* (n_bad), borrowed */
	int n_bad;
	bool has_forced_eos;
	int32_t forced_eos;
	bool has_forced_bos;
	int32_t forced_bos;
	/* Optional (NULL: prompt lookup): a draft model's runner, with the same vocabulary, whose
	 * greedy continuations are the speculative drafts (ragged.h rg_model_set_draft). Read only
	 * by rg_gen_engine_create_runner, which makes an inner engine over it (its own block pool
	 * of draft->n_blocks blocks) when p->max_speculative_tokens > 0; borrowed for that call
	 * (draft->ctx for the engine's life). */
	const struct rg_gen_runner *draft;
	int max_batch_tokens; /* tokens one step may hold (the model's max_batch_tokens), 0: any */
} rg_gen_runner;

/* An engine over runner r (copied; r->ctx borrowed) and pool (borrowed, block size
 * r->block_size; NULL: one of r->n_blocks blocks owned by the engine). tok (may be NULL): the
 * streaming detokenizer's tokenizer; eos (n_eos): the default EOS ids of requests that name none
 * (borrowed). p: the limits (max_context 0: r->max_context; kv_* ignored). Errors as
 * rg_gen_engine_create. */
RG_TEST_API rg_gen_engine *rg_gen_engine_create_runner(const rg_gen_runner *r, rg_kv_pool *pool,
						       const rg_tokenizer *tok,
						       const int32_t *eos, int n_eos,
						       const rg_gen_engine_params *p,
						       rg_status *st);

/* rg_gen_params_check for an engine whose text comes from a streaming tokenizer (streams_text):
 * stop strings need no detokenize callback then. */
rg_status rg_gen_engine_params_check(const rg_gen_params *p, int vocab, bool streams_text);

/* The model as a runner (its step variants and block copy; its KV cache's shape, which must
 * exist). With a draft model attached (rg_model_set_draft), *draft is filled as the draft's
 * runner and r->draft points at it, after the draft's KV cache is made (or kept when it has the
 * target's block size and at least as many blocks as the target's, plus a quarter); draft may
 * be NULL when the caller wants no drafts. Errors: the draft's rg_model_kv_init. */
rg_status rg_gen_model_runner(rg_model *m, rg_gen_runner *r, rg_gen_runner *draft);

/* The scheduler's step cost model (admission's estimates: fitted online from each step's
 * period, from its begin to the next step's begin while work remains, so the host's work around
 * the model counts), and its prior. */
RG_TEST_API rg_status rg_gen_engine_cost_model(rg_gen_engine *e, rg_step_cost *out);
RG_TEST_API void rg_gen_engine_set_cost_prior(rg_gen_engine *e, const rg_step_cost *m);

/* How many sequences request id has, or -1 for an unknown id. */
int rg_gen_engine_n_outputs(const rg_gen_engine *e, uint64_t id);
#endif
