/* The whole-request generation loop over the step API (generate.h). */
#include "gen/generate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "gen/engine.h"

void rg_gen_params_default(rg_gen_params *p)
{
	memset(p, 0, sizeof(*p));
	rg_sampling_params_default(&p->sampling);
	p->n = 1;
	p->max_tokens = 16;
	p->num_beams = 1;
	p->num_beam_groups = 1;
	p->length_penalty = 1.f;
	p->early_stopping = RG_EARLY_STOPPING_FALSE;
	p->pad_id = -1;
	p->max_step_tokens = 512;
}

static bool beams_on(const rg_gen_params *p) { return p->num_beams > 1; }

rg_status rg_gen_params_check(const rg_gen_params *p, int vocab)
{
	const rg_sampling_params *s = &p->sampling;
	rg_status st;

	if ((st = rg_sampling_params_check(s, vocab)) != RG_OK)
		return st;
	if (p->n < 1 || p->max_tokens < 1 || p->max_step_tokens < 1 || p->logprobs < 0 ||
	    p->logprobs > RG_GEN_MAX_LOGPROBS)
		return rg_errorf(RG_ERR_INVALID_INPUT,
				 "n %d, max_tokens %d, max_step_tokens %d must be >= 1 and logprobs "
				 "%d in [0, %d]", p->n, p->max_tokens, p->max_step_tokens,
				 p->logprobs, RG_GEN_MAX_LOGPROBS);
	if (p->n_eos < 0 || p->n_stop_ids < 0 || p->n_stop < 0 || (p->n_eos && !p->eos_ids) ||
	    (p->n_stop_ids && !p->stop_ids) || (p->n_stop && !p->stop))
		return rg_errorf(RG_ERR_INVALID_INPUT, "stop conditions: counts without arrays");
	for (int i = 0; i < p->n_eos; i++)
		if (p->eos_ids[i] < 0 || p->eos_ids[i] >= vocab)
			return rg_errorf(RG_ERR_INVALID_INPUT, "eos id %d outside [0, %d)",
					 p->eos_ids[i], vocab);
	for (int i = 0; i < p->n_stop_ids; i++)
		if (p->stop_ids[i] < 0 || p->stop_ids[i] >= vocab)
			return rg_errorf(RG_ERR_INVALID_INPUT, "stop id %d outside [0, %d)",
					 p->stop_ids[i], vocab);
	for (int i = 0; i < p->n_stop; i++)
		if (!p->stop[i] || !p->stop[i][0])
			return rg_errorf(RG_ERR_INVALID_INPUT, "stop string %d is empty", i);
	if (p->n_stop > 0 && !p->detokenize)
		return rg_errorf(RG_ERR_INVALID_INPUT, "stop strings need a detokenize callback");
	if (p->num_beams < 1 || p->num_beam_groups < 1 || p->num_beams % p->num_beam_groups)
		return rg_errorf(RG_ERR_INVALID_INPUT,
				 "num_beams %d must be >= 1 and a multiple of num_beam_groups %d",
				 p->num_beams, p->num_beam_groups);
	if (!beams_on(p))
		return RG_OK;
	if (s->do_sample)
		return rg_errorf(RG_ERR_UNSUPPORTED, "beam search with do_sample is not implemented");
	if (p->n_stop > 0 || p->logprobs > 0 || s->n_logit_bias > 0 ||
	    rg_sampling_penalties_on(s))
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "beam search takes no stop strings, top logprobs, logit bias or "
				 "repetition/presence/frequency penalties");
	if (p->n > p->num_beams)
		return rg_errorf(RG_ERR_INVALID_INPUT, "n %d (returned beams) > num_beams %d", p->n,
				 p->num_beams);
	if (p->num_beams > p->max_step_tokens)
		return rg_errorf(RG_ERR_INVALID_INPUT, "num_beams %d > max_step_tokens %d",
				 p->num_beams, p->max_step_tokens);
	if (!(p->diversity_penalty >= 0.f) || !isfinite(p->length_penalty))
		return rg_errorf(RG_ERR_INVALID_INPUT, "diversity_penalty / length_penalty invalid");
	return RG_OK;
}

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

rg_status rg_gen_beam_init(const rg_gen_params *p, const int32_t *ids, int len, int max_new,
			   int vocab, rg_beam_search **out)
{
	rg_beam_params bp = {
		.num_beams = p->num_beams, .num_beam_groups = p->num_beam_groups,
		.diversity_penalty = p->diversity_penalty,
		.length_penalty = p->length_penalty, .early_stopping = p->early_stopping,
		.no_repeat_ngram_size = p->sampling.no_repeat_ngram_size,
		.num_return_sequences = p->n, .n_eos = p->n_eos + p->n_stop_ids,
		.pad_id = p->pad_id >= 0 ? p->pad_id : (p->n_eos ? p->eos_ids[0] : -1),
		.max_new_tokens = max_new,
	};
	int32_t eos[64];

	*out = NULL;
	if (bp.n_eos > 64)
		return rg_errorf(RG_ERR_INVALID_INPUT, "beam search: over 64 EOS/stop ids");
	if (p->n_eos > 0)
		memcpy(eos, p->eos_ids, (size_t)p->n_eos * sizeof(int32_t));
	if (p->n_stop_ids)
		memcpy(eos + (p->n_eos > 0 ? p->n_eos : 0), p->stop_ids,
		       (size_t)p->n_stop_ids * sizeof(int32_t));
	bp.eos_ids = eos;
	return rg_beam_init(out, &bp, ids, len, vocab);
}

rg_finish_reason rg_gen_beam_finish(const rg_gen_params *p, const rg_beam_hyp *h)
{
	if (!h->eos)
		return RG_FINISH_LENGTH;
	/* a stop id acting as EOS */
	return rg_stop_token(p->eos_ids, p->n_eos, NULL, 0, h->ids[h->n - 1]) == RG_FINISH_NONE
		       ? RG_FINISH_STOP : RG_FINISH_EOS;
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
