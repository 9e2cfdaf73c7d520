/* The generation engine: one loop for every entry point (include/ragged.h rg_gen_engine_*).
 *
 * A step:
 *   begin: rg_iter_schedule -> the plan; each logits row classified (a beam group's row, a row
 *          sampled on the host chain, or one sampled on the device) and its rg_row_sampling
 *          built (the sequence's next draw, penalty lists, logit bias with min_tokens' block);
 *          the runner call chosen: greedy argmax when every row is plain greedy, the device
 *          sampler otherwise, with the logits of the rows that need them copied out in the same
 *          forward (host-chain rows, beam groups whose candidates exceed the device's top-N);
 *   run:   copy-on-write block copies, then the one runner call (no engine state but the step
 *          buffers is touched: other threads may add and abort meanwhile, under their lock);
 *   end:   per row, the token goes to its output sequence (src/gen/seq.h: stops, text), a beam
 *          group's search takes one step (src/gen/beam.h) and gives the scheduler its next
 *          beams; rg_iter_update; finished requests become events.
 * Prompt scoring (rg_gen_params.prompt_logprobs): output 0's scheduler entry asks for its
 * prompt positions' logits (src/sched/iter.h), rows after the sampling rows, copied to the host
 * in the same forward (their sampler choice, if any, unused); at the step's end each row's
 * float64 log-softmax scores the next prompt token (log-prob, rank, top-N) into the request.
 * Request id serial: iter ids serial << SEQ_BITS | output index. */
#include "gen/engine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "core/rng.h"
#include "core/threadpool.h"
#include "core/tuning.h"
#include "gen/beam.h"
#include "gen/grammar.h"
#include "gen/params.h"
#include "gen/sampler.h"
#include "gen/seq.h"
#include "gen/spec.h"
#include "gen/stop.h"
#include "model/model.h"
#include "sched/iter.h"

#define SEQ_BITS 8
#define MAX_OUT (1 << SEQ_BITS)
#define PRE_ERR 256 /* host_rows_sample: a failed row's message, bytes */
#define BIAS_BLOCK -1e9f /* min_tokens: the bias that keeps EOS and stop ids out */
#define N_GCACHE 8 /* compiled grammars kept for requests that repeat one */

enum { MODE_NONE, MODE_ARGMAX, MODE_SAMPLE, MODE_SAMPLE_LOGITS, MODE_LOGITS };
enum { ROW_DEVICE, ROW_HOST, ROW_BEAM, ROW_NONE, ROW_PROMPT };

/* Engine state of one output of a request. */
typedef struct eout {
	rg_seq seq;
	rg_rng rng;
	rg_sampler *chain;   /* host-chain rows: built on first use, replayed to the tokens so far */
	bool live;           /* in the scheduler */
	bool reported;       /* its finishing event was listed */
	int n_cached, n_preemptions;
	double first_ms;
	int32_t *bias_ids;   /* user bias then (min_tokens) EOS and stop ids blocked */
	float *bias_vals;
	int n_bias, n_bias_min;
	int gstate;          /* constrained requests: the grammar's DFA state (-1: left it) */
	int spec_miss;       /* speculation: drafts rejected whole in a row (spec_backoff) */
	int spec_skip;       /* decode steps left before the next proposal */
} eout;

typedef struct ereq {
	uint64_t id;
	int32_t *prompt;      /* the decoder's prompt (an encoder-decoder's: decoder_start) */
	int prompt_len;
	int32_t *src;         /* encoder-decoders: the source (n_src), else NULL */
	int n_src;
	rg_gen_params gp;     /* a deep copy: the arrays below */
	int32_t *eos, *stop_ids, *bias_ids;
	float *bias_vals;
	char **stop;
	rg_gen_options opt;
	int n_out;
	bool beam;
	bool host;            /* sampled on the host chain (no device form) */
	rg_grammar *grammar;  /* structured outputs: the output's constraint (a reference), or NULL */
	eout *o;              /* (n_out) */
	rg_beam_search *bs;   /* beam requests */
	int max_new;
	double queue_ms;
	double est_ttft_ms, est_tpot_ms; /* admission's estimates (the latest output's) */
	/* prompt scoring (gp.prompt_logprobs): output 0's prompt rows, by prompt index */
	float *plp;           /* (prompt_len) */
	int32_t *prank;       /* (prompt_len) */
	int32_t *ptop_ids;    /* (prompt_len, gp.prompt_top_n) */
	float *ptop_lps;      /* (prompt_len, gp.prompt_top_n) */
	bool score_only;      /* max_tokens 0: the one token its scheduler entry samples is
			       * dropped, the output ends LENGTH without a token */
	rg_status status;
	char err[200];
	bool finished;        /* every output ended */
} ereq;

struct rg_gen_engine {
	rg_gen_runner r;
	rg_model *m;            /* model engines: the model (KV cache, step) */
	const rg_tokenizer *tok;
	const int32_t *eos;
	int n_eos;
	rg_kv_pool *pool;
	bool own_pool;
	rg_iter *it;
	rg_gen_engine_params p;
	int max_context, V, S;
	int R;                  /* logits rows of a step at most: RS + max_prompt_logprob_rows */
	int RS;                 /* sampling rows of a step at most: S, + the budget with drafts */
	int32_t *draft;         /* (RG_ITER_MAX_DRAFT) a proposal's scratch */
	/* drafts from a draft model (rg_model_set_draft; NULL: prompt lookup): the engine over
	 * its runner, and one step's draft requests, (S) this engine's sequence id and the inner
	 * engine's request id */
	rg_gen_engine *de;
	struct {
		uint64_t iid, did;
	} *dq;
	rg_rng *rng_row;        /* (R) each device row's output RNG state before its draw */
	bool beam_logits;       /* beams read their rows' logits on the host (A/B switch) */

	ereq **reqs;            /* live and unreleased requests, by id ascending */
	int n_reqs, cap_reqs;
	uint64_t next_serial;

	/* the step in flight */
	bool pending, ran;
	rg_iter_plan plan;
	int mode, top_n, cand_k;
	rg_row_sampling *rows;  /* (R) */
	uint8_t *kind;          /* (R) ROW_* */
	uint8_t *want;          /* (R) rows whose logits are copied to the host */
	int32_t *ids;           /* (R) */
	float *lps;             /* (R) */
	int32_t *top_ids;       /* (R, RG_GEN_MAX_LOGPROBS) */
	float *top_lps;
	bool *stops;            /* (R) */
	float *logits;          /* (logits_rows, V), allocated on first need, grown to R */
	int logits_rows;
	float no_logits;        /* what a step without logits rows is given (never written) */
	int32_t *pen_ids, *pen_counts, *pen_keys; /* (R, max_context) penalty lists */
	uint8_t *pen_prompt;
	rg_token_array work;    /* host-chain scratch (V) */
	uint64_t *gbits;        /* ((V + 63) / 64) a grammar's allowed tokens, scratch */
	/* host_rows_sample's draws: the rows drawn, each row's token, log-prob, top lists, status
	 * and message; per pool thread, a scratch candidate array (V) and bitmask */
	int32_t *pre_list, *pre_t;  /* (R) */
	float *pre_lp;              /* (R) */
	int32_t *pre_tops;          /* (R, RG_GEN_MAX_LOGPROBS) */
	float *pre_topl;            /* (R, RG_GEN_MAX_LOGPROBS) */
	rg_status *pre_st;          /* (R) */
	uint8_t *pre_on;            /* (R) */
	char *pre_err;              /* (R, PRE_ERR) */
	struct {
		rg_token_array work;
		uint64_t *bits;
	} *hs;
	int n_hs;
	bool hs_ok;
	rg_status run_st;
	char run_err[256];
	/* the cost model's measurement: a step's period, from its begin to the next step's begin
	 * while work remains (the host's work around the model, the caller's included), else to
	 * its own end */
	double t_begin, prev_begin, prev_end;
	rg_step_shape prev_shape;
	bool prev_ran, prev_busy, no_measure;

	rg_gen_event *ev;
	int n_ev, cap_ev;
	long long n_steps, n_preemptions, n_refused;
	int last_step_tokens;
	int32_t *enc_tok, *enc_cu; /* encoder-decoders: a step's packed sources (B), cu (S + 1) */
	/* structured outputs: the vocabulary's byte trie (built at the first constrained request)
	 * and the last grammars compiled, by (kind, text), so a repeated schema is compiled and
	 * its masks computed once */
	rg_token_trie *trie;
	struct {
		rg_grammar_kind kind;
		char *text;
		rg_grammar *g;
	} gcache[N_GCACHE];
	int gcache_next;
};

double rg_gen_engine_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static void sleep_ms(double ms)
{
	struct timespec ts;

	if (ms <= 0)
		return;
	ts.tv_sec = (time_t)(ms / 1000);
	ts.tv_nsec = (long)((ms - (double)ts.tv_sec * 1000) * 1e6);
	nanosleep(&ts, NULL);
}

void rg_gen_engine_params_default(rg_gen_engine_params *p)
{
	memset(p, 0, sizeof(*p));
	p->max_num_batched_tokens = 512;
	p->max_num_seqs = 64;
	p->max_waiting = 1024;
	p->watermark_blocks = -1;
	p->prefix_caching = true;
	p->deadline_slack = 1.1;
	p->block_size = 16;
	p->kv_fraction = 0.9;
	p->default_ttft_ms = 0;
	p->default_tpot_ms = 0;
	p->max_grammar_states = RG_GRAMMAR_MAX_STATES;
	p->max_prompt_logprob_rows = 128;
}

void rg_gen_options_default(rg_gen_options *r)
{
	memset(r, 0, sizeof(*r));
	r->skip_special_tokens = true;
}

/* Stands for the engine's own streamed text when rg_gen_params_check asks for a detokenizer
 * (stop strings); never called. */
static rg_status streamed_text(void *ctx, const int32_t *ids, int n, char **text, size_t *len)
{
	return RG_ERR_UNSUPPORTED;
}

rg_status rg_gen_engine_params_check(const rg_gen_params *p, int vocab, bool streams_text)
{
	rg_gen_params chk = *p;

	if (!chk.detokenize && streams_text)
		chk.detokenize = streamed_text; /* the engine streams the text */
	return rg_gen_params_check(&chk, vocab);
}

/* ---- requests ------------------------------------------------------------------------------ */

static void req_free(ereq *q)
{
	if (!q)
		return;
	for (int k = 0; q->o && k < q->n_out; k++) {
		rg_seq_free(&q->o[k].seq);
		rg_sampler_free(q->o[k].chain);
		free(q->o[k].bias_ids);
		free(q->o[k].bias_vals);
	}
	for (int k = 0; q->stop && k < q->gp.n_stop; k++)
		free(q->stop[k]);
	rg_beam_free(q->bs);
	rg_grammar_unref(q->grammar);
	free(q->o);
	free(q->stop);
	free(q->prompt);
	free(q->src);
	free(q->eos);
	free(q->stop_ids);
	free(q->bias_ids);
	free(q->bias_vals);
	free(q->plp);
	free(q->prank);
	free(q->ptop_ids);
	free(q->ptop_lps);
	free(q);
}

