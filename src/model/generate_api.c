/* rg_generate (include/ragged.h): the model as the runner of src/gen/generate.c's loop. The model
 * provides the step (rg_model_step), the copy-on-write block copy (rg_model_kv_copy_blocks), its
 * tokenizer (prompts in, rg_tokenizer_decode with special tokens skipped for texts and stop
 * strings) and its EOS; this file sizes the KV cache when the caller made none, keeps one block
 * pool over it per model (so rg_model_kv_blocks_in_use can say that a request gave every block
 * back), and times the request. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "gen/generate.h"
#include "kv/block_pool.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

#define RG_GEN_BLOCK 16   /* positions per block of a cache rg_generate makes */
#define RG_GEN_MIN_BLOCKS 64

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static rg_status run_step(void *ctx, const rg_step_batch *b, float *logits)
{
	return rg_model_step(ctx, b, logits);
}

static rg_status run_step_argmax(void *ctx, const rg_step_batch *b, int32_t *ids, float *lps)
{
	return rg_model_step_argmax(ctx, b, ids, lps);
}

static rg_status run_copy(void *ctx, const int32_t *src, const int32_t *dst, int n)
{
	return rg_model_kv_copy_blocks(ctx, src, dst, n);
}

static rg_status run_detok(void *ctx, const int32_t *ids, int n, char **text, size_t *len)
{
	const rg_model *m = ctx;

	return rg_tokenizer_decode(m->tok, ids, (size_t)n, true, text, len);
}

/* The user's callback, and the time of the first token. */
typedef struct tok_relay {
	rg_gen_token_fn fn;
	void *user;
	double t_first;
} tok_relay;

static rg_status relay(void *ctx, int seq, int32_t token, float logprob)
{
	tok_relay *r = ctx;

	if (r->t_first == 0)
		r->t_first = now_s();
	return r->fn ? r->fn(r->user, seq, token, logprob) : RG_OK;
}

void rg_generate_state_free(rg_model *m)
{
	rg_kv_pool_free(m->gen_pool);
	m->gen_pool = NULL;
}

int rg_model_kv_blocks_in_use(const rg_model *m)
{
	if (!m || m->info.kind != RG_MODEL_DECODER)
		return -1;
	return m->gen_pool ? rg_kv_pool_n_used(m->gen_pool) : 0;
}

int32_t rg_model_eos_id(const rg_model *m)
{
	if (!m || m->info.kind != RG_MODEL_DECODER)
		return -1;
	return m->dec.cfg.eos_token_id;
}

const char *rg_model_chat_template(const rg_model *m)
{
	return m ? m->chat_template : NULL;
}

/* Blocks one request may hold at once: each of a prompt's outputs (samples or beams, and as
 * many again while beams fork) up to its prompt plus max_tokens, one partial block each. */
static int64_t blocks_needed(const rg_model *m, const int *lens, int n, const rg_gen_params *p,
			     int bs)
{
	const int width = p->num_beams > 1 ? 2 * p->num_beams : p->n;
	const int64_t max_pos = m->dec.cfg.max_position_embeddings;
	int64_t need = 0;

	for (int i = 0; i < n; i++) {
		int64_t ctx = (int64_t)lens[i] + p->max_tokens;

		ctx = ctx > max_pos ? max_pos : ctx;
		need += (int64_t)width * ((ctx + bs - 1) / bs + 1);
	}
	return need;
}

/* A cache and a pool for this request: the caller's cache as it is, else one of RG_GEN_BLOCK
 * positions per block with room for the request (twice what it needs, so that similar requests
 * reuse it), grown when a later request needs more. */
