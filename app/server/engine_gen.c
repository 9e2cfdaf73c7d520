/* The generation service of `ragged serve`: a step thread around the library engine. See
 * engine_gen.h. */
#include "server/engine_gen.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "server/engine.h"
#include "server/metrics.h"

#define MAX_SEQS_PER_JOB 256 /* the engine's outputs per request */

typedef struct gen_metrics {
	rg_hist ttft_ms, itl_ms, step_ms, step_tokens, e2e_ms;
	rg_hist queue_ms;          /* per job: arrival to its first scheduled step */
	rg_hist tpot_ms;           /* per sequence: (last - first token) / (tokens - 1) */
	rg_hist req_prompt_tokens; /* per job: its prompt's tokens */
	rg_hist seq_gen_tokens;    /* per sequence: tokens generated */
	uint64_t prompt_tokens, generated_tokens, cached_tokens, requests_ok, requests_aborted,
		preemptions, steps, refused;
	uint64_t ends[3];          /* sequences ended by stop (EOS, stop string or id), length,
				    * abort: vLLM's finished_reason */
	uint64_t steps_prefill;    /* steps with a prompt chunk (the others: decode only) */
} gen_metrics;

struct rg_gen_srv {
	rg_model *m;
	rg_gen_engine *eng;
	rg_gen_srv_params p;
	int max_context;

	pthread_t th;
	bool started;
	pthread_mutex_t mu;        /* the engine and the live list */
	pthread_cond_t cv;
	bool stop, draining;
	double drain_end;
	double step_est_ms;        /* the next step's time by the recent ones: each step's time,
				    * or 3/4 of the last estimate when larger (a long prefill
				    * chunk is remembered for a few steps) */

	rg_gen_job **live;         /* by engine request id, ascending (guarded by mu) */
	int n_live, cap_live;
	double last_poll_ms;
	rg_gen_job **touched;      /* jobs with new output this step (step thread) */
	int n_touched, cap_touched;

	/* The notifier: the step thread hands it a step's touched jobs and ended jobs and goes on
	 * to the next step, so that resuming the connections (a syscall each) overlaps the model's
	 * next forward instead of following it. One batch in flight at most (guarded by nmu). */
	pthread_t nth;
	bool nstarted, nstop, nbusy;
	pthread_mutex_t nmu;
	pthread_cond_t ncv;
	rg_gen_job **nlist;        /* (n_nlist) touched jobs still running, one reference each */
	int n_nlist, cap_nlist;
	rg_gen_job *ndone;         /* ended jobs (linked by next), the engine's reference each */

	int block_size;            /* KV positions per block (the prefix cache's counts in tokens) */
	pthread_mutex_t mmu;       /* the metrics */
	gen_metrics met;

	FILE *trace;               /* --trace-steps, or NULL (step thread) */
	double t_start;
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
	if (!j->prompts || !j->prompt_lens || !j->out) {
		free(j->prompts);
		free(j->prompt_lens);
		free(j->out);
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
	}
	free(j->prompts);
	free(j->prompt_lens);
	free(j->out);
	free(j->prompt_lps);
	free(j->prompt_ranks);
	free(j->prompt_top_ids);
	free(j->prompt_top_lps);
	pthread_mutex_destroy(&j->mu);
	free(j);
}

void rg_gen_job_cancel(rg_gen_job *j)
{
	if (j)
		atomic_store(&j->cancel, true);
}

/* ---- the live-job index ------------------------------------------------------------------- */