static int req_index(const rg_gen_engine *e, uint64_t id)
{
	int lo = 0, hi = e->n_reqs - 1;

	while (lo <= hi) {
		int mid = (lo + hi) / 2;

		if (e->reqs[mid]->id == id)
			return mid;
		if (e->reqs[mid]->id < id)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return -1;
}

static ereq *req_find(const rg_gen_engine *e, uint64_t id)
{
	int i = req_index(e, id);

	return i < 0 ? NULL : e->reqs[i];
}

/* The request and output of an iter id. */
static ereq *req_of(const rg_gen_engine *e, uint64_t iter_id, int *k)
{
	ereq *q = req_find(e, iter_id >> SEQ_BITS);

	*k = (int)(iter_id & (MAX_OUT - 1));
	return q && *k < q->n_out ? q : NULL;
}

static void *dup_array(const void *src, size_t n, size_t size, bool *oom)
{
	void *d;

	if (!src || n == 0)
		return NULL;
	if (!(d = malloc(n * size))) {
		*oom = true;
		return NULL;
	}
	memcpy(d, src, n * size);
	return d;
}

/* q->gp = *p with every array copied into q. */
#define BANNED (-1e30f) /* a banned token's logit bias */

static rg_status copy_params(const rg_gen_engine *e, ereq *q, const rg_gen_params *p)
{
	bool oom = false;
	const rg_sampling_params *sp = &p->sampling;
	const size_t nb = (size_t)sp->n_logit_bias, nx = e->r.bad_ids ? (size_t)e->r.n_bad : 0;

	q->gp = *p;
	q->eos = dup_array(p->eos_ids, p->n_eos > 0 ? (size_t)p->n_eos : 0, sizeof(int32_t), &oom);
	q->stop_ids = dup_array(p->stop_ids, (size_t)p->n_stop_ids, sizeof(int32_t), &oom);
	/* the request's bias, then the model's banned tokens at BANNED (transformers'
	 * NoBadWordsLogitsProcessor's -inf: the step's bias must be finite; e^-1e30 is 0) */
	q->bias_ids = malloc((nb + nx ? nb + nx : 1) * sizeof(int32_t));
	q->bias_vals = malloc((nb + nx ? nb + nx : 1) * sizeof(float));
	if (!q->bias_ids || !q->bias_vals) {
		oom = true;
	} else {
		if (nb) {
			memcpy(q->bias_ids, sp->logit_bias_ids, nb * sizeof(int32_t));
			memcpy(q->bias_vals, sp->logit_bias_values, nb * sizeof(float));
		}
		q->gp.sampling.n_logit_bias = (int)nb;
		for (size_t i = 0; i < nx; i++) {
			bool have = false;

			for (size_t j = 0; j < nb; j++)
				if (q->bias_ids[j] == e->r.bad_ids[i]) {
					q->bias_vals[j] = BANNED;
					have = true;
				}
			if (!have) {
				q->bias_ids[q->gp.sampling.n_logit_bias] = e->r.bad_ids[i];
				q->bias_vals[q->gp.sampling.n_logit_bias++] = BANNED;
			}
		}
	}
	if (p->n_stop > 0) {
		if (!(q->stop = calloc((size_t)p->n_stop, sizeof(char *))))
			oom = true;
		for (int k = 0; q->stop && k < p->n_stop; k++)
			if (!(q->stop[k] = strdup(p->stop[k])))
				oom = true;
	}
	q->gp.eos_ids = q->eos;
	q->gp.stop_ids = q->stop_ids;
	q->gp.stop = (const char *const *)q->stop;
	q->gp.sampling.logit_bias_ids = q->bias_ids;
	q->gp.sampling.logit_bias_values = q->bias_vals;
	q->gp.on_token = NULL;
	q->gp.on_token_ctx = NULL;
	return oom ? rg_errorf(RG_ERR_OOM, "generate: out of memory for a request") : RG_OK;
}

/* Output k's state: RNG stream k of the seed (batch invariant), its sequence, its bias. */
static rg_status out_prepare(rg_gen_engine *e, ereq *q, int k)
{
	eout *o = &q->o[k];
	const rg_gen_params *gp = &q->gp;
	const rg_sampling_params *sp = &gp->sampling;
	const int n_eos = gp->n_eos > 0 ? gp->n_eos : 0;
	int n_block = 0;
	rg_seq_params sq = {
		.eos_ids = gp->eos_ids, .n_eos = n_eos, .stop_ids = gp->stop_ids,
		.n_stop_ids = gp->n_stop_ids, .stop = gp->stop, .n_stop = gp->n_stop,
		.max_tokens = q->max_new, .min_tokens = q->opt.min_tokens,
		.n_top = q->beam ? 0 : gp->logprobs, .keep_stop_id_text = q->opt.keep_stop_id_text,
		.tok = e->tok, .skip_special = q->opt.skip_special_tokens,
		.detokenize = gp->detokenize, .detokenize_ctx = gp->detokenize_ctx,
	};
	rg_status st;

	rg_rng_seed_stream(&o->rng, gp->seed, (uint64_t)k);
	o->gstate = q->grammar ? rg_dfa_start(rg_grammar_dfa(q->grammar)) : -1;
	if ((st = rg_seq_init(&o->seq, &sq)) != RG_OK)
		return st;
	if (q->opt.min_tokens > 0)
		n_block = n_eos + gp->n_stop_ids;
	o->n_bias = sp->n_logit_bias;
	o->n_bias_min = sp->n_logit_bias + n_block;
	if (o->n_bias_min > 0) {
		o->bias_ids = malloc((size_t)o->n_bias_min * sizeof(int32_t));
		o->bias_vals = malloc((size_t)o->n_bias_min * sizeof(float));
		if (!o->bias_ids || !o->bias_vals)
			return rg_errorf(RG_ERR_OOM, "generate: out of memory");
		for (int i = 0; i < sp->n_logit_bias; i++) {
			o->bias_ids[i] = sp->logit_bias_ids[i];
			o->bias_vals[i] = sp->logit_bias_values[i];
		}
		for (int i = 0; i < n_block; i++) {
			o->bias_ids[o->n_bias + i] = i < n_eos ? gp->eos_ids[i]
							       : gp->stop_ids[i - n_eos];
			o->bias_vals[o->n_bias + i] = BIAS_BLOCK;
		}
	}
	return RG_OK;
}

static rg_status reqs_insert(rg_gen_engine *e, ereq *q)
{
	if (e->n_reqs == e->cap_reqs) {
		int cap = e->cap_reqs ? 2 * e->cap_reqs : 64;
		ereq **l = realloc(e->reqs, (size_t)cap * sizeof(*l));

		if (!l)
			return rg_errorf(RG_ERR_OOM, "generate: out of memory");
		e->reqs = l;
		e->cap_reqs = cap;
	}
	e->reqs[e->n_reqs++] = q; /* ids only grow: the list stays sorted */
	return RG_OK;
}

/* The compiled grammar of p (a new reference): from the engine's cache, else compiled over
 * the vocabulary's trie (built on first use) and cached. */
static rg_status grammar_get(rg_gen_engine *e, const rg_gen_params *p, rg_grammar **out)
{
	const char *text = p->grammar ? p->grammar : "";
	rg_grammar *g;
	rg_status st;
	int slot;

	*out = NULL;
	for (int i = 0; i < N_GCACHE; i++)
		if (e->gcache[i].g && e->gcache[i].kind == p->grammar_kind &&
		    !strcmp(e->gcache[i].text, text)) {
			*out = rg_grammar_ref(e->gcache[i].g);
			return RG_OK;
		}
	if (!e->tok)
		return rg_errorf(RG_ERR_UNSUPPORTED, "structured outputs need the model's tokenizer "
				 "(the bytes of its tokens)");
	if (!e->trie && (st = rg_token_trie_from_tokenizer(e->tok, e->V, &e->trie)) != RG_OK)
		return st;
	if ((st = rg_grammar_from_params(p->grammar_kind, p->grammar, e->trie,
					 e->p.max_grammar_states, &g)) != RG_OK)
		return st;
	slot = e->gcache_next;
	e->gcache_next = (slot + 1) % N_GCACHE;
	free(e->gcache[slot].text);
	rg_grammar_unref(e->gcache[slot].g);
	e->gcache[slot].g = NULL;
	if ((e->gcache[slot].text = strdup(text))) {
		e->gcache[slot].kind = p->grammar_kind;
		e->gcache[slot].g = rg_grammar_ref(g);
	}
	*out = g;
	return RG_OK;
}

rg_status rg_gen_engine_add(rg_gen_engine *e, const int32_t *prompt, int n_prompt,
			    const rg_gen_params *params, const rg_gen_options *r, double now_ms,
			    uint64_t *id, rg_gen_admission *adm)
{
	rg_gen_params p;
	rg_gen_options opt;
	ereq *q = NULL;
	int added = 0, n_iter;
	rg_status st;
	rg_iter_admission ia = {0};

	if (id)
		*id = 0;
	if (adm) {
		/* until the queue decides: what is refused before can never be admitted */
		memset(adm, 0, sizeof(*adm));
		adm->retry_after_ms = -1;
	}
	if (!e || !prompt || n_prompt < 1 || !id)
		return rg_errorf(RG_ERR_INVALID_INPUT, "generate: no engine, prompt or id");
	if (params)
		p = *params;
	else
		rg_gen_params_default(&p);
	if (r)
		opt = *r;
	else
		rg_gen_options_default(&opt);
	if (p.n_eos == -1) {
		p.n_eos = 0;
		p.eos_ids = NULL;
	} else if (p.n_eos == 0 && !p.eos_ids && e->n_eos > 0) {
		p.eos_ids = e->eos;
		p.n_eos = e->n_eos;
	}
	if (!p.detokenize && !e->tok && p.n_stop > 0)
		return rg_errorf(RG_ERR_INVALID_INPUT,
				 "generate: stop strings need a tokenizer or a detokenizer");
	if (p.prompt_logprobs && e->r.encode)
		return rg_errorf(RG_ERR_UNSUPPORTED, "generate: prompt log-probabilities need a "
				 "decoder-only model (an encoder-decoder's prompt is its source)");
	if (p.prompt_logprobs && e->p.max_prompt_logprob_rows < 1)
		return rg_errorf(RG_ERR_UNSUPPORTED, "generate: this engine scores no prompts "
				 "(max_prompt_logprob_rows is 0)");
	if ((st = rg_gen_engine_params_check(&p, e->V, e->tok != NULL)) != RG_OK)
		return st;
	if (p.n > MAX_OUT)
		return rg_errorf(RG_ERR_INVALID_INPUT, "generate: n is %d, at most %d", p.n, MAX_OUT);
	if (opt.min_tokens < 0 || opt.deadline_ms < 0 || opt.tpot_ms < 0)
		return rg_errorf(RG_ERR_INVALID_INPUT,
				 "generate: min_tokens, deadline_ms and tpot_ms must be >= 0");
	if (e->r.encode && n_prompt > e->r.max_source)
		return rg_errorf(RG_ERR_TOO_LONG,
				 "the source has %d tokens; this model reads at most %d", n_prompt,
				 e->r.max_source);
	if (e->r.encode && n_prompt >= e->p.max_num_batched_tokens)
		return rg_errorf(RG_ERR_TOO_LONG,
				 "the source has %d tokens; a step holds at most %d "
				 "(max_num_batched_tokens) with the decoder's first token",
				 n_prompt, e->p.max_num_batched_tokens);
	if (!e->r.encode && n_prompt >= e->max_context)
		return rg_errorf(RG_ERR_TOO_LONG,
				 "the prompt has %d tokens; this model's context is %d tokens "
				 "(prompt and completion together)",
				 n_prompt, e->max_context);
	if (p.num_beams <= 1 && p.n > e->p.max_waiting)
		return rg_errorf(RG_ERR_INVALID_INPUT,
				 "generate: n is %d; the engine queues at most %d sequences "
				 "(max_waiting)", p.n, e->p.max_waiting);
	if (p.num_beams > e->S)
		return rg_errorf(RG_ERR_INVALID_INPUT,
				 "generate: num_beams is %d; a step runs at most %d sequences "
				 "(max_num_seqs)", p.num_beams, e->S);
	if (adm)
		adm->retry_after_ms = 0;
	/* the engine's defaults for a request without targets */
	if (opt.deadline_ms == 0)
		opt.deadline_ms = e->p.default_ttft_ms;
	if (opt.tpot_ms == 0)
		opt.tpot_ms = e->p.default_tpot_ms;
	for (int k = 0; k < n_prompt; k++)
		if (prompt[k] < 0 || prompt[k] >= e->V)
			return rg_errorf(RG_ERR_INVALID_INPUT,
					 "prompt token %d is %d, outside the vocabulary [0, %d)", k,
					 prompt[k], e->V);
	if (!(q = calloc(1, sizeof(*q))))
		return rg_errorf(RG_ERR_OOM, "generate: out of memory");
	q->beam = p.num_beams > 1;
	q->n_out = p.n;
	q->opt = opt;
	if (!q->opt.arrival_ms)
		q->opt.arrival_ms = now_ms;
	/* an encoder-decoder: the prompt is the source; the decoder's is decoder_start */
	q->prompt_len = e->r.encode ? 1 : n_prompt;
	{
		int room = e->max_context - q->prompt_len;

		/* max_tokens 0 (prompt scoring only): one token is scheduled and dropped; the
		 * prompt's last row, which samples it, is computed by its last chunk anyway */
		q->score_only = p.prompt_logprobs && p.max_tokens == 0;
		if (q->score_only)
			p.max_tokens = 1;
		q->max_new = p.max_tokens < room ? p.max_tokens : room;
	}
	q->host = !q->beam && p.sampling.no_repeat_ngram_size > 0; /* no device form */
	if (p.grammar_kind != RG_GRAMMAR_NONE) {
		/* the mask is applied to the row's logits on the host */
		if ((st = grammar_get(e, &p, &q->grammar)) != RG_OK)
			goto fail;
		q->host = true;
	}
	if ((st = copy_params(e, q, &p)) != RG_OK)
		goto fail;
	q->gp.grammar = NULL; /* borrowed during add only; q->grammar is the compiled form */
	if (!(q->prompt = malloc((size_t)n_prompt * sizeof(int32_t))) ||
	    !(q->o = calloc((size_t)q->n_out, sizeof(eout)))) {
		st = rg_errorf(RG_ERR_OOM, "generate: out of memory");
		goto fail;
	}
	if (e->r.encode) {
		q->src = q->prompt;
		q->n_src = n_prompt;
		memcpy(q->src, prompt, (size_t)n_prompt * sizeof(int32_t));
		if (!(q->prompt = malloc(sizeof(int32_t)))) {
			st = rg_errorf(RG_ERR_OOM, "generate: out of memory");
			goto fail;
		}
		q->prompt[0] = e->r.decoder_start;
	} else {
		memcpy(q->prompt, prompt, (size_t)n_prompt * sizeof(int32_t));
	}
	if (p.prompt_logprobs) {
		const size_t n = (size_t)n_prompt, tn = (size_t)p.prompt_top_n;

		q->plp = malloc(n * sizeof(float));
		q->prank = calloc(n, sizeof(int32_t));
		q->ptop_ids = malloc((n * tn > 0 ? n * tn : 1) * sizeof(int32_t));
		q->ptop_lps = malloc((n * tn > 0 ? n * tn : 1) * sizeof(float));
		if (!q->plp || !q->prank || !q->ptop_ids || !q->ptop_lps) {
			st = rg_errorf(RG_ERR_OOM, "generate: out of memory");
			goto fail;
		}
		for (size_t i = 0; i < n; i++)
			q->plp[i] = NAN;
		for (size_t i = 0; i < n * tn; i++) {
			q->ptop_ids[i] = -1;
			q->ptop_lps[i] = NAN;
		}
	}
	for (int k = 0; k < q->n_out; k++)
		if ((st = out_prepare(e, q, k)) != RG_OK)
			goto fail;
	q->id = e->next_serial++;
	/* one scheduler request per output; a beam search is one group on the prompt */
	n_iter = q->beam ? 1 : q->n_out;
	for (int k = 0; k < n_iter; k++) {
		rg_iter_request ir = {
			.id = q->id << SEQ_BITS | (uint64_t)k, .prompt = q->prompt,
			.prompt_len = q->prompt_len, .max_tokens = q->max_new, .n_src = q->n_src,
			.priority = opt.priority, .arrival_ms = q->opt.arrival_ms,
			.deadline_ms = opt.deadline_ms, .tpot_ms = opt.tpot_ms,
			.n_beams = q->beam ? p.num_beams : 0,
			/* key 0: the request's own share, all its outputs in it */
			.fair_key = opt.fair_key ? opt.fair_key : q->id, .fair_own = !opt.fair_key,
			/* output 0 scores the prompt; the others may share its cached blocks */
			.prompt_logits = p.prompt_logprobs && k == 0,
		};

		if ((st = rg_iter_add(e->it, &ir, now_ms, &ia)) != RG_OK)
			break;
		q->est_ttft_ms = ia.est_ttft_ms; /* the last output's: the latest first token */
		q->est_tpot_ms = fmax(q->est_tpot_ms, ia.est_tpot_ms);
		q->o[k].live = true;
		added++;
	}
	if (q->beam)
		for (int k = 1; k < q->n_out; k++)
			q->o[k].live = q->o[0].live;
	if (st == RG_OK)
		st = reqs_insert(e, q);
	if (adm) {
		adm->est_ttft_ms = ia.est_ttft_ms;
		adm->est_tpot_ms = ia.est_tpot_ms;
		adm->retry_after_ms = ia.retry_after_ms;
		adm->refused_for_others = ia.refused_for_others;
	}
	if (st != RG_OK) {
		char msg[256];

		snprintf(msg, sizeof(msg), "%s", rg_last_error());
		/* refused whole: the outputs already queued go now, nothing is left behind (they
		 * are not in a pending plan: a plan holds admitted, scheduled requests only) */
		for (int k = 0; k < added; k++)
			rg_iter_abort(e->it, q->id << SEQ_BITS | (uint64_t)k);
		if (added) {
			int nd;
			rg_iter_finished(e->it, &nd); /* theirs; no other request's end is lost: */
			(void)nd;                     /* every step drains the list before this */
		}
		if (st == RG_ERR_BUSY)
			e->n_refused++;
		req_free(q);
		return rg_errorf(st, "%s", msg);
	}
	*id = q->id;
	return RG_OK;
fail:
	req_free(q);
	return st;
}

/* ---- the step ------------------------------------------------------------------------------ */

static rg_status ev_push(rg_gen_engine *e, const rg_gen_event *x)
{
	if (e->n_ev == e->cap_ev) {
		int cap = e->cap_ev ? 2 * e->cap_ev : 64;
		rg_gen_event *v = realloc(e->ev, (size_t)cap * sizeof(*v));

		if (!v)
			return rg_errorf(RG_ERR_OOM, "generate: out of memory for events");
		e->ev = v;
		e->cap_ev = cap;
	}
	e->ev[e->n_ev++] = *x;
	return RG_OK;
}

/* The event of output k after it took n_new tokens (or ended). */
static void emit(rg_gen_engine *e, ereq *q, int k, int n_new)
{
	eout *o = &q->o[k];
	rg_gen_event x = {.req = q->id, .seq = k, .n_new = n_new, .token = -1};

	if (o->reported)
		return;
	if (n_new > 0 && o->seq.n > 0) {
		x.token = o->seq.ids[o->seq.n - 1];
		x.logprob = o->seq.logprobs[o->seq.n - 1];
	}
	rg_seq_take_text(&o->seq, &x.text, &x.text_len);
	x.finish = o->seq.finish;
	if (x.finish != RG_FINISH_NONE)
		o->reported = true;
	ev_push(e, &x); /* an OOM here loses an event, never a token: outputs keep them */
}

static void req_check_finished(ereq *q)
{
	bool all = true;

	for (int k = 0; k < q->n_out; k++)
		all &= q->o[k].seq.finish != RG_FINISH_NONE && !q->o[k].live;
	q->finished = all;
}

/* Abort what is live of q in the scheduler (its ends come through rg_iter_finished). */
static void req_abort(rg_gen_engine *e, ereq *q, rg_status status, const char *why)
{
	if (q->status == RG_OK && status != RG_OK)
		q->status = status;
	if (why && !q->err[0])
		snprintf(q->err, sizeof(q->err), "%s", why);
	for (int k = 0; k < (q->beam ? 1 : q->n_out); k++)
		if (q->o[k].live)
			rg_iter_abort(e->it, q->id << SEQ_BITS | (uint64_t)k);
}

/* A beam request's group ended: its outputs are the search's hypotheses, best first, or, when
 * aborted, empty ends. */
static void beam_end(rg_gen_engine *e, ereq *q, rg_iter_finish reason)
{
	int nh = 0;
	rg_status st = RG_OK;

	if (reason != RG_ITER_FINISH_ABORT && (!q->bs || (st = rg_beam_finalize(q->bs, &nh))))
		reason = RG_ITER_FINISH_ABORT;
	if (st != RG_OK) {
		q->status = st;
		snprintf(q->err, sizeof(q->err), "%s", rg_last_error());
	}
	for (int k = 0; k < q->n_out; k++) {
		eout *o = &q->o[k];
		const rg_beam_hyp *h = reason != RG_ITER_FINISH_ABORT && k < nh
					       ? rg_beam_result(q->bs, k) : NULL;

		o->live = false;
		if (h) {
			rg_finish_reason fr = rg_gen_beam_finish(&q->gp, h);

			if ((st = rg_seq_set_result(&o->seq, h->ids, h->logprobs, h->n, h->score,
						    fr)) != RG_OK) {
				q->status = st;
				rg_seq_end(&o->seq, RG_FINISH_ABORT);
			}
			o->seq.text_emitted = 0;
			emit(e, q, k, h->n);
		} else {
			/* aborted, or fewer hypotheses than asked: an empty output */
			rg_seq_end(&o->seq, reason == RG_ITER_FINISH_ABORT ? RG_FINISH_ABORT
									   : RG_FINISH_LENGTH);
			emit(e, q, k, 0);
		}
	}
}

/* The scheduler's finished entries: end their outputs, list the events. */
static void collect_finished(rg_gen_engine *e)
{
	const rg_iter_done *d;
	int nd;

	d = rg_iter_finished(e->it, &nd);
	for (int i = 0; i < nd; i++) {
		int k;
		ereq *q = req_of(e, d[i].id, &k);

		if (!q)
			continue;
		q->o[k].n_cached = d[i].n_cached_tokens;
		q->o[k].n_preemptions = d[i].n_preemptions;
		if (q->beam) {
			for (int j = 1; j < q->n_out; j++) {
				q->o[j].n_cached = d[i].n_cached_tokens;
				q->o[j].n_preemptions = d[i].n_preemptions;
			}
			beam_end(e, q, d[i].reason);
		} else {
			eout *o = &q->o[k];

			o->live = false;
			if (o->seq.finish == RG_FINISH_NONE)
				rg_seq_end(&o->seq, d[i].reason == RG_ITER_FINISH_ABORT
							    ? RG_FINISH_ABORT : RG_FINISH_LENGTH);
			emit(e, q, k, 0);
		}
		req_check_finished(q);
	}
}

/* The penalty lists of row r for output k of q: prompt and generated tokens. */
static void penalty_lists(rg_gen_engine *e, int r, const ereq *q, int k, rg_row_sampling *row)
{
	const rg_seq *s = &q->o[k].seq;
	int n_prompt = q->prompt_len, n_gen = s->n;
	int32_t *ids = e->pen_ids + (size_t)r * e->max_context;
	int32_t *cnt = e->pen_counts + (size_t)r * e->max_context;
	uint8_t *inp = e->pen_prompt + (size_t)r * e->max_context;

	if (n_prompt + n_gen > e->max_context)
		n_gen = e->max_context - n_prompt;
	row->n_penalty = rg_sampler_penalty_lists(q->prompt, n_prompt, s->ids, n_gen, e->pen_keys,
						  ids, cnt, inp);
	row->penalty_ids = ids;
	row->penalty_counts = cnt;
	row->penalty_in_prompt = inp;
}

static bool plain_greedy(const ereq *q, const eout *o)
{
	const rg_sampling_params *sp = &q->gp.sampling;

	return (!sp->do_sample || sp->temperature == 0.f) && !rg_sampling_penalties_on(sp) &&
	       sp->n_logit_bias == 0 && q->gp.logprobs == 0 && !rg_seq_blocks_stops(&o->seq);
}

/* Whether output o of q drafts with prompt lookup (rg_gen_params.num_speculative_tokens): a
 * greedy or sampled request whose rows depend on nothing but the context (no penalties, bias,
 * top logprobs or min_tokens block; not on the host chain; no beams), on a decoder-only model
 * without a forced EOS (whose last token is not the model's choice), in an engine that allows
 * drafts. */
static bool spec_on(const rg_gen_engine *e, const ereq *q, const eout *o)
{
	const rg_sampling_params *sp = &q->gp.sampling;

	return e->p.max_speculative_tokens > 0 && q->gp.num_speculative_tokens > 0 && !q->beam &&
	       !q->host && !q->src && !e->r.has_forced_eos && !rg_sampling_penalties_on(sp) &&
	       sp->n_logit_bias == 0 && q->gp.logprobs == 0 && !rg_seq_blocks_stops(&o->seq) &&
	       o->live && o->seq.finish == RG_FINISH_NONE && o->seq.n > 0;
}

/* The drafts of the next schedule: each speculating output's prompt-lookup proposal (src/gen/
 * spec.h) over its tokens so far, given to the scheduler (which uses it only for a sequence
 * that decodes in that step). */
/* After a step that verified m > 0 drafts of output o and took n_taken tokens: fewer than half
 * of the drafts accepted makes o wait 2, 4, 8, 16, then 32 decode steps before it proposes
 * again; half or more resets that. A verification step of 1 + m rows costs more than a plain one
 * (on the CPU at 2 threads a 5-row step of the quantized SmolLM2 took ~2.1 plain steps), so text
 * that the context does not predict (the real SmolLM2 at 2 threads: 16-27% slower with k = 4
 * without the backoff) pays for a few probes only; prompt lookup's wins come in runs (a copied
 * span), which the first good probe resumes. The tokens are unchanged (a step without a draft is a
 * plain step); only which steps carry drafts. vLLM's n-gram proposer has no such rule;
 * llama.cpp's lookup decoding keeps statistics of its n-gram hits in the same spirit. */
static void spec_backoff(eout *o, int m, int n_taken)
{
	if (m <= 0)
		return;
	if (2 * (n_taken - 1) < m) { /* fewer than half of the drafts accepted */
		o->spec_miss = o->spec_miss < 5 ? o->spec_miss + 1 : 5;
		o->spec_skip = 1 << o->spec_miss;
	} else {
		o->spec_miss = 0;
	}
}

/* The draft of output o of q (prompt lookup or the draft model): k tokens at most, or 0 for a
 * step without one (spec_on false, backing off); toks / n_tok: its context. */
static int spec_want(rg_gen_engine *e, ereq *q, int o, const int32_t **toks, int *n_tok)
{
	const uint64_t iid = q->id << SEQ_BITS | (uint64_t)o;

	if (!spec_on(e, q, &q->o[o]) || !(*toks = rg_iter_tokens(e->it, iid, n_tok)))
		return 0;
	if (q->o[o].spec_skip > 0) { /* backing off after rejected drafts */
		q->o[o].spec_skip--;
		return 0;
	}
	return q->gp.num_speculative_tokens < e->p.max_speculative_tokens
		       ? q->gp.num_speculative_tokens : e->p.max_speculative_tokens;
}

/* Drafts from the draft model (rg_model_set_draft; vLLM's draft-model speculator, llama.cpp's
 * --model-draft): each speculating output's context (its prompt and tokens so far) is a greedy
 * request of k new tokens to the inner engine e->de, whose prefix cache keeps the contexts'
 * full blocks from one step to the next: a step's draft prefill is the tokens since the last
 * full block (at most block_size - 1 plus those accepted since), then k - 1 decode steps, all
 * batched over the outputs (S at most per step). A draft is a function of its context alone
 * (greedy; the rounding of the draft's batch composition aside) and independent of the target's
 * RNG stream, so the acceptance rule of a one-hot proposal (rg_gen_params.
 * num_speculative_tokens) keeps the sampled distribution exactly the target's. A draft request
 * that cannot run (a context past the draft model's, a full pool, a draft model error)
 * proposes nothing: that output steps plainly. */
static void draft_propose(rg_gen_engine *e)
{
	const rg_gen_event *ev;
	rg_gen_output out;
	rg_gen_params gp;
	double now = rg_gen_engine_now_ms();
	int n = 0, k_max = 0, n_ev, guard;

	rg_gen_params_default(&gp);
	gp.n_eos = -1; /* k tokens, whatever they are: the target's step decides */
	for (int i = 0; i < e->n_reqs && n < e->S; i++) {
		ereq *q = e->reqs[i];

		for (int o = 0; o < q->n_out && n < e->S; o++) {
			const int32_t *toks;
			int n_tok, k = spec_want(e, q, o, &toks, &n_tok);

			gp.max_tokens = k;
			if (k <= 0 || rg_gen_engine_add(e->de, toks, n_tok, &gp, NULL, now,
							&e->dq[n].did, NULL) != RG_OK)
				continue;
			e->dq[n++].iid = q->id << SEQ_BITS | (uint64_t)o;
			k_max = k > k_max ? k : k_max;
		}
	}
	/* each request ends within its prefill chunks and k - 1 decode steps; the guard only
	 * bounds a scheduler that could not place one (such a request is aborted below) */
	guard = 8 * (k_max + 2) + 4 * n;
	while (n > 0 && rg_gen_engine_has_work(e->de) && guard-- > 0) {
		if (rg_gen_engine_step(e->de, now, &ev, &n_ev) != RG_OK)
			break;
		now = rg_gen_engine_now_ms();
	}
	for (int j = 0; j < n; j++) {
		if (rg_gen_engine_finished(e->de, e->dq[j].did) &&
		    rg_gen_engine_output(e->de, e->dq[j].did, 0, &out) == RG_OK &&
		    out.status == RG_OK && out.n_ids > 0) /* cannot fail: the id is live */
			rg_iter_set_draft(e->it, e->dq[j].iid, out.ids, out.n_ids);
		rg_gen_engine_release(e->de, e->dq[j].did);
	}
	while (rg_gen_engine_has_work(e->de) && /* the released requests' ends */
	       rg_gen_engine_step(e->de, rg_gen_engine_now_ms(), &ev, &n_ev) == RG_OK)
		;
}

static void spec_propose(rg_gen_engine *e)
{
	if (e->de) {
		draft_propose(e);
		return;
	}
	for (int i = 0; i < e->n_reqs; i++) {
		ereq *q = e->reqs[i];

		for (int o = 0; o < q->n_out; o++) {
			const uint64_t iid = q->id << SEQ_BITS | (uint64_t)o;
			const int32_t *toks;
			int n_tok, k = spec_want(e, q, o, &toks, &n_tok), got;

			if (k <= 0)
				continue;
			got = rg_spec_ngram_propose(toks, n_tok, q->gp.prompt_lookup_min,
						    q->gp.prompt_lookup_max, k, e->draft);
			if (got > 0) /* cannot fail: the id is live, no plan pending */
				rg_iter_set_draft(e->it, iid, e->draft, got);
		}
	}
}

/* A beam group's row r: the search (re)starts when the row is its prompt's last (the first
 * step, or again after a preemption). The candidates per row its next step needs; 0 for a
 * search that could not start (end then aborts it). */
static int beam_prepare(rg_gen_engine *e, ereq *q, uint64_t iter_id)
{
	int n_tok;

	if (!rg_iter_tokens(e->it, iter_id, &n_tok))
		return 0;
	if (n_tok == q->prompt_len) {
		rg_beam_free(q->bs);
		q->bs = NULL;
		if (rg_gen_beam_init(&q->gp, q->prompt, q->prompt_len, q->max_new, e->V, &q->bs) !=
		    RG_OK)
			q->bs = NULL;
	}
	return q->bs ? rg_beam_cand_needed(q->bs) : 0;
}

/* Host logits for n rows: grown on need, S rows at least (speculative steps may take up to
 * R; most never need more than S, so R rows of vocab are not held up front). */
static rg_status ensure_logits(rg_gen_engine *e, int n)
{
	float *l;

	if (n <= e->logits_rows)
		return RG_OK;
	n = n > e->S ? n : e->S;
	if (!(l = realloc(e->logits, (size_t)n * (size_t)e->V * sizeof(float))))
		return rg_errorf(RG_ERR_OOM, "generate: no memory for %d rows of logits", n);
	e->logits = l;
	e->logits_rows = n;
	return RG_OK;
}

/* The cost model's measurement of the last step that ran (see the struct): its period up to
 * t, the next step's begin, when work remained after it, else its own begin-to-end time. */
static void measure_prev(rg_gen_engine *e, double t)
{
	if (!e->prev_ran)
		return;
	e->prev_ran = false;
	rg_iter_cost_observe(e->it, &e->prev_shape,
			     (e->prev_busy ? t : e->prev_end) - e->prev_begin);
}

rg_status rg_gen_engine_step_begin(rg_gen_engine *e, double now_ms, bool *ran)
{
	const rg_step_batch *b;
	bool any_host = false, all_greedy = true, beam_rows = false;
	int top_n = 0, cand_k = 0;
	rg_status st;

	*ran = false;
	if (e->pending)
		return rg_errorf(RG_ERR_INVALID_INPUT, "generate: a step is already in flight");
	e->t_begin = rg_gen_engine_now_ms();
	measure_prev(e, e->t_begin);
	e->n_ev = 0;
	e->run_st = RG_OK;
	e->run_err[0] = '\0';
	if (e->p.max_speculative_tokens > 0)
		spec_propose(e);
	if ((st = rg_iter_schedule(e->it, now_ms, &e->plan)) != RG_OK)
		return st;
	b = &e->plan.batch;
	e->pending = true;
	e->ran = b->n_seq > 0;
	*ran = e->ran;
	if (!e->ran)
		return RG_OK;
	/* classify the rows (the prompt-scoring rows after the sampling rows: their logits go
	 * to the host, greedy parameters for a sampler step, its choice unused) */
	for (int r = 0; r < b->n_logits; r++) {
		const int bs = e->plan.logits_seq[r];
		const uint64_t iid = e->plan.seq_ids[bs];
		int k;
		ereq *q = req_of(e, iid, &k);

		e->want[r] = 0;
		e->rows[r] = (rg_row_sampling){.top_p = 1.f, .repetition_penalty = 1.f};
		if (r >= e->plan.n_sample) {
			e->kind[r] = q ? ROW_PROMPT : ROW_NONE;
			continue;
		}
		if (!q) {
			e->kind[r] = ROW_NONE;
			continue;
		}
		if (q->queue_ms == 0)
			q->queue_ms = now_ms - q->opt.arrival_ms;
		if (e->plan.beam_slot[bs] >= 0) {
			/* a group's rows are adjacent, its search prepared at its first */
			bool first = !(r > 0 && e->plan.beam_slot[e->plan.logits_seq[r - 1]] >= 0 &&
				       e->plan.seq_ids[e->plan.logits_seq[r - 1]] == iid);
			int need = first ? beam_prepare(e, q, iid) : 0;

			e->kind[r] = ROW_BEAM;
			/* the model's banned tokens (the request's bias list) in its candidates */
			e->rows[r].n_logit_bias = q->gp.sampling.n_logit_bias;
			e->rows[r].logit_bias_ids = q->gp.sampling.logit_bias_ids;
			e->rows[r].logit_bias_values = q->gp.sampling.logit_bias_values;
			beam_rows = true;
			cand_k = need > cand_k ? need : cand_k;
			continue;
		}
		e->kind[r] = q->host ? ROW_HOST : ROW_DEVICE;
		any_host |= q->host;
		if (!q->host) {
			all_greedy &= plain_greedy(q, &q->o[k]);
			top_n = q->gp.logprobs > top_n ? q->gp.logprobs : top_n;
		}
	}
	/* beams: their candidates come with the sampling's top-N (a greedy row's top-N are its
	 * log-softmax) when they fit; else their rows' logits go to the host */
	bool beam_cand = beam_rows && cand_k > 0 && cand_k <= RG_GEN_MAX_LOGPROBS &&
			 !e->beam_logits && (e->r.step_sample || e->r.step_sample_logits);
	if (beam_cand) {
		top_n = cand_k > top_n ? cand_k : top_n;
		all_greedy = false; /* the candidates come from the sampler's top-N */
	} else if (beam_rows) {
		all_greedy = false;
	}
	e->cand_k = beam_cand ? cand_k : 0;
	for (int r = 0; r < b->n_logits; r++)
		if (e->kind[r] == ROW_HOST || (e->kind[r] == ROW_BEAM && !beam_cand) ||
		    e->kind[r] == ROW_PROMPT)
			e->want[r] = 1;
	bool any_want = any_host || (beam_rows && !beam_cand) || e->plan.n_prompt_rows > 0;
	bool need_sample = !all_greedy || top_n > 0;
	if (b->n_logits == 0)
		e->mode = e->r.step_sample ? MODE_SAMPLE : MODE_LOGITS; /* prefill chunks only */
	else if (!any_want && !need_sample && e->r.step_argmax)
		e->mode = MODE_ARGMAX;
	else if (!any_want && e->r.step_sample)
		e->mode = MODE_SAMPLE;
	else if (any_want && e->r.step_sample_logits)
		e->mode = MODE_SAMPLE_LOGITS;
	else
		e->mode = MODE_LOGITS;
	if (e->mode == MODE_LOGITS) {
		/* every row on the host: the beams from their logits too */
		e->cand_k = 0;
		top_n = 0;
		for (int r = 0; r < b->n_logits; r++) {
			e->want[r] = e->kind[r] != ROW_NONE;
			if (e->kind[r] == ROW_DEVICE)
				e->kind[r] = ROW_HOST;
		}
	}
	e->top_n = top_n;
	if ((e->mode == MODE_LOGITS || e->mode == MODE_SAMPLE_LOGITS) && b->n_logits > 0 &&
	    (st = ensure_logits(e, b->n_logits)) != RG_OK) {
		e->run_st = st;
		snprintf(e->run_err, sizeof(e->run_err), "%s", rg_last_error());
		return RG_OK;
	}
	/* the device rows' parameters: the draw, penalties, bias */
	for (int r = 0; r < b->n_logits; r++) {
		int k;
		ereq *q;
		eout *o;

		if (e->kind[r] != ROW_DEVICE)
			continue;
		q = req_of(e, e->plan.seq_ids[e->plan.logits_seq[r]], &k);
		o = &q->o[k];
		/* a draft row's draws come from the stream in row order; the state before each is
		 * kept, so the draws of rows after the walk's end go back to the stream */
		e->rng_row[r] = o->rng;
		e->rows[r] = rg_sampler_row(&q->gp.sampling, &o->rng);
		if (rg_sampling_penalties_on(&q->gp.sampling))
			penalty_lists(e, r, q, k, &e->rows[r]);
		e->rows[r].n_logit_bias = rg_seq_blocks_stops(&o->seq) ? o->n_bias_min : o->n_bias;
		e->rows[r].logit_bias_ids = o->bias_ids;
		e->rows[r].logit_bias_values = o->bias_vals;
	}
	return RG_OK;
}

rg_status rg_gen_engine_step_run(rg_gen_engine *e)
{
	const rg_step_batch *b = &e->plan.batch;
	const int tn = e->top_n;
	rg_status st = RG_OK;

	if (!e->pending || !e->ran || e->run_st != RG_OK)
		return RG_OK;
	sleep_ms(e->p.step_delay_ms); /* testing: part of the step, as a slow device's time */
	if (e->plan.n_encode > 0) {
		/* encoder-decoders: the admitted sequences' encoder passes, packed, first */
		int nt = 0;

		e->enc_cu[0] = 0;
		for (int i = 0; i < e->plan.n_encode; i++) {
			int k;
			const ereq *q = req_of(e, e->plan.seq_ids[e->plan.enc_seq[i]], &k);

			if (!q || !q->src) {
				st = rg_errorf(RG_ERR_INTERNAL, "encode: no source for a sequence");
				break;
			}
			memcpy(e->enc_tok + nt, q->src, (size_t)q->n_src * sizeof(int32_t));
			nt += q->n_src;
			e->enc_cu[i + 1] = nt;
		}
		if (st == RG_OK)
			st = e->r.encode(e->r.ctx, nt, e->enc_tok, e->plan.n_encode, e->enc_cu,
					 e->plan.enc_slots);
	}
	if (st == RG_OK && e->plan.n_copies > 0) {
		if (!e->r.copy_blocks)
			st = rg_errorf(RG_ERR_INVALID_INPUT, "runner has no copy_blocks");
		else
			st = e->r.copy_blocks(e->r.ctx, e->plan.copy_src, e->plan.copy_dst,
					      e->plan.n_copies);
	}
	if (st == RG_OK) {
		switch (e->mode) {
		case MODE_ARGMAX:
			st = e->r.step_argmax(e->r.ctx, b, e->ids, e->lps);
			break;
		case MODE_SAMPLE:
			st = e->r.step_sample(e->r.ctx, b, e->rows, tn, e->ids, e->lps,
					      tn ? e->top_ids : NULL, tn ? e->top_lps : NULL);
			break;
		case MODE_SAMPLE_LOGITS:
			st = e->r.step_sample_logits(e->r.ctx, b, e->rows, tn, e->ids, e->lps,
						     tn ? e->top_ids : NULL,
						     tn ? e->top_lps : NULL, e->logits, e->want);
			break;
		default:
			st = e->r.step(e->r.ctx, b, b->n_logits > 0 ? e->logits : &e->no_logits);
			break;
		}
	}
	if (st != RG_OK) {
		e->run_st = st;
		snprintf(e->run_err, sizeof(e->run_err), "the model failed: %s", rg_last_error());
	}
	return RG_OK;
}

/* Fail every request of the plan after a model error. */
static void fail_plan(rg_gen_engine *e)
{
	for (int i = 0; i < e->plan.batch.n_seq; i++) {
		int k;
		ereq *q = req_of(e, e->plan.seq_ids[i], &k);

		if (q)
			req_abort(e, q, e->run_st, e->run_err);
	}
}

/* Whether output o's grammar allows nothing but its end: an accepting state with no byte
 * out, or a state left (a forced token outside the grammar). */
static bool grammar_done(const ereq *q, const eout *o)
{
	const rg_dfa *d = rg_grammar_dfa(q->grammar);

	return o->gstate < 0 || (rg_dfa_accepting(d, o->gstate) && !rg_dfa_has_out(d, o->gstate));
}

/* The tokens o's grammar allows next, as a bitmask bits ((V + 63) / 64 words): the state's
 * mask (tokens whose bytes stay in the DFA); the EOS ids set in an accepting state, else
 * cleared; only the EOS ids when nothing can follow. RG_ERR_INVALID_INPUT when no token can
 * continue (the vocabulary cannot spell what the grammar needs next). Reads the grammar's
 * mask cache only when the state's mask is cached (host_rows_sample's threads). */
static rg_status grammar_allowed(const rg_gen_engine *e, const ereq *q, const eout *o,
				 uint64_t *bits)
{
	const rg_dfa *d = rg_grammar_dfa(q->grammar);
	const int n_eos = q->gp.n_eos > 0 ? q->gp.n_eos : 0, words = (e->V + 63) / 64;
	const bool acc = o->gstate >= 0 && rg_dfa_accepting(d, o->gstate);
	const uint64_t *m = NULL;
	int n_ok = 0;

	if (!grammar_done(q, o) && !(m = rg_grammar_mask_cached(q->grammar, o->gstate)) &&
	    !(m = rg_grammar_mask(q->grammar, o->gstate)))
		return rg_errorf(RG_ERR_OOM, "structured output: no memory for a token mask");
	if (m)
		memcpy(bits, m, (size_t)words * sizeof(uint64_t));
	else
		memset(bits, 0, (size_t)words * sizeof(uint64_t));
	for (int i = 0; i < n_eos && i < 64; i++) {
		const int32_t v = q->gp.eos_ids[i];

		if (acc)
			bits[v >> 6] |= 1ull << (v & 63);
		else
			bits[v >> 6] &= ~(1ull << (v & 63));
	}
	for (int w = 0; w < words; w++)
		n_ok += __builtin_popcountll(bits[w]);
	if (!n_ok)
		return rg_errorf(RG_ERR_INVALID_INPUT, "structured output: no token of the "
				 "vocabulary continues the grammar here (after %d tokens)", o->seq.n);
	return RG_OK;
}

/* A host-chain row's token: the chain (built, and replayed over the tokens so far, on first
 * use), min_tokens' block on the row, then the draw. A constrained row draws over its allowed
 * tokens only (the same token and log-probs as the chain over the row with every other logit
 * -inf): a greedy chain without logprobs by a masked argmax over the mask's bits, any other
 * chain over the allowed candidates. work (V) and bits ((V + 63) / 64): the caller's scratch,
 * one per thread. */
static rg_status host_sample(rg_gen_engine *e, ereq *q, int k, int r, rg_token_array *work,
			     uint64_t *bits, int32_t *t, float *lp, int32_t *top_ids,
			     float *top_lps)
{
	eout *o = &q->o[k];
	float *row = e->logits + (size_t)r * e->V;
	rg_status st;

	if (!o->chain) {
		if ((st = rg_sampler_from_params(&q->gp.sampling, e->V, q->prompt, q->prompt_len,
						 &o->chain)) != RG_OK)
			return st;
		for (int i = 0; i < o->seq.n; i++)
			rg_sampler_accept(o->chain, o->seq.ids[i]);
	}
	if (rg_seq_blocks_stops(&o->seq))
		for (int i = o->n_bias; i < o->n_bias_min; i++)
			row[o->bias_ids[i]] += BIAS_BLOCK;
	if (!q->grammar)
		return rg_sampler_sample(o->chain, row, e->V, &o->rng, work, q->gp.logprobs, t, lp,
					 top_ids, top_lps);
	if ((st = grammar_allowed(e, q, o, bits)) != RG_OK)
		return st;
	if (q->gp.logprobs == 0 && rg_sampler_is_greedy(o->chain))
		return rg_sampler_masked_argmax(row, e->V, bits, t, lp);
	rg_token_array_fill_masked(work, row, e->V, bits);
	return rg_sampler_sample_cand(o->chain, work, &o->rng, q->gp.logprobs, t, lp, top_ids,
				      top_lps);
}

/* One host row of host_rows_sample (a rg_threadpool task): its draw into the row's pre_*
 * slots, with the thread's scratch. */
static void host_row_task(void *ctx, int j, int thread)
{
	rg_gen_engine *e = ctx;
	const int r = e->pre_list[j];
	int k;
	ereq *q = req_of(e, e->plan.seq_ids[e->plan.logits_seq[r]], &k);

	e->pre_st[r] = host_sample(e, q, k, r, &e->hs[thread].work, e->hs[thread].bits,
				   &e->pre_t[r], &e->pre_lp[r],
				   e->pre_tops + (size_t)r * RG_GEN_MAX_LOGPROBS,
				   e->pre_topl + (size_t)r * RG_GEN_MAX_LOGPROBS);
	if (e->pre_st[r] != RG_OK)
		snprintf(e->pre_err + (size_t)r * PRE_ERR, PRE_ERR, "%s", rg_last_error());
}

/* Draw the step's host rows that are independent of one another, spread over the CPU pool:
 * the rows of sequences without drafts (a draft row's tokens are taken in order, each
 * after the one before), whose output goes on and whose grammar mask (if any) is cached
 * (computed here first, in row order, as accept_row would; an uncached mask lives in the
 * grammar's one scratch). Each row has its own output (chain, RNG, grammar state), so the
 * draws are those the serial walk makes; accept_row takes them (pre_on) and draws the others
 * itself. A row left out costs what it did before; 16 constrained rows of a 49k vocabulary
 * were ~0.5-1 ms each on one core. */
static void host_rows_sample(rg_gen_engine *e)
{
	const rg_iter_plan *pl = &e->plan;
	int n = 0;

	memset(e->pre_on, 0, (size_t)e->R);
	for (int r = 0; r < pl->n_sample; r++) {
		const int m = pl->n_draft[pl->logits_seq[r]];
		int k;
		ereq *q;

		if (m == 0 && e->kind[r] == ROW_HOST &&
		    (q = req_of(e, pl->seq_ids[pl->logits_seq[r]], &k)) && !q->score_only &&
		    q->o[k].seq.finish == RG_FINISH_NONE) {
			const eout *o = &q->o[k];

			if (!q->grammar || grammar_done(q, o) ||
			    (rg_grammar_mask(q->grammar, o->gstate) &&
			     rg_grammar_mask_cached(q->grammar, o->gstate)))
				e->pre_list[n++] = r;
		}
		r += m;
	}
	if (n < 2)
		return; /* one row: accept_row draws it, with no hand-off */
	if (!e->hs) {
		const int nt = rg_threadpool_size(rg_threadpool_global()), words = (e->V + 63) / 64;

		if (!(e->hs = calloc((size_t)nt, sizeof(*e->hs))))
			return;
		e->n_hs = nt;
		for (int i = 0; i < nt; i++)
			if (!(e->hs[i].work.data = malloc((size_t)e->V * sizeof(rg_token_data))) ||
			    !(e->hs[i].bits = malloc((size_t)words * sizeof(uint64_t))))
				return; /* hs_ok stays false: serial */
		e->hs_ok = true;
	}
	if (!e->hs_ok)
		return;
	rg_threadpool_run(rg_threadpool_global(), n, host_row_task, e);
	for (int j = 0; j < n; j++)
		e->pre_on[e->pre_list[j]] = 1;
}

/* The token forced after q's one-token prompt: the request's (forced_bos_set), else the
 * model's; -1 none. */
static int32_t forced_bos_of(const rg_gen_engine *e, const ereq *q)
{
	if (q->gp.forced_bos_set)
		return q->gp.forced_bos_id;
	return e->r.has_forced_bos ? e->r.forced_bos : -1;
}

/* The beam groups of the plan: one step of each search with rows in it, in slot order, from its
 * rows' logits or each row's cand_k best tokens; the next beams to the scheduler, or a stop on
 * its rows when the search is done. A failing search aborts its request. */
static void beam_steps(rg_gen_engine *e)
{
	const rg_iter_plan *pl = &e->plan;
	const int cand_k = e->cand_k, top_n = e->top_n;

	for (int r0 = 0; r0 < pl->n_sample; r0++) {
		uint64_t iid = pl->seq_ids[pl->logits_seq[r0]];
		const float *rows[RG_ITER_MAX_BEAMS] = {0}, *clps[RG_ITER_MAX_BEAMS] = {0};
		const int32_t *cids[RG_ITER_MAX_BEAMS] = {0};
		int32_t parent[RG_ITER_MAX_BEAMS], token[RG_ITER_MAX_BEAMS];
		int k, n_tok;
		ereq *q;
		bool done = false, first;
		rg_status st = RG_OK;

		if (e->kind[r0] != ROW_BEAM)
			continue;
		if (r0 > 0 && e->kind[r0 - 1] == ROW_BEAM && pl->seq_ids[pl->logits_seq[r0 - 1]] == iid)
			continue; /* not the group's first row */
		q = req_of(e, iid, &k);
		if (!q || !rg_iter_tokens(e->it, iid, &n_tok)) {
			for (int r = r0; r < pl->n_sample; r++)
				if (pl->seq_ids[pl->logits_seq[r]] == iid)
					e->stops[r] = true;
			continue;
		}
		first = n_tok == q->prompt_len;
		if (!q->bs)
			st = rg_errorf(RG_ERR_OOM, "beam search: the search could not start");
		for (int r = r0; st == RG_OK && r < pl->n_sample; r++) {
			int qs = pl->logits_seq[r];

			if (pl->seq_ids[qs] != iid)
				continue;
			for (int j = 0; j < q->gp.num_beams; j++) {
				if (!first && j != pl->beam_slot[qs])
					continue;
				rows[j] = cand_k ? NULL : e->logits + (size_t)r * e->V;
				cids[j] = cand_k ? e->top_ids + (size_t)r * top_n : NULL;
				clps[j] = cand_k ? e->top_lps + (size_t)r * top_n : NULL;
			}
		}
		/* the last step max_tokens allows with a forced EOS, or the first after a one-token
		 * prompt with a forced BOS: every live beam's one candidate (its log-prob 0); the
		 * host's logits rows get the request's bias (the device's top-N had it applied) */
		const bool force_eos = e->r.has_forced_eos && n_tok - q->prompt_len == q->max_new - 1;
		const int32_t fbos = forced_bos_of(e, q);
		const bool forced = force_eos || (fbos >= 0 && n_tok == 1);
		const int32_t fzd = force_eos ? e->r.forced_eos : fbos;
		int32_t fid[RG_ITER_MAX_BEAMS][RG_BEAM_MAX_CAND];
		float flp[RG_ITER_MAX_BEAMS][RG_BEAM_MAX_CAND];

		for (int j = 0; st == RG_OK && j < q->gp.num_beams; j++) {
			float *row = (float *)rows[j];

			if (cand_k && forced && cids[j]) {
				/* the forced token at log-prob 0 first, the other candidates
				 * banned */
				int c = 1;

				fid[j][0] = fzd;
				flp[j][0] = 0.f;
				for (int i = 0; i < cand_k && c < cand_k; i++)
					if (cids[j][i] != fzd) {
						fid[j][c] = cids[j][i];
						flp[j][c++] = cids[j][i] < 0 ? -INFINITY : BANNED;
					}
				for (; c < cand_k; c++) {
					fid[j][c] = -1;
					flp[j][c] = -INFINITY;
				}
				cids[j] = fid[j];
				clps[j] = flp[j];
			} else if (!cand_k && row) {
				for (int c = 0; c < q->gp.sampling.n_logit_bias; c++)
					row[q->gp.sampling.logit_bias_ids[c]] +=
						q->gp.sampling.logit_bias_values[c];
				if (forced) /* log-softmax: it 0, the others BANNED below it */
					for (int v = 0; v < e->V; v++)
						row[v] = v == fzd ? 0.f : BANNED;
			}
		}
		if (st == RG_OK)
			st = cand_k ? rg_beam_step_cand(q->bs, cids, clps, cand_k, parent, token, &done)
				    : rg_beam_step(q->bs, rows, parent, token, &done);
		if (st == RG_OK && !done) {
			/* a diverse search's group that ended at this step has no next beams */
			for (int j = 0; j < q->gp.num_beams; j++)
				if (!rg_beam_slot_live(q->bs, j))
					parent[j] = -1;
			st = rg_iter_beam_next(e->it, iid, parent, token, q->gp.num_beams);
		}
		if (st != RG_OK) {
			char msg[200];

			snprintf(msg, sizeof(msg), "beam search failed: %s", rg_last_error());
			req_abort(e, q, RG_ERR_INTERNAL, msg);
			continue;
		}
		if (done)
			for (int r = r0; r < pl->n_sample; r++)
				if (pl->seq_ids[pl->logits_seq[r]] == iid)
					e->stops[r] = true;
	}
}

/* Prompt scoring: the log-softmax of logits row (V), in double, scores prompt token t of q
 * (1 <= t < prompt_len): its log-probability, its rank and the prompt_top_n best. */
static void score_row(const rg_gen_engine *e, ereq *q, const float *row, int t)
{
	const int V = e->V, tn = q->gp.prompt_top_n;
	const float x = row[q->prompt[t]];
	int32_t *ti = q->ptop_ids + (size_t)t * tn;
	float *tl = q->ptop_lps + (size_t)t * tn;
	double mx = -INFINITY, sum = 0, lse;
	int rank = 1, n_top = 0;

	for (int v = 0; v < V; v++)
		mx = row[v] > mx ? row[v] : mx;
	for (int v = 0; v < V; v++)
		sum += exp((double)row[v] - mx);
	lse = mx + log(sum);
	for (int v = 0; v < V; v++) {
		rank += row[v] > x;
		/* the tn best so far, most probable first, the lower id first on ties */
		if (tn > 0 && (n_top < tn || row[v] > row[ti[n_top - 1]])) {
			int j = n_top < tn ? n_top++ : tn - 1;

			for (; j > 0 && row[v] > row[ti[j - 1]]; j--)
				ti[j] = ti[j - 1];
			ti[j] = v;
		}
	}
	for (int j = 0; j < n_top; j++)
		tl[j] = (float)((double)row[ti[j]] - lse);
	q->plp[t] = (float)((double)x - lse);
	q->prank[t] = rank;
}

/* Prompt-scoring row j of the plan (a rg_threadpool task: rows are independent, each writes
 * its own prompt index of its request). */
static void score_task(void *ctx, int j, int thread)
{
	rg_gen_engine *e = ctx;
	const rg_iter_plan *pl = &e->plan;
	const int r = pl->n_sample + j, t = pl->prompt_pos[j] + 1;
	int k;
	ereq *q = req_of(e, pl->seq_ids[pl->logits_seq[r]], &k);

	(void)thread;
	if (q && e->kind[r] == ROW_PROMPT && q->plp && t < q->prompt_len)
		score_row(e, q, e->logits + (size_t)r * e->V, t);
}

/* The plan's prompt-scoring rows (src/sched/iter.h): each scores its position's next prompt
 * token (a preempted sequence's second prefill writes the same values again), spread over the
 * CPU pool (128 rows of a 152k vocabulary are ~140 ms on one core). */
static void score_prompt_rows(rg_gen_engine *e)
{
	if (e->plan.n_prompt_rows > 0)
		rg_threadpool_run(rg_threadpool_global(), e->plan.n_prompt_rows, score_task, e);
}

/* Row r's token for output k of q (sampled on the host for a host row, else the step's): the
 * forced tokens, then the output sequence's acceptance (stops, text); the caller emits the
 * step's event. 0: taken, the output goes on; 1: taken, the output ended here (e->stops[r]
 * tells the scheduler); -1: not taken (the output had ended, or sampling failed and its
 * request is aborted). */
static int accept_row(rg_gen_engine *e, ereq *q, int k, int r, double now_ms)
{
	int32_t t, tops[RG_GEN_MAX_LOGPROBS];
	float lp, topl[RG_GEN_MAX_LOGPROBS];
	const int32_t *ti = tops;
	const float *tl = topl;
	rg_finish_reason fr;

	if (q->o[k].seq.finish != RG_FINISH_NONE) {
		e->stops[r] = true; /* ended meanwhile (cannot: kept) */
		return -1;
	}
	if (q->score_only) {
		/* max_tokens 0: the prompt was scored; its token is not taken */
		rg_seq_end(&q->o[k].seq, RG_FINISH_LENGTH);
		if (q->o[k].first_ms == 0)
			q->o[k].first_ms = now_ms;
		e->ids[r] = 0;
		e->stops[r] = true;
		return -1;
	}
	if (e->kind[r] == ROW_HOST && e->pre_on[r]) { /* drawn by host_rows_sample */
		if (e->pre_st[r] != RG_OK) {
			req_abort(e, q, e->pre_st[r], e->pre_err + (size_t)r * PRE_ERR);
			e->ids[r] = 0;
			return -1;
		}
		t = e->ids[r] = e->pre_t[r];
		lp = e->pre_lp[r];
		ti = e->pre_tops + (size_t)r * RG_GEN_MAX_LOGPROBS;
		tl = e->pre_topl + (size_t)r * RG_GEN_MAX_LOGPROBS;
	} else if (e->kind[r] == ROW_HOST) {
		rg_status st = host_sample(e, q, k, r, &e->work, e->gbits, &t, &lp, tops, topl);

		if (st != RG_OK) {
			req_abort(e, q, st, rg_last_error());
			e->ids[r] = 0;
			return -1;
		}
		e->ids[r] = t;
	} else {
		t = e->ids[r];
		lp = e->lps[r];
		ti = e->top_ids + (size_t)r * e->top_n;
		tl = e->top_lps + (size_t)r * e->top_n;
	}
	if (q->o[k].seq.n == 0 && q->prompt_len == 1 &&
	    forced_bos_of(e, q) >= 0) {
		/* the first token after a one-token prompt (transformers'
		 * ForcedBOSTokenLogitsProcessor at cur_len 1) */
		t = e->ids[r] = forced_bos_of(e, q);
		lp = 0.f;
	}
	if (e->r.has_forced_eos && q->o[k].seq.n == q->max_new - 1) {
		/* the last token max_tokens allows (transformers'
		 * ForcedEOSTokenLogitsProcessor: every other logit -inf) */
		t = e->ids[r] = e->r.forced_eos;
		lp = 0.f;
	}
	if (e->kind[r] == ROW_HOST) /* the chain sees the token emitted */
		rg_sampler_accept(q->o[k].chain, t);
	if (q->o[k].first_ms == 0)
		q->o[k].first_ms = now_ms;
	fr = rg_seq_accept(&q->o[k].seq, t, lp, ti, tl);
	if (fr == RG_FINISH_ABORT) {
		req_abort(e, q, q->o[k].seq.err, "detokenizing failed");
	}
	if (q->grammar && fr == RG_FINISH_NONE) {
		eout *o = &q->o[k];

		o->gstate = rg_grammar_advance(q->grammar, o->gstate, t);
		/* complete, and no EOS to end it: it ends here */
		if (q->gp.n_eos <= 0 && grammar_done(q, o)) {
			rg_seq_end(&o->seq, RG_FINISH_STOP);
			fr = RG_FINISH_STOP;
		}
	}
	e->stops[r] = fr != RG_FINISH_NONE;
	return e->stops[r] ? 1 : 0;
}

rg_status rg_gen_engine_step_end(rg_gen_engine *e, double now_ms, const rg_gen_event **ev,
				 int *n_ev)
{
	const rg_step_batch *b = &e->plan.batch;

	if (ev)
		*ev = NULL;
	if (n_ev)
		*n_ev = 0;
	if (!e->pending)
		return rg_errorf(RG_ERR_INVALID_INPUT, "generate: no step in flight");
	e->pending = false;
	if (e->ran) {
		memset(e->stops, 0, (size_t)e->R * sizeof(bool));
		if (e->run_st != RG_OK) {
			fail_plan(e);
			for (int r = 0; r < b->n_logits; r++)
				e->ids[r] = 0;
			rg_iter_update(e->it, e->ids, e->stops, now_ms, NAN);
		} else {
			score_prompt_rows(e);
			host_rows_sample(e);
			for (int r = 0; r < e->plan.n_sample; r++) {
				const int i = e->plan.logits_seq[r], m = e->plan.n_draft[i];
				int k;
				ereq *q = req_of(e, e->plan.seq_ids[i], &k);

				if (!q || e->kind[r] == ROW_BEAM || e->kind[r] == ROW_NONE) {
					if (e->kind[r] != ROW_BEAM)
						for (int j = 0; j <= m; j++)
							e->ids[r + j] = 0;
					r += m;
					continue;
				}
				/* a draft row's 1 + m rows: the verification walk of src/sched/iter.h
				 * (each token accepted in order; on while it equals its draft and the
				 * sequence goes on), the scheduler's rule; one event for the tokens
				 * taken (its text pointer stays valid: the sequence is not touched
				 * again in this step) */
				int n_taken = 0;

				for (int j = 0; j <= m; j++) {
					const int32_t d = j < m ? b->tokens[b->cu_seqlens_q[i + 1] - m + j]
								: -1;
					const int rc = accept_row(e, q, k, r + j, now_ms);

					n_taken += rc >= 0;
					if (rc != 0 || j == m || e->ids[r + j] != d)
						break;
				}
				if (m > 0 && n_taken <= m && e->kind[r] == ROW_DEVICE)
					q->o[k].rng = e->rng_row[r + n_taken]; /* n_taken draws used */
				spec_backoff(&q->o[k], m, n_taken);
				if (n_taken > 0)
					emit(e, q, k, n_taken);
				r += m;
			}
			beam_steps(e);
			rg_iter_update(e->it, e->ids, e->stops, now_ms, NAN); /* measure_prev's */
			if (!e->no_measure) {
				rg_iter_stats is;

				rg_iter_stats_get(e->it, &is);
				e->prev_ran = true;
				e->prev_busy = is.n_running + is.n_waiting > 0;
				e->prev_begin = e->t_begin;
				e->prev_end = rg_gen_engine_now_ms();
				e->prev_shape = e->plan.shape;
			}
			e->n_steps++;
			e->n_preemptions += e->plan.n_preempted;
			e->last_step_tokens = b->n_tokens;
		}
	}
	collect_finished(e);
	if (ev)
		*ev = e->ev;
	if (n_ev)
		*n_ev = e->n_ev;
	return RG_OK;
}

rg_status rg_gen_engine_step(rg_gen_engine *e, double now_ms, const rg_gen_event **ev, int *n_ev)
{
	bool ran;
	rg_status st;

	if (ev)
		*ev = NULL;
	if (n_ev)
		*n_ev = 0;
	if (!e)
		return rg_errorf(RG_ERR_INVALID_INPUT, "generate: no engine");
	if ((st = rg_gen_engine_step_begin(e, now_ms, &ran)) != RG_OK)
		return st;
	rg_gen_engine_step_run(e);
	return rg_gen_engine_step_end(e, ran ? rg_gen_engine_now_ms() : now_ms, ev, n_ev);
}

/* ---- the rest of the API ------------------------------------------------------------------- */

rg_status rg_gen_engine_abort(rg_gen_engine *e, uint64_t id, const char *why)
{
	ereq *q = e ? req_find(e, id) : NULL;

	if (!q)
		return rg_errorf(RG_ERR_INVALID_INPUT, "generate: no request %llu",
				 (unsigned long long)id);
	if (!q->finished)
		req_abort(e, q, RG_OK, why ? why : "cancelled");
	return RG_OK;
}

rg_status rg_gen_engine_output(const rg_gen_engine *e, uint64_t id, int k, rg_gen_output *out)
{
	const ereq *q = e ? req_find(e, id) : NULL;
	const eout *o;

	if (!q || k < 0 || k >= q->n_out || !out)
		return rg_errorf(RG_ERR_INVALID_INPUT, "generate: no output %d of request %llu", k,
				 (unsigned long long)id);
	o = &q->o[k];
	*out = (rg_gen_output){
		.n_ids = o->seq.n, .ids = o->seq.ids, .logprobs = o->seq.logprobs,
		.n_top = o->seq.p.n_top, .top_ids = o->seq.top_ids,
		.top_logprobs = o->seq.top_logprobs, .text_end = o->seq.text_end,
		.text = o->seq.text.data ? o->seq.text.data : "", .text_len = o->seq.text.len,
		.text_ready = o->seq.text_ready, .finish = o->seq.finish,
		.stop_str = o->seq.stop_str, .score = o->seq.score,
		.prompt_tokens = q->src ? q->n_src : q->prompt_len, /* an enc-dec's: its source */
		.n_cached = o->n_cached, .n_preemptions = o->n_preemptions,
		.first_token_ms = o->first_ms, .queue_ms = q->queue_ms, .status = q->status,
		.error = q->err, .est_ttft_ms = q->est_ttft_ms, .est_tpot_ms = q->est_tpot_ms,
	};
	if (q->beam && o->seq.finish != RG_FINISH_NONE)
		out->first_token_ms = o->first_ms ? o->first_ms : 0;
	if (q->plp && k == 0) {
		out->prompt_logprobs = q->plp;
		out->prompt_ranks = q->prank;
		out->prompt_top_n = q->gp.prompt_top_n;
		out->prompt_top_ids = q->ptop_ids;
		out->prompt_top_logprobs = q->ptop_lps;
	}
	return RG_OK;
}

int rg_gen_engine_n_outputs(const rg_gen_engine *e, uint64_t id)
{
	const ereq *q = e ? req_find(e, id) : NULL;

	return q ? q->n_out : -1;
}

bool rg_gen_engine_finished(const rg_gen_engine *e, uint64_t id)
{
	const ereq *q = e ? req_find(e, id) : NULL;

	return q && q->finished;
}

void rg_gen_engine_release(rg_gen_engine *e, uint64_t id)
{
	int i = e ? req_index(e, id) : -1;
	ereq *q;

	if (i < 0)
		return;
	q = e->reqs[i];
	if (!q->finished) {
		/* abort now; its scheduler entries are dropped when they are listed */
		req_abort(e, q, RG_OK, "released");
	}
	memmove(e->reqs + i, e->reqs + i + 1, (size_t)(e->n_reqs - i - 1) * sizeof(*e->reqs));
	e->n_reqs--;
	req_free(q);
}

bool rg_gen_engine_has_work(const rg_gen_engine *e)
{
	rg_iter_stats s;

	if (!e)
		return false;
	rg_iter_stats_get(e->it, &s);
	if (s.n_running > 0 || s.n_waiting > 0)
		return true;
	for (int i = 0; i < e->n_reqs; i++)
		if (!e->reqs[i]->finished)
			return true;
	return false;
}

void rg_gen_engine_get_stats(const rg_gen_engine *e, rg_gen_engine_stats *out)
{
	rg_iter_stats s;

	memset(out, 0, sizeof(*out));
	if (!e)
		return;
	rg_iter_stats_get(e->it, &s);
	out->n_running = s.n_running;
	out->n_waiting = s.n_waiting;
	out->n_steps = e->n_steps;
	out->n_preemptions = e->n_preemptions;
	out->n_refused = e->n_refused;
	out->blocks_used = s.blocks_used;
	out->blocks_free = s.blocks_free;
	out->blocks_total = rg_kv_pool_n_blocks(e->pool);
	out->prefix_query_blocks = (long long)s.prefix.query_blocks;
	out->prefix_hit_blocks = (long long)s.prefix.hit_blocks;
	out->max_context = e->max_context;
	out->max_num_seqs = e->S;
	out->last_step_tokens = e->last_step_tokens;
	out->n_eos = e->n_eos;
	out->eos_ids = e->eos;
	out->spec_drafted = s.n_drafted;
	out->spec_accepted = s.n_draft_accepted;
}

rg_status rg_gen_engine_cost_model(rg_gen_engine *e, rg_step_cost *out)
{
	return rg_iter_cost_model(e->it, out);
}

void rg_gen_engine_set_cost_prior(rg_gen_engine *e, const rg_step_cost *m)
{
	rg_iter_set_cost_prior(e->it, m);
}

/* ---- create / free ------------------------------------------------------------------------- */

void rg_gen_engine_free(rg_gen_engine *e)
{
	if (!e)
		return;
	for (int i = 0; i < e->n_reqs; i++)
		req_free(e->reqs[i]);
	rg_iter_free(e->it);
	rg_gen_engine_free(e->de);
	free(e->dq);
	if (e->own_pool)
		rg_kv_pool_free(e->pool);
	free(e->reqs);
	free(e->rows);
	free(e->kind);
	free(e->want);
	free(e->ids);
	free(e->lps);
	free(e->top_ids);
	free(e->top_lps);
	free(e->stops);
	free(e->logits);
	free(e->pen_ids);
	free(e->pen_counts);
	free(e->pen_keys);
	free(e->pen_prompt);
	free(e->work.data);
	free(e->gbits);
	free(e->pre_list);
	free(e->pre_t);
	free(e->pre_lp);
	free(e->pre_tops);
	free(e->pre_topl);
	free(e->pre_st);
	free(e->pre_on);
	free(e->pre_err);
	for (int i = 0; i < e->n_hs; i++) {
		free(e->hs[i].work.data);
		free(e->hs[i].bits);
	}
	free(e->hs);
	free(e->draft);
	free(e->rng_row);
	free(e->ev);
	free(e->enc_tok);
	free(e->enc_cu);
	for (int i = 0; i < N_GCACHE; i++) {
		free(e->gcache[i].text);
		rg_grammar_unref(e->gcache[i].g);
	}
	rg_token_trie_free(e->trie);
	free(e);
}

/* Warm-up: a few steps through the scheduler (prefills of a few lengths, batched decodes), so
 * the step cost model behind admission has measured points before the first request. */
static rg_status warm_up(rg_gen_engine *e)
{
	const int lens[3] = {8, 64, 200};
	int32_t *prompt;
	rg_gen_params gp;
	uint64_t ids[3] = {0};
	rg_status st = RG_OK;
	int guard = 0;

	prompt = malloc((size_t)e->max_context * sizeof(int32_t));
	if (!prompt)
		return rg_errorf(RG_ERR_OOM, "generation engine: out of memory");
	for (int k = 0; k < e->max_context; k++)
		prompt[k] = (int32_t)((k * 7919 + 13) % e->V);
	rg_gen_params_default(&gp);
	gp.max_tokens = 4;
	gp.n_eos = -1;
	for (int q = 0; q < 3; q++) {
		int len = lens[q] < e->max_context - 5 ? lens[q] : e->max_context - 5;

		/* an encoder-decoder's source: within the encoder and within one step with the
		 * decoder's first token (rg_gen_engine_add's limits; a server may run small steps) */
		if (e->r.encode && len > e->r.max_source)
			len = e->r.max_source;
		if (e->r.encode && len > e->p.max_num_batched_tokens - 1)
			len = e->p.max_num_batched_tokens - 1;

		if ((st = rg_gen_engine_add(e, prompt, len < 1 ? 1 : len, &gp, NULL,
					    rg_gen_engine_now_ms(), &ids[q], NULL)) != RG_OK)
			goto out;
	}
	while (rg_gen_engine_has_work(e) && ++guard < 100000) {
		bool ran;
		double t0 = rg_gen_engine_now_ms();

		if ((st = rg_gen_engine_step_begin(e, t0, &ran)) != RG_OK)
			goto out;
		rg_gen_engine_step_run(e);
		if (e->run_st != RG_OK) {
			st = e->run_st;
			e->pending = false;
			rg_iter_update(e->it, e->ids, NULL, rg_gen_engine_now_ms(), NAN);
			goto out;
		}
		/* the first step pays one-time costs (allocation, graphs): not fitted */
		e->no_measure = guard == 1;
		rg_gen_engine_step_end(e, rg_gen_engine_now_ms(), NULL, NULL);
		e->no_measure = false;
	}
out:
	for (int q = 0; q < 3; q++)
		rg_gen_engine_release(e, ids[q]);
	free(prompt);
	/* the warm-up's steps ran cold and alone: they become the prior that the steps served
	 * later refine, not points that stay beside them (issue 28) */
	measure_prev(e, rg_gen_engine_now_ms());
	rg_iter_cost_settle(e->it);
	return st;
}

static rg_status engine_init(rg_gen_engine *e, const rg_gen_engine_params *p)
{
	rg_iter_params ip;
	size_t S;
	rg_status st;

	if (p)
		e->p = *p;
	else
		rg_gen_engine_params_default(&e->p);
	rg_iter_params_default(&ip);
	ip.max_num_batched_tokens = e->p.max_num_batched_tokens;
	ip.max_num_seqs = e->p.max_num_seqs;
	ip.max_waiting = e->p.max_waiting;
	ip.watermark_blocks = e->p.watermark_blocks;
	ip.prefix_caching = e->p.prefix_caching;
	if (e->p.deadline_slack >= 1)
		ip.deadline_slack = e->p.deadline_slack;
	ip.max_context = e->max_context;
	ip.max_source = e->r.encode ? e->r.max_source : 0;
	if (e->p.max_speculative_tokens < 0 || e->p.max_speculative_tokens > RG_GEN_MAX_SPEC_TOKENS)
		return rg_errorf(RG_ERR_INVALID_INPUT, "generation engine: max_speculative_tokens "
				 "%d outside [0, %d]", e->p.max_speculative_tokens,
				 RG_GEN_MAX_SPEC_TOKENS);
	ip.max_draft = e->p.max_speculative_tokens;
	if (e->p.max_prompt_logprob_rows < 0)
		return rg_errorf(RG_ERR_INVALID_INPUT, "generation engine: max_prompt_logprob_rows "
				 "%d < 0", e->p.max_prompt_logprob_rows);
	ip.max_prompt_logits = e->r.encode ? 0 : e->p.max_prompt_logprob_rows;
	if ((st = rg_iter_init(&e->it, e->pool, &ip)) != RG_OK)
		return st;
	if (e->r.encode &&
	    (!(e->enc_tok = malloc((size_t)ip.max_num_batched_tokens * sizeof(int32_t))) ||
	     !(e->enc_cu = malloc(((size_t)ip.max_num_seqs + 1) * sizeof(int32_t)))))
		return rg_errorf(RG_ERR_OOM, "generation engine: out of memory");
	e->S = ip.max_num_seqs;
	e->RS = e->S + (ip.max_draft > 0 ? ip.max_num_batched_tokens : 0); /* iter.c's rows */
	e->R = e->RS + ip.max_prompt_logits;
	e->next_serial = 1;
	S = (size_t)e->R; /* the row buffers */
	e->rows = calloc(S, sizeof(*e->rows));
	e->kind = calloc(S, 1);
	e->want = calloc(S, 1);
	e->ids = calloc(S, sizeof(*e->ids));
	e->lps = calloc(S, sizeof(*e->lps));
	e->top_ids = calloc(S * RG_GEN_MAX_LOGPROBS, sizeof(*e->top_ids));
	e->top_lps = calloc(S * RG_GEN_MAX_LOGPROBS, sizeof(*e->top_lps));
	e->stops = calloc(S, sizeof(*e->stops));
	/* the penalty lists: sampling rows only */
	e->pen_ids = calloc((size_t)e->RS * (size_t)e->max_context, sizeof(*e->pen_ids));
	e->pen_counts = calloc((size_t)e->RS * (size_t)e->max_context, sizeof(*e->pen_counts));
	e->pen_prompt = calloc((size_t)e->RS * (size_t)e->max_context, sizeof(*e->pen_prompt));
	e->pen_keys = calloc((size_t)e->max_context, sizeof(*e->pen_keys));
	e->work.data = malloc((size_t)e->V * sizeof(rg_token_data));
	e->gbits = malloc((size_t)((e->V + 63) / 64) * sizeof(uint64_t));
	e->pre_list = malloc(S * sizeof(*e->pre_list));
	e->pre_t = malloc(S * sizeof(*e->pre_t));
	e->pre_lp = malloc(S * sizeof(*e->pre_lp));
	e->pre_tops = malloc(S * RG_GEN_MAX_LOGPROBS * sizeof(*e->pre_tops));
	e->pre_topl = malloc(S * RG_GEN_MAX_LOGPROBS * sizeof(*e->pre_topl));
	e->pre_st = malloc(S * sizeof(*e->pre_st));
	e->pre_on = calloc(S, 1);
	e->pre_err = malloc(S * PRE_ERR);
	e->draft = malloc(RG_ITER_MAX_DRAFT * sizeof(*e->draft));
	e->rng_row = calloc(S, sizeof(*e->rng_row));
	if (!e->draft || !e->rng_row || !e->rows || !e->kind || !e->want || !e->ids || !e->lps || !e->top_ids ||
	    !e->top_lps || !e->stops || !e->pen_ids || !e->pen_counts || !e->pen_prompt ||
	    !e->pen_keys || !e->work.data || !e->gbits || !e->pre_list || !e->pre_t ||
	    !e->pre_lp || !e->pre_tops || !e->pre_topl || !e->pre_st || !e->pre_on || !e->pre_err)
		return rg_errorf(RG_ERR_OOM, "generation engine: out of memory");
	return RG_OK;
}

/* The inner engine of draft_propose over runner d: as many sequences and step tokens as e (the
 * draft's own step limit below that), its prefix cache on, no drafts of its own. */
static rg_status draft_init(rg_gen_engine *e, const rg_gen_runner *d)
{
	rg_gen_engine_params dp;
	rg_status st;

	if (d->vocab_size != e->V || d->draft)
		return rg_errorf(RG_ERR_INVALID_INPUT, "generation engine: a draft model of %d "
				 "tokens for a model of %d%s", d->vocab_size, e->V,
				 d->draft ? ", with a draft of its own" : "");
	rg_gen_engine_params_default(&dp);
	dp.max_num_seqs = e->S;
	dp.max_num_batched_tokens = e->p.max_num_batched_tokens;
	if (d->max_batch_tokens > 0 && dp.max_num_batched_tokens > d->max_batch_tokens)
		dp.max_num_batched_tokens = d->max_batch_tokens;
	dp.max_waiting = e->S + 1;
	dp.prefix_caching = true;
	dp.max_prompt_logprob_rows = 0;
	if (!(e->de = rg_gen_engine_create_runner(d, NULL, NULL, NULL, 0, &dp, &st)))
		return st;
	if (!(e->dq = malloc((size_t)e->S * sizeof(*e->dq))))
		return rg_errorf(RG_ERR_OOM, "generation engine: out of memory");
	return RG_OK;
}

rg_gen_engine *rg_gen_engine_create_runner(const rg_gen_runner *r, rg_kv_pool *pool,
					   const rg_tokenizer *tok, const int32_t *eos, int n_eos,
					   const rg_gen_engine_params *p, rg_status *st)
{
	rg_gen_engine *e;

	*st = RG_OK;
	if (!r || !r->step || r->vocab_size < 1 || r->block_size < 1 || r->max_context < 2) {
		*st = rg_errorf(RG_ERR_INVALID_INPUT, "generation engine: bad runner");
		return NULL;
	}
	if (pool && rg_kv_pool_block_size(pool) != r->block_size) {
		*st = rg_errorf(RG_ERR_INVALID_INPUT, "generate: pool block size %d != runner's %d",
				rg_kv_pool_block_size(pool), r->block_size);
		return NULL;
	}
	if (!(e = calloc(1, sizeof(*e)))) {
		*st = rg_errorf(RG_ERR_OOM, "generation engine: out of memory");
		return NULL;
	}
	e->r = *r;
	e->tok = tok;
	e->eos = eos;
	e->n_eos = n_eos;
	e->V = r->vocab_size;
	e->max_context = p && p->max_context > 0 && p->max_context < r->max_context
				 ? p->max_context : r->max_context;
	if (pool) {
		e->pool = pool;
	} else {
		if ((*st = rg_kv_pool_init(&e->pool, r->n_blocks, r->block_size)) != RG_OK)
			goto fail;
		e->own_pool = true;
	}
	if ((*st = engine_init(e, p)) != RG_OK)
		goto fail;
	if (r->draft && e->p.max_speculative_tokens > 0 && !r->encode &&
	    (*st = draft_init(e, r->draft)) != RG_OK)
		goto fail;
	e->r.draft = NULL; /* borrowed for this call only */
	return e;
fail:
	rg_gen_engine_free(e);
	return NULL;
}

/* ---- the model as a runner ------------------------------------------------------------------ */

static rg_status mrun_step(void *ctx, const rg_step_batch *b, float *logits)
{
	const rg_step_out o = {.logits = logits};

	return rg_model_step(ctx, b, b->n_logits > 0 ? &o : NULL);
}

static rg_status mrun_argmax(void *ctx, const rg_step_batch *b, int32_t *ids, float *lps)
{
	const rg_step_out o = {.ids = ids, .logprobs = lps};

	return rg_model_step(ctx, b, &o);
}

static rg_status mrun_sample(void *ctx, const rg_step_batch *b, const rg_row_sampling *rows,
			     int top_n, int32_t *ids, float *lps, int32_t *top_ids, float *top_lps)
{
	const rg_step_out o = {.top_n = top_n, .rows = rows, .ids = ids, .logprobs = lps,
			       .top_ids = top_ids, .top_logprobs = top_lps};

	if (b->n_logits == 0) /* a step of prefill chunks only: no sampling buffers */
		return rg_model_step(ctx, b, NULL);
	return rg_model_step(ctx, b, &o);
}

/* One forward: every row sampled on the device, the rows want names copied out as logits. */
static rg_status mrun_sample_logits(void *ctx, const rg_step_batch *b, const rg_row_sampling *rows,
				    int top_n, int32_t *ids, float *lps, int32_t *top_ids,
				    float *top_lps, float *logits, const uint8_t *want)
{
	const rg_step_out o = {.top_n = top_n, .rows = rows, .ids = ids, .logprobs = lps,
			       .top_ids = top_ids, .top_logprobs = top_lps, .logits = logits,
			       .want_logits = want};

	return rg_model_step(ctx, b, &o);
}

static rg_status mrun_encode(void *ctx, int n_tokens, const int32_t *tokens, int n_seq,
			       const int32_t *cu_seqlens, const int32_t *slot_mapping)
{
	return rg_model_encode_cross(ctx, n_tokens, tokens, n_seq, cu_seqlens, slot_mapping);
}

static rg_status mrun_copy(void *ctx, const int32_t *src, const int32_t *dst, int n)
{
	return rg_model_kv_copy_blocks(ctx, src, dst, n);
}

rg_status rg_gen_model_runner(rg_model *m, rg_gen_runner *r, rg_gen_runner *draft)
{
	rg_kv_info kv;
	int64_t max_ctx;
	rg_status st;

	memset(r, 0, sizeof(*r));
	rg_model_kv_info(m, &kv);
	max_ctx = (int64_t)kv.n_blocks * kv.block_size;
	if (max_ctx > m->info.max_position_embeddings)
		max_ctx = m->info.max_position_embeddings;
	r->ctx = m;
	r->vocab_size = m->info.vocab_size;
	r->block_size = kv.block_size;
	r->n_blocks = kv.n_blocks;
	r->max_context = (int)max_ctx;
	r->step = mrun_step;
	r->copy_blocks = mrun_copy;
	r->bad_ids = m->gen_bad;
	r->n_bad = m->n_gen_bad;
	r->has_forced_eos = m->gen_forced_eos >= 0;
	r->forced_eos = m->gen_forced_eos;
	r->has_forced_bos = m->gen_forced_bos >= 0;
	r->forced_bos = m->gen_forced_bos;
	if (m->info.kind == RG_MODEL_ENC_DEC) {
		r->encode = mrun_encode;
		r->max_source = m->info.max_source_positions;
		r->decoder_start = m->info.decoder_start_token_id;
	}
	/* plain greedy rows choose on the device, sampled ones sample there (the logits stay
	 * there); RAGGED_GEN_ARGMAX=0 / RAGGED_GEN_DEVICE_SAMPLE=0 take the host sampler instead
	 * (the same choices; for checks and A/B runs) */
	r->step_argmax = rg_tuning_bool(RG_TUNE_GEN_ARGMAX) ? mrun_argmax : NULL;
	if (rg_tuning_bool(RG_TUNE_GEN_DEVICE_SAMPLE)) {
		r->step_sample = mrun_sample;
		r->step_sample_logits = mrun_sample_logits;
	}
	r->max_batch_tokens = m->max_tokens;
	if (m->draft && draft) {
		/* the draft's cache: the target's positions, a quarter more for the prefix cache
		 * and the k tokens past each context */
		const int64_t need = (int64_t)kv.n_blocks + kv.n_blocks / 4 + 4;
		rg_kv_info dk;

		if (need > INT32_MAX / 2)
			return rg_errorf(RG_ERR_INVALID_INPUT, "draft model: %lld KV blocks",
					 (long long)need);
		if ((rg_model_kv_info(m->draft, &dk) != RG_OK || dk.block_size != kv.block_size ||
		     dk.n_blocks < need) &&
		    (st = rg_model_kv_init(m->draft, kv.block_size, (int)need)) != RG_OK)
			return st;
		if ((st = rg_gen_model_runner(m->draft, draft, NULL)) != RG_OK)
			return st;
		r->draft = draft;
	}
	return RG_OK;
}

rg_status rg_model_set_draft(rg_model *m, rg_model *draft)
{
	if (!m)
		return rg_errorf(RG_ERR_INVALID_INPUT, "rg_model_set_draft: NULL model");
	if (!draft) {
		m->draft = NULL;
		return RG_OK;
	}
	if (draft == m)
		return rg_errorf(RG_ERR_INVALID_INPUT,
				 "rg_model_set_draft: a model cannot draft for itself (the draft "
				 "needs a KV cache of its own); load its files a second time");
	if (m->info.kind != RG_MODEL_DECODER || draft->info.kind != RG_MODEL_DECODER)
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "rg_model_set_draft: %s and %s must both be decoder-only models "
				 "(%s, %s)", m->dir, draft->dir, m->info.model_type,
				 draft->info.model_type);
	if (draft->draft)
		return rg_errorf(RG_ERR_INVALID_INPUT,
				 "rg_model_set_draft: %s has a draft model of its own", draft->dir);
	if (m->info.vocab_size != draft->info.vocab_size)
		return rg_errorf(RG_ERR_INVALID_INPUT,
				 "rg_model_set_draft: the vocabularies differ: %d tokens in %s, %d "
				 "in %s", m->info.vocab_size, m->dir, draft->info.vocab_size,
				 draft->dir);
	if (m->tok && draft->tok) /* the same ids must be the same tokens */
		for (int32_t id = 0; id < m->info.vocab_size; id++) {
			size_t la = 0, lb = 0;
			const char *a = rg_tokenizer_id_to_token(m->tok, id, &la);
			const char *b = rg_tokenizer_id_to_token(draft->tok, id, &lb);

			if ((!a) != (!b) || (a && (la != lb || memcmp(a, b, la))))
				return rg_errorf(RG_ERR_INVALID_INPUT,
						 "rg_model_set_draft: token %d is %.*s in %s but "
						 "%.*s in %s: the draft needs the target's "
						 "vocabulary", id, a ? (int)(la < 40 ? la : 40) : 6,
						 a ? a : "absent", m->dir,
						 b ? (int)(lb < 40 ? lb : 40) : 6, b ? b : "absent",
						 draft->dir);
		}
	m->draft = draft;
	return RG_OK;
}

