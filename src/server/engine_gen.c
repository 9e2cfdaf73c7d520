/* The generation engine of `ragged serve`: the step loop over src/sched/iter.h. See engine_gen.h. */
#include "server/engine_gen.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "core/rng.h"
#include "gen/beam.h"
#include "gen/generate.h"
#include "gen/stop.h"
#include "kv/block_pool.h"
#include "model/model.h"
#include "server/engine.h"
#include "server/metrics.h"
#include "tokenizer/decode_stream.h"
#include "tokenizer/tokenizer.h"

#define SEQ_BITS 8 /* iter id = job serial << SEQ_BITS | sequence index */
#define MAX_SEQS_PER_JOB (1 << SEQ_BITS)
#define BIAS_BLOCK -1e9f /* min_tokens: the bias that keeps EOS and stop ids out */

/* The engine's per-sequence state (the job's st[i]). */
typedef struct gen_seq_state {
	rg_rng rng;
	rg_detok_stream *detok;
	int n_gen;
	bool ended;
	bool live;            /* in the scheduler (admitted, not yet finished) */
	size_t searched;      /* stop strings: text bytes already searched */
	int32_t *bias_ids;    /* (n_bias_min) user bias then (min_tokens) EOS and stop ids blocked */
	float *bias_vals;
	int n_bias, n_bias_min;
} gen_seq_state;

typedef struct gen_metrics {
	rg_hist ttft_ms, itl_ms, step_ms, step_tokens, e2e_ms;
	uint64_t prompt_tokens, generated_tokens, cached_tokens, requests_ok, requests_aborted,
		preemptions, steps, refused;
} gen_metrics;

struct rg_gen_engine {
	rg_model *m;
	const rg_model_info *info;
	rg_gen_engine_params p;
	rg_kv_pool *pool;
	rg_iter *it;
	int max_context;
	int vocab;
	const rg_tokenizer *tok;
	/* RAGGED_GEN_DEVICE_SAMPLE=0: beam searches read their rows' logits on the host instead of
	 * each row's best tokens from the device (A/B runs, checks) */
	bool beam_logits;

	pthread_t th;
	bool started;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool stop, draining;
	double drain_end;

	/* live jobs in serial order (guarded by mu) */
	rg_gen_job **live;
	uint64_t *live_serial;
	int n_live, cap_live;
	uint64_t next_serial;
	double last_poll_ms;

	/* step buffers (step thread) */
	int S;                     /* max_num_seqs: logits rows of a step at most */
	rg_row_sampling *rows;     /* (S) */
	int32_t *ids;              /* (S) */
	float *lps;                /* (S) */
	int32_t *top_ids;          /* (S, RG_GEN_MAX_LOGPROBS) */
	float *top_lps;
	bool *stops;               /* (S) */
	int32_t *pen_ids;          /* (S, max_context) penalty scratch */
	int32_t *pen_counts;
	uint8_t *pen_prompt;
	int32_t *pen_keys;         /* (max_context) sort scratch */
	rg_gen_job **touched;      /* (S) jobs with new output this step */
	float *blogits;            /* (S, vocab) a step's beam rows' logits, lazily */
	uint8_t *bkeep;            /* (S) which rows of the step are beam rows */

	pthread_mutex_t mmu;       /* the metrics */
	gen_metrics met;
};

static void sleep_ms(double ms)
{
	struct timespec ts;

	if (ms <= 0)
		return;
	ts.tv_sec = (time_t)(ms / 1000);
	ts.tv_nsec = (long)((ms - (double)ts.tv_sec * 1000) * 1e6);
	nanosleep(&ts, NULL);
}

static rg_status beam_detok(void *ctx, const int32_t *ids, int n, char **text, size_t *len);
static void beam_job_end(rg_gen_engine *e, rg_gen_job *j, rg_iter_finish reason);

/* ---- jobs ----------------------------------------------------------------------------------- */

rg_gen_job *rg_gen_job_new(int n_seqs)
{
	rg_gen_job *j;

	if (n_seqs < 1 || n_seqs > MAX_SEQS_PER_JOB)
		return NULL;
	j = calloc(1, sizeof(*j));
	if (!j)
		return NULL;
	j->n_seqs = n_seqs;
	j->prompts = calloc((size_t)n_seqs, sizeof(*j->prompts));
	j->prompt_lens = calloc((size_t)n_seqs, sizeof(*j->prompt_lens));
	j->out = calloc((size_t)n_seqs, sizeof(*j->out));
	j->st = calloc((size_t)n_seqs, sizeof(*j->st));
	if (!j->prompts || !j->prompt_lens || !j->out || !j->st) {
		free(j->prompts);
		free(j->prompt_lens);
		free(j->out);
		free(j->st);
		free(j);
		return NULL;
	}
	for (int i = 0; i < n_seqs; i++)
		rg_buf_init(&j->out[i].text);
	rg_gen_params_default(&j->gp);
	j->skip_special = true;
	j->client_fd = -1;
	pthread_mutex_init(&j->mu, NULL);
	atomic_init(&j->refs, 1);
	atomic_init(&j->cancel, false);
	return j;
}

static void seq_state_free(gen_seq_state *s)
{
	rg_detok_stream_free(s->detok);
	free(s->bias_ids);
	free(s->bias_vals);
	memset(s, 0, sizeof(*s));
}

void rg_gen_job_put(rg_gen_job *j)
{
	if (!j || atomic_fetch_sub(&j->refs, 1) != 1)
		return;
	for (int i = 0; i < j->n_seqs; i++) {
		rg_gen_seq_out *o = &j->out[i];

		free(j->prompts[i]);
		free(o->ids);
		free(o->logprobs);
		free(o->top_ids);
		free(o->top_logprobs);
		free(o->text_end);
		free(o->stop_str);
		rg_buf_free(&o->text);
		seq_state_free(&j->st[i]);
	}
	rg_beam_free(j->beam);
	free(j->prompts);
	free(j->prompt_lens);
	free(j->out);
	free(j->st);
	pthread_mutex_destroy(&j->mu);
	free(j);
}

void rg_gen_job_cancel(rg_gen_job *j)
{
	if (j)
		atomic_store(&j->cancel, true);
}

/* ---- the live-job index ------------------------------------------------------------------- */