static rg_gen_job *live_find(const rg_gen_srv *e, uint64_t req)
{
	int lo = 0, hi = e->n_live - 1;

	while (lo <= hi) {
		int mid = (lo + hi) / 2;

		if (e->live[mid]->req == req)
			return e->live[mid];
		if (e->live[mid]->req < req)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return NULL;
}

static rg_status live_add(rg_gen_srv *e, rg_gen_job *j)
{
	if (e->n_live == e->cap_live) {
		int cap = e->cap_live ? 2 * e->cap_live : 64;
		rg_gen_job **l = realloc(e->live, (size_t)cap * sizeof(*l));

		if (!l)
			return RG_ERR_OOM;
		e->live = l;
		e->cap_live = cap;
	}
	e->live[e->n_live++] = j; /* engine ids only grow: the list stays sorted */
	return RG_OK;
}

static void live_remove(rg_gen_srv *e, rg_gen_job *j)
{
	for (int i = 0; i < e->n_live; i++)
		if (e->live[i] == j) {
			memmove(e->live + i, e->live + i + 1,
				(size_t)(e->n_live - i - 1) * sizeof(*e->live));
			e->n_live--;
			return;
		}
}

/* ---- admission ---------------------------------------------------------------------------- */

/* Job j checked and its engine request's params and options (j->n_top, n_running, arrival
 * set). */
static rg_status job_prepare(rg_gen_job *j, double now, rg_gen_params *gp, rg_gen_options *opt)
{
	if (!j || j->n_seqs < 1)
		return rg_errorf(RG_ERR_INVALID_INPUT, "generate: no job");
	if (j->gp.num_beams > 1 && j->n_seqs != j->gp.n)
		return rg_errorf(RG_ERR_INVALID_INPUT, "generate: a beam search job has one output "
				 "per returned beam (n_seqs = gp.n)");
	for (int i = 0; i < j->n_seqs; i++)
		if (!j->prompts[i] || j->prompt_lens[i] < 1)
			return rg_errorf(RG_ERR_INVALID_INPUT, "generate: sequence %d has no prompt",
					 i);
	/* a job's sequences share its prompt: one engine request of n_seqs outputs */
	*gp = j->gp;
	if (gp->num_beams <= 1)
		gp->n = j->n_seqs;
	rg_gen_options_default(opt);
	opt->priority = j->priority;
	opt->arrival_ms = j->arrival_ms ? j->arrival_ms : now;
	opt->deadline_ms = j->deadline_ms;
	opt->tpot_ms = j->tpot_ms;
	opt->min_tokens = j->min_tokens;
	opt->skip_special_tokens = j->skip_special;
	opt->keep_stop_id_text = true; /* vLLM: a stop id's text stays (special ones have none) */
	opt->fair_key = j->fair_key;
	j->n_top = j->gp.num_beams > 1 ? 0 : j->gp.logprobs;
	j->n_running = j->n_seqs;
	if (!j->arrival_ms)
		j->arrival_ms = now;
	return RG_OK;
}

int rg_gen_job_queue_entries(const rg_gen_job *j)
{
	return j->gp.num_beams > 1 ? 1 : j->n_seqs;
}

rg_status rg_gen_srv_submit_all(rg_gen_srv *e, rg_gen_job *const *jobs, int n_jobs,
				int *refused)
{
	rg_status st = RG_OK;
	double now = rg_now_ms();
	uint64_t prompt_tokens = 0;
	int added = 0;

	if (refused)
		*refused = 0;
	if (!e || !jobs || n_jobs < 1)
		return rg_errorf(RG_ERR_INVALID_INPUT, "generate: no jobs");
	pthread_mutex_lock(&e->mu);
	if (e->stop || e->draining) {
		pthread_mutex_unlock(&e->mu);
		jobs[0]->adm.retry_after_ms = 1000;
		jobs[0]->stopping = true;
		return rg_errorf(RG_ERR_BUSY, "the server is shutting down");
	}
	for (; added < n_jobs; added++) {
		rg_gen_job *j = jobs[added];
		rg_gen_params gp;
		rg_gen_options opt;

		if ((st = job_prepare(j, now, &gp, &opt)) != RG_OK)
			break;
		st = rg_gen_engine_add(e->eng, j->prompts[0], j->prompt_lens[0], &gp, &opt, now,
				       &j->req, &j->adm);
		if (st == RG_OK && (st = live_add(e, j)) != RG_OK) {
			rg_gen_engine_release(e->eng, j->req);
			st = rg_errorf(RG_ERR_OOM, "generate: out of memory");
		}
		if (st != RG_OK)
			break;
		prompt_tokens += (uint64_t)j->prompt_lens[0] *
				 (uint64_t)(gp.num_beams > 1 ? 1 : gp.n);
	}
	if (st != RG_OK) {
		char msg[512];

		/* refused whole: what was added goes now, under the same lock, so that no step
		 * ever sees it and nothing of the request is left queued (a still-waiting
		 * request released leaves the waiting queue at once) */
		snprintf(msg, sizeof(msg), "%s", rg_last_error());
		for (int k = 0; k < added; k++) {
			rg_gen_engine_release(e->eng, jobs[k]->req);
			live_remove(e, jobs[k]);
			jobs[k]->req = 0;
		}
		if (st == RG_ERR_BUSY) {
			pthread_mutex_lock(&e->mmu);
			e->met.refused++;
			pthread_mutex_unlock(&e->mmu);
		}
		pthread_mutex_unlock(&e->mu);
		if (refused)
			*refused = added;
		return rg_errorf(st, "%s", msg); /* rg_last_error names it */
	}
	for (int k = 0; k < n_jobs; k++)
		atomic_fetch_add(&jobs[k]->refs, 1);
	pthread_mutex_lock(&e->mmu);
	e->met.prompt_tokens += prompt_tokens;
	pthread_mutex_unlock(&e->mmu);
	pthread_cond_broadcast(&e->cv);
	pthread_mutex_unlock(&e->mu);
	return RG_OK;
}

rg_status rg_gen_srv_submit(rg_gen_srv *e, rg_gen_job *j)
{
	return rg_gen_srv_submit_all(e, &j, 1, NULL);
}

int rg_gen_srv_max_waiting(const rg_gen_srv *e)
{
	return e->p.eng.max_waiting;
}

/* ---- the step loop ------------------------------------------------------------------------ */

static void job_abort(rg_gen_srv *e, rg_gen_job *j, const char *why)
{
	if (j->aborted)
		return;
	j->aborted = true;
	pthread_mutex_lock(&j->mu);
	if (why && !j->err[0])
		snprintf(j->err, sizeof(j->err), "%s", why);
	pthread_mutex_unlock(&j->mu);
	rg_gen_engine_abort(e->eng, j->req, why);
}

/* Cancelled jobs, gone clients, the drain's end (lock held). The drain ends at the last step
 * boundary before drain_end: a step that is estimated to end past it is not begun (one
 * 512-token chunk on a slow CPU takes seconds), so the shutdown is not late by a whole step. */
static void sweep(rg_gen_srv *e, double now)
{
	bool poll = now - e->last_poll_ms >= e->p.disconnect_poll_ms;
	bool cut = e->draining && (now >= e->drain_end || now + e->step_est_ms > e->drain_end);

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

static rg_status out_reserve(rg_gen_seq_out *o, int n, int n_top)
{
	int cap = o->cap ? o->cap : 32;

	if (n <= o->cap)
		return RG_OK;
	while (cap < n)
		cap *= 2;
#define GROW(field, per)                                                                    \
	do {                                                                                \
		void *q = realloc(o->field, (size_t)cap * (per) * sizeof(*o->field));       \
		if (!q)                                                                     \
			return RG_ERR_OOM;                                                  \
		o->field = q;                                                               \
	} while (0)
	GROW(ids, 1);
	GROW(logprobs, 1);
	GROW(text_end, 1);
	if (n_top > 0) {
		GROW(top_ids, (size_t)n_top);
		GROW(top_logprobs, (size_t)n_top);
	}
#undef GROW
	o->cap = cap;
	return RG_OK;
}

static rg_gen_end end_of(rg_finish_reason f)
{
	switch (f) {
	case RG_FINISH_NONE: return RG_GEN_END_NONE;
	case RG_FINISH_EOS: return RG_GEN_END_EOS;
	case RG_FINISH_STOP: return RG_GEN_END_STOP;
	case RG_FINISH_LENGTH: return RG_GEN_END_LENGTH;
	case RG_FINISH_ABORT: return RG_GEN_END_ABORT;
	}
	return RG_GEN_END_ABORT;
}

/* Output 0's prompt scoring into j (j->mu held); left NULL on OOM (the answer then has
 * none: the route says so). */
static void prompt_copy(rg_gen_job *j, const rg_gen_output *x)
{
	const size_t n = (size_t)x->prompt_tokens, tn = (size_t)x->prompt_top_n;

	j->prompt_lps = malloc(n * sizeof(float));
	j->prompt_ranks = malloc(n * sizeof(int32_t));
	j->prompt_top_ids = malloc((n * tn > 0 ? n * tn : 1) * sizeof(int32_t));
	j->prompt_top_lps = malloc((n * tn > 0 ? n * tn : 1) * sizeof(float));
	if (!j->prompt_lps || !j->prompt_ranks || !j->prompt_top_ids || !j->prompt_top_lps) {
		free(j->prompt_lps);
		free(j->prompt_ranks);
		free(j->prompt_top_ids);
		free(j->prompt_top_lps);
		j->prompt_lps = NULL;
		j->prompt_ranks = j->prompt_top_ids = NULL;
		j->prompt_top_lps = NULL;
		return;
	}
	memcpy(j->prompt_lps, x->prompt_logprobs, n * sizeof(float));
	memcpy(j->prompt_ranks, x->prompt_ranks, n * sizeof(int32_t));
	if (n * tn > 0) {
		memcpy(j->prompt_top_ids, x->prompt_top_ids, n * tn * sizeof(int32_t));
		memcpy(j->prompt_top_lps, x->prompt_top_logprobs, n * tn * sizeof(float));
	}
	j->prompt_top_n = (int)tn;
}

/* Output k of j brought up to the engine's (lock held; takes j->mu): new tokens, text, the end.
 * Metrics: TTFT and inter-token latency of its new tokens. */
static void job_sync(rg_gen_srv *e, rg_gen_job *j, int k, double now)
{
	rg_gen_output x;
	rg_gen_seq_out *o = &j->out[k];
	int from;
	bool first;
	double prev_ms;

	if (rg_gen_engine_output(e->eng, j->req, k, &x) != RG_OK)
		return;
	pthread_mutex_lock(&j->mu);
	if (o->end != RG_GEN_END_NONE || out_reserve(o, x.n_ids, j->n_top) != RG_OK) {
		pthread_mutex_unlock(&j->mu);
		return;
	}
	from = o->n_ids;
	first = from == 0 && x.n_ids > 0;
	for (int t = from; t < x.n_ids; t++) {
		o->ids[t] = x.ids[t];
		o->logprobs[t] = x.logprobs[t];
		if (j->n_top > 0) {
			memcpy(o->top_ids + (size_t)t * j->n_top, x.top_ids + (size_t)t * x.n_top,
			       (size_t)j->n_top * sizeof(int32_t));
			memcpy(o->top_logprobs + (size_t)t * j->n_top,
			       x.top_logprobs + (size_t)t * x.n_top, (size_t)j->n_top * sizeof(float));
		}
	}
	o->n_ids = x.n_ids;
	/* the text only grows while running; at the end it may be cut before a stop string */
	if (x.finish != RG_FINISH_NONE || x.text_len < o->text.len) {
		o->text.len = 0;
		rg_buf_put(&o->text, x.text, x.text_len);
		for (int t = 0; t < x.n_ids; t++)
			o->text_end[t] = x.text_end[t];
	} else {
		rg_buf_put(&o->text, x.text + o->text.len, x.text_len - o->text.len);
		for (int t = from; t < x.n_ids; t++)
			o->text_end[t] = x.text_end[t];
	}
	o->text_ready = x.text_ready < o->text.len ? x.text_ready : o->text.len;
	o->score = x.score;
	o->n_cached = x.n_cached;
	o->n_preemptions = x.n_preemptions;
	prev_ms = o->last_token_ms;
	if (x.n_ids > from) {
		if (first)
			o->first_token_ms = now;
		o->last_token_ms = now;
	}
	if (x.finish != RG_FINISH_NONE) {
		o->end = end_of(x.finish);
		if (x.stop_str && !o->stop_str)
			o->stop_str = strdup(x.stop_str);
		if (o->first_token_ms == 0)
			o->first_token_ms = o->last_token_ms = now;
		if (x.status != RG_OK && j->status == RG_OK)
			/* a model error is the request's (400); a failed search is ours (500) */
			j->status = x.status == RG_ERR_INTERNAL ? RG_ERR_INTERNAL
								: RG_ERR_INVALID_INPUT;
		if (x.error[0] && !j->err[0])
			snprintf(j->err, sizeof(j->err), "%s", x.error);
		j->n_running--;
	}
	if (j->queue_ms == 0 && x.queue_ms > 0)
		j->queue_ms = x.queue_ms;
	/* the prompt is scored once output 0 has its first token (or ended without one) */
	if (k == 0 && x.prompt_logprobs && !j->prompt_lps &&
	    (x.n_ids > 0 || x.finish != RG_FINISH_NONE))
		prompt_copy(j, &x);
	pthread_mutex_unlock(&j->mu);
	pthread_mutex_lock(&e->mmu);
	if (x.n_ids > from) {
		if (j->gp.num_beams > 1) {
			rg_hist_observe(&e->met.ttft_ms, now - j->arrival_ms);
		} else if (first) {
			rg_hist_observe(&e->met.ttft_ms, now - j->arrival_ms);
		} else {
			/* tokens that came together share the gap since the last one */
			for (int t = from; t < x.n_ids; t++)
				rg_hist_observe(&e->met.itl_ms, (now - prev_ms) / (x.n_ids - from));
		}
		e->met.generated_tokens += (uint64_t)(x.n_ids - from);
	}
	if (x.finish != RG_FINISH_NONE && (k == 0 || j->gp.num_beams <= 1))
		e->met.cached_tokens += (uint64_t)x.n_cached;
	if (x.finish != RG_FINISH_NONE) {
		e->met.ends[x.finish == RG_FINISH_LENGTH ? 1 : x.finish == RG_FINISH_ABORT ? 2 : 0]++;
		rg_hist_observe(&e->met.seq_gen_tokens, x.n_ids);
		if (x.n_ids >= 2 && o->last_token_ms > o->first_token_ms)
			rg_hist_observe(&e->met.tpot_ms, (o->last_token_ms - o->first_token_ms) /
							 (x.n_ids - 1));
	}
	pthread_mutex_unlock(&e->mmu);
}

static void touch(rg_gen_srv *e, rg_gen_job *j)
{
	for (int k = 0; k < e->n_touched; k++)
		if (e->touched[k] == j)
			return;
	if (e->n_touched == e->cap_touched) {
		int cap = e->cap_touched ? 2 * e->cap_touched : 64;
		rg_gen_job **t = realloc(e->touched, (size_t)cap * sizeof(*t));

		if (!t)
			return; /* its owner learns of the output at the next notify */
		e->touched = t;
		e->cap_touched = cap;
	}
	e->touched[e->n_touched++] = j;
}

/* The events of a step (lock held): outputs copied into their jobs; jobs whose every output
 * ended leave the live list for *done (linked by next) and the engine forgets them. */
static void take_events(rg_gen_srv *e, const rg_gen_event *ev, int n_ev, double now,
			rg_gen_job **done)
{
	for (int i = 0; i < n_ev; i++) {
		rg_gen_job *j = live_find(e, ev[i].req);

		if (!j)
			continue;
		job_sync(e, j, ev[i].seq, now);
		touch(e, j);
	}
	for (int k = 0; k < e->n_touched; k++) {
		rg_gen_job *j = e->touched[k];

		if (j->ended || !rg_gen_engine_finished(e->eng, j->req))
			continue;
		pthread_mutex_lock(&j->mu);
		j->ended = true;
		j->n_running = 0;
		if (j->gp.num_beams <= 1)
			for (int q = 0; q < j->n_seqs; q++)
				if (j->out[q].end == RG_GEN_END_ABORT && j->status == RG_OK)
					j->status = RG_ERR_BUSY; /* drained, cancelled: 503 */
		pthread_mutex_unlock(&j->mu);
		rg_gen_engine_release(e->eng, j->req);
		live_remove(e, j);
		j->next = *done;
		*done = j;
	}
}

/* Tell the owners (the notifier thread, no lock held): more output for the n jobs of list
 * (a reference each, dropped here), then the jobs that ended (last). */
static void notify_all(rg_gen_srv *e, rg_gen_job **list, int n, rg_gen_job *done)
{
	for (int k = 0; k < n; k++) {
		if (list[k]->notify)
			list[k]->notify(list[k], false);
		rg_gen_job_put(list[k]);
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
		rg_hist_observe(&e->met.queue_ms, done->queue_ms);
		rg_hist_observe(&e->met.req_prompt_tokens, done->prompt_lens[0]);
		pthread_mutex_unlock(&e->mmu);
		if (done->notify)
			done->notify(done, true);
		rg_gen_job_put(done);
		done = next;
	}
}

static void *notify_thread(void *arg)
{
	rg_gen_srv *e = arg;
	rg_gen_job **list = NULL;
	int cap = 0;

	pthread_mutex_lock(&e->nmu);
	for (;;) {
		int n;
		rg_gen_job *done;

		while (!e->nbusy && !e->nstop)
			pthread_cond_wait(&e->ncv, &e->nmu);
		if (!e->nbusy)
			break; /* stopped with nothing handed over */
		/* take the batch: swap arrays so that the step thread can fill the other */
		{
			rg_gen_job **t = e->nlist;
			int c = e->cap_nlist;

			e->nlist = list;
			e->cap_nlist = cap;
			list = t;
			cap = c;
		}
		n = e->n_nlist;
		e->n_nlist = 0;
		done = e->ndone;
		e->ndone = NULL;
		pthread_mutex_unlock(&e->nmu);
		notify_all(e, list, n, done);
		pthread_mutex_lock(&e->nmu);
		e->nbusy = false;
		pthread_cond_broadcast(&e->ncv);
	}
	pthread_mutex_unlock(&e->nmu);
	free(list);
	return NULL;
}

/* Hand a step's touched and ended jobs to the notifier (step thread, e->mu not held): waits
 * for the batch before it to be told, then goes on. Jobs that ended are only in done. Without
 * a notifier (it could not start), they are told here. */
static void notify_hand(rg_gen_srv *e, rg_gen_job *done)
{
	if (!e->nstarted) {
		for (int k = 0; k < e->n_touched; k++) {
			rg_gen_job *j = e->touched[k];

			if (!j->ended && j->notify)
				j->notify(j, false);
		}
		e->n_touched = 0;
		notify_all(e, NULL, 0, done);
		return;
	}
	pthread_mutex_lock(&e->nmu);
	while (e->nbusy)
		pthread_cond_wait(&e->ncv, &e->nmu);
	if (e->cap_nlist < e->n_touched) {
		rg_gen_job **t = realloc(e->nlist, (size_t)e->n_touched * sizeof(*t));

		if (t) {
			e->nlist = t;
			e->cap_nlist = e->n_touched;
		}
	}
	e->n_nlist = 0;
	for (int k = 0; k < e->n_touched && e->n_nlist < e->cap_nlist; k++) {
		rg_gen_job *j = e->touched[k];

		/* (a job the array has no room for learns of its output at its next step) */
		if (j->ended)
			continue;
		atomic_fetch_add(&j->refs, 1);
		e->nlist[e->n_nlist++] = j;
	}
	e->n_touched = 0;
	e->ndone = done;
	e->nbusy = e->n_nlist > 0 || done;
	pthread_cond_broadcast(&e->ncv);
	pthread_mutex_unlock(&e->nmu);
}

static void *step_thread(void *arg)
{
	rg_gen_srv *e = arg;

	pthread_mutex_lock(&e->mu);
	for (;;) {
		double now = rg_now_ms(), t0 = 0, step_ms = 0, t_loop = now, t_begun = 0, t_ended;
		double t_swept;
		const rg_gen_event *ev;
		int n_ev;
		bool ran = false;
		rg_gen_job *done = NULL;
		rg_gen_engine_stats s0, s1;

		sweep(e, now);
		t_swept = rg_now_ms();
		rg_gen_engine_get_stats(e->eng, &s0);
		if (rg_gen_engine_step_begin(e->eng, now, &ran) != RG_OK)
			break; /* cannot happen: every step is ended */
		t_begun = rg_now_ms();
		if (ran) {
			pthread_mutex_unlock(&e->mu);
			t0 = rg_now_ms();
			rg_gen_engine_step_run(e->eng);
			step_ms = rg_now_ms() - t0;
			pthread_mutex_lock(&e->mu);
		}
		now = rg_now_ms();
		rg_gen_engine_step_end(e->eng, now, &ev, &n_ev);
		take_events(e, ev, n_ev, now, &done);
		t_ended = rg_now_ms();
		if (ran) {
			rg_gen_engine_get_stats(e->eng, &s1);
			pthread_mutex_lock(&e->mmu);
			e->met.steps += (uint64_t)(s1.n_steps - s0.n_steps);
			e->met.preemptions += (uint64_t)(s1.n_preemptions - s0.n_preemptions);
			rg_hist_observe(&e->met.step_ms, step_ms);
			rg_hist_observe(&e->met.step_tokens, s1.last_step_tokens);
			/* a decode step has one token per running sequence at most: more is a
			 * prompt chunk (or a waiting request's first one) */
			if (s1.last_step_tokens > s0.n_running)
				e->met.steps_prefill++;
			pthread_mutex_unlock(&e->mmu);
			e->step_est_ms = fmax(step_ms, 0.75 * e->step_est_ms);
		}
		if (!ran && !done && e->n_touched == 0) {
			struct timespec ts;
			double wake = e->n_live > 0 ? 10 : 1000;

			if (e->stop)
				break;
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += (long)(wake * 1e6);
			ts.tv_sec += ts.tv_nsec / 1000000000L;
			ts.tv_nsec %= 1000000000L;
			pthread_cond_timedwait(&e->cv, &e->mu, &ts);
			continue;
		}
		pthread_mutex_unlock(&e->mu);
		notify_hand(e, done);
		if (e->trace && ran)
			fprintf(e->trace, "%.3f %.3f %.3f %.3f %.3f %.3f %d %d\n",
				t_loop - e->t_start, t_swept - t_loop, t_begun - t_swept, step_ms, t_ended - t0 - step_ms,
				rg_now_ms() - t_ended, s1.last_step_tokens, s1.n_running);
		pthread_mutex_lock(&e->mu);
	}
	pthread_mutex_unlock(&e->mu);
	return NULL;
}

/* ---- create / stop ------------------------------------------------------------------------ */

rg_gen_srv *rg_gen_srv_create(rg_model *m, const rg_gen_srv_params *p, rg_status *st)
{
	rg_gen_srv *e;
	rg_gen_engine_params ep;
	rg_gen_engine_stats s;

	*st = RG_OK;
	if (!m || !p) {
		*st = rg_errorf(RG_ERR_INVALID_INPUT, "generation engine: no model");
		return NULL;
	}
	e = calloc(1, sizeof(*e));
	if (!e) {
		*st = RG_ERR_OOM;
		return NULL;
	}
	e->m = m;
	e->p = *p;
	if (e->p.disconnect_poll_ms <= 0)
		e->p.disconnect_poll_ms = 10;
	pthread_mutex_init(&e->mu, NULL);
	pthread_mutex_init(&e->mmu, NULL);
	pthread_cond_init(&e->cv, NULL);
	pthread_mutex_init(&e->nmu, NULL);
	pthread_cond_init(&e->ncv, NULL);
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
		rg_hist_init(&e->met.queue_ms, ms, 16);
		rg_hist_init(&e->met.tpot_ms, ms, 16);
		rg_hist_init(&e->met.req_prompt_tokens, tok, 14);
		rg_hist_init(&e->met.seq_gen_tokens, tok, 14);
	}
	e->block_size = p->eng.block_size > 0 ? p->eng.block_size : 16;
	ep = p->eng;
	ep.warm_up = true; /* admission's cost model starts from measured steps */
	if (!(e->eng = rg_gen_engine_create(m, &ep, st)))
		goto fail;
	rg_gen_engine_get_stats(e->eng, &s);
	e->max_context = s.max_context;
	e->t_start = rg_now_ms();
	if (p->trace_path) {
		if (!(e->trace = fopen(p->trace_path, "w"))) {
			*st = rg_errorf(RG_ERR_IO, "--trace-steps: cannot open %s", p->trace_path);
			goto fail;
		}
		fputs("# start_ms sweep_ms schedule_ms model_ms accept_ms hand_ms tokens running\n",
		      e->trace);
	}
	/* without a notifier the step thread tells the owners itself (slower, still right) */
	e->nstarted = pthread_create(&e->nth, NULL, notify_thread, e) == 0;
	if (pthread_create(&e->th, NULL, step_thread, e) != 0) {
		*st = rg_errorf(RG_ERR_OOM, "generation engine: cannot start its thread");
		goto fail;
	}
	e->started = true;
	return e;
fail:
	rg_gen_srv_free(e);
	return NULL;
}

void rg_gen_srv_drain(rg_gen_srv *e, double end_ms)
{
	pthread_mutex_lock(&e->mu);
	if (!e->draining || end_ms < e->drain_end)
		e->drain_end = end_ms;
	e->draining = true;
	pthread_cond_broadcast(&e->cv);
	pthread_mutex_unlock(&e->mu);
}

bool rg_gen_srv_idle(rg_gen_srv *e)
{
	bool idle;

	pthread_mutex_lock(&e->mu);
	idle = e->n_live == 0;
	pthread_mutex_unlock(&e->mu);
	return idle;
}

/* Stop the notifier once the step thread is gone: it tells what was handed to it first. */
static void notify_stop(rg_gen_srv *e)
{
	if (!e->nstarted)
		return;
	pthread_mutex_lock(&e->nmu);
	e->nstop = true;
	pthread_cond_broadcast(&e->ncv);
	pthread_mutex_unlock(&e->nmu);
	pthread_join(e->nth, NULL);
	e->nstarted = false;
}

void rg_gen_srv_stop(rg_gen_srv *e)
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
		notify_stop(e);
		return;
	}
	e->stop = true;
	pthread_mutex_unlock(&e->mu);
	notify_stop(e);
}