static rg_status ensure_cache(rg_model *m, const int *lens, int n, const rg_gen_params *p)
{
	rg_status s;

	if (!m->dec.kv_d || (m->dec.kv_d == m->gen_kv_auto && m->dec.block_size == RG_GEN_BLOCK)) {
		int64_t need = blocks_needed(m, lens, n, p, RG_GEN_BLOCK);

		if (!m->dec.kv_d || m->dec.n_blocks < need) {
			int64_t nb = 2 * need < RG_GEN_MIN_BLOCKS ? RG_GEN_MIN_BLOCKS : 2 * need;

			if (nb > (1 << 30) / RG_GEN_BLOCK)
				return rg_errorf(RG_ERR_TOO_LONG,
						 "rg_generate: the request needs %lld KV blocks",
						 (long long)need);
			rg_generate_state_free(m);
			if ((s = rg_model_kv_init(m, RG_GEN_BLOCK, (int)nb)) != RG_OK)
				return s;
			m->gen_kv_auto = m->dec.kv_d;
		}
	}
	if (m->gen_pool && (rg_kv_pool_n_blocks(m->gen_pool) != m->dec.n_blocks ||
			    rg_kv_pool_block_size(m->gen_pool) != m->dec.block_size))
		rg_generate_state_free(m); /* the caller re-initialised the cache */
	if (!m->gen_pool)
		return rg_kv_pool_init(&m->gen_pool, m->dec.n_blocks, m->dec.block_size);
	return RG_OK;
}

rg_status rg_generate_ids(rg_model *m, const int32_t *const *prompts, const int *lens, int n,
			  const rg_gen_params *params, rg_gen_token_fn on_token, void *user,
			  rg_gen_result **out)
{
	const double t0 = now_s();
	rg_gen_params p;
	rg_gen_runner r;
	tok_relay rel = {on_token, user, 0};
	int64_t max_ctx;
	rg_status s;

	if (out)
		*out = NULL;
	if (!m || !prompts || !lens || !out || n < 1)
		return rg_errorf(RG_ERR_INVALID_INPUT,
				 "rg_generate: NULL model, prompts or out, or n %d < 1", n);
	if (m->info.kind != RG_MODEL_DECODER)
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "rg_generate: %s is an encoder (%s); generation needs a decoder",
				 m->dir, m->info.model_type);
	if (params)
		p = *params;
	else
		rg_gen_params_default(&p);
	for (int i = 0; i < n; i++) {
		if (!prompts[i] || lens[i] < 1)
			return rg_errorf(RG_ERR_INVALID_INPUT, "rg_generate: prompt %d is empty", i);
		if (lens[i] >= m->dec.cfg.max_position_embeddings)
			return rg_errorf(RG_ERR_TOO_LONG,
					 "rg_generate: prompt %d has %d tokens; the model's context "
					 "is %d (max_position_embeddings), and at least one must be "
					 "left to generate",
					 i, lens[i], m->dec.cfg.max_position_embeddings);
	}
	if (p.n_eos == -1) {
		p.n_eos = 0;
		p.eos_ids = NULL;
	} else if (p.n_eos == 0 && !p.eos_ids && m->n_gen_eos > 0) {
		p.eos_ids = m->gen_eos;
		p.n_eos = m->n_gen_eos;
	}
	if (!p.detokenize && m->tok) {
		p.detokenize = run_detok;
		p.detokenize_ctx = m;
	}
	if (p.max_step_tokens > m->max_tokens)
		p.max_step_tokens = m->max_tokens;
	p.on_token = relay;
	p.on_token_ctx = &rel;
	if ((s = rg_gen_params_check(&p, m->dec.cfg.vocab_size)) != RG_OK)
		return s;
	if ((s = ensure_cache(m, lens, n, &p)) != RG_OK)
		return s;
	max_ctx = (int64_t)m->dec.n_blocks * m->dec.block_size;
	if (max_ctx > m->dec.cfg.max_position_embeddings)
		max_ctx = m->dec.cfg.max_position_embeddings;
	r.ctx = m;
	r.vocab_size = m->dec.cfg.vocab_size;
	r.block_size = m->dec.block_size;
	r.n_blocks = m->dec.n_blocks;
	r.max_context = (int)max_ctx;
	r.step = run_step;
	r.copy_blocks = run_copy;
	/* plain greedy requests choose on the device (the logits stay there); RAGGED_GEN_ARGMAX=0
	 * takes the host sampler instead (the same choice; for checks) */
	{
		const char *e = getenv("RAGGED_GEN_ARGMAX");

		r.step_argmax = e && !strcmp(e, "0") ? NULL : run_step_argmax;
	}
	if ((s = rg_gen_run(&r, prompts, lens, n, &p, m->gen_pool, out)) != RG_OK)
		return s;
	(*out)->time_total_s = now_s() - t0;
	(*out)->time_first_token_s = rel.t_first > 0 ? rel.t_first - t0 : 0;
	return RG_OK;
}

