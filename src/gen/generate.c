/* The whole-request generation loop over the step API (generate.h). */
#include "gen/generate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

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

/* One sampled output sequence. */
typedef struct gseq {
	rg_kv_seq kv;
	rg_sampler *chain;
	rg_rng rng;
	int32_t pending;   /* last chosen token, not yet in the cache */
	int max_new;
	bool started;
	rg_finish_reason finish;
	bool by_string;    /* finished by a stop string */
	int32_t *ids;      /* (max_new) */
	float *lps;        /* (max_new) */
	int32_t *top_ids;  /* (max_new, n_top) */
	float *top_lps;
	int n;
	double sum_lp;
	char *text;
	size_t text_len, searched;
} gseq;

typedef struct gprompt {
	const int32_t *ids;
	int len, prefilled, max_new;
	rg_kv_seq root;
	rg_beam_search *beam;
	rg_kv_seq *bkv;     /* (num_beams) */
	int32_t *bpending;  /* (num_beams) */
	bool beam_started, beam_done;
} gprompt;

typedef struct gen {
	const rg_gen_runner *r;
	const rg_gen_params *p;
	rg_kv_pool *pool;
	int V, budget, rows_cap, max_blocks, width, n_prompts, n_top;
	gprompt *pr; /* (n_prompts) */
	gseq *seqs;  /* (n_prompts * width), sampling only */
	/* the step being built */
	int32_t *tokens, *positions, *cu, *ctx_lens, *tables, *slots, *lrows, *csrc, *cdst;
	int bn_tok, bn_seq, bn_logits, n_copies;
	int32_t *row_unit; /* (rows_cap) which unit asked for each logits row */
	float *logits;     /* (rows_cap, V) */
	bool fast;         /* plain greedy through r->step_argmax: ids / log-probs, no logits */
	int32_t *am_ids;   /* (rows_cap) fast / dev: each row's chosen id */
	float *am_lps;     /* (rows_cap) fast / dev: its log-prob */
	/* dev: sampled on the runner (r->step_sample) with per-row parameters; no logits */
	bool dev;
	rg_row_sampling *rowp;   /* (rows_cap) */
	int32_t *row_seq;        /* (rows_cap) the output sequence each logits row samples for */
	int32_t *dev_top_ids;    /* (rows_cap, n_top) */
	float *dev_top_lps;      /* (rows_cap, n_top) */
	/* bdev: beam steps ask the runner for each row's beam_k best tokens (its step_sample's
	 * top_n at temperature 0) instead of the logits, when beam_k fits (else 0: logits) */
	bool bdev;
	int beam_k;
	const int32_t **cids; /* (num_beams) each live slot's candidates */
	const float **clps;
	int32_t *pen_ids, *pen_counts, *pen_keys; /* the step's penalty lists (pen_cap) */
	uint8_t *pen_inp;
	size_t pen_cap;
	rg_token_array work;
	/* beam step scratch (num_beams) */
	int32_t *parent, *btok, *children;
	const float **rows;
	rg_kv_seq *newkv;
} gen;

static void batch_reset(gen *g)
{
	g->bn_tok = g->bn_seq = g->bn_logits = g->n_copies = 0;
	g->cu[0] = 0;
}

/* Append n tokens of a sequence to the step being built, taking their KV slots. */
static rg_status batch_add(gen *g, rg_kv_seq *kv, const int32_t *toks, int n, bool want_logits)
{
	rg_kv_copy cp;
	int nc;
	rg_status st = rg_kv_seq_append(g->pool, kv, n, g->slots + g->bn_tok, &cp, &nc);

	if (st != RG_OK)
		return st;
	if (nc) {
		g->csrc[g->n_copies] = cp.src;
		g->cdst[g->n_copies++] = cp.dst;
	}
	for (int k = 0; k < n; k++) {
		g->tokens[g->bn_tok + k] = toks[k];
		g->positions[g->bn_tok + k] = kv->n_tokens - n + k;
	}
	g->ctx_lens[g->bn_seq] = kv->n_tokens;
	memcpy(g->tables + (size_t)g->bn_seq * g->max_blocks, kv->blocks,
	       (size_t)kv->n_blocks * sizeof(int32_t));
	g->bn_tok += n;
	g->cu[++g->bn_seq] = g->bn_tok;
	if (want_logits)
		g->lrows[g->bn_logits++] = g->bn_tok - 1;
	return RG_OK;
}

