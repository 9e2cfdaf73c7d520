/* rg_generate (include/ragged.h): the model as the runner of src/gen/generate.c's loop. The model
 * provides the step (rg_model_step), the copy-on-write block copy (rg_model_kv_copy_blocks), its
 * tokenizer (prompts in, rg_tokenizer_decode with special tokens skipped for texts and stop
 * strings) and its EOS; this file sizes the KV cache when the caller made none, keeps one block
 * pool over it per model (so rg_model_kv_blocks_in_use can say that a request gave every block
 * back), and times the request. That state is generation's, attached to the model opaquely
 * (rg_model.gen, freed through rg_model.gen_free by rg_model_free), so model/ calls nothing
 * here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "gen/engine.h"
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

/* rg_generate's state of one model (rg_model.gen). */
typedef struct gen_state {
	rg_kv_pool *pool; /* the block pool over the KV cache, NULL until the first request */
	void *kv_auto;    /* the cache (dec.kv_d) rg_generate made and may regrow; a cache the
			   * caller made (another kv_d) is used as it is */
} gen_state;

static void gen_state_free(void *p)
{
	gen_state *g = p;

	if (g)
		rg_kv_pool_free(g->pool);
	free(g);
}

/* The model's state, made at the first request (NULL: out of memory). */
static gen_state *gen_state_of(rg_model *m)
{
	if (!m->gen && (m->gen = calloc(1, sizeof(gen_state))))
		m->gen_free = gen_state_free;
	return m->gen;
}

/* Drop the pool (the cache is about to change). */
static void gen_pool_free(gen_state *g)
{
	rg_kv_pool_free(g->pool);
	g->pool = NULL;
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

int rg_model_kv_blocks_in_use(const rg_model *m)
{
	const gen_state *g;

	if (!m || (m->info.kind != RG_MODEL_DECODER && m->info.kind != RG_MODEL_ENC_DEC))
		return -1;
	g = m->gen;
	return g && g->pool ? rg_kv_pool_n_used(g->pool) : 0;
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
	gen_state *g = gen_state_of(m);
	rg_status s;

	if (!g)
		return rg_errorf(RG_ERR_OOM, "out of host memory");
	if (!m->dec.kv_d || (m->dec.kv_d == g->kv_auto && m->dec.block_size == RG_GEN_BLOCK)) {
		int64_t need = blocks_needed(m, lens, n, p, RG_GEN_BLOCK);

		if (!m->dec.kv_d || m->dec.n_blocks < need) {
			int64_t nb = 2 * need < RG_GEN_MIN_BLOCKS ? RG_GEN_MIN_BLOCKS : 2 * need;

			if (nb > (1 << 30) / RG_GEN_BLOCK)
				return rg_errorf(RG_ERR_TOO_LONG,
						 "rg_generate: the request needs %lld KV blocks",
						 (long long)need);
			gen_pool_free(g);
			if ((s = rg_model_kv_init(m, RG_GEN_BLOCK, (int)nb)) != RG_OK)
				return s;
			g->kv_auto = m->dec.kv_d;
		}
	}
	if (g->pool && (rg_kv_pool_n_blocks(g->pool) != m->dec.n_blocks ||
			rg_kv_pool_block_size(g->pool) != m->dec.block_size))
		gen_pool_free(g); /* the caller re-initialised the cache */
	if (!g->pool)
		return rg_kv_pool_init(&g->pool, m->dec.n_blocks, m->dec.block_size);
	return RG_OK;
}

rg_status rg_generate_ids(rg_model *m, const int32_t *const *prompts, const int *lens, int n,
			  const rg_gen_params *params, rg_gen_token_fn on_token, void *user,
			  rg_gen_result **out)
{
	const double t0 = now_s();
	rg_gen_params p;
	rg_gen_runner r, dr;
	tok_relay rel = {on_token, user, 0};
	rg_status s;

	if (out)
		*out = NULL;
	if (!m || !prompts || !lens || !out || n < 1)
		return rg_errorf(RG_ERR_INVALID_INPUT,
				 "rg_generate: NULL model, prompts or out, or n %d < 1", n);
	if ((m->info.kind != RG_MODEL_DECODER && m->info.kind != RG_MODEL_ENC_DEC))
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
		if (m->info.kind == RG_MODEL_ENC_DEC && lens[i] > m->dec.cfg.max_source_positions)
			return rg_errorf(RG_ERR_TOO_LONG,
					 "rg_generate: the source has %d tokens (prompt %d); this "
					 "model reads at most %d (max_position_embeddings)",
					 lens[i], i, m->dec.cfg.max_source_positions);
		if (m->info.kind != RG_MODEL_ENC_DEC &&
		    lens[i] >= m->dec.cfg.max_position_embeddings)
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
	if (p.max_step_tokens > m->max_tokens)
		p.max_step_tokens = m->max_tokens;
	p.on_token = relay;
	p.on_token_ctx = &rel;
	if ((s = rg_gen_engine_params_check(&p, m->dec.cfg.vocab_size, m->tok != NULL)) != RG_OK)
		return s;
	if ((s = ensure_cache(m, lens, n, &p)) != RG_OK)
		return s;
	if ((s = rg_gen_model_runner(m, &r, &dr)) != RG_OK)
		return s;
	if ((s = rg_gen_run_ex(&r, prompts, lens, n, &p, gen_state_of(m)->pool, m->tok, out)) !=
	    RG_OK)
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
	if ((m->info.kind != RG_MODEL_DECODER && m->info.kind != RG_MODEL_ENC_DEC))
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