rg_status rg_generate(rg_model *m, const char *const *prompts, int n, const rg_gen_params *p,
		      rg_gen_token_fn on_token, void *user, rg_gen_result **out)
{
	const double t0 = now_s();
	int32_t **ids = NULL;
	int *lens = NULL;
	rg_status s = RG_OK;

	if (out)
		*out = NULL;
	if (!m || !prompts || !out || n < 1)
		return rg_errorf(RG_ERR_INVALID_INPUT,
				 "rg_generate: NULL model, prompts or out, or n %d < 1", n);
	if (m->info.kind != RG_MODEL_DECODER)
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "rg_generate: %s is an encoder (%s); generation needs a decoder",
				 m->dir, m->info.model_type);
	if (!m->tok)
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "rg_generate: %s has no tokenizer (use rg_generate_ids)", m->dir);
	ids = calloc((size_t)n, sizeof(*ids));
	lens = calloc((size_t)n, sizeof(*lens));
	if (!ids || !lens) {
		s = rg_errorf(RG_ERR_OOM, "out of host memory");
		goto out_free;
	}
	for (int i = 0; i < n; i++) {
		size_t k = 0;

		if (!prompts[i]) {
			s = rg_errorf(RG_ERR_INVALID_INPUT, "rg_generate: prompt %d is NULL", i);
			goto out_free;
		}
		if ((s = rg_tokenizer_encode(m->tok, prompts[i], strlen(prompts[i]), &ids[i], &k)) !=
		    RG_OK) {
			s = rg_error_wrap(s, "rg_generate: prompt %d", i);
			goto out_free;
		}
		if (k > (size_t)INT32_MAX) {
			s = rg_errorf(RG_ERR_TOO_LONG, "rg_generate: prompt %d is too long", i);
			goto out_free;
		}
		lens[i] = (int)k;
		if (k == 0) {
			s = rg_errorf(RG_ERR_INVALID_INPUT,
				      "rg_generate: prompt %d gives no tokens (an empty prompt needs "
				      "a tokenizer that adds BOS)",
				      i);
			goto out_free;
		}
	}
	s = rg_generate_ids(m, (const int32_t *const *)ids, lens, n, p, on_token, user, out);
	if (s == RG_OK) {
		const double t1 = (*out)->time_total_s, tf = (*out)->time_first_token_s;
		const double tok = now_s() - t0 - t1; /* tokenization */

		(*out)->time_total_s = t1 + tok;
		(*out)->time_first_token_s = tf > 0 ? tf + tok : 0;
	}
out_free:
	for (int i = 0; ids && i < n; i++)
		free(ids[i]);
	free(ids);
	free(lens);
	return s;
}

rg_status rg_model_chat_format(const rg_model *m, const char *system, const char *user,
			       char **out)
{
	static const char *const S = "<|im_start|>", *const E = "<|im_end|>\n";
	size_t n;
	char *b;

	if (out)
		*out = NULL;
	if (!m || !user || !out)
		return rg_errorf(RG_ERR_INVALID_INPUT, "rg_model_chat_format: NULL argument");
	if (!m->chat_template)
		return rg_errorf(RG_ERR_UNSUPPORTED, "%s has no chat template", m->dir);
	if (!strstr(m->chat_template, "<|im_start|>") || !strstr(m->chat_template, "<|im_end|>"))
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "%s: its chat template is not ChatML (<|im_start|> / <|im_end|>), the "
				 "only one rendered for now; it begins \"%.40s\"",
				 m->dir, m->chat_template);
	n = strlen(user) + (system ? strlen(system) : 0) + 128;
	if (!(b = malloc(n)))
		return rg_errorf(RG_ERR_OOM, "out of host memory");
	if (system)
		snprintf(b, n, "%ssystem\n%s%s%suser\n%s%s%sassistant\n", S, system, E, S, user, E, S);
	else
		snprintf(b, n, "%suser\n%s%s%sassistant\n", S, user, E, S);
	*out = b;
	return RG_OK;
}
