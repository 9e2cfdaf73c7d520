/* The whole-request generation loop over the step API (generate.h). */
#include "gen/generate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "gen/engine.h"

void rg_gen_result_free(rg_gen_result *res)
{
	if (!res)
		return;
	for (int i = 0; i < res->n_seqs; i++) {
		rg_gen_seq *s = &res->seqs[i];

		free(s->ids);
		free(s->logprobs);
		free(s->top_ids);
		free(s->top_logprobs);
		free(s->text);
	}
	free(res->seqs);
	free(res);
}

/* Output k of request id into o (copied; the engine keeps its own until release). */
static rg_status take_output(const rg_gen_engine *e, uint64_t id, int k, int prompt_index,
			     bool text, rg_gen_seq *o)
{
	rg_gen_output x;
	size_t n, nt;

	if (rg_gen_engine_output(e, id, k, &x) != RG_OK)
		return rg_errorf(RG_ERR_INTERNAL, "generate: a request's output is missing");
	if (x.status != RG_OK)
		return rg_errorf(x.status, "%s", x.error[0] ? x.error : "generation failed");
	if (x.finish == RG_FINISH_ABORT)
		return rg_errorf(RG_ERR_INTERNAL, "generate: %s",
				 x.error[0] ? x.error : "the request was aborted");
	n = (size_t)(x.n_ids ? x.n_ids : 1);
	nt = (size_t)x.n_top;
	o->prompt_index = prompt_index;
	o->index = k;
	o->prompt_tokens = x.prompt_tokens;
	o->n_ids = o->completion_tokens = x.n_ids;
	o->n_top = x.n_top;
	o->finish = x.finish;
	o->score = x.score;
	o->ids = malloc(n * sizeof(int32_t));
	o->logprobs = malloc(n * sizeof(float));
	if (nt) {
		o->top_ids = malloc(n * nt * sizeof(int32_t));
		o->top_logprobs = malloc(n * nt * sizeof(float));
	}
	if (!o->ids || !o->logprobs || (nt && (!o->top_ids || !o->top_logprobs)))
		return rg_errorf(RG_ERR_OOM, "generate: out of memory for the result");
	memcpy(o->ids, x.ids, (size_t)x.n_ids * sizeof(int32_t));
	memcpy(o->logprobs, x.logprobs, (size_t)x.n_ids * sizeof(float));
	if (nt) {
		memcpy(o->top_ids, x.top_ids, (size_t)x.n_ids * nt * sizeof(int32_t));
		memcpy(o->top_logprobs, x.top_logprobs, (size_t)x.n_ids * nt * sizeof(float));
	}
	if (text) {
		o->text = strndup(x.text, x.text_len);
		o->text_len = x.text_len;
		if (!o->text)
			return rg_errorf(RG_ERR_OOM, "generate: out of memory for the result");
	}
	return RG_OK;
}