/* dev: each logits row's sampling parameters (rg_row_sampling) for the sequence it samples
 * for: the request's options, the next draw of the sequence's RNG stream when it samples (the
 * draw the host chain's dist step would take), its penalty lists. */
static rg_status dev_params(gen *g)
{
	const rg_sampling_params *sp = &g->p->sampling;
	const bool pen = rg_sampling_penalties_on(sp);
	size_t need = 0, off = 0;

	if (pen) {
		for (int k = 0; k < g->bn_logits; k++) {
			const gseq *s = &g->seqs[g->row_seq[k]];

			need += (size_t)g->pr[g->row_seq[k] / g->width].len + (size_t)s->n;
		}
		if (need > g->pen_cap) {
			int32_t *ids = realloc(g->pen_ids, need * sizeof(int32_t));
			int32_t *cnt = ids ? realloc(g->pen_counts, need * sizeof(int32_t)) : NULL;
			int32_t *keys = cnt ? realloc(g->pen_keys, need * sizeof(int32_t)) : NULL;
			uint8_t *inp = keys ? realloc(g->pen_inp, need) : NULL;

			if (ids)
				g->pen_ids = ids;
			if (cnt)
				g->pen_counts = cnt;
			if (keys)
				g->pen_keys = keys;
			if (!inp)
				return rg_errorf(RG_ERR_OOM, "generate: out of memory for penalties");
			g->pen_inp = inp;
			g->pen_cap = need;
		}
	}
	for (int k = 0; k < g->bn_logits; k++) {
		gseq *s = &g->seqs[g->row_seq[k]];
		rg_row_sampling *row = &g->rowp[k];

		*row = rg_sampler_row(sp, &s->rng);
		if (pen) {
			const gprompt *pr = &g->pr[g->row_seq[k] / g->width];

			row->n_penalty = rg_sampler_penalty_lists(
				pr->ids, pr->len, s->ids, s->n, g->pen_keys, g->pen_ids + off,
				g->pen_counts + off, g->pen_inp + off);
			row->penalty_ids = g->pen_ids + off;
			row->penalty_counts = g->pen_counts + off;
			row->penalty_in_prompt = g->pen_inp + off;
			off += (size_t)row->n_penalty;
		}
	}
	return RG_OK;
}

/* bdev: the candidates this step's beams need (rg_beam_cand_needed, the most of any prompt). */
static int beam_cands(gen *g)
{
	int k = 0;

	for (int i = 0; i < g->n_prompts; i++) {
		gprompt *pr = &g->pr[i];
		int n = pr->beam_done ? 0 : rg_beam_cand_needed(pr->beam);

		k = n > k ? n : k;
	}
	return k;
}

static rg_status batch_run(gen *g)
{
	rg_step_batch b = {
		.n_tokens = g->bn_tok, .tokens = g->tokens, .positions = g->positions,
		.n_seq = g->bn_seq, .cu_seqlens_q = g->cu, .context_lens = g->ctx_lens,
		.max_blocks_per_seq = g->max_blocks, .block_tables = g->tables,
		.slot_mapping = g->slots, .n_logits = g->bn_logits, .logits_rows = g->lrows,
	};
	rg_status st;

	if (g->bn_seq == 0)
		return RG_OK;
	if (g->n_copies > 0) {
		if (!g->r->copy_blocks)
			return rg_errorf(RG_ERR_INVALID_INPUT, "runner has no copy_blocks");
		if ((st = g->r->copy_blocks(g->r->ctx, g->csrc, g->cdst, g->n_copies)) != RG_OK)
			return rg_error_wrap(st, "copy_blocks");
	}
	g->beam_k = g->bdev ? beam_cands(g) : 0;
	if (g->beam_k > RG_GEN_MAX_LOGPROBS)
		g->beam_k = 0; /* more than the runner's top_n: the logits to the host */
	if (g->beam_k) {
		for (int k = 0; k < g->bn_logits; k++)
			g->rowp[k] = (rg_row_sampling){.top_p = 1.f, .repetition_penalty = 1.f};
		st = g->r->step_sample(g->r->ctx, &b, g->rowp, g->beam_k, g->am_ids, g->am_lps,
				       g->dev_top_ids, g->dev_top_lps);
	} else if (g->dev) {
		if ((st = dev_params(g)) != RG_OK)
			return st;
		st = g->r->step_sample(g->r->ctx, &b, g->rowp, g->n_top, g->am_ids, g->am_lps,
				       g->n_top ? g->dev_top_ids : NULL,
				       g->n_top ? g->dev_top_lps : NULL);
	} else {
		st = g->fast ? g->r->step_argmax(g->r->ctx, &b, g->am_ids, g->am_lps)
			     : g->r->step(g->r->ctx, &b, g->logits);
	}
	if (st != RG_OK)
		return rg_error_wrap(st, "step");
	return RG_OK;
}