void rg_gen_srv_free(rg_gen_srv *e)
{
	if (!e)
		return;
	rg_gen_srv_stop(e);
	rg_gen_engine_free(e->eng);
	free(e->live);
	free(e->touched);
	free(e->nlist);
	if (e->trace)
		fclose(e->trace);
	pthread_mutex_destroy(&e->nmu);
	pthread_cond_destroy(&e->ncv);
	pthread_mutex_destroy(&e->mu);
	pthread_mutex_destroy(&e->mmu);
	pthread_cond_destroy(&e->cv);
	free(e);
}

int rg_gen_srv_queue_depth(rg_gen_srv *e)
{
	rg_gen_engine_stats s;

	pthread_mutex_lock(&e->mu);
	rg_gen_engine_get_stats(e->eng, &s);
	pthread_mutex_unlock(&e->mu);
	return s.n_waiting;
}

const int32_t *rg_gen_srv_eos(const rg_gen_srv *e, int32_t *n)
{
	rg_gen_engine_stats s;

	rg_gen_engine_get_stats(e->eng, &s); /* the model's, fixed: no lock needed */
	*n = s.n_eos;
	return s.eos_ids;
}

int rg_gen_srv_max_context(const rg_gen_srv *e)
{
	return e->max_context;
}

int rg_gen_srv_blocks_used(rg_gen_srv *e)
{
	rg_gen_engine_stats s;

	pthread_mutex_lock(&e->mu);
	rg_gen_engine_get_stats(e->eng, &s);
	pthread_mutex_unlock(&e->mu);
	return s.blocks_used;
}