rg_gen_engine *rg_gen_engine_create(rg_model *m, const rg_gen_engine_params *params,
				    rg_status *st)
{
	rg_gen_engine_params p;
	rg_gen_runner r, dr;
	rg_gen_engine *e;
	rg_kv_info kv;

	*st = RG_OK;
	if (!m) {
		*st = rg_errorf(RG_ERR_INVALID_INPUT, "generation engine: no model");
		return NULL;
	}
	if (rg_model_get_info(m)->kind != RG_MODEL_DECODER &&
	    rg_model_get_info(m)->kind != RG_MODEL_ENC_DEC) {
		*st = rg_errorf(RG_ERR_UNSUPPORTED, "generation engine: not a generative model");
		return NULL;
	}
	if (params)
		p = *params;
	else
		rg_gen_engine_params_default(&p);
	if (p.block_size <= 0)
		p.block_size = 16;
	if (p.max_context <= 0 || p.max_context > m->info.max_position_embeddings)
		p.max_context = m->info.max_position_embeddings;
	if (p.max_num_batched_tokens > m->info.max_batch_tokens)
		p.max_num_batched_tokens = m->info.max_batch_tokens;
	if (p.kv_bytes > 0)
		*st = rg_model_kv_init_bytes(m, p.block_size, p.kv_bytes);
	else if (p.kv_fraction > 0)
		*st = rg_model_kv_init_fraction(m, p.block_size, p.kv_fraction);
	else if (rg_model_kv_info(m, &kv) != RG_OK || kv.n_blocks == 0)
		*st = rg_errorf(RG_ERR_INVALID_INPUT,
				"generation engine: kv_bytes and kv_fraction are 0 and the model "
				"has no KV cache (rg_model_kv_init)");
	if (*st != RG_OK)
		return NULL;
	if ((*st = rg_gen_model_runner(m, &r, &dr)) != RG_OK)
		return NULL;
	e = rg_gen_engine_create_runner(&r, NULL, m->tok, m->gen_eos, m->n_gen_eos, &p, st);
	if (!e)
		return NULL;
	e->m = m;
	e->beam_logits = !rg_tuning_bool(RG_TUNE_GEN_DEVICE_SAMPLE);
	if (p.warm_up && (*st = warm_up(e)) != RG_OK) {
		rg_gen_engine_free(e);
		return NULL;
	}
	return e;
}