/* A sampled sequence got token t: record, stream, check the stop conditions. */
static rg_status seq_take(gen *g, gseq *s, int idx, int32_t t, float lp, const int32_t *top_ids,
			  const float *top_lps)
{
	const rg_gen_params *p = g->p;
	rg_finish_reason fin;
	rg_status st;

	s->ids[s->n] = t;
	s->lps[s->n] = lp;
	if (g->n_top) {
		memcpy(s->top_ids + (size_t)s->n * g->n_top, top_ids, g->n_top * sizeof(int32_t));
		memcpy(s->top_lps + (size_t)s->n * g->n_top, top_lps, g->n_top * sizeof(float));
	}
	s->n++;
	s->sum_lp += lp;
	if (p->on_token && (st = p->on_token(p->on_token_ctx, idx, t, lp)) != RG_OK)
		return rg_error_wrap(st, "on_token callback");
	rg_sampler_accept(s->chain, t);
	fin = rg_stop_token(p->eos_ids, p->n_eos, p->stop_ids, p->n_stop_ids, t);
	if (fin == RG_FINISH_NONE && p->n_stop > 0) {
		char *text = NULL;
		size_t len = 0;
		long pos;

		if ((st = p->detokenize(p->detokenize_ctx, s->ids, s->n, &text, &len)) != RG_OK)
			return rg_error_wrap(st, "detokenize");
		/* earlier text can change as UTF-8 completes: look back a little */
		pos = rg_stop_find(text, len, s->searched > 16 ? s->searched - 16 : 0, p->stop,
				   p->n_stop);
		free(s->text);
		s->text = text;
		s->text_len = len;
		s->searched = len;
		if (pos >= 0) {
			fin = RG_FINISH_STOP;
			s->by_string = true;
			s->text_len = (size_t)pos;
			s->text[pos] = '\0';
		}
	}
	if (fin == RG_FINISH_NONE && s->n >= s->max_new)
		fin = RG_FINISH_LENGTH;
	s->finish = fin;
	if (fin != RG_FINISH_NONE)
		rg_kv_seq_free(g->pool, &s->kv); /* blocks back as soon as a sequence ends */
	else
		s->pending = t;
	return RG_OK;
}

/* Sequence idx's next token from logits row k of the last step. */
static rg_status seq_sample(gen *g, int idx, int k)
{
	gseq *s = &g->seqs[idx];
	const float *row = g->logits + (size_t)k * g->V;
	int32_t t, top_ids[RG_GEN_MAX_LOGPROBS];
	float lp, top_lps[RG_GEN_MAX_LOGPROBS];
	rg_status st;

	if (g->fast) /* the runner chose on the device: the same token and log-prob */
		return seq_take(g, s, idx, g->am_ids[k], g->am_lps[k], NULL, NULL);
	if (g->dev) /* the runner sampled with this sequence's parameters and draw */
		return seq_take(g, s, idx, g->am_ids[k], g->am_lps[k],
				g->dev_top_ids + (size_t)k * g->n_top,
				g->dev_top_lps + (size_t)k * g->n_top);
	if ((st = rg_sampler_sample(s->chain, row, g->V, &s->rng, &g->work, g->n_top, &t, &lp,
				    top_ids, top_lps)) != RG_OK)
		return st;
	return seq_take(g, s, idx, t, lp, top_ids, top_lps);
}

/* Re-seat the KV of a prompt's beams after a beam step: new slot j continues old slot
 * map(parent[j]); a parent's last child takes its table over, the others fork it, childless
 * parents are released (before the next appends, so that a sole remaining owner of a block
 * writes in place). old (n_old) entries are emptied. */