static void gauge(rg_buf *b, const char *name, const char *help, const char *type, double v)
{
	rg_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
}

/* A counter or gauge with one label (lab: `key="value",` as rg_metrics_label writes it). */
static void sample(rg_buf *b, const char *name, const char *help, const char *type,
		   const char *lab, double v)
{
	size_t ll = strlen(lab);

	rg_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s{%.*s} %.17g\n", name, help, name, type,
		      name, (int)(ll ? ll - 1 : 0), lab, v);
}

/* vLLM's names (vllm/v1/metrics/loggers.py: label model_name; ours has no engine label, one
 * engine) and TGI's (docs/source/reference/metrics.md), so that their dashboards carry over;
 * the values are ragged's own, below. The prefix cache's counts are in tokens, as vLLM's
 * (blocks x block size). */
static void render_compat(rg_buf *b, const gen_metrics *m, const rg_gen_engine_stats *s,
			  const char *model_name, int block_size)
{
	static const char *const why[3] = {"stop", "length", "abort"};
	char lab[320];

	rg_metrics_label(lab, sizeof(lab), "model_name", model_name ? model_name : "");
	sample(b, "vllm:num_requests_running", "Sequences in model execution batches.", "gauge",
	       lab, s->n_running);
	sample(b, "vllm:num_requests_waiting", "Sequences waiting to be processed.", "gauge", lab,
	       s->n_waiting);
	sample(b, "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", "gauge",
	       lab, s->blocks_total ? (double)s->blocks_used / s->blocks_total : 0);
	sample(b, "vllm:prefix_cache_queries_total",
	       "Prefix cache queries, in terms of number of queried tokens.", "counter", lab,
	       (double)s->prefix_query_blocks * block_size);
	sample(b, "vllm:prefix_cache_hits_total",
	       "Prefix cache hits, in terms of number of cached tokens.", "counter", lab,
	       (double)s->prefix_hit_blocks * block_size);
	sample(b, "vllm:num_preemptions_total", "Cumulative number of preemption from the engine.",
	       "counter", lab, (double)m->preemptions);
	sample(b, "vllm:prompt_tokens_total", "Number of prefill tokens processed.", "counter", lab,
	       (double)m->prompt_tokens);
	sample(b, "vllm:generation_tokens_total", "Number of generation tokens processed.",
	       "counter", lab, (double)m->generated_tokens);
	rg_buf_puts(b, "# HELP vllm:request_success_total Count of successfully processed "
		    "requests (sequences, by why they ended).\n"
		    "# TYPE vllm:request_success_total counter\n");
	for (int k = 0; k < 3; k++)
		rg_buf_printf(b, "vllm:request_success_total{%sfinished_reason=\"%s\"} %llu\n", lab,
			      why[k], (unsigned long long)m->ends[k]);
	rg_hist_render_labeled(b, "vllm:time_to_first_token_seconds",
			       "Histogram of time to first token in seconds.", lab, &m->ttft_ms, 1e-3);
	rg_hist_render_labeled(b, "vllm:inter_token_latency_seconds",
			       "Histogram of inter-token latency in seconds.", lab, &m->itl_ms, 1e-3);
	rg_hist_render_labeled(b, "vllm:time_per_output_token_seconds",
			       "Histogram of time per output token in seconds (per sequence: "
			       "(last - first token) / (tokens - 1)).", lab, &m->tpot_ms, 1e-3);
	rg_hist_render_labeled(b, "vllm:e2e_request_latency_seconds",
			       "Histogram of e2e request latency in seconds.", lab, &m->e2e_ms, 1e-3);
	rg_hist_render_labeled(b, "vllm:request_queue_time_seconds",
			       "Histogram of time spent in WAITING phase for request.", lab,
			       &m->queue_ms, 1e-3);
	rg_hist_render_labeled(b, "vllm:request_prompt_tokens",
			       "Number of prefill tokens processed.", lab, &m->req_prompt_tokens, 1);
	rg_hist_render_labeled(b, "vllm:request_generation_tokens",
			       "Number of generation tokens processed.", lab, &m->seq_gen_tokens, 1);
	rg_hist_render_labeled(b, "vllm:iteration_tokens_total",
			       "Histogram of number of tokens per engine_step.", lab,
			       &m->step_tokens, 1);

	rg_hist_render(b, "tgi_request_duration",
		       "Total time spent processing the request (e2e latency).", &m->e2e_ms, 1e-3);
	rg_hist_render(b, "tgi_request_queue_duration", "Time spent in the queue per request.",
		       &m->queue_ms, 1e-3);
	rg_hist_render(b, "tgi_request_input_length", "Input token length per request.",
		       &m->req_prompt_tokens, 1);
	rg_hist_render(b, "tgi_request_generated_tokens", "Generated tokens per request "
		       "(sequence).", &m->seq_gen_tokens, 1);
	rg_hist_render(b, "tgi_request_mean_time_per_token_duration",
		       "Mean time per token per request (inter-token latency).", &m->tpot_ms, 1e-3);
	rg_hist_render(b, "tgi_batch_inference_duration", "Batch inference duration (one step).",
		       &m->step_ms, 1e-3);
	gauge(b, "tgi_batch_current_size", "Current batch size (sequences running).", "gauge",
	      s->n_running);
	gauge(b, "tgi_batch_current_max_tokens", "Maximum tokens for the current batch (KV "
	      "positions held: blocks in use x block size).", "gauge",
	      (double)s->blocks_used * block_size);
	gauge(b, "tgi_queue_size", "Current queue size (sequences waiting).", "gauge",
	      s->n_waiting);
	rg_buf_puts(b, "# HELP tgi_batch_inference_count Inference calls per method (prefill: a "
		    "step with a prompt chunk; decode: the others).\n"
		    "# TYPE tgi_batch_inference_count counter\n");
	rg_buf_printf(b, "tgi_batch_inference_count{method=\"prefill\"} %llu\n"
		      "tgi_batch_inference_count{method=\"decode\"} %llu\n",
		      (unsigned long long)m->steps_prefill,
		      (unsigned long long)(m->steps - m->steps_prefill));
	rg_buf_puts(b, "# HELP tgi_batch_inference_success Successful inference calls per method "
		    "(a model error aborts the step's requests and is not counted apart).\n"
		    "# TYPE tgi_batch_inference_success counter\n");
	rg_buf_printf(b, "tgi_batch_inference_success{method=\"prefill\"} %llu\n"
		      "tgi_batch_inference_success{method=\"decode\"} %llu\n",
		      (unsigned long long)m->steps_prefill,
		      (unsigned long long)(m->steps - m->steps_prefill));
}