rg_status rg_gen_run_ex(const rg_gen_runner *r, const int32_t *const *prompts,
			const int *prompt_lens, int n_prompts, const rg_gen_params *p,
			rg_kv_pool *pool, const rg_tokenizer *tok, rg_gen_result **out)
{
	rg_gen_engine_params ep;
	rg_gen_options opt;
	rg_gen_engine *e = NULL;
	rg_gen_result *res = NULL;
	uint64_t *ids = NULL;
	const int width = p && p->num_beams > 1 ? p->num_beams : p ? p->n : 1;
	long long total_out;
	int cap_ctx;
	rg_status st;

	*out = NULL;
	if (!r || !r->step || r->vocab_size < 1 || r->block_size < 1 || r->max_context < 2 ||
	    !p || n_prompts < 1 || !prompts || !prompt_lens)
		return rg_errorf(RG_ERR_INVALID_INPUT, "generate: bad runner or arguments");
	if ((st = rg_gen_engine_params_check(p, r->vocab_size, tok != NULL)) != RG_OK)
		return st;
	if (p->prompt_logprobs) /* rg_gen_result has no place for them: not computed for nothing */
		return rg_errorf(RG_ERR_UNSUPPORTED, "generate: prompt_logprobs needs the engine API "
				 "(rg_gen_engine_output's prompt_* fields; Python: Generator.score)");
	if ((p->n > 1 || p->num_beams > 1) && !r->copy_blocks)
		return rg_errorf(RG_ERR_INVALID_INPUT, "generate: n > 1 or beams need copy_blocks");
	cap_ctx = pool ? rg_kv_pool_n_blocks(pool) * rg_kv_pool_block_size(pool)
		       : r->n_blocks * r->block_size;
	for (int i = 0; i < n_prompts; i++) {
		if (!prompts[i] || prompt_lens[i] < 1)
			return rg_errorf(RG_ERR_INVALID_INPUT, "generate: prompt %d is empty", i);
		if (prompt_lens[i] >= r->max_context)
			return rg_errorf(RG_ERR_TOO_LONG,
					 "generate: prompt %d has %d tokens, max_context is %d", i,
					 prompt_lens[i], r->max_context);
		/* the scheduler preempts, but each sequence (a beam search: all its beams) must fit
		 * the pool whole, or the cache the caller made is too small for the request */
		{
			long long need = (long long)prompt_lens[i] + p->max_tokens;
			long long bs = r->block_size, blocks;

			need = need < r->max_context ? need : r->max_context;
			/* (a beam's partial last block may be copied on write: one more each) */
			blocks = p->num_beams > 1 ? ((need + bs - 1) / bs + 1) * p->num_beams
						  : (need + bs - 1) / bs;
			if (blocks * bs > cap_ctx)
				return rg_errorf(RG_ERR_BUSY,
						 "generate: prompt %d needs %lld KV blocks of %lld "
						 "positions; the cache has %lld",
						 i, blocks, bs, cap_ctx / bs);
		}
	}
	rg_gen_engine_params_default(&ep);
	total_out = (long long)n_prompts * width;
	ep.max_num_batched_tokens = p->max_step_tokens;
	ep.max_num_seqs = total_out < p->max_step_tokens ? (int)total_out : p->max_step_tokens;
	if (ep.max_num_seqs < width)
		ep.max_num_seqs = width;
	ep.max_waiting = (int)(total_out < (1 << 30) ? total_out + 1 : 1 << 30);
	ep.prefix_caching = false; /* nothing is kept between calls: every block comes back */
	ep.max_context = r->max_context < cap_ctx ? r->max_context : cap_ctx;
	ep.max_speculative_tokens = p->num_speculative_tokens;
	if (!(e = rg_gen_engine_create_runner(r, pool, tok, NULL, 0, &ep, &st)))
		return st;
	if (!(ids = calloc((size_t)n_prompts, sizeof(*ids)))) {
		st = rg_errorf(RG_ERR_OOM, "generate: out of memory");
		goto out_free;
	}
	rg_gen_options_default(&opt);
	for (int i = 0; i < n_prompts; i++)
		if ((st = rg_gen_engine_add(e, prompts[i], prompt_lens[i], p, &opt, 0, &ids[i],
					    NULL)) != RG_OK)
			goto out_free;
	while (rg_gen_engine_has_work(e)) {
		const rg_gen_event *ev;
		int n_ev;

		if ((st = rg_gen_engine_step(e, rg_gen_engine_now_ms(), &ev, &n_ev)) != RG_OK)
			goto out_free;
		for (int k = 0; k < n_ev; k++) {
			int pi = 0;
			rg_gen_output x;

			if (!p->on_token || ev[k].n_new == 0)
				continue;
			while (ids[pi] != ev[k].req)
				pi++;
			rg_gen_engine_output(e, ev[k].req, ev[k].seq, &x);
			for (int t = x.n_ids - ev[k].n_new; t < x.n_ids; t++)
				if ((st = p->on_token(p->on_token_ctx, pi * p->n + ev[k].seq,
						      x.ids[t], x.logprobs[t])) != RG_OK) {
					st = rg_error_wrap(st, "on_token callback");
					goto out_free;
				}
		}
	}
	if (!(res = calloc(1, sizeof(*res))) ||
	    !(res->seqs = calloc((size_t)n_prompts * p->n, sizeof(rg_gen_seq)))) {
		st = rg_errorf(RG_ERR_OOM, "generate: out of memory for the result");
		goto out_free;
	}
	res->n_seqs = n_prompts * p->n;
	{
		rg_gen_engine_stats es;

		rg_gen_engine_get_stats(e, &es);
		res->spec_drafted = es.spec_drafted;
		res->spec_accepted = es.spec_accepted;
	}
	for (int i = 0; i < n_prompts; i++)
		for (int k = 0; k < p->n; k++)
			if ((st = take_output(e, ids[i], k, i, p->detokenize || tok,
						&res->seqs[i * p->n + k])) != RG_OK)
				goto out_free;
	*out = res;
	res = NULL;
out_free:
	rg_gen_result_free(res);
	rg_gen_engine_free(e);
	free(ids);
	if (st == RG_OK && pool && rg_kv_pool_n_used(pool) != 0) { /* a broken invariant, caught */
		st = rg_errorf(RG_ERR_INTERNAL, "generate: %d KV blocks still in use at the end",
			       rg_kv_pool_n_used(pool));
		rg_gen_result_free(*out);
		*out = NULL;
	}
	return st;
}

rg_status rg_gen_run(const rg_gen_runner *r, const int32_t *const *prompts,
		     const int *prompt_lens, int n_prompts, const rg_gen_params *p, rg_kv_pool *pool,
		     rg_gen_result **out)
{
	return rg_gen_run_ex(r, prompts, prompt_lens, n_prompts, p, pool, NULL, out);
}