static rg_status beams_reseat(gen *g, rg_kv_seq *old, int n_old, bool first)
{
	int nb = g->p->num_beams;
	rg_status st = RG_OK;

	memset(g->children, 0, (size_t)nb * sizeof(int32_t));
	for (int j = 0; j < nb; j++)
		if (g->parent[j] >= 0)
			g->children[first ? 0 : g->parent[j]]++;
	for (int j = 0; j < nb; j++)
		rg_kv_seq_init(&g->newkv[j]);
	for (int j = 0; j < nb; j++) {
		int o;

		if (g->parent[j] < 0)
			continue;
		o = first ? 0 : g->parent[j];
		if (--g->children[o] > 0) {
			if ((st = rg_kv_seq_fork(g->pool, &old[o], &g->newkv[j])) != RG_OK)
				break;
		} else {
			g->newkv[j] = old[o];
			rg_kv_seq_init(&old[o]);
		}
	}
	for (int o = 0; o < n_old; o++)
		rg_kv_seq_free(g->pool, &old[o]);
	return st;
}

/* One beam step of prompt pr from g->rows (logits) or, with beam_k, g->cids / g->clps. */
static rg_status beam_advance(gen *g, gprompt *pr)
{
	int nb = g->p->num_beams;
	bool done;
	rg_status st;

	st = g->beam_k ? rg_beam_step_cand(pr->beam, g->cids, g->clps, g->beam_k, g->parent,
					   g->btok, &done)
		       : rg_beam_step(pr->beam, g->rows, g->parent, g->btok, &done);
	if (st != RG_OK)
		return st;
	if (!pr->beam_started) {
		st = beams_reseat(g, &pr->root, 1, true);
		pr->beam_started = true;
	} else {
		st = beams_reseat(g, pr->bkv, nb, false);
	}
	memcpy(pr->bkv, g->newkv, (size_t)nb * sizeof(rg_kv_seq));
	if (st != RG_OK)
		return st;
	for (int j = 0; j < nb; j++)
		pr->bpending[j] = g->btok[j];
	if (done) {
		for (int j = 0; j < nb; j++)
			rg_kv_seq_free(g->pool, &pr->bkv[j]);
		pr->beam_done = true;
	}
	return RG_OK;
}

/* The prompt's prefill produced its last row: start its outputs. */
static rg_status prompt_start(gen *g, int i, int k)
{
	gprompt *pr = &g->pr[i];
	const float *row = g->logits + (size_t)k * g->V;
	rg_status st;

	if (beams_on(g->p)) {
		for (int j = 0; j < g->p->num_beams; j++) {
			g->rows[j] = row;
			g->cids[j] = g->dev_top_ids + (size_t)k * g->beam_k;
			g->clps[j] = g->dev_top_lps + (size_t)k * g->beam_k;
		}
		return beam_advance(g, pr);
	}
	for (int j = 0; j < g->width; j++) {
		gseq *s = &g->seqs[i * g->width + j];

		if (j < g->width - 1) {
			if ((st = rg_kv_seq_fork(g->pool, &pr->root, &s->kv)) != RG_OK)
				return st;
		} else {
			s->kv = pr->root;
			rg_kv_seq_init(&pr->root);
		}
		s->started = true;
		/* dev: sample j drew from its own copy of the row (batch_add's extra rows) */
		if ((st = seq_sample(g, i * g->width + j, g->dev ? k + j : k)) != RG_OK)
			return st;
	}
	return RG_OK;
}

static rg_status prefill(gen *g)
{
	int next = 0;
	rg_status st;

	while (next < g->n_prompts) {
		batch_reset(g);
		/* dev: a prompt's last chunk asks for its last row once per sample */
		const int per = g->dev ? g->width : 1;

		while (next < g->n_prompts && g->bn_tok < g->budget &&
		       g->bn_logits + per <= g->rows_cap) {
			gprompt *pr = &g->pr[next];
			int take = pr->len - pr->prefilled;
			bool last;

			if (take > g->budget - g->bn_tok)
				take = g->budget - g->bn_tok;
			last = pr->prefilled + take == pr->len;
			if ((st = batch_add(g, &pr->root, pr->ids + pr->prefilled, take, last)))
				return st;
			if (last) {
				g->row_unit[g->bn_logits - 1] = next;
				g->row_seq[g->bn_logits - 1] = next * g->width;
				for (int j = 1; j < per; j++) {
					g->lrows[g->bn_logits] = g->bn_tok - 1;
					g->row_unit[g->bn_logits] = -1;
					g->row_seq[g->bn_logits++] = next * g->width + j;
				}
			}
			pr->prefilled += take;
			if (last)
				next++;
		}
		if ((st = batch_run(g)) != RG_OK)
			return st;
		for (int k = 0; k < g->bn_logits; k++)
			if (g->row_unit[k] >= 0 && (st = prompt_start(g, g->row_unit[k], k)))
				return st;
	}
	return RG_OK;
}