static rg_gen_job *live_find(const rg_gen_engine *e, uint64_t serial)
{
	int lo = 0, hi = e->n_live - 1;

	while (lo <= hi) {
		int mid = (lo + hi) / 2;

		if (e->live_serial[mid] == serial)
			return e->live[mid];
		if (e->live_serial[mid] < serial)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return NULL;
}

static rg_status live_add(rg_gen_engine *e, rg_gen_job *j, uint64_t serial)
{
	if (e->n_live == e->cap_live) {
		int cap = e->cap_live ? 2 * e->cap_live : 64;
		rg_gen_job **l = realloc(e->live, (size_t)cap * sizeof(*l));
		uint64_t *s;

		if (!l)
			return RG_ERR_OOM;
		e->live = l;
		s = realloc(e->live_serial, (size_t)cap * sizeof(*s));
		if (!s)
			return RG_ERR_OOM;
		e->live_serial = s;
		e->cap_live = cap;
	}
	e->live[e->n_live] = j;
	e->live_serial[e->n_live++] = serial;
	return RG_OK;
}

static void live_remove(rg_gen_engine *e, rg_gen_job *j)
{
	for (int i = 0; i < e->n_live; i++)
		if (e->live[i] == j) {
			memmove(e->live + i, e->live + i + 1,
				(size_t)(e->n_live - i - 1) * sizeof(*e->live));
			memmove(e->live_serial + i, e->live_serial + i + 1,
				(size_t)(e->n_live - i - 1) * sizeof(*e->live_serial));
			e->n_live--;
			return;
		}
}

/* ---- output ------------------------------------------------------------------------------- */

static size_t max_stop_len(const rg_gen_job *j)
{
	size_t m = 0;

	for (int i = 0; i < j->gp.n_stop; i++) {
		size_t n = strlen(j->gp.stop[i]);

		m = n > m ? n : m;
	}
	return m;
}

/* Bytes of o->text that are final: all but a possible stop-string prefix at the end, on a UTF-8
 * character boundary. */
static void update_ready(const rg_gen_job *j, rg_gen_seq_out *o)
{
	size_t hold = max_stop_len(j), len = o->text.len, r;

	if (o->end != RG_GEN_END_NONE || hold <= 1) {
		o->text_ready = len;
		return;
	}
	r = len > hold - 1 ? len - (hold - 1) : 0;
	while (r > 0 && r < len && ((unsigned char)o->text.data[r] & 0xC0) == 0x80)
		r--;
	if (r > o->text_ready)
		o->text_ready = r;
}

static rg_status out_grow(rg_gen_seq_out *o, int n_top)
{
	int cap;

	if (o->n_ids < o->cap)
		return RG_OK;
	cap = o->cap ? 2 * o->cap : 32;
	{
		int32_t *ids = realloc(o->ids, (size_t)cap * sizeof(*ids));
		float *lps;
		size_t *te;

		if (!ids)
			return RG_ERR_OOM;
		o->ids = ids;
		lps = realloc(o->logprobs, (size_t)cap * sizeof(*lps));
		if (!lps)
			return RG_ERR_OOM;
		o->logprobs = lps;
		te = realloc(o->text_end, (size_t)cap * sizeof(*te));
		if (!te)
			return RG_ERR_OOM;
		o->text_end = te;
	}
	if (n_top > 0) {
		int32_t *ti = realloc(o->top_ids, (size_t)cap * (size_t)n_top * sizeof(*ti));
		float *tl;

		if (!ti)
			return RG_ERR_OOM;
		o->top_ids = ti;
		tl = realloc(o->top_logprobs, (size_t)cap * (size_t)n_top * sizeof(*tl));
		if (!tl)
			return RG_ERR_OOM;
		o->top_logprobs = tl;
	}
	o->cap = cap;
	return RG_OK;
}

/* End sequence i of j (under j->mu): flush the detokenizer (its held bytes), final text. */
static void seq_end(rg_gen_job *j, int i, rg_gen_end why)
{
	rg_gen_seq_out *o = &j->out[i];
	gen_seq_state *s = &j->st[i];

	if (s->ended)
		return;
	s->ended = true;
	if (s->detok && why != RG_GEN_END_STOP) {
		const char *t;
		size_t n;

		if (rg_detok_stream_flush(s->detok, &t, &n) == RG_OK && n)
			rg_buf_put(&o->text, t, n);
	}
	o->end = why;
	o->text_ready = o->text.len;
	if (o->n_ids > 0)
		o->text_end[o->n_ids - 1] = o->text.len;
	j->n_running--;
}

/* One sampled token of sequence i of j (engine lock held; takes j->mu). Returns true when it
 * ends the sequence by EOS, a stop id or a stop string (the scheduler's `stop`). */
static bool seq_token(rg_gen_engine *e, rg_gen_job *j, int i, int32_t tok, float lp,
		      const int32_t *top_ids, const float *top_lps, double now)
{
	rg_gen_seq_out *o = &j->out[i];
	gen_seq_state *s = &j->st[i];
	rg_finish_reason fr = RG_FINISH_NONE;
	bool ended = false;

	pthread_mutex_lock(&j->mu);
	if (s->ended || out_grow(o, j->n_top) != RG_OK) {
		pthread_mutex_unlock(&j->mu);
		return false;
	}
	o->ids[o->n_ids] = tok;
	o->logprobs[o->n_ids] = lp;
	if (j->n_top > 0) {
		memcpy(o->top_ids + (size_t)o->n_ids * j->n_top, top_ids,
		       (size_t)j->n_top * sizeof(int32_t));
		memcpy(o->top_logprobs + (size_t)o->n_ids * j->n_top, top_lps,
		       (size_t)j->n_top * sizeof(float));
	}
	o->n_ids++;
	o->score += lp;
	s->n_gen++;
	if (o->first_token_ms == 0) {
		o->first_token_ms = now;
		pthread_mutex_lock(&e->mmu);
		rg_hist_observe(&e->met.ttft_ms, now - j->arrival_ms);
		pthread_mutex_unlock(&e->mmu);
	} else {
		pthread_mutex_lock(&e->mmu);
		rg_hist_observe(&e->met.itl_ms, now - o->last_token_ms);
		pthread_mutex_unlock(&e->mmu);
	}
	o->last_token_ms = now;
	if (s->n_gen > j->min_tokens)
		fr = rg_stop_token(j->gp.eos_ids, j->gp.n_eos > 0 ? j->gp.n_eos : 0,
				   j->gp.stop_ids, j->gp.n_stop_ids, tok);
	if (s->detok) {
		const char *t;
		size_t n;

		if (rg_detok_stream_push(s->detok, tok, &t, &n) == RG_OK && n)
			rg_buf_put(&o->text, t, n);
	}
	o->text_end[o->n_ids - 1] = o->text.len;
	if (fr != RG_FINISH_NONE) {
		seq_end(j, i, fr == RG_FINISH_EOS ? RG_GEN_END_EOS : RG_GEN_END_STOP);
		ended = true;
	} else if (j->gp.n_stop > 0 && s->n_gen > j->min_tokens) {
		long pos = rg_stop_find(o->text.data, o->text.len, s->searched, j->gp.stop,
					j->gp.n_stop);

		s->searched = o->text.len;
		if (pos >= 0) {
			for (int k = 0; k < j->gp.n_stop; k++)
				if (!strncmp(o->text.data + pos, j->gp.stop[k],
					     strlen(j->gp.stop[k])) &&
				    (size_t)pos + strlen(j->gp.stop[k]) <= o->text.len) {
					free(o->stop_str);
					o->stop_str = strdup(j->gp.stop[k]);
					break;
				}
			o->text.len = (size_t)pos;
			o->text.data[pos] = '\0';
			if (o->text_ready > o->text.len)
				o->text_ready = o->text.len;
			for (int k = 0; k < o->n_ids; k++)
				if (o->text_end[k] > o->text.len)
					o->text_end[k] = o->text.len;
			seq_end(j, i, RG_GEN_END_STOP);
			ended = true;
		}
	}
	update_ready(j, o);
	pthread_mutex_unlock(&j->mu);
	return ended;
}

/* ---- admission ---------------------------------------------------------------------------- */

static rg_status seq_prepare(rg_gen_engine *e, rg_gen_job *j, int i)
{
	gen_seq_state *s = &j->st[i];
	const rg_sampling_params *sp = &j->gp.sampling;
	int n_block = 0;

	rg_rng_seed_stream(&s->rng, j->gp.seed, (uint64_t)i);
	if (e->tok && rg_detok_stream_init(e->tok, j->skip_special, &s->detok) != RG_OK)
		s->detok = NULL; /* a tokenizer without streaming decode: ids only */
	if (j->min_tokens > 0)
		n_block = (j->gp.n_eos > 0 ? j->gp.n_eos : 0) + j->gp.n_stop_ids;
	s->n_bias = sp->n_logit_bias;
	s->n_bias_min = sp->n_logit_bias + n_block;
	if (s->n_bias_min > 0) {
		s->bias_ids = malloc((size_t)s->n_bias_min * sizeof(int32_t));
		s->bias_vals = malloc((size_t)s->n_bias_min * sizeof(float));
		if (!s->bias_ids || !s->bias_vals)
			return RG_ERR_OOM;
		for (int k = 0; k < sp->n_logit_bias; k++) {
			s->bias_ids[k] = sp->logit_bias_ids[k];
			s->bias_vals[k] = sp->logit_bias_values[k];
		}
		for (int k = 0; k < n_block; k++) {
			int nb = j->gp.n_eos > 0 ? j->gp.n_eos : 0;

			s->bias_ids[s->n_bias + k] = k < nb ? j->gp.eos_ids[k]
							    : j->gp.stop_ids[k - nb];
			s->bias_vals[s->n_bias + k] = BIAS_BLOCK;
		}
	}
	return RG_OK;
}

rg_status rg_gen_engine_submit(rg_gen_engine *e, rg_gen_job *j)
{
	rg_status st = RG_OK;
	uint64_t serial;
	double now = rg_now_ms();
	int added = 0;
	/* the scheduler's requests: one per sequence; a beam job is one beam group on prompts[0],
	 * its n_seqs outputs the returned beams, filled when the search ends */
	const int n_iter = j && j->gp.num_beams > 1 ? 1 : j ? j->n_seqs : 0;

	if (!e || !j || j->n_seqs < 1)
		return rg_errorf(RG_ERR_INVALID_INPUT, "generate: no job");
	{
		/* stop strings are matched on the engine's own streamed text */
		rg_gen_params chk = j->gp;

		if (e->tok && !chk.detokenize) {
			chk.detokenize = beam_detok;
			chk.detokenize_ctx = e;
		}
		if ((st = rg_gen_params_check(&chk, e->vocab)) != RG_OK)
			return st;
	}
	if (j->gp.num_beams > 1 && j->n_seqs != j->gp.n)
		return rg_errorf(RG_ERR_INVALID_INPUT, "generate: a beam search job has one output "
				 "per returned beam (n_seqs = gp.n)");
	for (int i = 0; i < j->n_seqs; i++) {
		if (!j->prompts[i] || j->prompt_lens[i] < 1)
			return rg_errorf(RG_ERR_INVALID_INPUT, "generate: sequence %d has no prompt",
					 i);
		if (j->prompt_lens[i] >= e->max_context)
			return rg_errorf(RG_ERR_TOO_LONG,
					 "the prompt has %d tokens; this model's context is %d "
					 "tokens (prompt and completion together)",
					 j->prompt_lens[i], e->max_context);
		for (int k = 0; k < j->prompt_lens[i]; k++)
			if (j->prompts[i][k] < 0 || j->prompts[i][k] >= e->vocab)
				return rg_errorf(RG_ERR_INVALID_INPUT,
						 "prompt token %d is %d, outside the vocabulary "
						 "[0, %d)", k, j->prompts[i][k], e->vocab);
	}
	j->n_top = j->gp.num_beams > 1 ? 0 : j->gp.logprobs;
	j->n_running = j->n_seqs;
	if (!j->arrival_ms)
		j->arrival_ms = now;
	for (int i = 0; i < j->n_seqs; i++)
		if ((st = seq_prepare(e, j, i)) != RG_OK)
			return rg_errorf(st, "generate: out of memory");
	pthread_mutex_lock(&e->mu);
	if (e->stop || e->draining) {
		pthread_mutex_unlock(&e->mu);
		j->adm.retry_after_ms = 1000;
		j->stopping = true;
		return rg_errorf(RG_ERR_BUSY, "the server is shutting down");
	}
	serial = e->next_serial++;
	j->base_id = serial << SEQ_BITS;
	for (int i = 0; i < n_iter; i++) {
		rg_iter_request r = {
			.id = j->base_id | (uint64_t)i, .prompt = j->prompts[i],
			.prompt_len = j->prompt_lens[i], .max_tokens = j->gp.max_tokens,
			.priority = j->priority, .arrival_ms = j->arrival_ms,
			.deadline_ms = j->deadline_ms, .tpot_ms = j->tpot_ms,
			.n_beams = j->gp.num_beams > 1 ? j->gp.num_beams : 0,
		};

		if ((st = rg_iter_add(e->it, &r, now, &j->adm)) != RG_OK)
			break;
		j->st[i].live = true;
		added++;
	}
	if (st == RG_OK)
		st = live_add(e, j, serial);
	if (st != RG_OK) {
		char msg[256];

		snprintf(msg, sizeof(msg), "%s", rg_last_error());
		/* the sequences already added go (the step thread finds no live job for their
		 * finished entries and skips them) */
		for (int i = 0; i < added; i++) {
			rg_iter_abort(e->it, j->base_id | (uint64_t)i);
			j->st[i].live = false;
		}
		if (st == RG_ERR_BUSY) {
			pthread_mutex_lock(&e->mmu);
			e->met.refused++;
			pthread_mutex_unlock(&e->mmu);
		}
		pthread_mutex_unlock(&e->mu);
		return rg_errorf(st, "%s", msg);
	}
	atomic_fetch_add(&j->refs, 1);
	pthread_mutex_lock(&e->mmu);
	for (int i = 0; i < n_iter; i++)
		e->met.prompt_tokens += (uint64_t)j->prompt_lens[i];
	pthread_mutex_unlock(&e->mmu);
	pthread_cond_broadcast(&e->cv);
	pthread_mutex_unlock(&e->mu);
	return RG_OK;
}

/* ---- the step loop ------------------------------------------------------------------------ */

/* Abort every live sequence of j in the scheduler (engine lock held); they are reported by
 * rg_iter_finished. */
static void job_abort(rg_gen_engine *e, rg_gen_job *j, const char *why)
{
	pthread_mutex_lock(&j->mu);
	if (why && !j->err[0])
		snprintf(j->err, sizeof(j->err), "%s", why);
	pthread_mutex_unlock(&j->mu);
	for (int i = 0; i < j->n_seqs; i++)
		if (j->st[i].live)
			rg_iter_abort(e->it, j->base_id | (uint64_t)i);
}

/* Cancelled jobs, gone clients, the drain's end (engine lock held). */
static void sweep(rg_gen_engine *e, double now)
{
	bool poll = now - e->last_poll_ms >= e->p.disconnect_poll_ms;
	bool cut = e->draining && now >= e->drain_end;

	if (poll)
		e->last_poll_ms = now;
	for (int k = 0; k < e->n_live; k++) {
		rg_gen_job *j = e->live[k];

		if (cut)
			job_abort(e, j, "the server is shutting down");
		else if (atomic_load(&j->cancel))
			job_abort(e, j, "cancelled");
		else if (poll && j->client_fd >= 0 && rg_client_gone(j->client_fd)) {
			atomic_store(&j->cancel, true);
			job_abort(e, j, "the client went away");
		}
	}
}

/* The penalty lists of row r for sequence i of j (prompt and generated tokens: distinct ids,
 * counts among the generated, in-prompt flags; rg_sampler_penalty_lists). */
static void penalty_lists(rg_gen_engine *e, int r, const rg_gen_job *j, int i,
			  rg_row_sampling *row)
{
	const int32_t *toks;
	int n_tok, n_prompt;
	int32_t *ids = e->pen_ids + (size_t)r * e->max_context;
	int32_t *cnt = e->pen_counts + (size_t)r * e->max_context;
	uint8_t *inp = e->pen_prompt + (size_t)r * e->max_context;

	toks = rg_iter_tokens(e->it, j->base_id | (uint64_t)i, &n_tok);
	if (!toks)
		n_tok = 0;
	if (n_tok > e->max_context)
		n_tok = e->max_context;
	n_prompt = j->prompt_lens[i] < n_tok ? j->prompt_lens[i] : n_tok;
	row->n_penalty = rg_sampler_penalty_lists(toks, n_prompt, toks + n_prompt, n_tok - n_prompt,
						  e->pen_keys, ids, cnt, inp);
	row->penalty_ids = ids;
	row->penalty_counts = cnt;
	row->penalty_in_prompt = inp;
}

static void row_params(rg_gen_engine *e, int r, rg_gen_job *j, int i, rg_row_sampling *row)
{
	const rg_sampling_params *sp = &j->gp.sampling;
	gen_seq_state *s = &j->st[i];

	*row = rg_sampler_row(sp, &s->rng);
	if (rg_sampling_penalties_on(sp))
		penalty_lists(e, r, j, i, row);
	row->n_logit_bias = s->n_gen < j->min_tokens ? s->n_bias_min : s->n_bias;
	row->logit_bias_ids = s->bias_ids;
	row->logit_bias_values = s->bias_vals;
}

static rg_gen_job *job_of(const rg_gen_engine *e, uint64_t id, int *seq)
{
	*seq = (int)(id & (MAX_SEQS_PER_JOB - 1));
	return live_find(e, id >> SEQ_BITS);
}

static void touch(rg_gen_engine *e, rg_gen_job *j, int *n_touched)
{
	for (int k = 0; k < *n_touched; k++)
		if (e->touched[k] == j)
			return;
	if (*n_touched < e->S)
		e->touched[(*n_touched)++] = j;
}

/* Finished sequences from the scheduler (engine lock held): end them; jobs whose last sequence
 * ended leave the live list and go to *done (linked by next). */
static void collect_finished(rg_gen_engine *e, rg_gen_job **done)
{
	const rg_iter_done *d;
	int nd;

	d = rg_iter_finished(e->it, &nd);
	for (int k = 0; k < nd; k++) {
		int i;
		rg_gen_job *j = job_of(e, d[k].id, &i);
		rg_gen_end why;

		if (!j || i >= j->n_seqs)
			continue;
		if (j->gp.num_beams > 1) {
			j->out[0].n_cached = d[k].n_cached_tokens;
			j->out[0].n_preemptions = d[k].n_preemptions;
			beam_job_end(e, j, d[k].reason);
			pthread_mutex_lock(&e->mmu);
			e->met.cached_tokens += (uint64_t)d[k].n_cached_tokens;
			pthread_mutex_unlock(&e->mmu);
			goto ended;
		}
		why = d[k].reason == RG_ITER_FINISH_LENGTH ? RG_GEN_END_LENGTH
			: d[k].reason == RG_ITER_FINISH_ABORT ? RG_GEN_END_ABORT
							      : RG_GEN_END_NONE;
		pthread_mutex_lock(&j->mu);
		j->st[i].live = false;
		j->out[i].n_cached = d[k].n_cached_tokens;
		j->out[i].n_preemptions = d[k].n_preemptions;
		if (why != RG_GEN_END_NONE)
			seq_end(j, i, why);
		if (j->n_running == 0 && !j->ended) {
			bool all_dead = true;

			for (int q = 0; q < j->n_seqs; q++)
				all_dead &= !j->st[q].live;
			if (all_dead) {
				j->ended = true;
				for (int q = 0; q < j->n_seqs; q++)
					if (j->out[q].end == RG_GEN_END_ABORT && j->status == RG_OK)
						j->status = RG_ERR_BUSY;
			}
		}
		pthread_mutex_unlock(&j->mu);
		pthread_mutex_lock(&e->mmu);
		e->met.cached_tokens += (uint64_t)d[k].n_cached_tokens;
		pthread_mutex_unlock(&e->mmu);
ended:
		if (j->ended) {
			bool listed = false;

			for (rg_gen_job *q = *done; q; q = q->next)
				listed |= q == j;
			if (!listed) {
				live_remove(e, j);
				j->next = *done;
				*done = j;
			}
		}
	}
}

/* Tell the owners (no lock held): more output, then the jobs that ended (last). */
static void notify_all(rg_gen_engine *e, int n_touched, rg_gen_job *done)
{
	for (int k = 0; k < n_touched; k++) {
		bool is_done = false;

		for (rg_gen_job *q = done; q; q = q->next)
			is_done |= q == e->touched[k];
		if (!is_done && e->touched[k]->notify)
			e->touched[k]->notify(e->touched[k], false);
	}
	while (done) {
		rg_gen_job *next = done->next;
		bool ok = true;
		double now = rg_now_ms();

		for (int i = 0; i < done->n_seqs; i++)
			ok &= done->out[i].end != RG_GEN_END_ABORT;
		pthread_mutex_lock(&e->mmu);
		if (ok)
			e->met.requests_ok++;
		else
			e->met.requests_aborted++;
		rg_hist_observe(&e->met.e2e_ms, now - done->arrival_ms);
		pthread_mutex_unlock(&e->mmu);
		if (done->notify)
			done->notify(done, true);
		rg_gen_job_put(done);
		done = next;
	}
}

static rg_status beam_detok(void *ctx, const int32_t *ids, int n, char **text, size_t *len)
{
	const rg_gen_engine *e = ctx;

	return rg_tokenizer_decode(e->tok, ids, (size_t)n, true, text, len);
}

/* A beam job's group ended (engine lock held; takes j->mu): its outputs are the search's
 * hypotheses, best first (as rg_gen_run returns them), or, when aborted, nothing. */
static void beam_job_end(rg_gen_engine *e, rg_gen_job *j, rg_iter_finish reason)
{
	int nh = 0;
	rg_status st = RG_OK;
	double now = rg_now_ms();

	if (reason != RG_ITER_FINISH_ABORT && (!j->beam || (st = rg_beam_finalize(j->beam, &nh))))
		reason = RG_ITER_FINISH_ABORT;
	pthread_mutex_lock(&j->mu);
	if (st != RG_OK || (reason == RG_ITER_FINISH_ABORT && !j->err[0]))
		snprintf(j->err, sizeof(j->err), "%s", st != RG_OK ? rg_last_error()
								  : "beam search aborted");
	for (int q = 0; q < j->n_seqs; q++) {
		rg_gen_seq_out *x = &j->out[q];
		const rg_beam_hyp *h = q < nh ? rg_beam_result(j->beam, q) : NULL;

		x->end = reason == RG_ITER_FINISH_ABORT ? RG_GEN_END_ABORT : RG_GEN_END_LENGTH;
		x->first_token_ms = x->last_token_ms = now;
		if (!h)
			continue; /* fewer hypotheses than asked: an empty output */
		x->ids = malloc((size_t)(h->n ? h->n : 1) * sizeof(int32_t));
		x->logprobs = malloc((size_t)(h->n ? h->n : 1) * sizeof(float));
		x->text_end = calloc((size_t)(h->n ? h->n : 1), sizeof(size_t));
		if (!x->ids || !x->logprobs || !x->text_end) {
			x->end = RG_GEN_END_ABORT;
			continue;
		}
		memcpy(x->ids, h->ids, (size_t)h->n * sizeof(int32_t));
		memcpy(x->logprobs, h->logprobs, (size_t)h->n * sizeof(float));
		x->n_ids = x->cap = h->n;
		x->score = h->score;
		switch (rg_gen_beam_finish(&j->gp, h)) {
		case RG_FINISH_EOS: x->end = RG_GEN_END_EOS; break;
		case RG_FINISH_STOP: x->end = RG_GEN_END_STOP; break;
		default: x->end = RG_GEN_END_LENGTH; break;
		}
		if (e->tok) {
			char *t = NULL;
			size_t n = 0;

			/* the text without the EOS or stop id that ended it, as rg_gen_run's */
			if (beam_detok(e, h->ids, h->eos ? h->n - 1 : h->n, &t, &n) == RG_OK && t)
				rg_buf_put(&x->text, t, n);
			free(t);
		}
		for (int k = 0; k < h->n; k++)
			x->text_end[k] = x->text.len;
		x->text_ready = x->text.len;
	}
	if (st != RG_OK && j->status == RG_OK)
		j->status = st; /* an abort (cancel, client gone, drain) keeps RG_OK: 503 */
	j->n_running = 0;
	j->st[0].live = false;
	j->ended = true;
	pthread_mutex_unlock(&j->mu);
	pthread_mutex_lock(&e->mmu);
	for (int q = 0; q < j->n_seqs; q++)
		e->met.generated_tokens += (uint64_t)j->out[q].n_ids;
	pthread_mutex_unlock(&e->mmu);
}

/* A beam group's logits row r of the plan (engine lock held): the search (re)starts when the
 * row is its prompt's last (the first step, or again after a preemption). Returns the candidates
 * per row its next step needs (rg_beam_cand_needed), 0 for no job or a failed start (beam_steps
 * then ends or aborts it). */
static int beam_prepare(rg_gen_engine *e, const rg_iter_plan *pl, int r)
{
	uint64_t id = pl->seq_ids[pl->logits_seq[r]];
	int i, n_tok, room;
	rg_gen_job *j = job_of(e, id, &i);

	if (!j || !rg_iter_tokens(e->it, id, &n_tok))
		return 0;
	if (n_tok == j->prompt_lens[0]) {
		room = e->max_context - j->prompt_lens[0];
		rg_beam_free(j->beam);
		j->beam = NULL;
		if (rg_gen_beam_init(&j->gp, j->prompts[0], j->prompt_lens[0],
				     j->gp.max_tokens < room ? j->gp.max_tokens : room, e->vocab,
				     &j->beam) != RG_OK)
			j->beam = NULL;
	}
	return j->beam ? rg_beam_cand_needed(j->beam) : 0;
}

/* The beam groups of the plan (engine lock held): for each beam job with rows, one step of its
 * search (started by beam_prepare), in slot order, on its rows' logits (e->blogits, row r for
 * the plan's logits row r) or, with cand_k > 0, on each row's cand_k best tokens (e->top_ids /
 * top_lps at stride top_n: rg_beam_step_cand). The next beams go to the scheduler, or, when the
 * search is done, a stop on its rows. A failing search aborts its job. */
static void beam_steps(rg_gen_engine *e, const rg_iter_plan *pl, int cand_k, int top_n)
{
	const rg_step_batch *b = &pl->batch;

	for (int r0 = 0; r0 < b->n_logits; r0++) {
		uint64_t id = pl->seq_ids[pl->logits_seq[r0]];
		const float *rows[RG_ITER_MAX_BEAMS] = {0}, *clps[RG_ITER_MAX_BEAMS] = {0};
		const int32_t *cids[RG_ITER_MAX_BEAMS] = {0};
		int32_t parent[RG_ITER_MAX_BEAMS], token[RG_ITER_MAX_BEAMS];
		int i, n_tok;
		rg_gen_job *j;
		bool done = false, dup = false, first;
		rg_status st = RG_OK;

		if (pl->beam_slot[pl->logits_seq[r0]] < 0)
			continue;
		for (int r = 0; r < r0; r++)
			dup |= pl->seq_ids[pl->logits_seq[r]] == id;
		if (dup)
			continue;
		j = job_of(e, id, &i);
		if (!j || !rg_iter_tokens(e->it, id, &n_tok)) {
			for (int r = r0; r < b->n_logits; r++)
				if (pl->seq_ids[pl->logits_seq[r]] == id)
					e->stops[r] = true; /* no job: end the group */
			continue;
		}
		first = n_tok == j->prompt_lens[0];
		if (!j->beam)
			st = rg_errorf(RG_ERR_OOM, "beam search: the search could not start");
		for (int r = r0; st == RG_OK && r < b->n_logits; r++) {
			int q = pl->logits_seq[r];
			const float *row = cand_k ? NULL : e->blogits + (size_t)r * e->vocab;
			const int32_t *ci = cand_k ? e->top_ids + (size_t)r * top_n : NULL;
			const float *cl = cand_k ? e->top_lps + (size_t)r * top_n : NULL;

			if (pl->seq_ids[q] != id)
				continue;
			for (int k = 0; k < j->gp.num_beams; k++) {
				if (!first && k != pl->beam_slot[q])
					continue;
				rows[k] = row;
				cids[k] = ci;
				clps[k] = cl;
			}
		}
		if (st == RG_OK)
			st = cand_k ? rg_beam_step_cand(j->beam, cids, clps, cand_k, parent, token,
							&done)
				    : rg_beam_step(j->beam, rows, parent, token, &done);
		if (st == RG_OK && !done) {
			/* a diverse search's group that ended at this step has no next beams */
			for (int k = 0; k < j->gp.num_beams; k++)
				if (!rg_beam_slot_live(j->beam, k))
					parent[k] = -1;
			st = rg_iter_beam_next(e->it, id, parent, token, j->gp.num_beams);
		}
		if (st != RG_OK) {
			char msg[200];

			snprintf(msg, sizeof(msg), "beam search failed: %s", rg_last_error());
			pthread_mutex_lock(&j->mu);
			j->status = RG_ERR_INTERNAL;
			pthread_mutex_unlock(&j->mu);
			job_abort(e, j, msg);
			continue;
		}
		if (done)
			for (int r = r0; r < b->n_logits; r++)
				if (pl->seq_ids[pl->logits_seq[r]] == id)
					e->stops[r] = true;
	}
}

/* Fail every sequence of the plan's jobs after a model error (engine lock held). */
static void fail_plan(rg_gen_engine *e, const rg_iter_plan *plan, const char *msg)
{
	for (int b = 0; b < plan->batch.n_seq; b++) {
		int i;
		rg_gen_job *j = job_of(e, plan->seq_ids[b], &i);

		if (j) {
			pthread_mutex_lock(&j->mu);
			j->status = RG_ERR_INVALID_INPUT;
			pthread_mutex_unlock(&j->mu);
			job_abort(e, j, msg);
		}
	}
}

static void *step_thread(void *arg)
{
	rg_gen_engine *e = arg;
	rg_iter_plan plan;

	pthread_mutex_lock(&e->mu);
	for (;;) {
		double now = rg_now_ms(), t0, step_ms;
		rg_gen_job *done = NULL;
		int n_touched = 0, top_n = 0, cand_k = 0;
		rg_status st;
		char err[256] = "";
		bool beam_rows = false;

		sweep(e, now);
		if (rg_iter_schedule(e->it, now, &plan) != RG_OK)
			break; /* cannot happen: every plan is reported */
		if (plan.batch.n_seq == 0) {
			collect_finished(e, &done);
			if (done) {
				pthread_mutex_unlock(&e->mu);
				notify_all(e, 0, done);
				pthread_mutex_lock(&e->mu);
				continue;
			}
			if (e->stop)
				break;
			{
				struct timespec ts;
				double wake = e->n_live > 0 ? 10 : 1000;

				clock_gettime(CLOCK_REALTIME, &ts);
				ts.tv_nsec += (long)(wake * 1e6);
				ts.tv_sec += ts.tv_nsec / 1000000000L;
				ts.tv_nsec %= 1000000000L;
				pthread_cond_timedwait(&e->cv, &e->mu, &ts);
			}
			continue;
		}
		/* rows: each logits row's sampling */
		for (int r = 0; r < plan.batch.n_logits; r++) {
			int i;
			rg_gen_job *j = job_of(e, plan.seq_ids[plan.logits_seq[r]], &i);

			e->bkeep[r] = plan.beam_slot[plan.logits_seq[r]] >= 0;
			if (e->bkeep[r]) {
				/* a beam group's row: its best tokens (or its logits) go to the search;
				 * a group's rows are adjacent, its search prepared at its first */
				const uint64_t id = plan.seq_ids[plan.logits_seq[r]];
				int need = r > 0 && plan.beam_slot[plan.logits_seq[r - 1]] >= 0 &&
						   plan.seq_ids[plan.logits_seq[r - 1]] == id
					   ? 0
					   : beam_prepare(e, &plan, r);

				e->rows[r] = (rg_row_sampling){.top_p = 1, .repetition_penalty = 1};
				beam_rows = true;
				cand_k = need > cand_k ? need : cand_k;
				if (j && j->queue_ms == 0)
					j->queue_ms = now - j->arrival_ms;
			} else if (j) {
				row_params(e, r, j, i, &e->rows[r]);
				if (j->n_top > top_n)
					top_n = j->n_top;
				if (j->queue_ms == 0)
					j->queue_ms = now - j->arrival_ms;
			} else {
				e->rows[r] = (rg_row_sampling){.top_p = 1, .repetition_penalty = 1};
			}
		}
		/* the beam rows' cand_k best tokens come with the sampling's top-N (a greedy row's
		 * top-N log-probs are its log-softmax), so the step stays one graphable call; more
		 * than the device's top-N: their logits to the host */
		if (beam_rows && cand_k > 0 && cand_k <= RG_GEN_MAX_LOGPROBS && !e->beam_logits) {
			beam_rows = false;
			top_n = cand_k > top_n ? cand_k : top_n;
		} else {
			cand_k = 0;
		}
		pthread_mutex_unlock(&e->mu);

		t0 = rg_now_ms();
		sleep_ms(e->p.step_delay_ms); /* testing: part of the step, as a slow device's time */
		st = RG_OK;
		if (plan.n_copies > 0)
			st = rg_model_kv_copy_blocks(e->m, plan.copy_src, plan.copy_dst,
						     plan.n_copies);
		if (st == RG_OK && beam_rows) {
			/* one forward: every row sampled on the device, the rows' logits kept for
			 * the beam groups' searches */
			if (!e->blogits && !(e->blogits = malloc((size_t)e->S * (size_t)e->vocab *
								 sizeof(float))))
				st = rg_errorf(RG_ERR_OOM, "beam search: no memory for %d rows of "
					       "logits", e->S);
			else
				st = rg_model_step(e->m, &plan.batch, &(rg_step_out){
					.top_n = top_n, .rows = e->rows, .ids = e->ids, .logprobs = e->lps,
					.top_ids = top_n ? e->top_ids : NULL,
					.top_logprobs = top_n ? e->top_lps : NULL,
					.logits = e->blogits, .want_logits = e->bkeep});
		} else if (st == RG_OK) {
			if (plan.batch.n_logits > 0)
				st = rg_model_step(e->m, &plan.batch, &(rg_step_out){
					.top_n = top_n, .rows = e->rows, .ids = e->ids, .logprobs = e->lps,
					.top_ids = top_n ? e->top_ids : NULL,
					.top_logprobs = top_n ? e->top_lps : NULL});
			else
				st = rg_model_step(e->m, &plan.batch, NULL);
		}
		if (st != RG_OK)
			snprintf(err, sizeof(err), "the model failed: %s", rg_last_error());
		step_ms = rg_now_ms() - t0;
		now = rg_now_ms();

		pthread_mutex_lock(&e->mu);
		if (st != RG_OK) {
			fail_plan(e, &plan, err);
			memset(e->stops, 0, (size_t)e->S * sizeof(bool));
			for (int r = 0; r < plan.batch.n_logits; r++)
				e->ids[r] = 0;
			rg_iter_update(e->it, e->ids, e->stops, now, NAN);
		} else {
			for (int r = 0; r < plan.batch.n_logits; r++) {
				int i;
				rg_gen_job *j = job_of(e, plan.seq_ids[plan.logits_seq[r]], &i);
				int32_t tops[RG_GEN_MAX_LOGPROBS];
				float topl[RG_GEN_MAX_LOGPROBS];

				e->stops[r] = false;
				if (!j || plan.beam_slot[plan.logits_seq[r]] >= 0)
					continue;
				for (int k = 0; k < j->n_top; k++) {
					tops[k] = e->top_ids[(size_t)r * top_n + k];
					topl[k] = e->top_lps[(size_t)r * top_n + k];
				}
				e->stops[r] = seq_token(e, j, i, e->ids[r], e->lps[r], tops, topl,
							now);
				touch(e, j, &n_touched);
			}
			if (beam_rows || cand_k)
				beam_steps(e, &plan, cand_k, top_n);
			rg_iter_update(e->it, e->ids, e->stops, now, step_ms);
			pthread_mutex_lock(&e->mmu);
			e->met.steps++;
			/* a beam job's tokens count when it ends: those of the beams it returns */
			for (int r = 0; r < plan.batch.n_logits; r++)
				e->met.generated_tokens += !e->bkeep[r];
			e->met.preemptions += (uint64_t)plan.n_preempted;
			rg_hist_observe(&e->met.step_ms, step_ms);
			rg_hist_observe(&e->met.step_tokens, plan.batch.n_tokens);
			pthread_mutex_unlock(&e->mmu);
		}
		collect_finished(e, &done);
		pthread_mutex_unlock(&e->mu);
		notify_all(e, n_touched, done);
		pthread_mutex_lock(&e->mu);
	}
	pthread_mutex_unlock(&e->mu);
	return NULL;
}

/* ---- create / stop ------------------------------------------------------------------------ */

/* Warm-up: a few steps through the scheduler (prefills of a few lengths, batched decodes), so
 * that the step cost model behind admission has measured points before the first request. */
static rg_status warm_up(rg_gen_engine *e)
{
	int lens[3] = {8, 64, 200};
	int32_t *prompt;
	rg_iter_plan plan;
	rg_status st = RG_OK;
	int guard = 0;

	prompt = malloc((size_t)e->max_context * sizeof(int32_t));
	if (!prompt)
		return RG_ERR_OOM;
	for (int k = 0; k < e->max_context; k++)
		prompt[k] = (int32_t)((k * 7919 + 13) % e->vocab);
	for (int q = 0; q < 3; q++) {
		rg_iter_request r = {
			.id = (uint64_t)(q + 1), .prompt = prompt,
			.prompt_len = lens[q] < e->max_context - 5 ? lens[q] : e->max_context - 5,
			.max_tokens = 4, .arrival_ms = rg_now_ms(),
		};

		if (r.prompt_len < 1)
			r.prompt_len = 1;
		if ((st = rg_iter_add(e->it, &r, rg_now_ms(), NULL)) != RG_OK)
			goto out;
	}
	for (;;) {
		double t0;
		int nd;

		if ((st = rg_iter_schedule(e->it, rg_now_ms(), &plan)) != RG_OK)
			goto out;
		if (plan.batch.n_seq == 0 || ++guard > 100000)
			break;
		for (int r = 0; r < plan.batch.n_logits; r++)
			e->rows[r] = (rg_row_sampling){.top_p = 1, .repetition_penalty = 1};
		t0 = rg_now_ms();
		sleep_ms(e->p.step_delay_ms);
		if (plan.n_copies > 0)
			st = rg_model_kv_copy_blocks(e->m, plan.copy_src, plan.copy_dst,
						     plan.n_copies);
		if (st == RG_OK)
			st = plan.batch.n_logits > 0
				? rg_model_step(e->m, &plan.batch, &(rg_step_out){
					  .rows = e->rows, .ids = e->ids, .logprobs = e->lps})
				: rg_model_step(e->m, &plan.batch, NULL);
		if (st != RG_OK)
			goto out;
		/* the first step of a shape pays one-time costs (allocation, graphs): not fitted */
		rg_iter_update(e->it, e->ids, NULL, rg_now_ms(), guard > 1 ? rg_now_ms() - t0 : NAN);
		rg_iter_finished(e->it, &nd);
	}
out:
	free(prompt);
	return st;
}

rg_gen_engine *rg_gen_engine_create(rg_model *m, const rg_gen_engine_params *p, rg_status *st)
{
	rg_gen_engine *e;
	rg_kv_info kv;
	rg_iter_params ip;
	size_t S;

	*st = RG_OK;
	if (!m || !p) {
		*st = rg_errorf(RG_ERR_INVALID_INPUT, "generation engine: no model");
		return NULL;
	}
	if (rg_model_get_info(m)->kind != RG_MODEL_DECODER) {
		*st = rg_errorf(RG_ERR_UNSUPPORTED, "generation engine: not a decoder model");
		return NULL;
	}
	e = calloc(1, sizeof(*e));
	if (!e) {
		*st = RG_ERR_OOM;
		return NULL;
	}
	e->m = m;
	e->info = rg_model_get_info(m);
	e->p = *p;
	if (e->p.block_size <= 0)
		e->p.block_size = 16;
	if (e->p.disconnect_poll_ms <= 0)
		e->p.disconnect_poll_ms = 10;
	e->vocab = e->info->vocab_size;
	e->tok = m->tok;
	pthread_mutex_init(&e->mu, NULL);
	pthread_mutex_init(&e->mmu, NULL);
	pthread_cond_init(&e->cv, NULL);
	e->next_serial = 1; /* ids below 1 << SEQ_BITS are the warm-up's */
	ip = p->iter;
	if (ip.max_context > e->info->max_position_embeddings)
		ip.max_context = e->info->max_position_embeddings;
	e->max_context = ip.max_context;
	if (ip.max_num_batched_tokens > e->info->max_batch_tokens)
		ip.max_num_batched_tokens = e->info->max_batch_tokens;
	if (p->kv_bytes > 0)
		*st = rg_model_kv_init_bytes(m, e->p.block_size, p->kv_bytes);
	else
		*st = rg_model_kv_init_fraction(m, e->p.block_size,
						p->kv_fraction > 0 ? p->kv_fraction : 0.9);
	if (*st != RG_OK)
		goto fail;
	if ((*st = rg_model_kv_info(m, &kv)) != RG_OK ||
	    (*st = rg_kv_pool_init(&e->pool, kv.n_blocks, kv.block_size)) != RG_OK)
		goto fail;
	if ((*st = rg_iter_init(&e->it, e->pool, &ip)) != RG_OK)
		goto fail;
	e->S = ip.max_num_seqs;
	S = (size_t)e->S;
	{
		const char *d = getenv("RAGGED_GEN_DEVICE_SAMPLE");

		e->beam_logits = d && !strcmp(d, "0");
	}
	e->rows = calloc(S, sizeof(*e->rows));
	e->ids = calloc(S, sizeof(*e->ids));
	e->lps = calloc(S, sizeof(*e->lps));
	e->top_ids = calloc(S * RG_GEN_MAX_LOGPROBS, sizeof(*e->top_ids));
	e->top_lps = calloc(S * RG_GEN_MAX_LOGPROBS, sizeof(*e->top_lps));
	e->stops = calloc(S, sizeof(*e->stops));
	e->pen_ids = calloc(S * (size_t)e->max_context, sizeof(*e->pen_ids));
	e->pen_counts = calloc(S * (size_t)e->max_context, sizeof(*e->pen_counts));
	e->pen_prompt = calloc(S * (size_t)e->max_context, sizeof(*e->pen_prompt));
	e->pen_keys = calloc((size_t)e->max_context, sizeof(*e->pen_keys));
	e->touched = calloc(S, sizeof(*e->touched));
	e->bkeep = calloc(S, sizeof(*e->bkeep));
	if (!e->rows || !e->ids || !e->lps || !e->top_ids || !e->top_lps || !e->stops || !e->bkeep ||
	    !e->pen_ids || !e->pen_counts || !e->pen_prompt || !e->pen_keys || !e->touched) {
		*st = rg_errorf(RG_ERR_OOM, "generation engine: out of memory");
		goto fail;
	}
	{
		static const double ms[] = {1, 2.5, 5, 10, 20, 40, 80, 160, 320, 640, 1280, 2560,
					    5120, 10240, 20480, 60000};
		static const double tok[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048,
					     4096, 8192};

		rg_hist_init(&e->met.ttft_ms, ms, 16);
		rg_hist_init(&e->met.itl_ms, ms, 16);
		rg_hist_init(&e->met.step_ms, ms, 16);
		rg_hist_init(&e->met.e2e_ms, ms, 16);
		rg_hist_init(&e->met.step_tokens, tok, 14);
	}
	if ((*st = warm_up(e)) != RG_OK)
		goto fail;
	if (pthread_create(&e->th, NULL, step_thread, e) != 0) {
		*st = rg_errorf(RG_ERR_OOM, "generation engine: cannot start its thread");
		goto fail;
	}
	e->started = true;
	return e;
fail:
	rg_gen_engine_free(e);
	return NULL;
}

void rg_gen_engine_drain(rg_gen_engine *e, double end_ms)
{
	pthread_mutex_lock(&e->mu);
	if (!e->draining || end_ms < e->drain_end)
		e->drain_end = end_ms;
	e->draining = true;
	pthread_cond_broadcast(&e->cv);
	pthread_mutex_unlock(&e->mu);
}

bool rg_gen_engine_idle(rg_gen_engine *e)
{
	bool idle;

	pthread_mutex_lock(&e->mu);
	idle = e->n_live == 0;
	pthread_mutex_unlock(&e->mu);
	return idle;
}

void rg_gen_engine_stop(rg_gen_engine *e)
{
	if (!e)
		return;
	pthread_mutex_lock(&e->mu);
	if (e->started) {
		/* end what is left, then let the loop see nothing to run */
		e->draining = true;
		e->drain_end = -INFINITY;
		pthread_cond_broadcast(&e->cv);
		pthread_mutex_unlock(&e->mu);
		for (;;) {
			bool idle;

			pthread_mutex_lock(&e->mu);
			idle = e->n_live == 0;
			pthread_cond_broadcast(&e->cv);
			pthread_mutex_unlock(&e->mu);
			if (idle)
				break;
			sleep_ms(2);
		}
		pthread_mutex_lock(&e->mu);
		e->stop = true;
		pthread_cond_broadcast(&e->cv);
		pthread_mutex_unlock(&e->mu);
		pthread_join(e->th, NULL);
		e->started = false;
		return;
	}
	e->stop = true;
	pthread_mutex_unlock(&e->mu);
}

void rg_gen_engine_free(rg_gen_engine *e)
{
	if (!e)
		return;
	rg_gen_engine_stop(e);
	rg_iter_free(e->it);
	rg_kv_pool_free(e->pool);
	free(e->live);
	free(e->live_serial);
	free(e->rows);
	free(e->ids);
	free(e->lps);
	free(e->top_ids);
	free(e->top_lps);
	free(e->stops);
	free(e->pen_ids);
	free(e->pen_counts);
	free(e->pen_prompt);
	free(e->pen_keys);
	free(e->touched);
	free(e->blogits);
	free(e->bkeep);
	pthread_mutex_destroy(&e->mu);
	pthread_mutex_destroy(&e->mmu);
	pthread_cond_destroy(&e->cv);
	free(e);
}

int rg_gen_engine_queue_depth(rg_gen_engine *e)
{
	rg_iter_stats s;

	pthread_mutex_lock(&e->mu);
	rg_iter_stats_get(e->it, &s);
	pthread_mutex_unlock(&e->mu);
	return s.n_waiting;
}

const int32_t *rg_gen_engine_eos(const rg_gen_engine *e, int32_t *n)
{
	*n = e->m->n_gen_eos;
	return e->m->gen_eos;
}

int rg_gen_engine_max_context(const rg_gen_engine *e)
{
	return e->max_context;
}

int rg_gen_engine_blocks_used(rg_gen_engine *e)
{
	int n;

	pthread_mutex_lock(&e->mu);
	n = rg_kv_pool_n_used(e->pool);
	pthread_mutex_unlock(&e->mu);
	return n;
}

static void gauge(rg_buf *b, const char *name, const char *help, const char *type, double v)
{
	rg_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
}

void rg_gen_engine_metrics(rg_gen_engine *e, rg_buf *b)
{
	rg_iter_stats s;
	gen_metrics m;

	pthread_mutex_lock(&e->mu);
	rg_iter_stats_get(e->it, &s);
	pthread_mutex_unlock(&e->mu);
	pthread_mutex_lock(&e->mmu);
	m = e->met;
	pthread_mutex_unlock(&e->mmu);
	rg_hist_render(b, "ragged_gen_time_to_first_token_seconds",
		    "Time from a request's arrival to its first generated token.", &m.ttft_ms,
		    1e-3);
	rg_hist_render(b, "ragged_gen_inter_token_latency_seconds",
		    "Time between two tokens of one sequence.", &m.itl_ms, 1e-3);
	rg_hist_render(b, "ragged_gen_request_duration_seconds",
		    "Time from a request's arrival to its end.", &m.e2e_ms, 1e-3);
	rg_hist_render(b, "ragged_gen_step_duration_seconds", "Time of one model step.", &m.step_ms,
		    1e-3);
	rg_hist_render(b, "ragged_gen_step_tokens", "New tokens (prefill and decode) per step.",
		    &m.step_tokens, 1);
	gauge(b, "ragged_gen_prompt_tokens_total", "Prompt tokens admitted.", "counter",
	      (double)m.prompt_tokens);
	gauge(b, "ragged_gen_generation_tokens_total", "Tokens generated.", "counter",
	      (double)m.generated_tokens);
	gauge(b, "ragged_gen_prefix_cache_hit_tokens_total",
	      "Prompt tokens taken from the prefix cache.", "counter", (double)m.cached_tokens);
	gauge(b, "ragged_gen_steps_total", "Model steps run.", "counter", (double)m.steps);
	gauge(b, "ragged_gen_requests_finished_total", "Requests that ended normally.", "counter",
	      (double)m.requests_ok);
	gauge(b, "ragged_gen_requests_aborted_total",
	      "Requests ended early (client gone, drain, model error).", "counter",
	      (double)m.requests_aborted);
	gauge(b, "ragged_gen_requests_refused_total",
	      "Requests refused at admission (queue full, a deadline that cannot be met).",
	      "counter", (double)m.refused);
	gauge(b, "ragged_gen_preemptions_total",
	      "Sequences preempted for KV blocks (recomputed later).", "counter",
	      (double)m.preemptions);
	gauge(b, "ragged_gen_num_requests_running", "Sequences running.", "gauge", s.n_running);
	gauge(b, "ragged_gen_num_requests_waiting", "Sequences waiting.", "gauge", s.n_waiting);
	gauge(b, "ragged_gen_kv_blocks_used", "KV cache blocks in use (prefix cache included).",
	      "gauge", s.blocks_used);
	gauge(b, "ragged_gen_kv_blocks_free", "KV cache blocks free.", "gauge", s.blocks_free);
	gauge(b, "ragged_gen_prefix_cache_queries_total",
	      "Full prompt blocks looked up in the prefix cache.", "counter",
	      (double)s.prefix.query_blocks);
	gauge(b, "ragged_gen_prefix_cache_hits_total", "Of those, found.", "counter",
	      (double)s.prefix.hit_blocks);
	gauge(b, "ragged_gen_prefix_cache_hit_rate", "Hits / queries (0 before any query).",
	      "gauge", s.prefix.query_blocks ? (double)s.prefix.hit_blocks /
						   (double)s.prefix.query_blocks : 0);
}