void rg_gen_srv_metrics(rg_gen_srv *e, rg_buf *b, const char *model_name)
{
	rg_gen_engine_stats s;
	gen_metrics m;

	pthread_mutex_lock(&e->mu);
	rg_gen_engine_get_stats(e->eng, &s);
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
	      (double)s.prefix_query_blocks);
	gauge(b, "ragged_gen_prefix_cache_hits_total", "Of those, found.", "counter",
	      (double)s.prefix_hit_blocks);
	gauge(b, "ragged_gen_prefix_cache_hit_rate", "Hits / queries (0 before any query).",
	      "gauge", s.prefix_query_blocks ? (double)s.prefix_hit_blocks /
						   (double)s.prefix_query_blocks : 0);
	/* vLLM's spec_decode counters (vllm:spec_decode_num_draft_tokens / _accepted_tokens) */
	gauge(b, "ragged_gen_spec_decode_num_draft_tokens_total",
	      "Speculative draft tokens verified (--speculative ngram, --draft-model).", "counter",
	      (double)s.spec_drafted);
	gauge(b, "ragged_gen_spec_decode_num_accepted_tokens_total",
	      "Of those, accepted (equal to the model's greedy token).", "counter",
	      (double)s.spec_accepted);
	render_compat(b, &m, &s, model_name, e->block_size);
}