/* Rows of the last step back to their units: sampled sequences or a prompt's beams. */
static rg_status decode_process(gen *g)
{
	rg_status st;

	if (!beams_on(g->p)) {
		for (int k = 0; k < g->bn_logits; k++)
			if ((st = seq_sample(g, g->row_unit[k], k)))
				return st;
		return RG_OK;
	}
	for (int k = 0; k < g->bn_logits;) {
		int i = g->row_unit[k];
		gprompt *pr = &g->pr[i];

		for (int j = 0; j < g->p->num_beams; j++) {
			g->rows[j] = NULL;
			g->cids[j] = NULL;
			g->clps[j] = NULL;
			if (!rg_beam_slot_live(pr->beam, j))
				continue;
			g->rows[j] = g->logits + (size_t)k * g->V;
			g->cids[j] = g->dev_top_ids + (size_t)k * g->beam_k;
			g->clps[j] = g->dev_top_lps + (size_t)k++ * g->beam_k;
		}
		if ((st = beam_advance(g, pr)) != RG_OK)
			return st;
	}
	return RG_OK;
}

static rg_status decode(gen *g)
{
	rg_status st;

	for (;;) {
		int n_units = 0;

		batch_reset(g);
		if (!beams_on(g->p)) {
			for (int i = 0; i < g->n_prompts * g->width; i++) {
				gseq *s = &g->seqs[i];

				if (s->finish != RG_FINISH_NONE)
					continue;
				n_units++;
				if (g->bn_seq + 1 > g->rows_cap || g->bn_tok + 1 > g->budget) {
					if ((st = batch_run(g)) || (st = decode_process(g)))
						return st;
					batch_reset(g);
				}
				if ((st = batch_add(g, &s->kv, &s->pending, 1, true)) != RG_OK)
					return st;
				g->row_unit[g->bn_logits - 1] = i;
				g->row_seq[g->bn_logits - 1] = i;
			}
		} else {
			for (int i = 0; i < g->n_prompts; i++) {
				gprompt *pr = &g->pr[i];
				int live = pr->beam_done ? 0 : rg_beam_n_running(pr->beam);

				if (live == 0)
					continue;
				n_units++;
				if (g->bn_seq + live > g->rows_cap || g->bn_tok + live > g->budget) {
					if ((st = batch_run(g)) || (st = decode_process(g)))
						return st;
					batch_reset(g);
				}
				for (int j = 0; j < g->p->num_beams; j++) {
					if (!rg_beam_slot_live(pr->beam, j))
						continue;
					if ((st = batch_add(g, &pr->bkv[j], &pr->bpending[j], 1,
							    true)) != RG_OK)
						return st;
					g->row_unit[g->bn_logits - 1] = i;
				}
			}
		}
		if (n_units == 0)
			return RG_OK;
		if ((st = batch_run(g)) || (st = decode_process(g)))
			return st;
	}
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

/* Detokenize what the caller sees as the completion: without an ending EOS or stop id. */
static rg_status final_text(gen *g, const int32_t *ids, int n, bool drop_last, char **text,
			    size_t *len)
{
	const rg_gen_params *p = g->p;

	*text = NULL;
	*len = 0;
	if (!p->detokenize)
		return RG_OK;
	return p->detokenize(p->detokenize_ctx, ids, drop_last ? n - 1 : n, text, len);
}

static rg_status collect(gen *g, rg_gen_result *res)
{
	const rg_gen_params *p = g->p;
	rg_status st;

	for (int i = 0; i < g->n_prompts; i++) {
		gprompt *pr = &g->pr[i];
		int nh = 0;

		if (beams_on(p) && (st = rg_beam_finalize(pr->beam, &nh)) != RG_OK)
			return st;
		for (int j = 0; j < p->n; j++) {
			rg_gen_seq *o = &res->seqs[i * p->n + j];

			o->prompt_index = i;
			o->index = j;
			o->prompt_tokens = pr->len;
			if (beams_on(p)) {
				const rg_beam_hyp *h;

				if (j >= nh)
					continue; /* fewer hypotheses than asked: an empty output */
				h = rg_beam_result(pr->beam, j);
				o->ids = malloc((size_t)(h->n ? h->n : 1) * sizeof(int32_t));
				o->logprobs = malloc((size_t)(h->n ? h->n : 1) * sizeof(float));
				if (!o->ids || !o->logprobs)
					return rg_errorf(RG_ERR_OOM, "generate: out of memory");
				memcpy(o->ids, h->ids, (size_t)h->n * sizeof(int32_t));
				memcpy(o->logprobs, h->logprobs, (size_t)h->n * sizeof(float));
				o->n_ids = o->completion_tokens = h->n;
				o->score = h->score;
				o->finish = rg_gen_beam_finish(p, h);
				if ((st = final_text(g, o->ids, o->n_ids, h->eos, &o->text,
						     &o->text_len)) != RG_OK)
					return st;
				if (p->on_token)
					for (int k = 0; k < o->n_ids; k++)
						if ((st = p->on_token(p->on_token_ctx, i * p->n + j,
								      o->ids[k], o->logprobs[k])))
							return rg_error_wrap(st, "on_token callback");
			} else {
				gseq *s = &g->seqs[i * p->n + j];

				o->ids = s->ids, s->ids = NULL;
				o->logprobs = s->lps, s->lps = NULL;
				o->top_ids = s->top_ids, s->top_ids = NULL;
				o->top_logprobs = s->top_lps, s->top_lps = NULL;
				o->n_top = g->n_top;
				o->n_ids = o->completion_tokens = s->n;
				o->score = s->sum_lp;
				o->finish = s->finish;
				if (s->by_string) {
					o->text = s->text, s->text = NULL;
					o->text_len = s->text_len;
				} else if ((st = final_text(g, o->ids, o->n_ids,
							    s->finish == RG_FINISH_EOS ||
							    s->finish == RG_FINISH_STOP,
							    &o->text, &o->text_len)) != RG_OK) {
					return st;
				}
			}
		}
	}
	return RG_OK;
}

static void gen_free(gen *g)
{
	if (g->pr)
		for (int i = 0; i < g->n_prompts; i++) {
			gprompt *pr = &g->pr[i];

			rg_kv_seq_free(g->pool, &pr->root);
			if (pr->bkv)
				for (int j = 0; j < g->p->num_beams; j++)
					rg_kv_seq_free(g->pool, &pr->bkv[j]);
			free(pr->bkv);
			free(pr->bpending);
			rg_beam_free(pr->beam);
		}
	if (g->seqs)
		for (int i = 0; i < g->n_prompts * g->width; i++) {
			gseq *s = &g->seqs[i];

			rg_kv_seq_free(g->pool, &s->kv);
			rg_sampler_free(s->chain);
			free(s->ids);
			free(s->lps);
			free(s->top_ids);
			free(s->top_lps);
			free(s->text);
		}
	free(g->pr);
	free(g->seqs);
	free(g->tokens);
	free(g->positions);
	free(g->cu);
	free(g->ctx_lens);
	free(g->tables);
	free(g->slots);
	free(g->lrows);
	free(g->csrc);
	free(g->cdst);
	free(g->row_unit);
	free(g->logits);
	free(g->am_ids);
	free(g->am_lps);
	free(g->rowp);
	free(g->row_seq);
	free(g->dev_top_ids);
	free(g->dev_top_lps);
	free(g->pen_ids);
	free(g->pen_counts);
	free(g->pen_keys);
	free(g->pen_inp);
	free(g->work.data);
	free(g->parent);
	free(g->btok);
	free(g->children);
	free(g->rows);
	free(g->cids);
	free(g->clps);
	free(g->newkv);
}

static rg_status gen_alloc(gen *g)
{
	const rg_gen_params *p = g->p;
	size_t B = (size_t)g->budget, R = (size_t)g->rows_cap, nb = (size_t)p->num_beams;

	g->tokens = malloc(B * sizeof(int32_t));
	g->positions = malloc(B * sizeof(int32_t));
	g->slots = malloc(B * sizeof(int32_t));
	g->cu = malloc((B + 1) * sizeof(int32_t));
	g->ctx_lens = malloc(B * sizeof(int32_t));
	g->csrc = malloc(B * sizeof(int32_t));
	g->cdst = malloc(B * sizeof(int32_t));
	g->tables = calloc(B * (size_t)g->max_blocks, sizeof(int32_t));
	g->lrows = malloc(R * sizeof(int32_t));
	g->row_unit = malloc(R * sizeof(int32_t));
	g->logits = malloc((g->fast || g->dev ? 1 : R) * (size_t)g->V * sizeof(float));
	g->rowp = malloc(R * sizeof(rg_row_sampling));
	g->row_seq = malloc(R * sizeof(int32_t));
	{
		size_t per = g->bdev ? RG_GEN_MAX_LOGPROBS : g->n_top ? (size_t)g->n_top : 1;

		g->dev_top_ids = malloc(R * per * sizeof(int32_t));
		g->dev_top_lps = malloc(R * per * sizeof(float));
	}
	g->cids = malloc(nb * sizeof(*g->cids));
	g->clps = malloc(nb * sizeof(*g->clps));
	g->am_ids = malloc(R * sizeof(int32_t));
	g->am_lps = malloc(R * sizeof(float));
	g->work.data = malloc((size_t)g->V * sizeof(rg_token_data));
	g->parent = malloc(nb * sizeof(int32_t));
	g->btok = malloc(nb * sizeof(int32_t));
	g->children = malloc(nb * sizeof(int32_t));
	g->rows = malloc(nb * sizeof(*g->rows));
	g->newkv = malloc(nb * sizeof(rg_kv_seq));
	g->pr = calloc((size_t)g->n_prompts, sizeof(gprompt));
	if (!g->tokens || !g->positions || !g->slots || !g->cu || !g->ctx_lens || !g->csrc ||
	    !g->cdst || !g->tables || !g->lrows || !g->row_unit || !g->logits || !g->work.data ||
	    !g->parent || !g->btok || !g->children || !g->rows || !g->newkv || !g->pr ||
	    !g->rowp || !g->row_seq || !g->dev_top_ids || !g->dev_top_lps || !g->cids ||
	    !g->clps)
		return rg_errorf(RG_ERR_OOM, "generate: out of memory for the step buffers");
	if (!beams_on(p) &&
	    !(g->seqs = calloc((size_t)g->n_prompts * (size_t)g->width, sizeof(gseq))))
		return rg_errorf(RG_ERR_OOM, "generate: out of memory");
	return RG_OK;
}

static rg_status gen_setup_prompt(gen *g, int i, const int32_t *ids, int len)
{
	const rg_gen_params *p = g->p;
	gprompt *pr = &g->pr[i];
	int room = g->r->max_context - len;
	rg_status st;

	pr->ids = ids;
	pr->len = len;
	pr->max_new = p->max_tokens < room ? p->max_tokens : room;
	if (beams_on(p)) {
		pr->bkv = calloc((size_t)p->num_beams, sizeof(rg_kv_seq));
		pr->bpending = calloc((size_t)p->num_beams, sizeof(int32_t));
		if (!pr->bkv || !pr->bpending)
			return rg_errorf(RG_ERR_OOM, "generate: out of memory");
		return rg_gen_beam_init(p, ids, len, pr->max_new, g->V, &pr->beam);
	}
	for (int j = 0; j < g->width; j++) {
		gseq *s = &g->seqs[i * g->width + j];
		size_t m = (size_t)pr->max_new;

		s->max_new = pr->max_new;
		rg_rng_seed_stream(&s->rng, p->seed, (uint64_t)j);
		if ((st = rg_sampler_from_params(&p->sampling, g->V, ids, len, &s->chain)))
			return st;
		s->ids = malloc(m * sizeof(int32_t));
		s->lps = malloc(m * sizeof(float));
		if (g->n_top) {
			s->top_ids = malloc(m * (size_t)g->n_top * sizeof(int32_t));
			s->top_lps = malloc(m * (size_t)g->n_top * sizeof(float));
		}
		if (!s->ids || !s->lps || (g->n_top && (!s->top_ids || !s->top_lps)))
			return rg_errorf(RG_ERR_OOM, "generate: out of memory");
	}
	return RG_OK;
}

rg_status rg_gen_run(const rg_gen_runner *r, const int32_t *const *prompts,
		     const int *prompt_lens, int n_prompts, const rg_gen_params *p, rg_kv_pool *pool,
		     rg_gen_result **out)
{
	gen g = {0};
	rg_kv_pool *own = NULL;
	rg_gen_result *res = NULL;
	long long total_out;
	rg_status st;

	*out = NULL;
	if (!r || !r->step || r->vocab_size < 1 || r->block_size < 1 || r->max_context < 2 ||
	    !p || n_prompts < 1 || !prompts || !prompt_lens)
		return rg_errorf(RG_ERR_INVALID_INPUT, "generate: bad runner or arguments");
	if ((st = rg_gen_params_check(p, r->vocab_size)) != RG_OK)
		return st;
	if ((p->n > 1 || beams_on(p)) && !r->copy_blocks)
		return rg_errorf(RG_ERR_INVALID_INPUT, "generate: n > 1 or beams need copy_blocks");
	for (int i = 0; i < n_prompts; i++) {
		if (!prompts[i] || prompt_lens[i] < 1)
			return rg_errorf(RG_ERR_INVALID_INPUT, "generate: prompt %d is empty", i);
		if (prompt_lens[i] >= r->max_context)
			return rg_errorf(RG_ERR_TOO_LONG,
					 "generate: prompt %d has %d tokens, max_context is %d", i,
					 prompt_lens[i], r->max_context);
		for (int k = 0; k < prompt_lens[i]; k++)
			if (prompts[i][k] < 0 || prompts[i][k] >= r->vocab_size)
				return rg_errorf(RG_ERR_INVALID_INPUT,
						 "generate: prompt %d token %d is %d, outside [0, %d)",
						 i, k, prompts[i][k], r->vocab_size);
	}
	if (!pool) {
		if ((st = rg_kv_pool_init(&own, r->n_blocks, r->block_size)) != RG_OK)
			return st;
		pool = own;
	} else if (rg_kv_pool_block_size(pool) != r->block_size) {
		return rg_errorf(RG_ERR_INVALID_INPUT, "generate: pool block size %d != runner's %d",
				 rg_kv_pool_block_size(pool), r->block_size);
	}
	g.r = r;
	g.p = p;
	g.pool = pool;
	g.V = r->vocab_size;
	g.n_prompts = n_prompts;
	g.width = beams_on(p) ? p->num_beams : p->n;
	g.n_top = beams_on(p) ? 0 : p->logprobs;
	{
		const rg_sampling_params *sp = &p->sampling;

		g.fast = r->step_argmax && !beams_on(p) && p->logprobs == 0 &&
			 (!sp->do_sample || sp->temperature == 0.f) &&
			 !rg_sampling_penalties_on(sp) && sp->n_logit_bias == 0 &&
			 sp->no_repeat_ngram_size == 0;
	}
	g.budget = p->max_step_tokens;
	total_out = (long long)n_prompts * g.width;
	g.rows_cap = total_out < g.budget ? (int)total_out : g.budget;
	if (g.rows_cap < n_prompts && g.rows_cap < g.budget)
		g.rows_cap = n_prompts < g.budget ? n_prompts : g.budget;
	g.max_blocks = (r->max_context + r->block_size - 1) / r->block_size;
	/* the device samples whatever the host chain would, except no-repeat n-grams and beams */
	g.dev = !g.fast && r->step_sample && !beams_on(p) &&
		p->sampling.no_repeat_ngram_size == 0 && g.width <= g.rows_cap;
	/* beams: each row's best few tokens from the runner (the logits stay on the device) */
	g.bdev = r->step_sample && beams_on(p);
	if ((st = gen_alloc(&g)) != RG_OK)
		goto out_free;
	for (int i = 0; i < n_prompts; i++)
		if ((st = gen_setup_prompt(&g, i, prompts[i], prompt_lens[i])) != RG_OK)
			goto out_free;
	if ((st = prefill(&g)) != RG_OK || (st = decode(&g)) != RG_OK)
		goto out_free;
	if (!(res = calloc(1, sizeof(*res))) ||
	    !(res->seqs = calloc((size_t)n_prompts * p->n, sizeof(rg_gen_seq)))) {
		st = rg_errorf(RG_ERR_OOM, "generate: out of memory for the result");
		goto out_free;
	}
	res->n_seqs = n_prompts * p->n;
	if ((st = collect(&g, res)) != RG_OK)
		goto out_free;
	*out = res;
	res = NULL;
out_free:
	rg_gen_result_free(res);
	gen_free(&g);
	if (st == RG_OK && own && rg_kv_pool_n_used(own) != 0) { /* a broken invariant, caught */
		st = rg_errorf(RG_ERR_INTERNAL, "generate: %d KV blocks still in use at the end",
			       rg_kv_pool_n_used(own));
		rg_gen_result_free(*out);
		*out = NULL;
	}
	rg_kv_pool_free(own);
	return st;
}
